"""
speculative.py: plain decoding and speculative decoding, side by side.

A cheap draft guesses k tokens; the big (target) model scores them in one pass, keeps the guesses
it agrees with and replaces the first it rejects with its own token: 1 to k+1 tokens per pass,
exactly the target's greedy output or distribution. Read speculative_decode first, then what it
calls (Drafter, Schedule, Scorer). Leviathan, Kalman, Matias (2023), Algorithm 1 and section 3's
formulas; Chen et al. (2023). The papers' p and q are target_probs and draft_probs here; the
acceptance and window rules are numpy_speculative.py's and lessonkit/scorer.py's (NumPy only).
Shapes: B batch, T time, V vocabulary, k guesses per round.
"""

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lessonkit import machine
from lessonkit.scorer import Model, Scorer, WindowScorer
from lessonkit.stats import Stats
from numpy_speculative import greedy_verdict, sample, verify, warp

# ----------------------------------------------------------------------------------------------
# Algorithm 1: speculative decoding of one sequence


def speculative_decode(propose, score, seq, max_new_tokens, schedule, sampling, after_round):
    """Extend seq (a list of token ids) by max_new_tokens, guessing and checking. Returns seq.

    propose: the drafter's (Drafter.propose); score: the target's, with its KV cache
    (Scorer.score); schedule.k: guesses per round; sampling: greedy, or the warp and the random
    numbers; after_round(guesses, kept, token) hears what each round did (counting, adapting)."""
    goal = len(seq) + max_new_tokens
    while len(seq) < goal:
        n = len(seq)
        k = min(schedule.k, goal - n - 1)          # never guess a token past the goal
        # 1. The draft guesses k tokens, one after another (and, sampling, their distributions).
        guesses, draft_probs = propose(seq, k, sampling) if k else ([], None)
        # 2. The target scores the last accepted token and every guess in one pass.
        target_logits = score([seq + guesses], n)[0]                     # (len(guesses) + 1, V)
        # 3. Keep the guesses it agrees with, then add its own token: the correction of the
        #    first rejected guess, or a bonus token when every guess was kept.
        kept, token = sampling.verdict(target_logits, guesses, draft_probs)
        seq += guesses[:kept] + [token]
        after_round(guesses, kept, token)
    return seq


# ----------------------------------------------------------------------------------------------
# What the loop calls: plain classes to subclass, whose optional methods do nothing here.


class Drafter:
    """A draft that is not a GPT (a GPT drafts as a ModelDraft). propose -> (guesses,
    draft_probs): 1 to k guesses after seq (the ids so far, never changed) and, when sampling,
    the (k, V) distributions they were drawn from (None when greedy; one-hot rows from a
    deterministic drafter)."""

    vocab_size = None                    # optional: checked against the target's

    def propose(self, seq, k, sampling):
        raise NotImplementedError(f"{type(self).__name__} must define propose(seq, k, sampling)")

    def reset(self):                     # optional: a new sequence begins
        pass

    def kept(self, n):                   # optional: n of its last guesses were kept
        pass

    def scorer_for(self, target):        # optional: a Scorer that shares its work, or None
        return None


class Schedule:
    """k for each round: FixedK, or one that adapts (beyond/adaptive.py). k: guesses the next
    round asks for; k_max: the most it ever asks for."""
    k: int
    k_max: int

    def update(self, proposed, kept, draft_seconds, check_seconds):   # after each round
        pass

    def attach(self, drafter):           # optional: the run's drafter, for one that tunes it
        pass


@dataclass
class Sampling:
    """How a run picks tokens: temperature 0 is greedy; rng has .random() (uniform [0, 1)).
    lenience < 1 keeps more guesses but loses the target's distribution (studies/lenience.py)."""
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
        V = target_probs.shape[1]
        draft_probs = np.reshape(draft_probs if guesses else [], (len(guesses), V))  # (k, V)
        return verify(target_probs, self.lenience * draft_probs, guesses, self.rng)


@dataclass
class TorchUniform:
    """Uniform numbers in [0, 1) from a torch.Generator, with NumPy's rng.random() interface."""
    generator: torch.Generator = None

    def random(self):
        return torch.rand((), generator=self.generator, dtype=torch.float64).item()


@torch.no_grad()
def speculative_generate(target, draft, idx, max_new_tokens, *, k=4, temperature=0.0,
                         top_k=None, top_p=None, generator=None, threads=machine.DECODE_THREADS,
                         lenience=1.0):
    """Speculative decoding. Returns (idx (B, T+new), Stats).

    At temperature 0 the tokens equal generate(target, ...) exactly; with sampling each output
    has exactly the distribution generate(target, ...) samples from. k: guesses per round, or
    a schedule that adapts it (beyond/adaptive.py). Rows of a batch are decoded one after
    another (beyond/batched.py decodes them together). threads as in generate()."""
    check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p, k, lenience)
    check_vocabularies(target, draft)
    sampling = Sampling(temperature, top_k, top_p, TorchUniform(generator), lenience)
    schedule = FixedK(k) if isinstance(k, int) else k
    stats = Stats(k=schedule.k_max)
    with machine.threads(threads):
        rows = [decode_row(target, draft, row, max_new_tokens, schedule, sampling, stats)
                for row in idx.tolist()]
    return torch.tensor(rows, dtype=torch.long, device=idx.device), stats


