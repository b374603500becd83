"""
speculative.py: plain decoding and speculative decoding, side by side.

A big model writes one token per forward pass. Speculative decoding lets a cheap draft guess k
tokens, scores them all in one pass of the big (target) model, keeps the guesses the target
agrees with and replaces the first one it rejects with its own token: 1 to k+1 tokens per pass,
with exactly the target's output (greedy) or exactly its distribution (sampling). Read
`speculative_decode` first; the rest is what it stands on. The acceptance rule and the window
rule live in numpy_speculative.py (NumPy only, so that exercise 3 runs without torch).

References: Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via Speculative
Decoding" (Algorithm 1 is speculative_decode, section 3 the formulas at the end); Chen et al.
(2023), "Accelerating Large Language Model Decoding with Speculative Sampling". The papers use p
and q the opposite way round; this file says `target_probs` and `draft_probs` instead.

The drafter protocol, the one interface every drafter implements:
    guesses, draft_probs = drafter.propose(seq, k, sampling)
seq: the token ids so far (read, never changed); k >= 1; sampling: the run's Sampling. Returns
1 to k guesses and, when sampling, the (k, V) distributions they were drawn from (None when
greedy; a deterministic drafter returns one-hot rows). Optional: `vocab_size`, `reset()` (a new
sequence starts), `kept(n)` (how many of its last guesses were kept) and `scorer_for(target)`
(a drafter inside the big model returns the scorer that checks for it, to share its work).
A GPT passed as a draft is wrapped as a ModelDraft.

Shapes: B batch, T time, V vocabulary, k guesses per round.
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

import machine
from numpy_speculative import (accept_probability, greedy_verdict, residual, sample,  # noqa: F401
                               softmax, verify, warp, windows)

# ----------------------------------------------------------------------------------------------
# Algorithm 1: speculative decoding of one sequence


def speculative_decode(scorer, drafter, seq, max_new_tokens, schedule, sampling, after_round):
    """Extend seq (a list of token ids) by max_new_tokens, guessing and checking. Returns seq.

    scorer: the target and its KV cache (Scorer.score); drafter: the protocol above;
    schedule.k: guesses per round; sampling: greedy, or the warp and the random numbers;
    after_round(guesses, kept, token) is told what each round did (counting, adapting k).
    """
    goal = len(seq) + max_new_tokens
    while len(seq) < goal:
        n = len(seq)
        k = min(schedule.k, goal - n - 1)          # never guess a token past the goal
        # 1. The draft guesses k tokens, one after another (and, sampling, their distributions).
        guesses, draft_probs = drafter.propose(seq, k, sampling) if k else ([], None)
        # 2. The target scores the last accepted token and every guess in one pass.
        target_logits = scorer.score([seq + guesses], n)[0]              # (len(guesses) + 1, V)
        # 3. Keep the guesses it agrees with, then add its own token: the correction of the
        #    first rejected guess, or a bonus token when every guess was kept.
        kept, token = sampling.verdict(target_logits, guesses, draft_probs)
        seq += guesses[:kept] + [token]
        after_round(guesses, kept, token)
    return seq


@dataclass
class Sampling:
    """How a run picks tokens: temperature 0 is greedy; rng has .random() (uniform [0, 1)).

    lenience (1.0, the exact rule, unless asked): a sampled guess x is kept with
    min(1, p(x) / (lenience q(x))) and a rejection draws from norm(max(0, p - lenience q)): more
    guesses kept, but no longer the target's distribution (beyond/studies/lenience.py)."""
    temperature: float = 0.0
    top_k: int = None
    top_p: float = None
    rng: object = None
    lenience: float = 1.0

    @property
    def greedy(self):
        return self.temperature == 0

    def warp(self, logits):
        return warp(logits, self.temperature, self.top_k, self.top_p)

    def draw(self, probs):
        return sample(probs, self.rng)

    def verdict(self, target_logits, guesses, draft_probs):
        """Step 3 of a round: (how many guesses are kept, the token the target adds)."""
        if self.greedy:
            return greedy_verdict(guesses, target_logits.argmax(-1).tolist())
        target_probs = self.warp(target_logits)                             # (k+1, V)
        draft_probs = np.reshape(draft_probs if guesses else [],
                                 (len(guesses), target_probs.shape[1]))            # (k, V)
        # The lenient rule is the exact one against lenience x the draft's distribution.
        return verify(target_probs, self.lenience * draft_probs, guesses, self.rng)


