"""
harness/common.py: what every exercise shares: its flags, its models and where it writes.

Each exercise is a script with main(), a dataclass of flags (so -h works) that extends
ExerciseArgs, and a run(args) that returns its numbers and a section of the report. Models come
from the checkpoint cache (beyond/presets.py) and are trained when missing; --quick
swaps in tiny models trained for a few dozen steps, so that the test suite can run every exercise
in seconds.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import gpt
import speculative as sd
from beyond import presets
from harness import stages
from lessonkit import cli, results_file, waiting
from lessonkit.corpus import LESSON_PROMPTS  # noqa: F401 (the exercises' prompts, as common.LESSON_PROMPTS)

ROOT = Path(__file__).resolve().parents[1]
DRAFT_NAMES = {"draft": "the lesson's draft (1 x 32)", "names": "the names draft (1 x 32)",
               "distilled": "the distilled draft (1 x 128)"}


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


def notebook_args():
    """The notebooks' settings: SPECDEC_QUICK=1 swaps in the tiny models (what the tests run),
    SPECDEC_CHECKPOINTS names another checkpoint folder."""
    return ExerciseArgs(quick=bool(os.environ.get("SPECDEC_QUICK")),
                        checkpoints=os.environ.get("SPECDEC_CHECKPOINTS", ""))


def notebook_models(names):
    """The trained presets a notebook needs, as they are in the checkpoint folder (the notebooks'
    claims hold however they were trained); the missing ones trained first, saying how long."""
    args = notebook_args()
    missing = stages.to_train(names, checkpoint_folder(args))
    if missing and not args.quick:
        print(f"training {', '.join(missing)} first, once: about "
              f"{waiting.duration(stages.about(missing))} on a quiet 2-core CPU (`make train` does the "
              "same from a terminal)")
    load_models(args, missing, log=print)
    return {name: presets.load_trained(name, checkpoint_folder(args)) for name in names}


def claim(holds, what, excuse=None):
    """A claim the notebook's text makes about the trained models, checked where it means
    something: on them (make notebooks-check) an AssertionError saying `what` when it does not
    hold, unless `excuse` (a busy machine's note) says why a claim about the clock went unjudged.
    On --quick's tiny models (the test suite) the numbers mean little and it is not asserted, but
    it must still be True or False: a claim that computes an array, a number or None fails there."""
    if not isinstance(holds, (bool, np.bool_)):
        raise TypeError(f"the claim {what!r} is {type(holds).__name__}, not True or False")
    if not holds and not excuse and not notebook_args().quick:
        raise AssertionError(f"these models do not show what the text says: {what}")


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
