"""
exercises/common.py: what every exercise shares: its flags, its models and where it writes.

Each exercise is a script with main(), a dataclass of flags (so -h works) that extends
ExerciseArgs, and a run(args) that returns its numbers and a section of the report. Models come
from the checkpoint cache (presets.py) and are trained when missing; --quick
swaps in tiny models trained for a few dozen steps, so that the test suite can run every exercise
in seconds.
"""

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import cli
import gpt
import machine
import presets
import speculative as sd
import training
from beyond import heads
from training import Recipe

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


def load_models(args, names, log=print):
    """The trained presets `names` (a dict name -> gpt.GPT), training any that are missing."""
    models = {}
    for name in names:   # --quick: the presets' "quick" size (presets.SIZES), trained in seconds
        presets.ensure_trained(presets.preset(name, "quick" if args.quick else "lesson"),
                               folder=checkpoint_folder(args), progress=not args.quick,
                               log=log if not args.quick else _quiet)
        models[name] = presets.load_trained(name, checkpoint_folder(args))
    return models


# Seconds each stage takes on the reference machine (a quiet 2-core x86-64 VM with AVX512-BF16,
# so training in bfloat16; torch 2.13 CPU), at that machine's probes (REFERENCE_PROBES). A
# forecast scales them by this machine's probes, timed now: a slower or busier machine waits
# longer. Training stages scale with the training probe, the rest (the exercises 1-5, the
# studies: decoding) with the decoding one.
# big, draft, names and 1-5: three `make lesson` runs from nothing in fresh clones there and
# three again, 2026-12-03 (medians; the big model 600 Muon steps); distilled: `python train.py
# --preset distilled` there the same day; heads and the studies: one `make studies` there the
# same day (27 min in all, the heads 2 min 30 s of it).
STAGE_SECONDS = {"big": 62, "draft": 10, "names": 10, "distilled": 90, "heads": 150,
                 1: 1, 2: 1, 3: 10, 4: 8, 5: 18, "notebooks": 0, "drafters": 600, "transformers": 200,
                 "sampling": 130, "batch": 165, "trees": 370}
TRAINING = ("big", "draft", "names", "distilled", "heads")
REFERENCE_PROBES = {"training": 0.11, "decoding": 0.04}   # seconds, quiet probes() (5 processes)


def probes(kinds=("training", "decoding"), repeats=5):
    """This machine's speed now, for each of `kinds`, after two untimed warm-ups, on an
    untrained model of the big one's size. training: the median of `repeats` training steps
    (forward and backward, 20 x 128 characters) on training's threads in training's precision,
    which is arithmetic. decoding: the mean of 2 x `repeats` plain decodings of 64 characters
    with the KV cache on decoding's one thread, which is mostly the fixed cost of each call.
    A mean, not a median: beside programs that keep both cores busy, a call either runs
    whole or is interrupted, and the interrupted ones are the slowdown (beside two spinning
    programs, medians of 5 said 1.25-1.95x slower in turn, means of 10 1.35-1.6x, the exercises
    ran 1.5x slower). (A training step timed on one thread instead said 1.3x slower on a
    processor without AVX-512 that decoded as fast, and 1.3x slower beside a busy core, where
    the exercises ran at their quiet speed.)"""
    torch.manual_seed(0)
    model = gpt.GPT(gpt.Config(**{**vars(presets.preset("big").config), "vocab_size": 65}))
    x = torch.randint(0, 65, (20, model.c.block_size))

    def seconds(fn, threads, times, average):
        with machine.threads(threads):
            fn(), fn()     # warm up, untimed (in a fresh process one call is not enough)
            return average(machine.times_of(fn, times, threads))

    def training_step():
        _, loss = model(x, x)
        loss.backward()
    # training's matrix products in its own precision (bfloat16 where the processor has it)
    measured = {}
    if "training" in kinds:
        precision = training.speedups(Recipe(), "cpu", width=model.c.n_embd)[0]
        with torch.autocast("cpu", dtype=precision, enabled=precision is not None):
            measured["training"] = seconds(training_step, machine.training_threads(), repeats,
                                           statistics.median)
    if "decoding" in kinds:
        model.eval()
        prompt = torch.zeros(1, 8, dtype=torch.long)
        with torch.no_grad():
            measured["decoding"] = seconds(lambda: sd.generate(model, prompt, 64),
                                           machine.DECODE_THREADS, 2 * repeats, statistics.mean)
    return measured


