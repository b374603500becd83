"""
harness/stages.py: how long things take, said in one place: about how long each stage of `make
lesson` and `make studies` takes on a quiet 2-core CPU (a model's training, an exercise, a
study), and one progress line per stage with the time so far and about how long is left.
Training says its own time left from its first steps (lessonkit/waiting.py).
"""

import time

from beyond import heads, presets
from lessonkit import waiting

# About how long each stage takes on a quiet 2-core CPU (the runs of docs/RESULTS.md, "The
# lesson's job" and "The studies", rounded; the extra heads, which those runs did not time
# apart: their first training in the student walks, about 2 minutes): a model's training, an
# exercise, a study, in seconds. A plan to read before a long wait, not a promise: training says its own from its first
# steps timed here (waiting.Pace), and this machine may be faster or slower.
ABOUT_S = {"big": 90, "draft": 20, "names": 20, "distilled": 50, "heads": 120,
           1: 3, 2: 2, 3: 15, 4: 15, 5: 30,
           "drafters": 530, "transformers": 220, "sampling": 140, "batch": 190, "trees": 340}


def about(keys):
    """Seconds the stage keys take on a quiet 2-core CPU (ABOUT_S; a key it lacks: none)."""
    return sum(ABOUT_S.get(key, 0) for key in keys)


class Progress:
    """One line per stage: what runs now, the time so far and about how long the stages left
    take (about(); none with --quick: tiny models take seconds). A stage is (label, keys: the
    models it trains first, then its own work)."""

    def __init__(self, stages, estimate=True):
        self.stages, self.estimate, self.started, self.done = stages, estimate, time.time(), 0
        self.records = []   # per stage: label, keys, when it started and its seconds

    def start(self):
        """Print the next stage's line (the one before it has ended)."""
        self.stop()
        label, keys = self.stages[self.done]
        so_far = f"{waiting.duration(time.time() - self.started)} so far"
        left = about(k for _, keys in self.stages[self.done:] for k in keys)
        if self.estimate and left:
            so_far += f", about {waiting.duration(left)} left on a quiet 2-core CPU"
        print(f"\n[{self.done + 1}/{len(self.stages)}] {label}  ({so_far})", flush=True)
        self.records.append({"label": label, "keys": keys, "started_s": time.time() - self.started})
        self.done += 1

    def stop(self):
        """The stage running now has ended: its measured seconds go into its record."""
        if self.records and "seconds" not in self.records[-1]:
            self.records[-1]["seconds"] = time.time() - self.started - \
                self.records[-1]["started_s"]

    def results(self, trained):
        """The stages as a results file holds them, and each stage key's seconds: a model's from
        its training record (trained: presets.training_record of each model trained meanwhile),
        a stage's own work the rest of its stage's time."""
        self.stop()
        seconds = {}
        for record in self.records:
            begun = self.started + record["started_s"]
            inside = [run for run in trained
                      if begun <= run["finished"] <= begun + record["seconds"]]
            for run in inside:
                seconds[run["preset"]] = run["seconds"]
            training_s = sum(run["seconds"] for run in inside)
            seconds[str(record["keys"][-1])] = record["seconds"] - training_s
        return {"total_s": time.time() - self.started, "stage_seconds": seconds,
                "stages": self.records, "trained": trained}


def to_train(names, folder):
    """Of the models `names` (presets, or "heads": the extra heads on the big model), those not
    trained yet in `folder`, in the order they will be trained: a teacher before its student,
    the big model before its heads."""
    missing = []
    for name in names:
        teacher = "big" if name == "heads" else presets.preset(name).teacher
        for model in ([teacher] if teacher else []) + [name]:
            path = heads.heads_path(folder) if model == "heads" else \
                presets.checkpoint_path(model, folder)
            if model not in missing and not path.exists():
                missing.append(model)
    return missing


def plan(steps, folder):
    """Stages for Progress: for each (label, the models it uses, its stage key) of `steps`, the
    models it trains first (not trained yet in `folder`, nor by an earlier step), then its key."""
    planned, trained = [], set()
    for label, models, key in steps:
        new = [m for m in to_train(models, folder) if m not in trained]
        trained.update(new)
        first = f" (training {', '.join(new)} first, once)" if new else ""
        planned.append((label + first, new + [key]))
    return planned
