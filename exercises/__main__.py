"""
The main job: the lesson, end to end. `make lesson` runs this after setting up.

    python -m exercises                 # corpora, then the five exercises and the report
    python -m exercises --only 3 4      # exercises 3 and 4 alone (make exercise N=3: one)
    python -m exercises --quick         # tiny models: what the tests run

First it trains the models the exercises use that are not trained yet (once: they are cached in
checkpoints/); the whole lesson (no --only) also the one model the notebooks add, the distilled
draft, so that no notebook has to. Then the exercises run. In the student repository an
exercise that calls a part not written yet stops there with one line naming the part, the
notebook cell and the file where it is written, and the next exercise runs; results/report.md
lists it under "Still to do", and the job exits 0 (unwritten work is not an error). The studies
past the lesson run by `python -m studies` (make studies); the report links to their sections.

Writes results/: each exercise's figures and numbers, and results/report.md with every number
measured next to the lesson's and the formulas', and the machine it ran on (harness/report.py).
"""

import sys
import time
from dataclasses import dataclass, field

from harness import common, report, stages
from exercises import ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu
from exercises.stubs import part_two_to_do, to_do  # lines for parts not written yet
from lessonkit import cli, corpus, machine, waiting

EXERCISES = {n: (report.TITLES[n], module) for n, module in
             enumerate([ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu], start=1)}


@dataclass
class Args(common.ExerciseArgs):
    only: list = field(default_factory=lambda: list(EXERCISES))


# The models the six notebooks use (each notebook would train a missing one first).
NOTEBOOK_MODELS = ["big", "draft", "names", "distilled"]


def lesson_stages(exercise_args, folder, notebooks=True):
    """(label, keys) per stage: first the models the exercises (and, with notebooks, the
    notebooks) use that are not trained yet, so that an exercise stopped by a part not written
    yet leaves every model trained; then each exercise (exercise_args: {n: its Args}). The
    models' own work is keyed "notebooks" (as the reference runs timed it); the stage is left
    out when there is nothing to train."""
    used = [m for n, args in exercise_args.items() for m in EXERCISES[n][1].models(args)]
    used = list(dict.fromkeys(used + (NOTEBOOK_MODELS if notebooks else [])))
    steps = [("the models", used, "notebooks")] + \
        [(f"exercise {n}: {EXERCISES[n][0]}", [], n) for n in exercise_args]
    planned = stages.plan(steps, folder)
    return planned[1:] if planned[0][1] == ["notebooks"] else planned   # all trained already


def run_exercise(n, args, log=print):
    """Exercise n's section of the report, or, when a part it calls is not written yet, one
    that says so (one line, also logged). Any other error goes on up."""
    try:
        return EXERCISES[n][1].run(args, log=log)
    except NotImplementedError as e:
        line = to_do(n, e)
        if line is None:
            raise
        log(line)
        return {"numbers": {}, "to_do": line, "markdown": f"Not run: {line}."}


def lesson(args):
    started, busy = time.time(), machine.Busy().start()
    corpus.prepare()
    corpora_s = time.time() - started
    print(f"corpora ready ({waiting.duration(corpora_s)})", flush=True)
    exercise_args = {n: EXERCISES[n][1].Args(seed=args.seed, quick=args.quick,
                                             checkpoints=args.checkpoints, results=args.results)
                     for n in args.only}
    planned = lesson_stages(exercise_args, common.checkpoint_folder(args),
                            notebooks=args.only == list(EXERCISES))
    progress = stages.Progress(planned, estimate=not args.quick)
    if len(planned) > len(exercise_args):      # the models first, where one is missing
        progress.start()
        common.load_models(args, [k for k in planned[0][1] if k != "notebooks"], log=print)
    sections = {}
    for n, module_args in exercise_args.items():
        progress.start()
        sections[n] = run_exercise(n, module_args, log=print)
        path = report.record(args, n, sections[n], log=None)
    left = [n for n, section in sections.items() if "to_do" in section]
    part_two = part_two_to_do()
    figures = {"exercises": args.only, "to_do": left, "part_two_to_do": part_two,
               "quick": args.quick,
               "corpora_s": corpora_s, **progress.results(common.TRAINED)}
    common.save_json(args, "lesson.json", figures, busy=busy.stop().note())
    path = report.write(args)                 # again: with part two's parts still to do
    print(f"\ndone in {waiting.duration(time.time() - started)}: {path}")
    if left:
        print(f"still to do: exercise{'s' if len(left) > 1 else ''} "
              f"{', '.join(map(str, left))} (each line above says which part and where; "
              f"{path} lists them)")
    if part_two:
        print("Part two (notebooks 07 to 09), still to do:\n" +
              "\n".join(f"  {line}" for line in part_two))
    print(f"Past the lesson: {report.studies_line(args)}")
    return sections


def main(argv=None):
    parser = cli.Parser(prog="python -m exercises", description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--only", type=int, nargs="+", default=None, choices=list(EXERCISES),
                        metavar="N", help="these exercises alone (1-5)")
    cli.add_fields(parser, common.ExerciseArgs, title="flags")
    ns = parser.parse_args(argv)
    args = cli.take(Args, ns)
    args.only = sorted(set(ns.only)) if ns.only else list(EXERCISES)
    lesson(args)


if __name__ == "__main__":
    cli.run(main, sys.argv[1:])
