"""
speculative.py: plain decoding and speculative decoding, side by side.

A big model writes one token per forward pass, and on an accelerator, where a pass is bound by
reading the weights, a pass costs about the same whether it scores one token or five (on a CPU
with tiny models, five cost 1.4-2 one-token passes). Speculative decoding lets a cheap draft
model guess k tokens, scores them all in one pass of the big (target) model, keeps the guesses
the target agrees with and replaces the first one it rejects with its own token: 1 to k+1
tokens per target pass, with exactly the target's output (greedy) or exactly the target's
distribution (sampling).

References:
- Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via Speculative Decoding",
  ICML. Algorithm 1 is the acceptance rule below; Table 1 checks our expected speed-ups.
- Chen, Borgeaud, Irving, Lespiau, Sifre, Jumper (2023), "Accelerating Large Language Model
  Decoding with Speculative Sampling", DeepMind.
The two papers use p and q the opposite way round (Leviathan: p target, q draft; Chen: q target,
p draft). This file says `target_probs` and `draft_probs` instead.

The window rule (contexts longer than block_size). Token n (0-based) is predicted from the
tokens [window_start(n), n). The window starts at 0; when it would hold more than block_size
tokens it jumps forward so that only the last block_size // 2 are kept, and those are re-encoded
into a fresh cache. window_start depends on n alone, so plain and speculative decoding change
windows at exactly the same positions and the target scores every token from exactly the same
context; a verification pass that crosses a window change is split there.

Shapes: B batch, T time, V vocabulary, k draft tokens per round.
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

import machine
# The NumPy half: the window rule, the sampling distribution and the acceptance rule live once,
# in numpy_speculative.py (torch-free, so that exercise 3 can be built and graded without torch).
from numpy_speculative import (accept_probability, greedy_verdict, residual, sample, verify,
                               warp, window_start)
from drafts import Sampling, as_drafter

# ----------------------------------------------------------------------------------------------
# Scoring a growing sequence with a KV cache, under the window rule


class CachedScorer:
    """Wraps a GPT and its KV cache; scores positions of sequences that grow and shrink.

    score(seqs, first): seqs is a list of B token-id lists of equal length T; returns logits
    (B, T - first + 1, V), a NumPy array, whose row i is the model's prediction for position
    first + i from the tokens before it. Only tokens not yet in the cache are fed; cached
    tokens that no longer match (rejected draft tokens) are rolled back first. Sequences are
    plain lists because decoding appends, trims and compares one token at a time, which tensors
    do slowly. This is the draft interface too: anything with `vocab_size` and `score(seqs, first)` (and,
    optionally, `reset()`) can draft.
    """

    def __init__(self, model, batch_size=1):
        self.model = model
        self.vocab_size = model.c.vocab_size
        self.block_size = model.c.block_size
        self.cache = model.new_cache(batch_size)
        self.fed = [[] for _ in range(batch_size)]  # the tokens in the cache, per sequence
        self.start = 0   # position of the first cached token
        self.passes = 0  # forward passes made

    def forward(self, new):
        """Feed new tokens (B lists of t ids) through the model and the cache: logits (B, t, V)."""
        if isinstance(self.model, torch.nn.Module):
            with torch.inference_mode():
                idx = torch.tensor(new, device=self.cache.k.device)
                return self.model(idx, cache=self.cache)[0].float().cpu().numpy()
        return self.model.logits(np.array(new), self.cache)  # numpy_gpt.NumpyGPT

    def score(self, seqs, first):
        T = len(seqs[0])
        assert 1 <= first <= T, f"can only score positions 1..{T}, not from {first}"
        out, pos = [], first
        while pos <= T:
            start = window_start(pos, self.block_size)
            end = min(T, start + self.block_size)    # the last position this window predicts
            if start != self.start:                  # the window jumped: start a fresh cache
                self.start, self.fed = start, [[] for _ in seqs]
            # Keep the cached tokens that still match, up to the one before `pos`.
            keep = min(len(self.fed[0]), pos - 1 - start)
            for fed, seq in zip(self.fed, seqs):
                keep = common_prefix(fed, seq, start, keep)
            self.cache.rollback(keep)
            for fed, seq in zip(self.fed, seqs):
                del fed[keep:]
                fed += seq[start + keep:end]         # tokens at positions start+keep..end-1
            logits = self.forward([fed[keep:] for fed in self.fed])
            self.passes += 1
            out.append(logits[:, pos - 1 - start - keep:])  # (B, end - pos + 1, V): pos..end
            pos = end + 1
        return out[0] if len(out) == 1 else np.concatenate(out, 1)


def common_prefix(fed, seq, start, limit):
    """How many of the first `limit` cached tokens equal seq[start:]."""
    if fed[:limit] == seq[start:start + limit]:
        return limit
    return next(i for i in range(limit) if fed[i] != seq[start + i])


def as_scorer(model, batch_size=1):
    """A fresh scorer for a GPT; anything else with score() is used as it is (after reset())."""
    if hasattr(model, "new_cache"):
        return CachedScorer(model, batch_size)
    if not (hasattr(model, "score") and hasattr(model, "vocab_size")):
        raise TypeError(f"{type(model).__name__} is neither a GPT nor a draft with "
                        f"vocab_size and score(seqs, first)")
    if hasattr(model, "reset"):
        model.reset()
    return model


def vocab_size_of(model):
    return model.c.vocab_size if hasattr(model, "c") else model.vocab_size


# ----------------------------------------------------------------------------------------------
# Arguments and randomness (warp, sample and verify come from numpy_speculative.py)


def check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p, k=1):
    if not (torch.is_tensor(idx) and idx.dim() == 2 and idx.dtype == torch.long):
        raise ValueError("idx must be a (B, T) LongTensor of token ids, "
                         "e.g. torch.tensor([encode(prompt)])")
    if idx.shape[1] < 1:
        raise ValueError("the prompt is empty; give at least one character")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number >= 0, not {max_new_tokens!r}")
    adaptive = hasattr(k, "update")  # a schedule (drafts/adaptive.py) checks its own k
    if not adaptive and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ValueError(f"k (draft tokens per round) must be a whole number >= 1, not {k!r}")
    if not (isinstance(temperature, (int, float)) and 0 <= temperature < math.inf):
        raise ValueError(f"temperature must be a number >= 0 (0 is greedy), not {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a whole number >= 1 or None, not {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, not {top_p!r}")


class TorchUniform:
    """Uniform numbers in [0, 1) from a torch.Generator, with NumPy's rng.random() interface."""

    def __init__(self, generator=None):
        self.generator = generator

    def random(self):
        return torch.rand((), generator=self.generator, dtype=torch.float64).item()