def decode_row(target, draft, seq, max_new_tokens, schedule, sampling, stats):
    """speculative_decode for one sequence, measured from outside: the drafter's guesses and the
    target's checks are timed, every round counted into stats and told to the schedule."""
    drafter = as_drafter(draft)
    scorer = drafter.scorer_for(target) or as_scorer(target)
    schedule.attach(drafter)

    def check(seqs, first):        # one pass of the big model, as plain decoding counts a token's
        stats.target_passes += 1   # (a window that slides costs a re-feed in both: not counted)
        return scorer.score(seqs, first)

    def after_round(guesses, kept, token):
        stats.count_round(guesses, kept, token)
        drafter.kept(kept)
        schedule.update(len(guesses), kept, guessing.take(), checking.take())

    guessing = machine.Timed(drafter.propose, machine.on_gpu(draft))
    checking = machine.Timed(check, machine.on_gpu(target))
    speculative_decode(guessing, checking, seq, max_new_tokens, schedule, sampling, after_round)
    stats.draft_time += guessing.seconds
    stats.target_time += checking.seconds
    return seq


class FixedK(Schedule):
    """The schedule of a fixed k (beyond/adaptive.py has ones that adapt)."""

    def __init__(self, k):
        self.k = self.k_max = k

    def update(self, *round_):        # proposed, kept, draft seconds, check seconds: ignored
        pass


# ----------------------------------------------------------------------------------------------
# Plain decoding, the baseline


@torch.no_grad()
def generate(model, idx, max_new_tokens, *, temperature=0.0, top_k=None, top_p=None,
             generator=None, stats=None, threads=machine.DECODE_THREADS):
    """Plain decoding with a KV cache: one forward pass per new token. Returns idx (B, T+new).
    Temperature 0 is greedy (argmax). Pass a Stats to have it counted. threads: torch threads
    while decoding (restored after; None keeps the setting): one, a step is too small to share."""
    check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p)
    stats = stats if stats is not None else Stats()
    scorer = as_scorer(model, idx.shape[0])
    sampling = Sampling(temperature, top_k, top_p, TorchUniform(generator))
    score = machine.Timed(scorer.score, machine.on_gpu(model))
    seqs = idx.tolist()                                                    # B lists of ids
    with machine.threads(threads):
        for _ in range(max_new_tokens):
            for seq, logits in zip(seqs, score(seqs, len(seqs[0]))[:, -1]):  # (B, V)
                seq.append(int(logits.argmax()) if sampling.greedy else
                           sampling.draw(sampling.warp(logits)))
    stats.target_passes += max_new_tokens                           # one pass a token
    stats.target_positions += max_new_tokens * len(seqs)
    stats.new_tokens += max_new_tokens
    stats.target_time += score.take()
    return torch.tensor(seqs, dtype=torch.long, device=idx.device)


# ----------------------------------------------------------------------------------------------
# A GPT as the target's scorer (scorer.WindowScorer) and as a drafter


def as_scorer(model, batch_size=1):
    """A Scorer as it is (reset: a new sequence); a fresh WindowScorer for a model (a GPT)."""
    if isinstance(model, Scorer):
        model.reset()
        return model
    return WindowScorer(model, batch_size)


class ModelDraft(Drafter):
    """A GPT (or anything with vocab_size and score(seqs, first)) as a drafter: a guess a pass,
    through its own WindowScorer."""

    def __init__(self, model):
        self.scorer = as_scorer(model)
        self.vocab_size = self.scorer.vocab_size

    def reset(self):
        self.scorer.reset()

    def propose(self, seq, k, sampling):
        work, probs = list(seq), []
        for _ in range(k):
            token, _, row = self.guess(work, sampling)
            work.append(token)
            probs += [] if row is None else [row]
        return work[len(seq):], (np.array(probs) if probs else None)       # (k, V) or None

    def guess(self, work, sampling):
        """One guess after `work`: (token, the draft's logits (V,), the warped distribution it
        was drawn from (V,), None when greedy)."""
        logits = self.scorer.score([work], len(work))[0, -1]               # (V,)
        if sampling.greedy:
            return int(logits.argmax()), logits, None
        row = sampling.warp(logits)
        return sampling.draw(row), logits, row


