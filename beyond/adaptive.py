"""
beyond/adaptive.py: k that adapts while decoding, for any drafter.

Pass a schedule as k: `speculative_generate(target, draft, idx, n, k=Heuristic())`. Before each
round the decoder asks `schedule.k`; after it, it calls `schedule.update(proposed, kept,
draft_seconds, check_seconds)` with what the round proposed, kept and took.

Each is a speculative.Schedule: Heuristic (transformers' assisted generation's +2 / -1), BestK
(the lesson's formula from running estimates), Confidence (the drafter stops when unsure, a
threshold learned from the run) and Oracle (hindsight's upper bound), each described below.
"""

import numpy as np

from numpy_speculative import softmax
from speculative import Drafter, ModelDraft, Schedule


def by_name(name, k):
    """A function giving a fresh k for each run: k itself (off), or a schedule starting at k."""
    kinds = {"off": None, "heuristic": Heuristic, "best": BestK, "confidence": Confidence}
    if name not in kinds:
        raise ValueError(f"--adaptive is off, heuristic, best or confidence, not {name!r}")
    if kinds[name] is None:
        return lambda: k
    return lambda: kinds[name](start=k, k_max=max(k, 16))


def check_range(start, k_max):
    if not 1 <= start <= k_max:
        raise ValueError(f"an adaptive k needs 1 <= start <= k_max, not {start} and {k_max}")


class Heuristic(Schedule):
    """transformers' assisted generation's schedule: +2 after a round where every guess was
    kept, -1 otherwise; between 1 and k_max."""

    def __init__(self, start=4, k_max=16):
        check_range(start, k_max)
        self.k, self.k_max = start, k_max

    def update(self, proposed, kept, draft_seconds=None, check_seconds=None):
        if proposed == 0:          # the last round of a run guesses nothing
            return
        self.k = min(self.k + 2, self.k_max) if kept == proposed else max(1, self.k - 1)


class BestK(Schedule):
    """The k with the highest expected speed-up, from what the run has measured so far.

    alpha: kept guesses over checked ones (a round checks every guess up to and including the
    first rejected one). Costs, in seconds: a guess (draft time over guesses) and a check, fitted
    as a + b (k + 1) by least squares over the rounds seen, because checking more tokens costs
    more (on a CPU, much more). The best k maximises
        (1 - alpha^(k+1)) / (1 - alpha)  /  (k guess + a + b (k + 1)).
    During the first rounds it explores k = start - 1, start, start + 2 in turn, so that the fit
    has more than one k to go by.

    The formula assumes independent guesses and a loop that costs nothing, so it only proposes:
    the rounds decide. Once the formula's k and its two neighbours have each run `trials`
    rounds, the k whose rounds wrote the most tokens per second becomes the centre, and its
    untried neighbours get their turn (a climb on measured speed, started where the formula
    points). Keep one schedule for many texts and it keeps what it learned.
    """

    def __init__(self, start=4, k_max=16, warmup_rounds=9, trials=16):
        check_range(start, k_max)
        self.start, self.k, self.k_max, self.warmup, self.trials = (start, start, k_max,
                                                                    warmup_rounds, trials)
        self.rounds_at, self.tokens_at, self.seconds_at = {}, {}, {}   # per k: measured speed
        self.explore = [max(1, start - 1), start, min(k_max, start + 2)]
        self.checked = self.kept = self.guesses = 0
        self.draft_seconds = 0.0
        # Running sums for the least-squares line check seconds = a + b (tokens checked): O(1)
        # per round, because a round of a tiny model takes only a few hundred microseconds.
        self.n = self.sx = self.sy = self.sxx = self.sxy = 0.0
        self.check_sum, self.check_count = {}, {}   # per number of tokens checked

    def update(self, proposed, kept, draft_seconds=None, check_seconds=None):
        if proposed == 0:
            return
        self.checked += kept + (1 if kept < proposed else 0)
        self.kept += kept
        if draft_seconds is not None:
            self.guesses += proposed
            self.draft_seconds += draft_seconds
            x = proposed + 1
            self.n += 1
            self.sx, self.sy = self.sx + x, self.sy + check_seconds
            self.sxx, self.sxy = self.sxx + x * x, self.sxy + x * check_seconds
            self.check_sum[x] = self.check_sum.get(x, 0.0) + check_seconds
            self.check_count[x] = self.check_count.get(x, 0) + 1
            self.rounds_at[proposed] = self.rounds_at.get(proposed, 0) + 1
            self.tokens_at[proposed] = self.tokens_at.get(proposed, 0) + kept + 1
            self.seconds_at[proposed] = (self.seconds_at.get(proposed, 0.0) + draft_seconds
                                         + check_seconds)
        warming = self.n < self.warmup
        self.k = self.explore[int(self.n) % len(self.explore)] if warming else self.climb()

    def climb(self):
        """The next k: an untried neighbour of the fastest k measured so far, or that k."""
        rated = {k: self.tokens_at[k] / self.seconds_at[k] for k, n in self.rounds_at.items()
                 if n >= self.trials and self.seconds_at[k] > 0}
        centre = max(rated, key=rated.get) if rated else self.best()
        for k in (centre, centre - 1, centre + 1):
            if 1 <= k <= self.k_max and self.rounds_at.get(k, 0) < self.trials:
                return k
        return centre

    def estimates(self):
        """Seconds of one guess, and the check's line a + b (tokens checked), so far."""
        if self.n == 0:
            return 0.0, 1.0, 0.0
        spread = self.n * self.sxx - self.sx ** 2
        b = max(0.0, (self.n * self.sxy - self.sx * self.sy) / spread) if spread > 0 else 0.0
        a = (self.sy - b * self.sx) / self.n                  # check = a + b (k + 1)
        if a < 0:                     # too few or too noisy rounds for a line: through 0
            a, b = 0.0, self.sy / self.sx
        return self.draft_seconds / max(1, self.guesses), a, b

    def check_seconds(self, tokens, a, b):
        """A check of `tokens` tokens: its own mean once seen twice (a check's cost can jump,
        as NumPy's does from 2 tokens to 3), else the line."""
        if self.check_count.get(tokens, 0) >= 2:
            return self.check_sum[tokens] / self.check_count[tokens]
        return a + b * tokens

    def best(self):
        guess, a, b = self.estimates()
        alpha = min(self.kept / max(1, self.checked), 0.999)
        best_k, best_speed, kept_so_far = 1, 0.0, 1.0
        for k in range(1, self.k_max + 1):
            kept_so_far += alpha ** k                         # 1 + alpha + ... + alpha^k
            speed = kept_so_far / (k * guess + self.check_seconds(k + 1, a, b))
            if speed > best_speed:
                best_k, best_speed = k, speed
        return best_k