@torch.no_grad()
def speculative_generate(target, draft, idx, max_new_tokens, *, k=4, temperature=0.0,
                         top_k=None, top_p=None, generator=None, threads=machine.DECODE_THREADS,
                         lenience=1.0):
    """Speculative decoding. Returns (idx (B, T+new), Stats).

    At temperature 0 the tokens equal generate(target, ...) exactly; with sampling each output
    has exactly the distribution generate(target, ...) samples from. The rows of a batch are
    decoded one after another (beyond/batched.py decodes them together). k: guesses per round,
    or a schedule that adapts it (beyond/adaptive.py). `threads` as in generate(); lenience as
    in Sampling (off by default).
    """
    check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p, k)
    if not (isinstance(lenience, (int, float)) and 0 < lenience <= 1):
        raise ValueError(f"lenience must be in (0, 1] (1 is the exact rule), not {lenience!r}")
    check_vocabularies(target, draft)
    sampling = Sampling(temperature, top_k, top_p, TorchUniform(generator), lenience)
    schedule = k if hasattr(k, "update") else FixedK(k)
    stats, rows = Stats(k=schedule.k_max), []
    with machine.threads(threads):
        for row in idx.tolist():
            out, row_stats = decode_row(target, draft, row, max_new_tokens, schedule, sampling)
            rows.append(out)
            stats.add(row_stats)
    return torch.tensor(rows, dtype=torch.long, device=idx.device), stats


def decode_row(target, draft, seq, max_new_tokens, schedule, sampling):
    """speculative_decode, measured: the drafter and the target's scorer are set up for a new
    sequence and timed from outside the loop; every round is counted. -> (seq, Stats)."""
    stats = Stats(k=schedule.k_max)
    drafter = as_drafter(draft)
    scorer = drafter.scorer_for(target) if hasattr(drafter, "scorer_for") else as_scorer(target)
    if hasattr(schedule, "attach"):                  # it tunes the drafter itself
        schedule.attach(drafter)
    timed_drafter, timed_scorer = Timed(drafter, draft), Timed(scorer, target)
    kept_hook = getattr(drafter, "kept", None)       # an adaptive drafter listens

    def after_round(guesses, kept, token):
        stats.count_round(guesses, kept, token)
        if kept_hook:
            kept_hook(kept)
        schedule.update(len(guesses), kept, timed_drafter.take(), timed_scorer.take())

    speculative_decode(timed_scorer, timed_drafter, seq, max_new_tokens, schedule, sampling,
                       after_round)
    stats.draft_time, stats.target_time = timed_drafter.seconds, timed_scorer.seconds
    stats.target_passes = timed_scorer.passes
    return seq, stats


@dataclass
class FixedK:
    """The schedule of a fixed k (beyond/adaptive.py has ones that adapt)."""
    k: int

    @property
    def k_max(self):
        return self.k

    def update(self, proposed, kept, draft_seconds, check_seconds):
        pass


class Timed:
    """A drafter or a scorer whose propose() / score() calls are timed from outside (after
    waiting for the GPU): `seconds` in all, take() the seconds since the last take(), and for a
    scorer `passes`, the forward passes its calls made (at least one each)."""

    def __init__(self, inner, model):
        self.inner, self.on_gpu = inner, on_gpu(model)
        self.seconds = self.pending = 0.0
        self.passes = 0

    def __getattr__(self, name):                     # vocab_size, reset, ...: the inner one's
        return getattr(self.inner, name)

    def propose(self, seq, k, sampling):
        return self._timed(self.inner.propose, seq, k, sampling)

    def score(self, seqs, first):
        before = getattr(self.inner, "passes", 0)
        logits = self._timed(self.inner.score, seqs, first)
        self.passes += max(1, getattr(self.inner, "passes", 0) - before)
        return logits

    def _timed(self, call, *args):
        started = time.perf_counter()
        out = call(*args)
        if self.on_gpu:
            torch.cuda.synchronize()
        self.pending += time.perf_counter() - started
        return out

    def take(self):
        seconds, self.pending = self.pending, 0.0
        self.seconds += seconds
        return seconds


def on_gpu(model):
    """Does `model` run on a GPU (whose work must be waited for before a timing is read)?"""
    p = next(model.parameters(), None) if hasattr(model, "parameters") else None
    return p is not None and p.is_cuda


# ----------------------------------------------------------------------------------------------
# Plain decoding, the baseline


@torch.no_grad()
def generate(model, idx, max_new_tokens, *, temperature=0.0, top_k=None, top_p=None,
             generator=None, stats=None, threads=machine.DECODE_THREADS):
    """Plain decoding with a KV cache: one forward pass per new token. Returns idx (B, T+new).

    Temperature 0 is greedy (argmax); otherwise tokens are sampled from warp(...). Pass a Stats
    to `stats` to have it counted. `threads`: torch threads while decoding (restored after;
    None keeps the current setting): one, because a step is too small to share (machine.py).
    """
    check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p)
    stats = stats if stats is not None else Stats()
    scorer = Timed(as_scorer(model, idx.shape[0]), model)
    sampling = Sampling(temperature, top_k, top_p, TorchUniform(generator))
    seqs = idx.tolist()                                      # B lists of token ids
    with machine.threads(threads):
        for _ in range(max_new_tokens):
            logits = scorer.score(seqs, len(seqs[0]))[:, -1]                   # (B, V)
            for seq, row in zip(seqs, logits):
                seq.append(int(row.argmax()) if sampling.greedy else
                           sampling.draw(sampling.warp(row)))
    stats.target_passes += scorer.passes
    stats.target_positions += max_new_tokens * len(seqs)
    stats.new_tokens += max_new_tokens
    stats.target_time += scorer.take()
    return torch.tensor(seqs, dtype=torch.long, device=idx.device)


