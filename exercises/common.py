"""
exercises/common.py: what every exercise shares: its flags, its models and where it writes.

Each exercise is a script with main(), a dataclass of flags (so -h works) that extends
ExerciseArgs, and a run(args) that returns its numbers and a section of the report. Models come
from the checkpoint cache (beyond/checkpoint.py, train.py) and are trained when missing; --quick
swaps in tiny models trained for a few dozen steps, so that the test suite can run every exercise
in seconds.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

import cli
import gpt
import speculative as sd
import train
from beyond import checkpoint
from gpt import TrainConfig

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


# --quick: the presets in checkpoint.SIZES["quick"], trained for seconds.
QUICK_TRAIN = TrainConfig(steps=60, batch_size=8, eval_every=30, eval_batches=2, warmup_steps=5)


def checkpoint_folder(args):
    folder = Path(args.checkpoints) if args.checkpoints else ROOT / "checkpoints"
    return folder / "quick" if args.quick else folder


def load_models(args, names, log=print):
    """The trained presets `names` (a dict name -> gpt.GPT), training any that are missing."""
    models = {}
    for name in names:
        config = checkpoint.preset(name, "quick") if args.quick else None
        tc = QUICK_TRAIN if args.quick else TrainConfig()
        train.ensure_trained(name, tc, config, folder=checkpoint_folder(args),
                             progress=not args.quick, log=log if not args.quick else _quiet)
        models[name] = checkpoint.load_trained(name, checkpoint_folder(args))
    return models


# Minutes each preset takes to train on a 2-core laptop, for the notice before training.
TRAIN_MINUTES = {"big": 3.5, "draft": 0.3, "names": 0.3, "distilled": 2}


def notebook_args():
    """The notebooks' settings: SPECDEC_QUICK=1 swaps in the tiny models (what the tests run),
    SPECDEC_CHECKPOINTS names another checkpoint folder."""
    return ExerciseArgs(quick=bool(os.environ.get("SPECDEC_QUICK")),
                        checkpoints=os.environ.get("SPECDEC_CHECKPOINTS", ""))


def notebook_models(names):
    """The trained presets a notebook needs; trains the missing ones, saying so first."""
    args = notebook_args()
    missing = [n for n in names if not checkpoint.checkpoint_path(n, checkpoint_folder(args)).exists()]
    if missing and not args.quick:
        minutes = sum(TRAIN_MINUTES[n] for n in missing)
        print(f"training {', '.join(missing)} first: about {minutes:.0f} minute(s) on a 2-core "
              f"laptop, once (`make train` does the same from a terminal)")
    return load_models(args, names, log=print if missing else _quiet)


def _quiet(*args):
    pass


def results_dir(args):
    path = Path(args.results)
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_json(args, name, data):
    path = results_dir(args) / name
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    return path


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
    """The flags of an exercise, from its Args dataclass; the docstring's first line is -h's."""
    parser = cli.Parser(description=doc.strip().split("\n\n")[0])
    cli.add_fields(parser, args_class, title="flags")
    return cli.take(args_class, parser.parse_args(argv))


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
    """The agreement alpha at which the formula's speed-up reaches `goal` at k (nan if no alpha
    below 1 does): speed-up(alpha, k, c, v) = goal exactly where speed-up(alpha, k, c goal,
    v goal) = 1, which speculative.break_even_alpha finds."""
    return sd.break_even_alpha(k, c * goal, verify_cost * goal)