def as_drafter(draft):
    """The run's Drafter (reset: a new sequence): a Drafter as it is, a GPT (or a Scorer) as a
    ModelDraft."""
    if not isinstance(draft, Drafter):
        if hasattr(draft, "propose"):
            raise TypeError(f"{type(draft).__name__} has propose() but is not a drafter: "
                            "subclass speculative.Drafter")
        draft = ModelDraft(draft)
    draft.reset()
    return draft


# ----------------------------------------------------------------------------------------------
# The one-line errors of decoding's arguments (here, beyond/batched.py, beyond/tree.py)


def check_decoding_args(idx, max_new_tokens, temperature, top_k=None, top_p=None, k=1,
                        lenience=1.0):
    """A one-line ValueError for a bad argument of decoding (k may be an adaptive schedule)."""
    if not (torch.is_tensor(idx) and idx.dim() == 2 and idx.dtype == torch.long):
        raise ValueError("idx must be a (B, T) LongTensor of token ids, "
                         "e.g. torch.tensor([encode(prompt)])")
    if idx.shape[1] < 1:
        raise ValueError("the prompt is empty; give at least one character")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number >= 0, not {max_new_tokens!r}")
    if not isinstance(k, Schedule) and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ValueError(f"k (draft tokens per round) must be a whole number >= 1, not {k!r}")
    if not (isinstance(temperature, (int, float)) and 0 <= temperature < math.inf):
        raise ValueError(f"temperature must be a number >= 0 (0 is greedy), not {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a whole number >= 1 or None, not {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, not {top_p!r}")
    if not (isinstance(lenience, (int, float)) and 0 < lenience <= 1):
        raise ValueError(f"lenience must be in (0, 1] (1 is the exact rule), not {lenience!r}")


def vocab_size_of(model):
    """A model's vocabulary size (its config's), or a drafter's or scorer's own (None: it does
    not say)."""
    if isinstance(model, (Drafter, Scorer)):
        return model.vocab_size
    return model.c.vocab_size if isinstance(model, Model) else None


def check_vocabularies(target, draft):
    theirs, ours = vocab_size_of(target), vocab_size_of(draft)
    if None not in (theirs, ours) and theirs != ours:
        raise ValueError(f"the draft's vocabulary ({ours} tokens) differs from the target's "
                         f"({theirs}); both must be trained on the same vocabulary")


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
    window = window or min([m.c.block_size for m in (target, draft) if isinstance(m, Model)]
                           or [64])
    if len(data) < window + 1:
        raise ValueError(f"need at least {window + 1} tokens of data, got {len(data)}")
    starts = torch.linspace(0, len(data) - window - 1, windows).long()
    x = torch.stack([data[s:s + window] for s in starts])                  # (W, T)
    target_logits, draft_logits = (every_logit(model, x) for model in (target, draft))
    return Agreement(*agreement_of(target_logits, draft_logits, temperature=temperature,
                                   top_k=top_k, top_p=top_p), positions=x.numel())


def every_logit(model, x):
    """A GPT's (or a drafter's) logits at every position of the windows x (W, T): (W, T, V)."""
    if not isinstance(model, Model):           # a drafter that is no GPT: through its scorer
        scorer = as_scorer(model)
        return np.stack([scorer.score([row], 1)[0] for row in x.tolist()])
    device = model.lm_head.weight.device if isinstance(model, torch.nn.Module) else "cpu"
    return model(x.to(device))[0].float().cpu().numpy()


def agreement_of(target_logits, draft_logits, *, temperature=1.0, top_k=None, top_p=None):
    """(alpha, greedy agreement), two floats, from both models' logits (..., V) at the same
    positions: the mean of sum_x min(target(x), draft(x)), both warped as decoding would, and
    the fraction of positions where both models' most likely tokens are the same."""
    # BEGIN SOLUTION
    target_probs = warp(target_logits, temperature, top_k, top_p)         # (..., V)
    draft_probs = warp(draft_logits, temperature, top_k, top_p)           # (..., V)
    alpha = float(np.minimum(target_probs, draft_probs).sum(-1).mean())
    agree = float((np.argmax(target_logits, -1) == np.argmax(draft_logits, -1)).mean())
    return alpha, agree
    # END SOLUTION


def alpha(target, draft, data, **kwargs):  # the mean of sum_x min(p(x), q(x)) on `data`
    return measure_agreement(target, draft, data, **kwargs).alpha


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


if __name__ == "__main__":
    # The command line decodes with every drafter the project has (beyond/), so it lives above
    # them, in harness/decode.py; `python speculative.py ...` starts that program in this process's
    # place (nothing here imports it), with this folder on the path where the project is not
    # installed.
    path = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent),
                                         os.environ.get("PYTHONPATH")]))
    os.execve(sys.executable, [sys.executable, "-m", "harness.decode", *sys.argv[1:]],
              {**os.environ, "PYTHONPATH": path})
