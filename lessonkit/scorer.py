"""
lessonkit/scorer.py: the window rule, and the one scorer that every decoder checks guesses with.

A model sees at most block_size tokens: window_start(n) says where the context of token n starts,
windows() walks the passes that score a run of positions, and WindowScorer feeds a model's KV
cache only what it lacks (rejected guesses rolled back, a jumped window started afresh). The
exercise (numpy_speculative.py) takes the window rule from here. NumPy only: a model is anything
with the Model protocol below. Shapes: B batch, T tokens, t new tokens, V vocabulary.
"""

from typing import Protocol, runtime_checkable

import numpy as np


def window_start(n, block_size):
    """First position of the context from which token n (0-based) is predicted. The window
    starts at 0; when it would hold more than block_size tokens it jumps forward, keeping the
    last block_size // 2 (re-encoded into a fresh cache). It depends on n alone, so plain and
    speculative decoding change windows at exactly the same positions."""
    if n <= block_size:
        return 0
    keep = max(1, block_size // 2)
    stride = block_size + 1 - keep            # how far the window moves at each jump
    return -(-(n - block_size) // stride) * stride  # ceil((n - block_size) / stride) * stride


def windows(first, T, block_size):
    """(pos, start, end) for each pass that scores positions first..T of T tokens: the window
    from `start` predicts pos..end (a check crossing a jump is split). Every scorer walks these."""
    if not 1 <= first <= T:
        raise ValueError(f"can only score positions 1..{T}, not from {first}")
    pos = first
    while pos <= T:
        start = window_start(pos, block_size)
        end = min(T, start + block_size)          # the last position this window predicts
        yield pos, start, end
        pos = end + 1


def common_prefix(fed, seq, start, limit):
    """How many of the first `limit` cached tokens equal seq[start:]."""
    if fed[:limit] == seq[start:start + limit]:
        return limit
    return next(i for i in range(limit) if fed[i] != seq[start + i])


@runtime_checkable
class Model(Protocol):
    """What WindowScorer asks of a model: its Config `c` (vocab_size, block_size), a KV cache
    for B rows whose rollback(n) forgets all but the first n tokens, and the logits of new
    tokens continuing that cache."""
    c: object

    def new_cache(self, batch_size=1): ...

    def logits(self, new, cache): ...             # new (B, t) int array -> (B, t, V) array


class Scorer:
    """The target's side of a round: score(seqs, first) -> logits (B, T - first + 1, V) of
    positions first..T of each sequence. passes: forward passes made (a check that crosses a
    window jump makes two)."""
    vocab_size = None                    # a subclass says (None: unknown)
    passes = 0

    def score(self, seqs, first):
        raise NotImplementedError(f"{type(self).__name__} must define score(seqs, first)")

    def reset(self):                     # optional: a new sequence begins
        pass


class WindowScorer(Scorer):
    """The Scorer of every model with a KV cache, each position scored from its window;
    score_rows(seqs, {b: first}) -> {b: logits}. Rows share one cache length here (decoded in
    step); beyond/batched.py's subclass lets them drift apart."""

    def __init__(self, model, batch_size=1):
        if not isinstance(model, Model):
            raise TypeError(f"{type(model).__name__} is not a model (c, new_cache, logits) nor a "
                            f"scorer (scorer.Scorer: vocab_size, score(seqs, first))")
        self.model, self.batch_size = model, batch_size
        self.vocab_size, self.block_size = model.c.vocab_size, model.c.block_size
        self.passes = 0
        self.reset()

    def reset(self):
        """Forget every row: the next score() starts from an empty cache."""
        self.cache = self.model.new_cache(self.batch_size)
        self.starts = [0] * self.batch_size              # each row's window start
        self.fed = [[] for _ in range(self.batch_size)]  # each row's cached tokens, from its start

    def score(self, seqs, first):
        rows = self.score_rows(seqs, dict.fromkeys(range(len(seqs)), first))   # in row order
        return np.stack(list(rows.values()))

    def score_rows(self, seqs, firsts):
        passes = [[]]                               # each pass: (row, new tokens, kept) segments
        parts = {b: [] for b in firsts}             # row b's logits: (pass, rows to skip) each
        for b, first in firsts.items():
            jumps = 0
            for pos, start, end in windows(first, len(seqs[b]), self.block_size):
                pass_ = 0
                if start != self.starts[b]:         # the window jumped: start the row afresh
                    self.starts[b], self.fed[b] = start, []
                    jumps = pass_ = jumps + 1
                    passes += [] if pass_ < len(passes) else [[]]
                fed = self.fed[b]                   # keep the cached tokens that still match,
                keep = common_prefix(fed, seqs[b], start, min(len(fed), pos - 1 - start))
                fed[keep:] = seqs[b][start + keep:end]  # up to the one before pos: feed the rest
                passes[pass_].append((b, fed[keep:], keep))
                parts[b].append((pass_, pos - 1 - start - keep))
        logits = [self.run(segments) if segments else {} for segments in passes]
        out = {b: [logits[p][b][skip:] for p, skip in parts[b]] for b in firsts}
        return {b: rows[0] if len(rows) == 1 else np.concatenate(rows) for b, rows in out.items()}

    def run(self, segments):
        """One forward pass over (row, new tokens, kept) segments -> {row: (len(new), V)}."""
        keep = segments[0][2]
        assert len(segments) == len(self.fed) and all(
            s[2] == keep and len(s[1]) == len(segments[0][1]) for s in segments), \
            "rows out of step: beyond/batched.py scores rows of different lengths"
        self.cache.rollback(keep)
        logits = self.logits([new for _, new, _ in segments])                # (B, t, V)
        self.passes += 1
        return {b: logits[i] for i, (b, _, _) in enumerate(segments)}

    def logits(self, new):                  # B lists of t new tokens -> logits (B, t, V)
        return self.model.logits(np.array(new), self.cache)
