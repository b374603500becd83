"""
beyond/ngram.py: a character n-gram table as a drafter: a guess is a dictionary look-up, so a
draft step costs almost nothing (c close to 0). The table keeps, for every context of up to
order - 1 characters, the character that most often came next (backing off to shorter contexts);
with prompt_lookup it first proposes what followed the last characters earlier in the sequence.
NGramDraft.of_target(big) ("ngram-big") learns the big model's own greedy text instead. Why
order 5, and how deterministic guesses stay exact when sampling: docs/DESIGN.md, "beyond/,
module by module".
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

import speculative as sd
from beyond import batched, presets
from beyond.backends import with_backend
from lessonkit import cli, corpus
from lessonkit.checkpoint import write_atomic

ORDER = 5
LOOKUP = 3   # characters matched by prompt lookup

# "ngram-big": the table of the big model's own greedy text. Measured by `python -m beyond.ngram`:
# orders 6, 8 and 10 did about as well as each other, and four times the runs gained nothing:
# hence the smallest. Prompt lookup on top of it did worse: it already knows the model's habits.
OWN_ORDER, OWN_RUNS, OWN_LENGTH, OWN_PROMPT = 6, 1024, 200, 32


def table(data, order, vocab_size):
    """[{context code: next token}] for context lengths 0 .. order - 1, from 1-D token array."""
    data = np.asarray(data, dtype=np.int64)
    tables = []
    for n in range(order):
        if len(data) <= n:
            tables.append({})
            continue
        code = np.zeros(len(data) - n, dtype=np.int64)
        for j in range(n):                                   # base-V number of the context
            code = code * vocab_size + data[j:len(data) - n + j]
        pairs = code * vocab_size + data[n:]                 # (context, next) as one number
        keys, counts = np.unique(pairs, return_counts=True)
        contexts, nexts = keys // vocab_size, keys % vocab_size
        order_ = np.lexsort((-counts, contexts))             # by context, most frequent first
        contexts, nexts = contexts[order_], nexts[order_]
        first = np.ones(len(contexts), dtype=bool)
        first[1:] = contexts[1:] != contexts[:-1]
        tables.append(dict(zip(contexts[first].tolist(), nexts[first].tolist())))
    return tables


def prompt_lookup(seq, k, longest=LOOKUP, shortest=1):
    """Prompt lookup: up to k tokens that followed the last n tokens of seq where those n last
    occurred earlier in seq, for the longest n from `longest` down to `shortest` that occurred
    earlier at all; [] where none did. seq: a list of token ids.

    For seq = "the cat sat; the c" (as tokens) and k = 3: the last 3 tokens, "e c", occurred at
    "the cat", so the proposal is what followed there, "at ". The continuation may run into the
    tail itself, and is shorter than k where seq ends first."""
    # BEGIN SOLUTION
    for n in range(min(longest, len(seq) - 1), shortest - 1, -1):
        tail = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):      # the latest earlier occurrence
            if seq[start:start + n] == tail:
                return seq[start + n:start + n + k]
    return []
    # END SOLUTION


class PromptLookup(sd.Drafter):
    """Prompt lookup alone ("lookup" on the command lines): what followed the last few tokens
    where they occurred before in the text so far, and no guess where they never did (the big
    model then writes one token that round, as plain decoding would). Sampling, each guess
    comes with a one-hot distribution, as the table's do (see the module docstring)."""

    def __init__(self, vocab_size, longest=LOOKUP):
        self.vocab_size, self.longest = vocab_size, longest

    def propose(self, seq, k, sampling):
        tokens = prompt_lookup(seq, k, self.longest)
        return tokens, None if sampling.greedy else np.eye(self.vocab_size)[tokens]  # (k, V)


class NGramDraft(sd.Drafter, sd.Scorer):
    """The drafter (speculative.Drafter), and a Scorer of the table's guesses as logits, so that
    speculative.measure_agreement measures it like any draft."""

    def __init__(self, tables, vocab_size, prompt_lookup=False):
        if len(tables) < 1:
            raise ValueError("an n-gram order must be at least 1")
        self.tables, self.vocab_size, self.prompt_lookup = tables, vocab_size, prompt_lookup
        self.order = len(tables)

    @classmethod
    def from_data(cls, data, vocab_size, order=ORDER, **options):
        if order < 1:
            raise ValueError(f"an n-gram order must be at least 1, not {order}")
        return cls(table(data, order, vocab_size), vocab_size, **options)

    @classmethod
    def trained(cls, folder=None, order=ORDER, **options):
        """The table of the Shakespeare training split, built once and cached (.npz)."""
        sha = corpus.loaded()["meta"]["shakespeare"]["sha256"]
        path = Path(folder or presets.CHECKPOINTS) / f"ngram{order}.npz"
        tables = cached(path, sha) or saved(path, sha, table(corpus.train_data.numpy(), order,
                                                             len(corpus.vocab())))
        return cls(tables, len(corpus.vocab()), **options)

    @classmethod
    def of_target(cls, target, folder=None, order=OWN_ORDER, runs=OWN_RUNS, length=OWN_LENGTH,
                  log=print):
        """The table of the target's own greedy text (own_text), backing off to the training
        text's table where it has not seen a context. Built once per target (seconds for the big
        model: docs/RESULTS.md, "Every drafter compared") and cached (.npz), tied to the
        target's weights."""
        base = cls.trained(folder)
        stamp = "/".join(map(str, (presets.fingerprint(target),
                                   corpus.loaded()["meta"]["shakespeare"]["sha256"], runs, length)))
        path = Path(folder or presets.CHECKPOINTS) / f"ngram-big{order}.npz"
        tables = cached(path, stamp)
        if tables is None:
            if log:
                log(f"building the table of the big model's own text ({runs} greedy runs of "
                    f"{length} characters), once: {path}")
            own = table(own_text(target, runs, length), order, base.vocab_size)
            tables = saved(path, stamp, [{**(base.tables[n] if n < base.order else {}), **t}
                                         for n, t in enumerate(own)])
        return cls(tables, base.vocab_size)

    def next_token(self, seq):
        """The table's guess after seq: the longest context it has seen decides."""
        V = self.vocab_size
        for n in range(min(self.order - 1, len(seq)), -1, -1):
            code = 0
            for t in seq[len(seq) - n:]:
                code = code * V + t
            token = self.tables[n].get(code)
            if token is not None:
                return token
        return 0

    def propose(self, seq, k, sampling):
        work = list(seq)
        tokens = prompt_lookup(work, k, LOOKUP, LOOKUP) if self.prompt_lookup else []
        work += tokens
        while len(tokens) < k:
            tokens.append(self.next_token(work))
            work.append(tokens[-1])
        probs = None if sampling.greedy else np.eye(self.vocab_size)[tokens]  # (k, V) one-hot
        return tokens, probs

    def score(self, seqs, first):
        """Logits (B, T - first + 1, V) like a model's: 0 at the table's guess, -1e9 elsewhere
        (so speculative.measure_agreement can measure the table like any draft)."""
        out = np.full((len(seqs), len(seqs[0]) - first + 1, self.vocab_size), -1e9)
        for b, seq in enumerate(seqs):
            for i, pos in enumerate(range(first, len(seq) + 1)):
                out[b, i, self.next_token(seq[:pos])] = 0.0
        return out


