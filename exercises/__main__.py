"""
The main job: the whole lesson, end to end. `make lesson` runs this after setting up.

    python -m exercises                 # corpora, models (cached), all five exercises, report
    python -m exercises --only 3 4      # exercises 3 and 4 alone (make exercise N=3: one)
    python -m exercises --quick         # tiny models: what the tests run
    python -m exercises --no-drafters   # without the comparison of every drafter (minutes)

Writes results/: each exercise's figures and numbers, and results/report.md with every number
measured next to the lesson's and the formulas', and the machine it ran on (exercises/report.py).
"""

import importlib.util
import sys
import time
from dataclasses import dataclass, field

import cli
import corpus
import gpt
import machine
from beyond import checkpoint
from beyond.studies import drafters, sampling_costs, transformers
from exercises import common, ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu, report

EXERCISES = {n: (report.TITLES[n], module) for n, module in
             enumerate([ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu], start=1)}


@dataclass
class Stages:
    drafters: bool = True      # then every drafter compared (beyond.studies.drafters; minutes)
    transformers: bool = True  # then vs transformers, if installed (beyond.studies.transformers)
    sampling: bool = True      # then sampling's price list (beyond.studies.sampling_costs; minutes)


@dataclass
class Args(common.ExerciseArgs, Stages):
    only: list = field(default_factory=lambda: list(EXERCISES))


class Progress:
    """One line per stage: what runs now, and about how long is left, forecast from the time
    each stage took on the reference machine scaled by this machine's speed, measured now
    (common.forecast) and again as the job goes on (the stages so far against their forecast).
    No forecast with --quick: its tiny models take seconds, not the lesson-size stages' times."""

    def __init__(self, stages, forecast=True):
        self.stages, self.started, self.done = stages, time.time(), 0
        self.probes = common.probes() if forecast else None
        self.forecast_so_far = 0.0

    def start(self, label, key):
        elapsed = time.time() - self.started
        so_far = f"{machine.duration(elapsed)} so far"
        if self.probes:
            waiting = [k for k, cached in self.stages[self.done:] if not cached]
            left = common.forecast(waiting, self.probes)
            if self.forecast_so_far > 30:  # the stages so far say how this machine runs today
                left *= elapsed / self.forecast_so_far
            so_far += f", about {machine.duration(left)} left"
            key_cached = self.stages[self.done][1]
            self.forecast_so_far += 0 if key_cached else common.forecast([key], self.probes)
        print(f"\n[{self.done + 1}/{len(self.stages)}] {label}  ({so_far})", flush=True)
        self.done += 1


def after_the_exercises(args):
    """(report key, title, module) of each stage the flags ask for after the exercises; the
    comparison with transformers only where it is installed (the optional extra [hf])."""
    stages = [("drafters", "every drafter compared", drafters) if args.drafters else None,
              ("sampling", "sampling's price list", sampling_costs) if args.sampling else None]
    if args.transformers and importlib.util.find_spec("transformers") is not None:
        stages.insert(1, ("transformers", "against Hugging Face transformers", transformers))
    return [stage for stage in stages if stage]


def lesson(args):
    started = time.time()
    corpus.prepare()
    folder = common.checkpoint_folder(args)
    presets = list(checkpoint.PRESETS)
    stages = [(name, checkpoint.checkpoint_path(name, folder).exists()) for name in presets]
    stages += [(n, False) for n in args.only]
    stages += [(key, False) for key, _, _ in after_the_exercises(args)]
    progress = Progress(stages, forecast=not args.quick)
    for name in presets:
        progress.start(f"model {name!r}", name)
        common.load_models(args, [name])
    sections = {}
    for n in args.only:
        title, module = EXERCISES[n]
        progress.start(f"exercise {n}: {title}", n)
        exercise_args = module.Args(seed=args.seed, quick=args.quick,
                                    checkpoints=args.checkpoints, results=args.results)
        sections[n] = module.run(exercise_args, log=print)
        path = report.record(args, n, sections[n], log=None)
    for key, title, module in after_the_exercises(args):
        progress.start(title, key)
        stage_args = module.Args(seed=args.seed, quick=args.quick,
                                 checkpoints=args.checkpoints, results=args.results)
        sections[key] = module.run(stage_args, log=print)
        path = report.record(args, key, sections[key], log=None)
    print(f"\ndone in {machine.duration(time.time() - started)}: {path}")
    return sections


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--only", type=int, nargs="+", default=None, choices=list(EXERCISES),
                        metavar="N", help="these exercises alone (1-5), nothing after them")
    cli.add_fields(parser, common.ExerciseArgs, title="flags")
    cli.add_fields(parser, Stages, title="after the exercises (the whole main job only)")
    ns = parser.parse_args(argv)
    args = cli.take(Args, ns)
    if ns.only:  # an exercise means that exercise: the studies after them run in the main job
        args.only, args.drafters, args.transformers, args.sampling = sorted(set(ns.only)), \
            False, False, False
    else:
        args.only = list(EXERCISES)
    lesson(args)


if __name__ == "__main__":
    cli.run(main, sys.argv[1:])
