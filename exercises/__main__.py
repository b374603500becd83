"""
The main job: the whole lesson, end to end. `make lesson` runs this after setting up.

    python -m exercises                 # corpora, models (cached), all five exercises, report
    python -m exercises --only 3 4      # some exercises
    python -m exercises --quick         # tiny models: what the tests run

Writes results/: each exercise's figures and numbers, and results/report.md with every number
measured in this run next to the lesson's and the formulas', and the machine it ran on.
"""

import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import corpus
import gpt
import speculative
import train
from exercises import common, ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu

EXERCISES = {1: ("watch it happen", ex1_watch), 2: ("derive", ex2_derive),
             3: ("build", ex3_build), 4: ("break", ex4_break), 5: ("GPU timing", ex5_gpu)}
# Seconds each stage took on a 2-core CPU, for the time-left estimate (0 when cached).
EXPECTED_SECONDS = {"big": 200, "draft": 12, "names": 12, "distilled": 110,
                    1: 5, 2: 3, 3: 15, 4: 12, 5: 25}


@dataclass
class Args(common.ExerciseArgs):
    only: list = field(default_factory=lambda: list(EXERCISES))


class Progress:
    """One line per stage: what runs now, and about how long is left."""

    def __init__(self, stages):
        self.stages, self.started, self.done = stages, time.time(), 0

    def start(self, label, key):
        left = sum(EXPECTED_SECONDS[k] for k, cached in self.stages[self.done:] if not cached)
        elapsed = time.time() - self.started
        print(f"\n[{self.done + 1}/{len(self.stages)}] {label}  ({elapsed:.0f}s so far, "
              f"about {_minutes(left)} left)", flush=True)
        self.done += 1


def _minutes(seconds):
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f}s"


def lesson(args):
    started = time.time()
    corpus.prepare()
    folder = common.checkpoint_folder(args)
    presets = list(gpt.PRESETS)
    stages = [(name, train.checkpoint_path(name, folder).exists()) for name in presets]
    stages += [(n, False) for n in args.only]
    progress = Progress(stages)
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
    path = write_report(args, sections, time.time() - started)
    print(f"\ndone in {time.time() - started:.0f}s: {path}")
    return sections


def trained_models(args):
    rows = []
    for name in gpt.PRESETS:
        _, state = gpt.load_checkpoint(train.checkpoint_path(name, common.checkpoint_folder(args)))
        c = state["config"]
        rows.append([name, f"{c['n_layer']} x {c['n_embd']}", state["corpus"], state["step"],
                     f"{state['val_loss']:.3f}"])
    return common.markdown_table(["preset", "layers x width", "trained on", "steps",
                                  "validation loss"], rows)


def summary(sections):
    """The lesson's numbers, the formulas' and ours, side by side."""
    rows = []
    n = {k: v["numbers"] for k, v in sections.items()}
    if 2 in n:
        rows.append(["tokens per pass, alpha 0.8, k 4", "3.36", f"{n[2]['closed_form']:.4f}",
                     f"{n[2]['simulated']:.4f} (simulated)", "agree"])
    if 3 in n:
        e = n[3]
        formula = speculative.expected_tokens_per_pass(e["greedy_agreement"], e["k"])
        rows.append(["tokens per pass, lesson's draft, k 4", "about 2",
                     f"{formula:.2f} (from alpha)", f"{e['tokens_per_pass']:.2f}",
                     "fewer: misses come in runs, the formula assumes independent guesses"
                     if e["tokens_per_pass"] < formula else ""])
        rows.append(["proposals accepted", "about a quarter", "", f"{e['acceptance_rate']:.0%}", ""])
        rows.append(["speed-up, lesson's loop (no cache)", "about 1.0x",
                     f"{e['predicted_speedup']['lesson']:.2f}x", f"{e['measured_speedup']['lesson']:.2f}x",
                     f"each round pays {e['k']} draft steps of c = {e['c_recompute']:.2f}: "
                     f"{e['k'] * e['c_recompute'] + 1:.2f} target steps for "
                     f"{e['tokens_per_pass']:.2f} characters"])
        rows.append(["speed-up, KV caches, draft in NumPy", "", f"{e['predicted_speedup']['numpy']:.2f}x",
                     f"{e['measured_speedup']['numpy']:.2f}x",
                     f"c = {e['c_cached_numpy']:.2f}, but checking {e['k'] + 1} tokens costs "
                     f"{e['verify_cost']:.2f} one-token passes on this CPU"])
    if 4 in n:
        d = n[4]["drafts"]
        rows.append(["next-character agreement, Shakespeare draft", "37%", "",
                     f"{d['draft']['greedy_agreement']:.0%}",
                     "the lesson's figure comes from its own draft and corpus"])
        rows.append(["next-character agreement, names draft", "3%", "",
                     f"{d['names']['greedy_agreement']:.0%}", ""])
        rows.append(["speed-up, distilled draft (NumPy), k 4", "", "",
                     f"{d['distilled']['speedup']:.2f}x",
                     f"it agrees on {d['distilled']['greedy_agreement']:.0%}"])
        b = n[4]["break_even"]
        rows.append(["break-even alpha, k 4, c 0.2", "about 0.45 (grid: 0.46)",
                     f"{b['0.2']['bisection']:.4f}", "", "a grid search rounds up to its grid"])
        rows.append(["break-even alpha, k 4, c 0.05", "0.17 (grid)", f"{b['0.05']['bisection']:.4f}",
                     "", "likewise"])
    return common.markdown_table(["quantity", "lesson", "formula", "measured here", "why they differ"],
                                 rows)


def write_report(args, sections, seconds):
    machine = common.machine()
    lines = [
        "# Speculative decoding: the lesson, measured",
        "",
        f"Run on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in {seconds:.0f} s"
        + (" (quick mode: tiny models, numbers only check the plumbing)" if args.quick else "") + ".",
        "",
        f"Machine: {machine['platform']}, {machine['cpu_cores']} CPU cores, "
        f"{machine['torch_threads']} torch threads, GPU: {machine['gpu'] or 'none'}; "
        f"Python {machine['python']}, torch {machine['torch']}. Settings: seed {args.seed}, "
        f"greedy decoding unless said otherwise.",
        "",
        "## Models", "", trained_models(args), "",
        "## The lesson's numbers and ours", "", summary(sections), "",
    ]
    for n, section in sections.items():
        lines += [f"## Exercise {n}: {EXERCISES[n][0]}", "", section["markdown"], ""]
    path = common.results_dir(args) / "report.md"
    path.write_text("\n".join(lines))
    return path


def main(argv=None):
    import cli
    parser = cli.Parser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--only", type=int, nargs="+", default=list(EXERCISES),
                        choices=list(EXERCISES), metavar="N", help="exercises to run (1-5)")
    for flag, default in (("--seed", 1337), ("--checkpoints", ""), ("--results", "results")):
        parser.add_argument(flag, type=type(default), default=default)
    parser.add_argument("--quick", action="store_true", help="tiny models (what the tests run)")
    ns = parser.parse_args(argv)
    lesson(Args(seed=ns.seed, quick=ns.quick, checkpoints=ns.checkpoints, results=ns.results,
                only=sorted(set(ns.only))))


if __name__ == "__main__":
    import cli
    cli.run(main, sys.argv[1:])