# ----------------------------------------------------------------------------------------------
# Scoring growing sequences with a KV cache, under the window rule


class Scorer:
    """A model (gpt.GPT, or beyond/fast_numpy.py's NumpyGPT) and its KV cache, scoring positions
    of sequences that grow and shrink: the one place that applies the window rule to a cache.

    score(seqs, first): B token lists of equal length T -> logits (B, T - first + 1, V), row i
    the prediction for position first + i from the tokens before it. score_rows(seqs, firsts)
    scores row b from firsts[b] -> {b: logits}. Only tokens not yet cached are fed: cached ones
    that no longer match (rejected guesses) are rolled back first, and a row whose window jumps
    starts afresh, in a pass after the others. Here all rows of a pass share one cache length
    (rows decoded in step); beyond/batched.py's subclass lets them drift apart.
    """

    def __init__(self, model, batch_size=1):
        self.model = model
        self.vocab_size, self.block_size = model.c.vocab_size, model.c.block_size
        self.cache = model.new_cache(batch_size)
        self.starts = [0] * batch_size              # each row's window start
        self.fed = [[] for _ in range(batch_size)]  # each row's cached tokens, from its start
        self.passes = 0                             # forward passes made

    def score(self, seqs, first):
        rows = self.score_rows(seqs, dict.fromkeys(range(len(seqs)), first))
        return np.stack([rows[b] for b in range(len(seqs))])

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
        return {b: joined([logits[p][b][skip:] for p, skip in parts[b]]) for b in firsts}

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

    def logits(self, new):
        """Feed B lists of t new tokens through the model and its cache: logits (B, t, V)."""
        if isinstance(self.model, torch.nn.Module):
            with torch.inference_mode():
                idx = torch.tensor(new, device=self.cache.k.device)
                return self.model(idx, cache=self.cache)[0].float().cpu().numpy()
        return self.model.logits(np.array(new), self.cache)     # beyond.fast_numpy.NumpyGPT


def common_prefix(fed, seq, start, limit):
    """How many of the first `limit` cached tokens equal seq[start:]."""
    if fed[:limit] == seq[start:start + limit]:
        return limit
    return next(i for i in range(limit) if fed[i] != seq[start + i])


def joined(arrays):
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def as_scorer(model, batch_size=1):
    """A fresh Scorer for a GPT; anything else with score() is used as it is (after reset())."""
    if hasattr(model, "new_cache"):
        return Scorer(model, batch_size)
    if not (hasattr(model, "score") and hasattr(model, "vocab_size")):
        raise TypeError(f"{type(model).__name__} is neither a GPT nor a draft with "
                        f"vocab_size and score(seqs, first)")
    if hasattr(model, "reset"):
        model.reset()
    return model


# ----------------------------------------------------------------------------------------------
# A language model as a drafter


class ModelDraft:
    """A GPT (or anything with vocab_size and score(seqs, first)) as a drafter: one guess per
    forward pass, through its own KV cache, which rolls back by itself after a rejection.
    With `min_confidence` set (beyond/adaptive.py's Confidence sets it) it stops guessing
    early, when its probability that all its guesses so far are right falls below it, and
    leaves those products in `confidences` for the schedule to learn from."""

    def __init__(self, model):
        self.scorer = as_scorer(model)
        self.vocab_size = self.scorer.vocab_size
        self.min_confidence = None      # a number: stop guessing below it
        self.confidences = []

    def propose(self, seq, k, sampling):
        work, tokens, probs = list(seq), [], []
        self.confidences, sure = [], 1.0
        for _ in range(k):
            logits = self.scorer.score([work], len(work))[0, -1]           # (V,)
            if sampling.greedy:
                token = int(logits.argmax())
                if self.min_confidence is not None:
                    sure *= float(softmax(logits.astype(np.float64))[token])
            else:
                probs.append(sampling.warp(logits))                        # (V,)
                token = sampling.draw(probs[-1])
                sure *= float(probs[-1][token])
            self.confidences.append(sure)
            tokens.append(token)
            work.append(token)
            if self.min_confidence is not None and sure < self.min_confidence:
                break                                  # not sure enough to guess further
        return tokens, (np.array(probs) if probs else None)                # (k, V) or None


