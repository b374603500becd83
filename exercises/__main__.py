"""
The main job: the lesson, end to end. `make lesson` runs this after setting up.

    python -m exercises                 # corpora, then the five exercises and the report
    python -m exercises --only 3 4      # exercises 3 and 4 alone (make exercise N=3: one)
    python -m exercises --quick         # tiny models: what the tests run

Each exercise trains the models it uses when it first needs them (once: they are cached in
checkpoints/): the big model, its draft and the names draft. The whole lesson (no --only) then
trains the one model the notebooks add, the distilled draft, so that no notebook has to.
The studies past the lesson (every drafter compared, transformers, sampling's price list, the
batch curve, token trees) run by their own commands, all of them by `python -m beyond.studies` (make
studies); the report links to their sections once they have run.

Writes results/: each exercise's figures and numbers, and results/report.md with every number
measured next to the lesson's and the formulas', and the machine it ran on (exercises/report.py).
"""

import sys
import time
from dataclasses import dataclass, field

import cli
import corpus
import machine
from exercises import common, ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu, report

EXERCISES = {n: (report.TITLES[n], module) for n, module in
             enumerate([ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu], start=1)}


@dataclass
class Args(common.ExerciseArgs):
    only: list = field(default_factory=lambda: list(EXERCISES))


# The models the six notebooks use (each notebook would train a missing one first).
NOTEBOOK_MODELS = ["big", "draft", "names", "distilled"]


def stages(exercise_args, folder, notebooks=True):
    """(label, keys) per exercise: the models it trains first (those it uses that are not
    trained yet, nor trained by an earlier exercise), then the exercise itself; and, with
    notebooks, a last stage that trains what the notebooks use besides.
    exercise_args: {n: that exercise's Args}."""
    steps = [(f"exercise {n}: {EXERCISES[n][0]}", EXERCISES[n][1].models(args), n)
             for n, args in exercise_args.items()]
    if notebooks:
        steps.append(("the notebooks' models", NOTEBOOK_MODELS, "notebooks"))
    planned = common.plan(steps, folder)
    return planned[:-1] if notebooks and planned[-1][1] == ["notebooks"] else planned  # trained


def lesson(args):
    started, busy = time.time(), machine.Busy().start()
    corpus.prepare()
    corpora_s = time.time() - started
    print(f"corpora ready ({machine.duration(corpora_s)})", flush=True)
    exercise_args = {n: EXERCISES[n][1].Args(seed=args.seed, quick=args.quick,
                                             checkpoints=args.checkpoints, results=args.results)
                     for n in args.only}
    whole = args.only == list(EXERCISES)
    planned = stages(exercise_args, common.checkpoint_folder(args), notebooks=whole)
    progress = common.Progress(planned, forecast=not args.quick)
    sections = {}
    for n, module_args in exercise_args.items():
        progress.start()
        sections[n] = EXERCISES[n][1].run(module_args, log=print)
        path = report.record(args, n, sections[n], log=None)
    if len(planned) > len(exercise_args):     # the notebooks' models, where one is missing
        progress.start()
        common.load_models(args, NOTEBOOK_MODELS, log=print)
    figures = {"exercises": args.only, "quick": args.quick, "corpora_s": corpora_s,
               **progress.results(common.TRAINED)}
    common.save_json(args, "lesson.json", figures, busy=busy.stop().note())
    print(f"\ndone in {machine.duration(time.time() - started)}: {path}")
    print(f"Past the lesson: {report.studies_line(args)}")
    return sections


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--only", type=int, nargs="+", default=None, choices=list(EXERCISES),
                        metavar="N", help="these exercises alone (1-5)")
    cli.add_fields(parser, common.ExerciseArgs, title="flags")
    ns = parser.parse_args(argv)
    args = cli.take(Args, ns)
    args.only = sorted(set(ns.only)) if ns.only else list(EXERCISES)
    lesson(args)


if __name__ == "__main__":
    cli.run(main, sys.argv[1:])
