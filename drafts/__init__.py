"""
drafts/: everything that can draft for speculative decoding, behind one small interface.

This docstring is the interface. A drafter guesses the next k tokens of a sequence, for the big
model to check in one pass:

    tokens, probs = drafter.propose(seq, k, sampling)

- seq: the token ids written so far (a list; read it, never change it);
- k: how many tokens to guess, at least 1;
- sampling: the run's Sampling (below): greedy, or a temperature / top-k / top-p warp and the
  run's random generator;
- returns k token ids (or fewer, at least one, when it is unsure: drafts/model.py stops early
  under a confidence threshold), and when sampling the (k, V) distributions they were drawn
  from (None when greedy). A drafter that guesses deterministically (an n-gram table) returns
  one-hot rows: the acceptance rule is exact for any distribution the guesses were really
  drawn from.

Optional: `vocab_size` (checked against the target's), `reset()` (a new sequence starts),
`kept(n)` (how many of its last guesses the big model kept: adaptive drafters listen), and
`scorer_for(target)`: a drafter that lives inside the big model (its first layers, extra heads
on its last hidden state) shares work with the big model's pass, so it returns the scorer that
checks its guesses (anything with `score(seqs, first)` and `vocab_size`, as
speculative.CachedScorer defines them) instead of letting speculative_generate make a plain one.

The drafters, one file each: drafts/model.py (any GPT, torch or NumPy, as a drafter),
drafts/ngram.py (a character n-gram table from the training text, or from the big model's own
greedy text; no model at all),
drafts/early_exit.py (the big model's own first layers) and drafts/heads.py (extra heads on the
big model's last hidden state, Medusa-style); drafts/adaptive.py adapts k for any.
`speculative_generate(target, draft, ...)` takes a drafter, or a GPT, which it wraps.
"""

from dataclasses import dataclass

from numpy_speculative import sample, warp

# What --draft accepts (exitL: any L).
NAMES = ("draft", "distilled", "names", "ngram", "ngram-big", "exit2", "heads")


@dataclass
class Sampling:
    """How a run picks tokens: temperature 0 is greedy; rng has .random() (uniform [0, 1))."""
    temperature: float = 0.0
    top_k: int = None
    top_p: float = None
    rng: object = None

    @property
    def greedy(self):
        return self.temperature == 0

    def warp(self, logits):
        return warp(logits, self.temperature, self.top_k, self.top_p)

    def draw(self, probs):
        return sample(probs, self.rng)


def as_drafter(draft):
    """A drafter as it is (after reset()), or a GPT / anything with score() wrapped as one."""
    if hasattr(draft, "propose"):
        if hasattr(draft, "reset"):
            draft.reset()
        return draft
    from drafts.model import ModelDraft
    return ModelDraft(draft)


def check_name(name):
    """A one-line error unless `name` is a drafter by_name knows."""
    if name not in NAMES and not (name.startswith("exit") and name[4:].isdigit()):
        raise ValueError(f"unknown draft {name!r}; choose one of: {', '.join(NAMES)} "
                         f"(exitL: the big model's first L layers)")


def by_name(name, folder=None, backend="numpy"):
    """The drafter a command line names: a trained GPT preset, "ngram" (the training text's
    table), "ngram-big" (the table of the big model's own text), "heads", or "exitL" (the big
    model's own first L layers)."""
    check_name(name)
    if name == "ngram":
        from drafts.ngram import NGramDraft
        return NGramDraft.trained(folder, prompt_lookup=True)
    import checkpoint
    import speculative
    if name == "ngram-big":  # the table of the big model's own greedy text
        from drafts.ngram import NGramDraft
        return NGramDraft.of_target(checkpoint.load_trained("big", folder), folder)
    if name == "heads":  # evaluated in NumPy, reading the state the big model's pass computed
        from drafts.heads import load
        return load(checkpoint.load_trained("big", folder), folder)
    if name.startswith("exit"):  # shares the big model's KV cache when the big model checks
        from drafts.early_exit import EarlyExit
        big = speculative.with_backend(checkpoint.load_trained("big", folder), backend)
        return EarlyExit(big, int(name[4:]))
    model = checkpoint.load_trained(name, folder)
    return speculative.with_backend(model, backend)