# ----------------------------------------------------------------------------------------------
# Decoding


@dataclass
class Stats:
    """What a decoding run did. The bonus token and corrections are not counted as accepted.

    target_passes   forward passes of the target (one per round, two if a round crosses a
                    window jump); plain decoding makes one per token
    draft_passes    forward passes of the draft (one per proposed token)
    target_positions  positions the target scored: k_round + 1 per round (the last accepted
                    token's and every guess's), one per token in plain decoding; so
                    target_positions - new_tokens positions were scored and thrown away
    draft_positions positions the draft scored to guess: one per guess (its catch-up on the
                    target's own token is not counted: at most one position a round)
    rounds          propose-then-verify rounds
    proposed        draft tokens proposed; accepted: how many of them were kept
    accepted_per_position[i]  rounds in which draft token i was kept
    new_tokens      tokens generated; draft_time / target_time: seconds in each model
    trace           one (proposed tokens, n_accepted, target's token) tuple per round
    """
    k: int = 0
    target_passes: int = 0
    draft_passes: int = 0
    target_positions: int = 0
    draft_positions: int = 0
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    accepted_per_position: list = field(default_factory=list)
    new_tokens: int = 0
    draft_time: float = 0.0
    target_time: float = 0.0
    trace: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        if not self.accepted_per_position:  # Stats(k=4): one counter per draft position
            self.accepted_per_position = [0] * self.k

    @property
    def acceptance_rate(self):
        """Fraction of proposed draft tokens the target kept."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def kept_of_checked(self):
        """Guesses kept / guesses checked, the run's own alpha: a round checks its guesses up
        to and including the first rejected one; those after it are never looked at."""
        checked = sum(kept + (kept < len(guesses)) for guesses, kept, _ in self.trace)
        return self.accepted / checked if checked else 0.0

    @property
    def tokens_per_pass(self):
        """New tokens per target forward pass: 1 for plain decoding, up to k+1 here."""
        return self.new_tokens / self.target_passes if self.target_passes else 0.0

    def count_round(self, guesses, kept, token):
        """One round: `guesses` proposed, the first `kept` of them kept, then `token` added."""
        self.rounds += 1
        self.target_positions += len(guesses) + 1
        self.draft_positions += len(guesses)
        self.proposed += len(guesses)
        self.accepted += kept
        for i in range(kept):
            self.accepted_per_position[i] += 1
        self.new_tokens += kept + 1
        self.trace.append((guesses, kept, token))

    def add(self, other):
        for name in ("target_passes", "draft_passes", "target_positions", "draft_positions",
                     "rounds", "proposed", "accepted", "new_tokens", "draft_time", "target_time"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.accepted_per_position = [a + b for a, b in zip(
            self.accepted_per_position or [0] * len(other.accepted_per_position),
            other.accepted_per_position)]
        self.trace += other.trace


def _sync(model):
    """Wait for the GPU so that timings are real (a no-op on the CPU)."""
    p = next(model.parameters(), None) if hasattr(model, "parameters") else None
    if p is not None and p.is_cuda:
        torch.cuda.synchronize(p.device)


@torch.no_grad()
def generate(model, idx, max_new_tokens, *, temperature=0.0, top_k=None, top_p=None,
             generator=None, stats=None, threads=machine.DECODE_THREADS):
    """Plain decoding with a KV cache: one forward pass per new token. Returns idx (B, T+new).

    Temperature 0 is greedy (argmax); otherwise tokens are sampled from warp(...). Pass a Stats
    to `stats` to have it counted. `threads`: torch threads while decoding (restored after;
    None keeps the current setting): one, because a step is too small to share (machine.py).
    """
    check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p)
    if idx.shape[0] > 1:  # a batch: every row in one pass per token (batched.py)
        import batched
        if batched.batchable(model):
            return batched.generate(model, idx, max_new_tokens, temperature=temperature,
                                    top_k=top_k, top_p=top_p, generator=generator, stats=stats,
                                    threads=threads)
    stats = stats if stats is not None else Stats()
    scorer = as_scorer(model, idx.shape[0])
    rng = TorchUniform(generator)
    seqs = idx.tolist()                                      # B lists of token ids
    started = time.perf_counter()
    with machine.threads(threads):
        for _ in range(max_new_tokens):
            logits = scorer.score(seqs, len(seqs[0]))[:, -1]     # (B, V)
            if temperature == 0:
                tokens = logits.argmax(-1).tolist()
            else:
                tokens = [sample(p, rng) for p in warp(logits, temperature, top_k, top_p)]
            for seq, token in zip(seqs, tokens):
                seq.append(token)
            stats.target_passes += 1
            stats.target_positions += len(seqs)
        _sync(model)
    stats.new_tokens += max_new_tokens
    stats.target_time += time.perf_counter() - started
    return torch.tensor(seqs, dtype=torch.long, device=idx.device)


@torch.no_grad()
def speculative_generate(target, draft, idx, max_new_tokens, *, k=4, temperature=0.0,
                         top_k=None, top_p=None, generator=None, threads=machine.DECODE_THREADS,
                         lenience=1.0):
    """Speculative decoding. Returns (idx (B, T+new), Stats).

    At temperature 0 the tokens equal generate(target, ...) exactly; with sampling each output
    has exactly the distribution generate(target, ...) samples from. Rows of a batch are decoded
    together, each accepting its own number of tokens per round (batched.py; its Stats count
    batched passes and keep one Stats per row in `rows`). `threads` as in generate().

    lenience (off by default: 1.0 is the exact rule): a sampled guess x is kept with
    min(1, p(x) / (lenience q(x))) and a rejection draws from norm(max(0, p - lenience q)), p the
    target's and q the draft's distribution: more guesses kept, but the output no longer has
    the target's distribution (exercises/sampling_costs.py measures both). Greedy decoding
    ignores it. A lenience below 1 decodes a batch row by row.
    """
    check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p, k)
    if not (isinstance(lenience, (int, float)) and 0 < lenience <= 1):
        raise ValueError(f"lenience must be in (0, 1] (1 is the exact rule), not {lenience!r}")
    if vocab_size_of(target) != vocab_size_of(draft):
        raise ValueError(f"the draft's vocabulary ({vocab_size_of(draft)} tokens) differs from "
                         f"the target's ({vocab_size_of(target)}); both must be trained on the "
                         f"same vocabulary")
    if idx.shape[0] > 1 and lenience == 1:  # a batch: every row at once, each keeping its own
        import batched                         # guesses (batched.py)
        return batched.speculative_generate(target, draft, idx, max_new_tokens, k=k,
                                            temperature=temperature, top_k=top_k, top_p=top_p,
                                            generator=generator, threads=threads)
    k_max = k.k_max if hasattr(k, "update") else k
    stats = Stats(k=k_max)
    rows = []
    with machine.threads(threads):
        for row in idx.tolist():
            out, row_stats = _speculative_row(target, draft, row, max_new_tokens, k, temperature,
                                              top_k, top_p, generator, lenience)
            rows.append(out)
            stats.add(row_stats)
    return torch.tensor(rows, dtype=torch.long, device=idx.device), stats


def _speculative_row(target, draft, seq, max_new_tokens, k, temperature, top_k, top_p,
                     generator, lenience=1.0):
    """Decode one sequence (a list of token ids, extended in place); return it and its Stats."""
    schedule = k if hasattr(k, "update") else None       # an adaptive k (drafts/adaptive.py)
    k_max = schedule.k_max if schedule else k
    stats = Stats(k=k_max)
    drafter = as_drafter(draft)
    # A drafter that shares work with the target's pass (early exit, extra heads) scores
    # for it too: drafts/__init__.py, scorer_for.
    target_scorer = drafter.scorer_for(target) if hasattr(drafter, "scorer_for") else \
        as_scorer(target)
    if hasattr(schedule, "attach"):                      # it tunes the drafter itself
        schedule.attach(drafter)
    rng = TorchUniform(generator)
    sampling = Sampling(temperature, top_k, top_p, rng)
    goal = len(seq) + max_new_tokens
    while len(seq) < goal:
        n = len(seq)
        k_round = min(schedule.k if schedule else k, goal - n - 1)  # never propose more
        # 1. The draft proposes k_round tokens (drafts/__init__.py: the drafter interface).
        started = time.perf_counter()
        draft_tokens, draft_probs = drafter.propose(seq, k_round, sampling) if k_round else \
            ([], None)
        k_round = len(draft_tokens)           # a drafter may stop early (drafts/model.py)
        seq.extend(draft_tokens)
        _sync(draft)
        # 2. The target scores the last accepted token and all proposals in one pass.
        drafted = time.perf_counter()
        passes_before = getattr(target_scorer, "passes", 0)
        target_logits = target_scorer.score([seq], n)[0]                   # (k_round+1, V)
        # 3. Keep the proposals the target agrees with, and add the target's own next token.
        if temperature == 0:
            choices = target_logits.argmax(-1).tolist()                    # (k_round+1,)
            n_accepted, next_token = greedy_verdict(draft_tokens, choices)
        else:
            target_probs = warp(target_logits, temperature, top_k, top_p)   # (k_round+1, V)
            draft_array = np.reshape(draft_probs if k_round else [],
                                     (k_round, target_probs.shape[1]))             # (k_round, V)
            # The lenient rule is the exact one against lenience x the draft's distribution:
            # verify reads it only through min(1, p/q) and norm(max(0, p - q)).
            n_accepted, next_token = verify(target_probs, lenience * draft_array, draft_tokens,
                                            rng)
        _sync(target)
        del seq[n + n_accepted:]  # the rejected proposals
        seq.append(next_token)
        # Count what happened.
        stats.draft_time += drafted - started
        stats.target_time += time.perf_counter() - drafted
        stats.draft_passes += k_round
        stats.target_passes += max(1, getattr(target_scorer, "passes", 1) - passes_before)
        stats.count_round(draft_tokens, n_accepted, next_token)
        if hasattr(drafter, "kept"):
            drafter.kept(n_accepted)
        if schedule:
            schedule.update(k_round, n_accepted, drafted - started,
                            time.perf_counter() - drafted)
    return seq, stats


# ----------------------------------------------------------------------------------------------
# Acceptance measured on held-out text


@dataclass
class Agreement:
    alpha: float             # mean over positions of sum_x min(target(x), draft(x))
    greedy_agreement: float  # fraction of positions where both argmaxes are equal
    positions: int


@torch.no_grad()
def measure_agreement(target, draft, data, *, windows=64, window=None, temperature=1.0,
                      top_k=None, top_p=None):
    """alpha and greedy agreement of draft with target on `data` (a 1-D LongTensor).

    Both models read the same `windows` evenly spaced windows of `data`; every position of every
    window counts. alpha is measured on the distributions decoding would sample from
    (temperature, top-k, top-p applied to both), so at temperature 1 it is the lesson's
    sum_x min(p(x), q(x)); greedy agreement is alpha at temperature 0.
    """
    sizes = [m.c.block_size for m in (target, draft) if hasattr(m, "c")]
    window = window or min(sizes or [64])
    if len(data) < window + 1:
        raise ValueError(f"need at least {window + 1} tokens of data, got {len(data)}")
    starts = torch.linspace(0, len(data) - window - 1, windows).long()
    x = torch.stack([data[s:s + window] for s in starts])                  # (W, T)
    logits = []
    for model in (target, draft):
        if hasattr(model, "c"):  # a GPT (torch or NumPy): all positions in one pass
            device = next(model.parameters()).device if hasattr(model, "parameters") else "cpu"
            logits.append(model(x.to(device))[0].float().cpu().numpy())    # (W, T, V)
        else:                    # any other draft: through its scorer, window by window
            model = as_scorer(model)
            logits.append(np.stack([model.score([row], 1)[0] for row in x.tolist()]))
    alpha, agree = agreement_of(*logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return Agreement(alpha=alpha, greedy_agreement=agree, positions=x.numel())


def agreement_of(target_logits, draft_logits, *, temperature=1.0, top_k=None, top_p=None):
    """(alpha, greedy agreement) from both models' logits (..., V) at the same positions.

    alpha: the mean over positions of sum_x min(target(x), draft(x)), both distributions
    warped (temperature, top-k, top-p) as decoding would; greedy agreement: the fraction of
    positions where both models' most likely tokens are the same. Two Python floats.
    """
    # BEGIN SOLUTION
    target_probs = warp(target_logits, temperature, top_k, top_p)         # (..., V)
    draft_probs = warp(draft_logits, temperature, top_k, top_p)           # (..., V)
    alpha = float(np.minimum(target_probs, draft_probs).sum(-1).mean())
    agree = float((np.argmax(target_logits, -1) == np.argmax(draft_logits, -1)).mean())
    return alpha, agree
    # END SOLUTION


def alpha(target, draft, data, **kwargs):
    """Measured alpha: the mean over positions of sum_x min(p(x), q(x)) on held-out `data`."""
    return measure_agreement(target, draft, data, **kwargs).alpha


# ----------------------------------------------------------------------------------------------
# The lesson's formulas (Leviathan et al. 2023, section 3)


def expected_tokens_per_pass(alpha, k):
    """1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha): tokens per target pass when
    each draft token is accepted with probability alpha, independently."""
    # BEGIN SOLUTION
    if alpha == 1:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)
    # END SOLUTION


def expected_speedup(alpha, k, c, verify_cost=1.0):
    """Wall-clock speed-up over plain decoding: tokens per pass over the cost of a round, k draft
    steps at c each plus one verification pass (verify_cost target steps; 1 in the lesson)."""
    # BEGIN SOLUTION
    return expected_tokens_per_pass(alpha, k) / (k * c + verify_cost)
    # END SOLUTION


def break_even_alpha(k, c, verify_cost=1.0):
    """The alpha above which speculation beats plain decoding (nan if none below 1 does):
    where expected_speedup(alpha, k, c, verify_cost) crosses 1, to 1e-9 or better."""
    # BEGIN SOLUTION
    if expected_speedup(1.0, k, c, verify_cost) <= 1:
        return math.nan
    low, high = 0.0, 1.0  # expected_speedup grows with alpha: bisect
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if expected_speedup(mid, k, c, verify_cost) < 1 else (low, mid)
    return (low + high) / 2
    # END SOLUTION


def best_k(alpha, c, verify_cost=1.0, k_max=32):
    """The k from 1 to k_max with the highest expected speed-up."""
    return max(range(1, k_max + 1), key=lambda k: expected_speedup(alpha, k, c, verify_cost))


# ----------------------------------------------------------------------------------------------
# What became of each guess (exercise 1, notebook 1 and decode.py's colours read a trace so)


def verdicts(proposed, n_accepted):
    """One round of a Stats.trace: the fate of each guess (kept, then the first rejected, then
    thrown away unchecked) and the kind of token the target added: "bonus" when every guess was
    kept, else "correction" (the target's own token in place of the first rejected guess)."""
    fates = (["kept"] * n_accepted + (["rejected"] if n_accepted < len(proposed) else [])
             + ["thrown-away"] * (len(proposed) - n_accepted - 1))
    return fates, "bonus" if proposed and n_accepted == len(proposed) else "correction"


def origins(trace):
    """Where each generated token came from: "accepted" (a kept guess), "correction" or "bonus"."""
    kinds = []
    for proposed, n_accepted, _ in trace:
        kinds += ["accepted"] * n_accepted + [verdicts(proposed, n_accepted)[1]]
    return kinds


def check_backend(backend):
    if backend not in ("torch", "numpy"):
        raise ValueError(f"a backend is torch or numpy, not {backend!r}")


def with_backend(model, backend):
    """The same trained model as a torch module or as a numpy_gpt.NumpyGPT (a drafter that is
    not a GPT, such as the n-gram table, has no backend and comes back as it is)."""
    check_backend(backend)
    if backend == "torch" or not hasattr(model, "new_cache"):
        return model
    from numpy_gpt import NumpyGPT
    return NumpyGPT(model)


if __name__ == "__main__":  # the command line lives in decode.py; this name keeps working
    import cli
    import decode
    cli.run(decode.main)