class Confidence(Schedule):
    """Guess up to the formula's k (as BestK), but stop as soon as the drafter's confidence
    falls below `threshold` (transformers' assistant_confidence_threshold, llama.cpp's
    --draft-p-min); learn the threshold from the run.

    Confidence: the drafter's own probability that every guess so far this round is right (the
    product of its probabilities for each). A GPT draft given as a ConfidentDraft honours
    `min_confidence` and reports `confidences`; with a drafter that does not (a plain GPT draft,
    the n-gram table), this is BestK. Learning: every guess is sorted into one of BINS by its
    confidence, with whether it was kept (a guess after the first rejected one: not kept). A
    guess pays when it is kept often enough: it costs a draft step and one more token in the
    check, and a kept one saves a pass of the big model (both measured as BestK measures them). The threshold becomes the lowest bin edge above which
    every bin pays; a bin with fewer than min_count guesses so far pays if it lies above the
    starting threshold.
    """

    BINS = 10

    def __init__(self, start=4, k_max=16, threshold=0.5, min_count=4):
        check_range(start, k_max)
        self.k_max, self.min_count = k_max, min_count
        self.threshold = self.prior = threshold
        self.seen, self.kept_in = [0] * self.BINS, [0] * self.BINS
        self.costs = BestK(start, k_max)     # its running estimates of a guess and a check
        self.drafter = None

    @property
    def k(self):
        return self.costs.k      # the formula's k, from BestK's running estimates

    def attach(self, drafter):
        self.drafter = drafter
        drafter.min_confidence = self.threshold

    def update(self, proposed, kept, draft_seconds=None, check_seconds=None):
        if proposed == 0 or self.drafter is None:
            return
        self.costs.update(proposed, kept, draft_seconds, check_seconds)
        for i, confidence in enumerate(getattr(self.drafter, "confidences", [])):
            b = min(int(confidence * self.BINS), self.BINS - 1)
            self.seen[b] += 1
            self.kept_in[b] += i < kept
        self.threshold = self.tuned()
        self.drafter.min_confidence = self.threshold

    def tuned(self):
        guess, a, b = self.costs.estimates()
        worth = min(1.0, (guess + b) / (a + b)) if a + b > 0 else 0.5   # break-even kept rate
        threshold = 1.0
        for edge in range(self.BINS - 1, -1, -1):
            if self.seen[edge] >= self.min_count:
                pays = self.kept_in[edge] >= worth * self.seen[edge]
            else:
                pays = edge / self.BINS >= self.prior       # too few guesses: the prior decides
            if not pays:
                break
            threshold = edge / self.BINS
        return threshold


class Oracle(Schedule):
    """The best k for every round in hindsight: replays a recorded greedy run (speculative_
    generate's Stats.trace at a large k), proposing in round i exactly as many guesses as that
    round kept. The draft guesses the same tokens from the same context, so every round ends
    where the recorded one ended, with no guess thrown away: the fastest any schedule can be
    with this drafter (a round's check cannot be merged with the next, since each round starts
    from the big model's own token)."""

    def __init__(self, trace):
        self.plan, self.round = [n_accepted for _, n_accepted, _ in trace], 0
        self.k_max = max(self.plan + [1])

    @property
    def k(self):
        return self.plan[self.round] if self.round < len(self.plan) else 1

    def update(self, proposed, kept, draft_seconds=None, check_seconds=None):
        self.round += 1


class ConfidentDraft(ModelDraft):
    """A GPT draft that stops guessing once its confidence this round (the product of its
    probabilities for each guess, `confidences`) falls below `min_confidence`, which the
    Confidence schedule sets; None: it guesses all k, as a ModelDraft does."""

    def __init__(self, model):
        super().__init__(model)
        self.min_confidence, self.confidences = None, []

    def propose(self, seq, k, sampling):
        work, probs, self.confidences, sure = list(seq), [], [], 1.0
        for _ in range(k):
            token, logits, row = self.guess(work, sampling)
            work.append(token)
            probs += [] if row is None else [row]
            sure *= float((softmax(logits.astype(np.float64)) if row is None else row)[token])
            self.confidences.append(sure)
            if self.min_confidence is not None and sure < self.min_confidence:
                break                                  # not sure enough to guess further
        return work[len(seq):], (np.array(probs) if probs else None)       # (k, V) or None


def drafting_for(name, draft):
    """The draft a run with --adaptive `name` decodes with: a GPT draft as a ConfidentDraft
    for the confidence schedule, any other draft as it is."""
    if name == "confidence" and not isinstance(draft, Drafter):
        return ConfidentDraft(draft)
    return draft
