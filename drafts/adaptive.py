"""
drafts/adaptive.py: k that adapts while decoding, for any drafter.

Pass a schedule as k: `speculative_generate(target, draft, idx, n, k=Heuristic())`. Before each
round the decoder asks `schedule.k`; after it, it calls `schedule.update(proposed, kept,
draft_seconds, check_seconds)` with what the round proposed, kept and took.

- Heuristic: the schedule of Hugging Face transformers' assisted generation: two more guesses
  after a round where every guess was kept, one fewer otherwise.
- BestK: the lesson's formula. It keeps running counts of how often a checked guess is kept
  (alpha) and of the time a guess and a check take, and picks the k with the highest expected
  speed-up, (1 - alpha^(k+1)) / ((1 - alpha)(k c + verify cost)); while it has seen little, it
  explores from `start`.
"""


def by_name(name, k):
    """A function giving a fresh k for each run: k itself (off), or a schedule starting at k."""
    kinds = {"off": None, "heuristic": Heuristic, "best": BestK}
    if name not in kinds:
        raise ValueError(f"--adaptive is off, heuristic or best, not {name!r}")
    if kinds[name] is None:
        return lambda: k
    return lambda: kinds[name](start=k, k_max=max(k, 16))


def check_range(start, k_max):
    if not 1 <= start <= k_max:
        raise ValueError(f"an adaptive k needs 1 <= start <= k_max, not {start} and {k_max}")


class Heuristic:
    """+2 after a round where every guess was kept, -1 otherwise; between 1 and k_max."""

    def __init__(self, start=4, k_max=16):
        check_range(start, k_max)
        self.k, self.k_max = start, k_max

    def update(self, proposed, kept, draft_seconds=None, check_seconds=None):
        if proposed == 0:          # the last round of a run guesses nothing
            return
        self.k = min(self.k + 2, self.k_max) if kept == proposed else max(1, self.k - 1)


class BestK:
    """The k with the highest expected speed-up, from what the run has measured so far.

    alpha: kept guesses over checked ones (a round checks every guess up to and including the
    first rejected one). Costs, in seconds: a guess (draft time over guesses) and a check, fitted
    as a + b (k + 1) by least squares over the rounds seen, because checking more tokens costs
    more (on a CPU, much more). The best k maximises
        (1 - alpha^(k+1)) / (1 - alpha)  /  (k guess + a + b (k + 1)).
    During the first rounds it explores k = start - 1, start, start + 2 in turn, so that the fit
    has more than one k to go by.
    """

    def __init__(self, start=4, k_max=16, warmup_rounds=9):
        check_range(start, k_max)
        self.start, self.k, self.k_max, self.warmup = start, start, k_max, warmup_rounds
        self.explore = [max(1, start - 1), start, min(k_max, start + 2)]
        self.checked = self.kept = self.guesses = 0
        self.draft_seconds = 0.0
        # Running sums for the least-squares line check seconds = a + b (tokens checked): O(1)
        # per round, because a round of a tiny model takes only a few hundred microseconds.
        self.n = self.sx = self.sy = self.sxx = self.sxy = 0.0

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
        if self.n < self.warmup:
            self.k = self.explore[int(self.n) % len(self.explore)]
            return
        self.k = self.best()

    def best(self):
        spread = self.n * self.sxx - self.sx ** 2
        b = max(0.0, (self.n * self.sxy - self.sx * self.sy) / spread) if spread > 0 else 0.0
        a = (self.sy - b * self.sx) / self.n                  # check = a + b (k + 1)
        guess = self.draft_seconds / max(1, self.guesses)
        alpha = min(self.kept / max(1, self.checked), 0.999)
        best_k, best_speed, kept_so_far = 1, 0.0, 1.0
        for k in range(1, self.k_max + 1):
            kept_so_far += alpha ** k                         # 1 + alpha + ... + alpha^k
            speed = kept_so_far / (k * guess + a + b * (k + 1))
            if speed > best_speed:
                best_k, best_speed = k, speed
        return best_k
