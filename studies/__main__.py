"""
Every study past the lesson, one after another: `make studies` runs this.

    python -m studies                           # all of them, into results/report.md
    python -m studies --only drafters sampling  # some of them (--forecast: how long, runs none)

Every drafter compared, against transformers (with the [hf] extra), sampling's price list, what
batching buys and token trees against chains; each also runs alone (`python -m studies.NAME`).
Before each, it says about how long is left (harness/stages.py), training missing models first.
"""

import contextlib
import importlib.util
import io
import sys
import time
from dataclasses import dataclass, field

from beyond import heads, presets
from harness import batch_curve, common, report, stages
from lessonkit import cli, machine, waiting
from studies import drafters, sampling_costs, transformers, trees


def named(drafts):
    """The trained models in a comma-separated list of drafters ("draft,ngram,heads" or
    transformers' "distilled/numpy/4,..."): the GPT presets and the extra heads."""
    names = [d.split("/")[0].strip() for d in drafts.split(",")]
    return [n for n in names if n in presets.PRESETS or n == "heads"]


# Each study: report key -> (its module, the models it uses with its default flags).
STUDIES = {
    "drafters": (drafters, named(drafters.Args.drafts)),
    "transformers": (transformers, named(transformers.Args.drafts + "," +
                                         transformers.Args.native)),
    "sampling": (sampling_costs, named(sampling_costs.Args.drafts + "," +
                                       sampling_costs.Args.lenience_draft)),
    "batch": (batch_curve, named(batch_curve.CurveArgs.drafts)),
    "trees": (trees, named(trees.Args.drafts)),
}


@dataclass
class Plan:
    forecast: bool = False     # say about how long each study takes, and run none


@dataclass
class Args(common.ExerciseArgs, Plan):
    only: list = field(default_factory=lambda: list(STUDIES))


def available(key):
    """Why study `key` cannot run here, or None."""
    if key == "transformers" and importlib.util.find_spec("transformers") is None:
        return "transformers is not installed (make studies installs it: pip install -e '.[hf]')"


def study_stages(args, keys, folder):
    """(label, stage keys of stages.ABOUT_S) per study: the models it trains first (those it
    uses that are not trained yet, nor trained by an earlier study), then the study."""
    return stages.plan([(report.TITLES[key], ["big"] + STUDIES[key][1], key) for key in keys],
                       folder)


class Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy (the batch curve prints its results)."""

    def __init__(self, out):
        self.out, self.copy = out, io.StringIO()

    def write(self, text):
        self.copy.write(text)
        return self.out.write(text)

    def flush(self):
        self.out.flush()


def batch_section(args, log):
    """The batch curve (its command line reads checkpoints/ only): its printed figures as a
    section of the report, its numbers in results/batch_curve.json."""
    if args.quick or args.checkpoints:
        raise ValueError("the batch curve measures the trained models in checkpoints/ only: run "
                         "python -m harness.batch_curve")
    common.load_models(args, [n for n in STUDIES["batch"][1] if n in presets.PRESETS], log=log)
    path = common.results_dir(args) / "batch_curve.json"
    tee = Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        numbers = batch_curve.main(["--json", str(path)])
    paragraphs = []
    for line in tee.copy.getvalue().strip().splitlines():  # its table stays one table
        if line.startswith("|") and paragraphs and paragraphs[-1].startswith("|"):
            paragraphs[-1] += "\n" + line
        elif line.strip():
            paragraphs.append(line)
    markdown = ("Printed by `python -m harness.batch_curve` (the big model in NumPy and "
                "torch, 16 held-out prompts; every figure in `batch_curve.json`):\n\n"
                + "\n\n".join(paragraphs))
    return {"numbers": numbers, "markdown": markdown}


def train_heads(args, log):
    """The extra heads on the big model, trained here (once: heads.load trains missing ones),
    with their time in common.TRAINED beside the presets'."""
    big = common.load_models(args, ["big"], log=log)["big"]
    started = time.time()
    heads.load(big, common.checkpoint_folder(args), log=log)
    common.TRAINED.append({"preset": "heads", "seconds": time.time() - started,
                           "finished": time.time()})


def run(args, log=print):
    """Each study asked for, in order, each recorded into the report; returns the sections."""
    started = time.time()
    keys = [key for key in args.only if not available(key)]
    for key in args.only:
        if available(key):
            log(f"{report.TITLES[key]}: skipped, {available(key)}")
    folder = common.checkpoint_folder(args)
    if args.forecast:
        for label, stage in study_stages(args, keys, folder):
            log(f"{label}: about {waiting.duration(stages.about(stage))}")
        total = sum(stages.about(stage) for _, stage in study_stages(args, keys, folder))
        log(f"all of them: about {waiting.duration(total)} on a quiet 2-core CPU")
        return {}
    progress = stages.Progress(study_stages(args, keys, folder), estimate=not args.quick)
    busy = machine.Busy().start()
    sections = {}
    for key, (_, stage_keys) in zip(keys, progress.stages):
        progress.start()
        if "heads" in stage_keys:   # trained first, timed: the heads' own stage time
            train_heads(args, log)
        if key == "batch":
            sections[key] = batch_section(args, log)
        else:
            module = STUDIES[key][0]
            sections[key] = module.run(module.Args(seed=args.seed, quick=args.quick,
                                                   checkpoints=args.checkpoints,
                                                   results=args.results), log=log)
        log(f"recorded in {report.record(args, key, sections[key], log=None)}")
    # The stages' times (the extra heads' training counted in the drafters' stage):
    # results/studies.json.
    common.save_json(args, "studies.json", {"studies": keys, "quick": args.quick,
                                            **progress.results(common.TRAINED)},
                     busy=busy.stop().note())
    log(f"\nthe studies done in {waiting.duration(time.time() - started)}")
    return sections


def main(argv=None):
    parser = cli.Parser(prog="python -m studies", description=__doc__.strip().split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=None, choices=list(STUDIES),
                        metavar="NAME", help=f"these studies alone: {', '.join(STUDIES)}")
    cli.add_fields(parser, common.ExerciseArgs, title="flags")
    cli.add_fields(parser, Plan, title="plan")
    ns = parser.parse_args(argv)
    args = cli.take(Args, ns)
    args.only = [key for key in STUDIES if key in (ns.only or STUDIES)]
    return run(args)


if __name__ == "__main__":
    cli.run(main, sys.argv[1:])