def own_text(target, runs=OWN_RUNS, length=OWN_LENGTH, prompt_chars=OWN_PROMPT):
    """What the target writes greedily: 1-D tokens of `runs` prompts of prompt_chars characters
    (speech starts spread evenly over the training split) each followed by `length` characters
    of the target's greedy decoding (a gpt.GPT, decoded in NumPy, 32 runs at a time)."""
    model = with_backend(target, "numpy")
    text = corpus.decode(corpus.train_data)
    starts = [text.find("\n\n", i * len(text) // runs) + 2 for i in range(runs)]
    prompts = [corpus.encode(text[s:s + prompt_chars]) for s in starts if s >= 2]
    out = []
    for i in range(0, len(prompts), 32):
        for row in batched.generate(model, prompts[i:i + 32], length):
            out += row
    return np.array(out, dtype=np.int64)


def cached(path, stamp):
    """The tables saved at path for `stamp` (what they were built from), or None."""
    if path.exists():
        with np.load(path) as f:
            if "stamp" in f.files and str(f["stamp"]) == stamp:
                return [dict(zip(f[f"c{n}"].tolist(), f[f"t{n}"].tolist()))
                        for n in range(int(f["order"]))]
    return None


def saved(path, stamp, tables):
    """Save tables at path (atomically), marked with `stamp`; -> tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"stamp": np.array(stamp), "order": np.array(len(tables))}
    for n, t in enumerate(tables):
        arrays[f"c{n}"] = np.array(list(t), dtype=np.int64)
        arrays[f"t{n}"] = np.array(list(t.values()), dtype=np.int64)
    write_atomic(path, lambda f: np.savez(f, **arrays))
    return tables


def main():
    """The choices above, measured. Agreement of orders 2-9 with the big model on held-out
    text (ORDER); then tables of the big model's own text of several orders and sizes against
    the training text's table, while decoding (OWN_ORDER, OWN_RUNS, no prompt lookup)."""
    target = presets.load_trained("big")
    for order in range(2, 10):
        draft = NGramDraft.from_data(corpus.train_data.numpy(), len(corpus.vocab()), order)
        a = sd.measure_agreement(target, draft, corpus.val_data, windows=64)
        print(f"order {order}: greedy agreement with the big model {a.greedy_agreement:.3f}",
              flush=True)
    print("\nwhile decoding 8 held-out prompts x 200 characters greedily (NumPy big model): "
          "guesses kept at k = 4, characters per pass at k = 8", flush=True)
    big, prompts = with_backend(target, "numpy"), corpus.held_out_prompts(8, 32)

    def decoding(label, draft):
        kept, per_pass = sd.Stats(k=4), sd.Stats(k=8)
        for p in prompts:
            kept.add(sd.speculative_generate(big, draft, p, 200, k=4)[1])
            per_pass.add(sd.speculative_generate(big, draft, p, 200, k=8)[1])
        print(f"  {label:48} {kept.kept_of_checked:.3f}  {per_pass.tokens_per_pass:.2f}",
              flush=True)
    decoding("training text, order 5, prompt lookup", NGramDraft.trained(prompt_lookup=True))
    with tempfile.TemporaryDirectory() as folder:   # the trials are not kept
        for order, runs in ((6, OWN_RUNS), (8, OWN_RUNS), (10, OWN_RUNS), (6, 4 * OWN_RUNS)):
            own = NGramDraft.of_target(target, folder, order, runs, log=None)
            decoding(f"big model's text, order {order}, {runs} runs", own)
            if (order, runs) == (OWN_ORDER, OWN_RUNS):
                own.prompt_lookup = True
                decoding(f"big model's text, order {order}, {runs} runs, prompt lookup", own)


if __name__ == "__main__":
    sys.exit(cli.run(lambda argv: main()))
