"""
beyond/common.py: what every exercise shares: its flags, its models and where it writes.

Each exercise is a script with main(), a dataclass of flags (so -h works) that extends
ExerciseArgs, and a run(args) that returns its numbers and a section of the report. Models come
from the checkpoint cache (beyond/presets.py) and are trained when missing; --quick
swaps in tiny models trained for a few dozen steps, so that the test suite can run every exercise
in seconds.
"""

import functools
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import gpt
import speculative as sd
from beyond import heads, presets, training
from beyond.training import Recipe
from lessonkit import cli, machine

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


# A forecast scales the time each stage took in a reference run by this machine's speed now
# against that run's (the same probes(), timed here before each stage and in that run): training
# stages by the training probe, the rest by the decoding one. The reference runs, in
# docs/results/: `python -m exercises` from nothing (lesson.json: the models), the same again
# (lesson-again.json: the exercises, without a fresh environment's first imports) and `python -m
# studies` (studies.json); a later one's time for a stage replaces an earlier one's.
REFERENCES = ROOT / "docs" / "results"
REFERENCE_RUNS = ("lesson.json", "lesson-again.json", "studies.json")
TRAINING = ("big", "draft", "names", "distilled", "heads")


class NoReference(ValueError):
    """A reference run that is missing or unreadable; the message says which and why."""


@functools.cache
def reference(folder=REFERENCES):
    """({stage key (a str): (seconds, {probe kind: seconds at that run's start})}, the first
    run's machine in words). An unreadable reference run, or none at all: NoReference."""
    table, machines = {}, []
    for name in REFERENCE_RUNS:
        path = Path(folder) / name
        if not path.exists():
            continue
        try:
            run = json.loads(path.read_text())
            probes_then = typical_probes(run["stages"])
            table.update({key: (seconds, probes_then)
                          for key, seconds in run["stage_seconds"].items()})
            machines.append(machine.summary(run["run"]["machine"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise NoReference(f"no forecast: the reference run {path} is unreadable "
                              f"({type(e).__name__}: {e})") from None
    if not machines:
        raise NoReference(f"no forecast: no reference run in {folder} "
                          f"({', '.join(REFERENCE_RUNS)})")
    return table, machines[0]


def typical_probes(stages):
    """A run's speed: the median of the probes taken before each of its stages, per kind (one
    probe jumps by a fifth from stage to stage on a quiet machine)."""
    kinds = {kind for stage in stages for kind in stage.get("probes") or {}}
    return {kind: statistics.median(stage["probes"][kind] for stage in stages
                                    if kind in (stage.get("probes") or {})) for kind in kinds}


def unforecast(keys):
    """The stage keys among `keys` that no reference run has timed."""
    return sorted({str(k) for k in keys} - set(reference()[0]))


def probes(kinds=("training", "decoding"), repeats=5):
    """This machine's speed now, for each of `kinds`, on an untrained model of the big one's
    size after two untimed warm-ups. training: the median of `repeats` training steps (20 x 128
    characters) on training's threads and precision, which is arithmetic. decoding: the mean of
    2 x `repeats` plain cached decodings of 64 characters on one thread, mostly each call's
    fixed cost. A mean: beside busy programs a call runs whole or is interrupted, and the
    interrupted ones are the slowdown (medians jumped from run to run). (A training step on one
    thread misjudged both a processor without AVX-512 and a busy core.)"""
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
    measured = {}
    if "training" in kinds:   # in training's own precision (bfloat16 where the processor has it)
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
    """Seconds the stages (keys of the reference runs' stage_seconds) will take here, at this
    machine's speed now (`measured`: probes())."""
    table = reference()[0]
    stages = [s for s in stages if str(s) in table]   # the others: see unforecast
    measured = measured or probes({kind(s) for s in stages})
    return sum(table[str(s)][0] * measured[kind(s)] / table[str(s)][1][kind(s)] for s in stages)


class Progress:
    """One line per stage: what runs now, and about how long is left (forecast(), at this
    machine's speed measured again before every stage, and scaled by the stages so far against
    their forecast). A stage is (label, stage keys: the models it trains first, then its own
    work). No forecast with --quick (tiny models). The probes go into each stage's record even
    without a reference run to forecast from (that record is how a reference run is made)."""

    def __init__(self, stages, forecast=True, probe=None):
        self.stages, self.started, self.done = stages, time.time(), 0
        self.probe = (probe or probes) if forecast else None
        self.forecast_so_far = 0.0
        self.records = []   # per stage: label, keys, probes, forecast and measured seconds
        self.reference = None
        if self.probe:
            try:
                self.reference = reference()[1]
                missing = unforecast([k for _, keys in stages for k in keys])
                if missing:   # a stage no reference run timed (a model it had trained already)
                    self.reference += f"; not counting {', '.join(missing)}, which it did not time"
            except NoReference as e:
                print(e)

    def left(self, measured):
        """Seconds the stages not yet started will take at the speed `measured` now."""
        left = forecast([k for _, keys in self.stages[self.done:] for k in keys], measured)
        if self.forecast_so_far > 30:  # the stages so far say how this machine runs today
            left *= (time.time() - self.started) / self.forecast_so_far
        return left

    def start(self):
        """Print the next stage's line (the one before it has ended)."""
        self.stop()
        label, keys = self.stages[self.done]
        so_far = f"{machine.duration(time.time() - self.started)} so far"
        record = {"label": label, "keys": keys, "started_s": time.time() - self.started}
        if self.probe:  # only what the stages left need: a second run trains nothing
            record["probes"] = self.probe({kind(k) for _, keys in self.stages[self.done:]
                                           for k in keys})
        if self.probe and self.reference:
            record["left_forecast_s"] = self.left(record["probes"])
            so_far += f", about {machine.duration(record['left_forecast_s'])} left"
            if not self.done:
                so_far += f" (from a run on {self.reference}, at this machine's speed now)"
            record["forecast_s"] = forecast(keys, record["probes"])
            self.forecast_so_far += record["forecast_s"]
        print(f"\n[{self.done + 1}/{len(self.stages)}] {label}  ({so_far})", flush=True)
        self.records.append(record)
        self.done += 1

    def stop(self):
        """The stage running now has ended: its measured seconds go into its record."""
        if self.records and "seconds" not in self.records[-1]:
            self.records[-1]["seconds"] = time.time() - self.started - \
                self.records[-1]["started_s"]

    def results(self, trained):
        """The stages as a results file holds them, and each stage key's seconds: a model's from
        its training record (trained: presets.training_record of each model trained meanwhile),
        a stage's own work the rest of its stage's time. The probes at the start are the speed
        those seconds belong to (what a forecast scales)."""
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
        first = self.records[0] if self.records else {}
        return {"total_s": time.time() - self.started, "probes": first.get("probes"),
                "forecast_s": first.get("left_forecast_s"), "stage_seconds": seconds,
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
        try:
            about = "" if unforecast(missing) else \
                f": about {machine.duration(forecast(missing))} at this machine's speed now"
        except NoReference:   # no reference run: no forecast
            about = ""
        print(f"training {', '.join(missing)} first, once{about} (`make train` does the same "
              "from a terminal)")
    load_models(args, missing, log=print)
    return {name: presets.load_trained(name, checkpoint_folder(args)) for name in names}


def results_dir(args):
    path = Path(args.results)
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_json(args, name, data, busy=""):
    """data as results/<name>, with the run's provenance (machine.write_results)."""
    return machine.write_results(results_dir(args) / name, data, busy=busy)


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