def kind(stage):
    """Which probe a stage's time scales with."""
    return "training" if stage in TRAINING else "decoding"


def forecast(stages, measured=None):
    """Seconds the stages (keys of STAGE_SECONDS) will take here, at this machine's speed now."""
    measured = measured or probes({kind(s) for s in stages})
    return sum(STAGE_SECONDS[s] * measured[kind(s)] / REFERENCE_PROBES[kind(s)] for s in stages)


class Progress:
    """One line per stage: what runs now, and about how long is left, forecast from the time
    each stage took on the reference machine scaled by this machine's speed, measured again
    before every stage (common.probes: a machine that got busier or quieter is seen at the next
    stage), and by the stages so far against their forecast. A stage is (label, keys of
    STAGE_SECONDS: the models it trains first, then its own work). No forecast with --quick:
    its tiny models take seconds, not the lesson-size times."""

    def __init__(self, stages, forecast=True, probe=None):
        self.stages, self.started, self.done = stages, time.time(), 0
        self.probe = (probe or probes) if forecast else None
        self.forecast_so_far = 0.0

    def left(self, measured):
        """Seconds the stages not yet started will take at the speed `measured` now."""
        left = forecast([k for _, keys in self.stages[self.done:] for k in keys], measured)
        elapsed = time.time() - self.started
        if self.forecast_so_far > 30:  # the stages so far say how this machine runs today
            left *= elapsed / self.forecast_so_far
        return left

    def start(self):
        label, keys = self.stages[self.done]
        so_far = f"{machine.duration(time.time() - self.started)} so far"
        if self.probe:  # only what the stages left need: a second run trains nothing
            measured = self.probe({kind(k) for _, keys in self.stages[self.done:] for k in keys})
            so_far += f", about {machine.duration(self.left(measured))} left"
            self.forecast_so_far += forecast(keys, measured)
        print(f"\n[{self.done + 1}/{len(self.stages)}] {label}  ({so_far})", flush=True)
        self.done += 1


def to_train(names, folder):
    """Of the models `names` (presets, or "heads": the extra heads on the big model), those not
    trained yet in `folder`, in the order they will be trained: a teacher before its student,
    the big model before its heads."""
    missing = []
    for name in names:
        teacher = "big" if name == "heads" else presets.preset(name).teacher
        first = [teacher] if teacher else []
        for model in first + [name]:
            path = heads.heads_path(folder) if model == "heads" else \
                presets.checkpoint_path(model, folder)
            if model not in missing and not path.exists():
                missing.append(model)
    return missing


def plan(steps, folder):
    """Stages for Progress: for each (label, the models it uses, its key of STAGE_SECONDS) of
    `steps`, the models it trains first (those not trained yet in `folder`, nor by an earlier
    step) and then its own work."""
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
    """The trained presets a notebook needs: those in the checkpoint folder as they are, however
    they were trained (another seed, more steps: the notebooks' claims hold for any of them);
    the missing ones trained first, saying how long."""
    args = notebook_args()
    missing = to_train(names, checkpoint_folder(args))
    if missing and not args.quick:
        print(f"training {', '.join(missing)} first, once: about "
              f"{machine.duration(forecast(missing))} at this machine's speed now (`make train` "
              "does the same from a terminal)")
    load_models(args, missing, log=print)
    return {name: presets.load_trained(name, checkpoint_folder(args)) for name in names}


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
    """The agreement alpha at which the formula's speed-up reaches `goal` at k (nan if no alpha
    below 1 does): speed-up(alpha, k, c, v) = goal exactly where speed-up(alpha, k, c goal,
    v goal) = 1, which speculative.break_even_alpha finds."""
    return sd.break_even_alpha(k, c * goal, verify_cost * goal)
