"""
lessonkit/stats.py: what a decoding run did, counted (Stats), and what became of each guess (verdicts,
origins): the one place that turns a run's trace into kept, rejected and bonus.

speculative.py's decoders fill a Stats; the command line colours its text by origins(), and
exercise 1's animation reads verdicts() of every round. Pure Python: no torch, no NumPy.
"""

from dataclasses import dataclass, field


@dataclass
class Stats:
    """What a decoding run did: forward passes of each model (a check that crosses a window
    jump makes two); rounds; guesses proposed and accepted (corrections and bonus tokens are
    not), accepted_per_position[i] the rounds that kept guess i; new_tokens; positions each
    model scored (k + 1 a round for the target); seconds in each; trace: (guesses, kept,
    target's token) for every round."""
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
    def acceptance_rate(self):                                 # kept / proposed guesses
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def kept_of_checked(self):
        """Kept guesses / checked ones, the run's own alpha: a round checks its guesses up to
        and including the first rejected one; those after it are never looked at."""
        checked = sum(kept + (kept < len(guesses)) for guesses, kept, _ in self.trace)
        return self.accepted / checked if checked else 0.0

    @property
    def tokens_per_pass(self):                 # 1 for plain decoding, up to k + 1 speculating
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
# What became of each guess (the command line's colours; exercise 1's animation reads it too)


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
