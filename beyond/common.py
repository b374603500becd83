"""
beyond/common.py: what every exercise shares: its flags, its models and where it writes.

Each exercise is a script with main(), a dataclass of flags (so -h works) that extends
ExerciseArgs, and a run(args) that returns its numbers and a section of the report. Models come
from the checkpoint cache (beyond/presets.py) and are trained when missing; --quick
swaps in tiny models trained for a few dozen steps, so that the test suite can run every exercise
in seconds.
"""

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import gpt
import speculative as sd
from beyond import heads, presets
from lessonkit import cli, results_file, waiting

ROOT = Path(__file__).resolve().parents[1]
DRAFT_NAMES = {"draft": "the lesson's draft (1 x 32)", "names": "the names draft (1 x 32)",
               "distilled": "the distilled draft (1 x 128)"}
LESSON_PROMPTS = ["ROMEO:\n", "JULIET:\n", "KING RICHARD III:\n", "First Citizen:\n",
                  "MENENIUS:\n"]


@dataclass
class ExerciseArgs:
    seed: int = 1337           # seed for everything random in the exercise
    quick: bool = False        # tiny models trained for seconds (what the tests run)
    checkpoints: str = ""      # checkpoint folder (default: checkpoints/, --quick: its quick/)
    results: str = "results"   # where figures, numbers and report.md go


def checkpoint_folder(args):
    folder = Path(args.checkpoints) if args.checkpoints else ROOT / "checkpoints"
    return folder / "quick" if args.quick else folder


# Every model this process trained (presets.training_record), for the main job's results file.
TRAINED = []


def load_models(args, names, log=print):
    """The trained presets `names` (a dict name -> gpt.GPT), training any that are missing."""
    for name in names:   # --quick: the presets' "quick" size (presets.SIZES), trained in seconds
        presets.ensure_trained(presets.preset(name, "quick" if args.quick else "lesson"),
                               folder=checkpoint_folder(args), progress=not args.quick,
                               log=(lambda *a: None) if args.quick else log, runs=TRAINED)
    return {name: presets.load_trained(name, checkpoint_folder(args)) for name in names}


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


def notebook_args():
    """The notebooks' settings: SPECDEC_QUICK=1 swaps in the tiny models (what the tests run),
    SPECDEC_CHECKPOINTS names another checkpoint folder."""
    return ExerciseArgs(quick=bool(os.environ.get("SPECDEC_QUICK")),
                        checkpoints=os.environ.get("SPECDEC_CHECKPOINTS", ""))


def notebook_models(names):
    """The trained presets a notebook needs, as they are in the checkpoint folder (the notebooks'
    claims hold however they were trained); the missing ones trained first, saying how long."""
    args = notebook_args()
    missing = to_train(names, checkpoint_folder(args))
    if missing and not args.quick:
        print(f"training {', '.join(missing)} first, once: about "
              f"{waiting.duration(about(missing))} on a quiet 2-core CPU (`make train` does the "
              "same from a terminal)")
    load_models(args, missing, log=print)
    return {name: presets.load_trained(name, checkpoint_folder(args)) for name in names}


def results_dir(args):
    path = Path(args.results)
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_json(args, name, data, busy=""):
    """data as results/<name>, with the run's provenance (results_file.write_results)."""
    return results_file.write_results(results_dir(args) / name, data, busy=busy)


def figure(args, name, fig):
    """Save a matplotlib figure as a PNG in the results folder and close it."""
    path = results_dir(args) / name
    fig.savefig(path, dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def pyplot():
    """matplotlib without a display (the exercises only write files)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def encode_prompt(text):
    return torch.tensor([gpt.encode(text)])


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def parse_args(doc, args_class, argv=None):
    """The flags of an exercise, from its Args dataclass; the docstring's first line is -h's.
    The flags every exercise shares are checked here, before anything is printed or loaded."""
    parser = cli.Parser(description=doc.strip().split("\n\n")[0])
    cli.add_fields(parser, args_class, title="flags")
    args = cli.take(args_class, parser.parse_args(argv))
    if hasattr(args, "prompt"):
        gpt.encode(args.prompt.replace("\\n", "\n"))   # unknown characters: one line
    if getattr(args, "draft", None) is not None and args.draft not in DRAFT_NAMES:
        raise ValueError(f"--draft takes {', '.join(DRAFT_NAMES)}, not {args.draft!r}")
    at_least_one(args, *[n for n in ("k", "max_new_tokens", "repeats") if hasattr(args, n)])
    return args


def whole_numbers(text, flag):
    """A comma-separated flag of whole numbers >= 1 as a list, or a one-line error."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values or not all(v.isdigit() and int(v) >= 1 for v in values):
        raise ValueError(f"--{flag} takes whole numbers >= 1, comma-separated, not {text!r}")
    return [int(v) for v in values]


def at_least_one(args, *names):
    """A one-line error unless each named flag of args is at least 1."""
    for name in names:
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, not {getattr(args, name)}")


def shrink_if_quick(args, **limits):
    """With --quick, cap these sizes (tiny models have a 64-character window; tests are short)."""
    if args.quick:
        for name, limit in limits.items():
            setattr(args, name, min(getattr(args, name), limit))


def alpha_for(goal, k, c, verify_cost=1.0):
    """The alpha at which the formula's speed-up reaches `goal` at k (nan if no alpha below 1
    does): speed-up(alpha, k, c, v) = goal where speed-up(alpha, k, c goal, v goal) = 1."""
    return sd.break_even_alpha(k, c * goal, verify_cost * goal)
