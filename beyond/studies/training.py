"""
beyond/studies/training.py: what makes the big model train faster, lever by lever, and what
each lever does to its loss.

    python -m beyond.studies.training                      # step times, interleaved (minutes)
    python -m beyond.studies.training --full               # and each lever's whole training
    python -m beyond.studies.training --levers float32,bfloat16 --repeats 5
    python -m beyond.studies.training --levers adamw,muon --full     # the optimizers, whole

A lever is a change of training.Recipe (LEVERS below). Each one trains a fresh big model for
`steps` steps, in turn with the others (A B C A B C ...: a drift in the machine's speed hits
every lever alike), `repeats` times; the figure is the median milliseconds of a step and its
ratio to the first lever's, both on the same machine in the same run. Compiling is timed apart
(its first step compiles). --full trains each lever for its whole steps (the default's, or the
lever's own) and adds the validation loss and the whole time: the loss column is what a lever
costs, and the whole time what it saves where it changes the steps (an optimizer does).
"""

import statistics
import time
from dataclasses import dataclass, replace

import cli
import gpt
import machine
import presets
from training import Recipe

# name -> what it changes in Recipe(); the first one asked for is the baseline
LEVERS = {
    "adamw": {"optimizer": "adamw"},                  # the default: AdamW alone, 1500 steps
    "muon": {"optimizer": "muon", "steps": 600},      # Muon for the blocks' matrices
    "float32": {"precision": "float32"},
    "bfloat16": {"precision": "bfloat16"},   # autocast: matrix products in bfloat16
    "auto": {},                              # the default: bfloat16 where it is native
    "batch 16": {"batch_size": 16},
    "batch 12": {"batch_size": 12},
    "compile": {"compile": True},
    "compile float32": {"compile": True, "precision": "float32"},
}


@dataclass
class TrainingArgs:
    levers: str = "float32,bfloat16,batch 16,compile"  # comma-separated names of LEVERS
    steps: int = 30            # steps per timed run (after one untimed step)
    repeats: int = 3           # timed runs per lever (the median is kept)
    threads: int = 0           # torch threads (0: training's own choice)
    full: bool = False         # also train each lever its whole steps: its loss and its time


def config_of(name, args):
    if name not in LEVERS:
        raise ValueError(f"unknown lever {name!r}; choose from: {', '.join(LEVERS)}")
    return replace(Recipe(eval_every=10**9, eval_batches=1,
                          threads=args.threads or machine.training_threads()),
                   **LEVERS[name])


def step_seconds(tc, steps):
    """(seconds of the first step, seconds per step of the next `steps`) of a fresh big model."""
    model = gpt.GPT(presets.preset("big").config)
    started = time.perf_counter()
    gpt.train(model, steps=1, log_every=0, config=tc)
    first = time.perf_counter() - started
    started = time.perf_counter()
    gpt.train(model, steps=steps, log_every=0, config=tc)
    return first, (time.perf_counter() - started) / steps


def run(args, log=print):
    names = [n.strip() for n in args.levers.split(",") if n.strip()]
    configs = {name: config_of(name, args) for name in names}
    times, first = {name: [] for name in names}, {}
    step_seconds(config_of("float32", args), 1)  # the process's first step pays for start-up
    with machine.Busy() as busy:
        for _ in range(args.repeats):          # round robin
            for name, tc in configs.items():
                once, per_step = step_seconds(tc, args.steps)
                first.setdefault(name, once)
                times[name].append(per_step)
    rows = {name: {"ms": 1e3 * statistics.median(t), "first_step_s": first[name]}
            for name, t in times.items()}
    base = rows[names[0]]["ms"]
    for name, row in rows.items():
        row["ratio"] = row["ms"] / base
        if args.full:
            tc = replace(configs[name], eval_every=250, eval_batches=16)
            started = time.perf_counter()
            model = gpt.train(gpt.GPT(presets.preset("big").config), log_every=0, config=tc)
            row["full_s"], row["val_loss"] = time.perf_counter() - started, model.val_loss
        log(f"{name:16s} {row['ms']:6.0f} ms a step ({row['ratio']:.2f}x {names[0]}), first "
            f"step {row['first_step_s']:.1f} s" + (f"; {configs[name].steps} steps "
                                                   f"{row['full_s']:.0f} s, validation loss "
                                                   f"{row['val_loss']:.3f}" if args.full else ""))
    note = busy.note([machine.spread(t) for t in times.values()])
    if note:
        log(note)
    return rows


def main(argv=None):
    parser = cli.Parser(description=__doc__.strip().split("\n\n")[0])
    cli.add_fields(parser, TrainingArgs, title="flags")
    args = cli.take(TrainingArgs, parser.parse_args(argv))
    if args.steps < 1 or args.repeats < 1:
        raise ValueError("--steps and --repeats must be at least 1")
    return run(args)


if __name__ == "__main__":
    cli.run(main)