def as_drafter(draft):
    """A drafter as it is (after reset()), or a GPT / anything with score() wrapped as one."""
    if hasattr(draft, "propose"):
        if hasattr(draft, "reset"):
            draft.reset()
        return draft
    return ModelDraft(draft)


# ----------------------------------------------------------------------------------------------
# Arguments and randomness


def check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p, k=1):
    if not (torch.is_tensor(idx) and idx.dim() == 2 and idx.dtype == torch.long):
        raise ValueError("idx must be a (B, T) LongTensor of token ids, "
                         "e.g. torch.tensor([encode(prompt)])")
    if idx.shape[1] < 1:
        raise ValueError("the prompt is empty; give at least one character")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number >= 0, not {max_new_tokens!r}")
    adaptive = hasattr(k, "update")  # a schedule (beyond/adaptive.py) checks its own k
    if not adaptive and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ValueError(f"k (draft tokens per round) must be a whole number >= 1, not {k!r}")
    if not (isinstance(temperature, (int, float)) and 0 <= temperature < math.inf):
        raise ValueError(f"temperature must be a number >= 0 (0 is greedy), not {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a whole number >= 1 or None, not {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, not {top_p!r}")


def vocab_size_of(model):
    return model.c.vocab_size if hasattr(model, "c") else model.vocab_size


def check_vocabularies(target, draft):
    if vocab_size_of(target) != vocab_size_of(draft):
        raise ValueError(f"the draft's vocabulary ({vocab_size_of(draft)} tokens) differs from "
                         f"the target's ({vocab_size_of(target)}); both must be trained on the "
                         f"same vocabulary")


class TorchUniform:
    """Uniform numbers in [0, 1) from a torch.Generator, with NumPy's rng.random() interface."""

    def __init__(self, generator=None):
        self.generator = generator

    def random(self):
        return torch.rand((), generator=self.generator, dtype=torch.float64).item()


# ----------------------------------------------------------------------------------------------
# What a run did


@dataclass
class Stats:
    """What a decoding run did; corrections and bonus tokens are not counted as accepted.

    target_passes, draft_passes: forward passes of each model (a round whose check crosses a
    window jump makes two); rounds; proposed and accepted guesses, accepted_per_position[i]
    the rounds that kept guess i; new_tokens; target_positions: positions the target scored
    (k + 1 a round, one a token in plain decoding), draft_positions: one a guess; draft_time,
    target_time: seconds in each; trace: (guesses, kept, target's token) for every round.
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
        """Fraction of proposed guesses the target kept."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def kept_of_checked(self):
        """Kept guesses / checked ones, the run's own alpha: a round checks its guesses up to
        and including the first rejected one; those after it are never looked at."""
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
        self.proposed += len(guesses)
        self.draft_positions += len(guesses)
        self.draft_passes += len(guesses)
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


# ----------------------------------------------------------------------------------------------
# Agreement measured on held-out text, and the lesson's formulas (Leviathan et al., section 3)


@dataclass
class Agreement:
    alpha: float             # mean over positions of sum_x min(target(x), draft(x))
    greedy_agreement: float  # fraction of positions where both argmaxes are equal
    positions: int


@torch.no_grad()
def measure_agreement(target, draft, data, *, windows=64, window=None, temperature=1.0,
                      top_k=None, top_p=None):
    """alpha and greedy agreement of draft with target on the same `windows` evenly spaced
    windows of `data` (a 1-D LongTensor), every position counted, both distributions warped
    as decoding would (at temperature 1 alpha is the lesson's sum_x min(p(x), q(x)))."""
    window = window or min([m.c.block_size for m in (target, draft) if hasattr(m, "c")] or [64])
    if len(data) < window + 1:
        raise ValueError(f"need at least {window + 1} tokens of data, got {len(data)}")
    starts = torch.linspace(0, len(data) - window - 1, windows).long()
    x = torch.stack([data[s:s + window] for s in starts])                  # (W, T)
    target_logits, draft_logits = (every_logit(model, x) for model in (target, draft))
    alpha, agree = agreement_of(target_logits, draft_logits, temperature=temperature,
                                top_k=top_k, top_p=top_p)
    return Agreement(alpha=alpha, greedy_agreement=agree, positions=x.numel())


def every_logit(model, x):
    """A GPT's (or a drafter's) logits at every position of the windows x (W, T): (W, T, V)."""
    if not hasattr(model, "c"):      # a drafter that is no GPT: through its scorer
        scorer = as_scorer(model)
        return np.stack([scorer.score([row], 1)[0] for row in x.tolist()])
    if isinstance(model, torch.nn.Module):
        x = x.to(model.lm_head.weight.device)
    return model(x)[0].float().cpu().numpy()


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


if __name__ == "__main__":  # the decoding command line, where the lesson's readers type it
    import cli
    from beyond import decode
    cli.run(decode.main)
