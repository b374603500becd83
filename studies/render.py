"""
studies/render.py: the documents' measured figures, rendered from the results files of the runs
that measured them (docs/results/*.json, each with its command, machine and date).

    python -m studies.render           # fill every marker in README.md and docs/*.md (make docs)
    python -m studies.render --check   # change nothing; exit 1 naming each figure that would change

A document marks a figure inline, `<!-- fig NAME -->1.60x<!-- /fig -->`, and a generated block
(a table, a provenance line) between `<!-- begin NAME -->` and `<!-- end NAME -->` lines; the
text between the markers is this script's to write, NAME one of FIGURES or BLOCKS below.
Re-measuring: run the command (`make benchmark`, `make lesson` in a fresh clone, `make test`),
copy its results/NAME.json into docs/results/, run `make docs` and review the diff.

A results file that is missing, malformed or of another format, or a claim in a document that
its results file contradicts, stops the rendering with one line naming it, before any document
is written: a document is never half rendered. Beside this script: studies/figures.py (reading
results files, writing figures, provenance lines, claim checks) and studies/render_studies.py (the
figures of RESULTS.md's study sections, merged into FIGURES and BLOCKS below).
"""

import re
import statistics
import sys
from pathlib import Path

from lessonkit import cli, machine
from studies import render_studies
from studies import training as study_training
from studies.figures import (
    RUNS,
    RenderError,
    Runs,
    about_machine,
    claim,
    grouped,
    minutes,
    percent,
    provenance,
    span,
    table,
    times,
)

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["README.md", "docs/LESSON.md", "docs/RESULTS.md", "docs/TESTING.md"]
FIGURE = re.compile(r"<!-- fig ([\w.-]+) -->(.*?)<!-- /fig -->", re.S)
BLOCK = re.compile(r"(<!-- begin ([\w.-]+) -->\n)(.*?)(<!-- end \2 -->)", re.S)


# ----------------------------------------------------------------------------------------------
# The benchmark


SETUP_WORDS = {"torch/numpy": "in NumPy", "torch/torch": "in torch"}
DRAFT_WORDS = {"draft": "the lesson's (1 layer x 32)", "distilled": "distilled (1 layer x 128)",
               "ngram": "n-gram table"}


def best_rows(runs):
    """The best fixed k of each (setup, draft) of the benchmark, in the run's order."""
    best = {}
    for row in runs["benchmark"]["runs"]:
        if isinstance(row["k"], int):
            key = (row["setup"], row["draft"])
            if key not in best or row["speedup"] > best[key]["speedup"]:
                best[key] = row
    return list(best.values())


def bench_row(runs, setup, draft):
    return next(r for r in best_rows(runs) if (r["setup"], r["draft"]) == (setup, draft))


def benchmark_table(runs):
    header = ["big model / draft backend", "draft", "best k", "plain tokens/s",
              "speculative tokens/s", "speed-up", "predicted", "tokens per pass",
              "guesses kept", "c", "verify cost"]
    rows = [[r["setup"].replace("/", " / "), r["draft"], r["k"], grouped(r["plain_tokens_per_s"]),
             grouped(r["spec_tokens_per_s"]), times(r["speedup"]), times(r["predicted_speedup"]),
             f"{r['tokens_per_pass']:.2f}", percent(r["acceptance_rate"]), f"{r['c']:.3f}",
             f"{r['verify_cost']:.2f}"] for r in best_rows(runs)]
    return table(header, rows)


def readme_benchmark(runs):
    header = ["draft", "best k", "tokens per pass", "guesses kept", "speed-up", "predicted"]
    rows = []
    for setup in ("torch/numpy", "torch/torch"):
        for draft in ("draft", "distilled"):
            r = bench_row(runs, setup, draft)
            name = DRAFT_WORDS[draft] if setup == "torch/numpy" else \
                DRAFT_WORDS[draft].split(" (")[0]
            rows.append([f"{name}, {SETUP_WORDS[setup]}", r["k"], f"{r['tokens_per_pass']:.2f}",
                         percent(r["acceptance_rate"]), times(r["speedup"]),
                         times(r["predicted_speedup"])])
    return table(header, rows)


def verify_at(runs, setup, k):
    """What a pass over k + 1 tokens costs in one-token passes, in one setup (the distilled
    draft's row: every drafter's check is the same pass)."""
    return next(f"{r['verify_cost']:.1f}" for r in runs["benchmark"]["runs"]
                if (r["setup"], r["draft"], r["k"]) == (setup, "distilled", k))


def verify_range(runs):
    costs = [r["verify_cost"] for r in best_rows(runs)]
    return f"{min(costs):.2f}-{max(costs):.2f}"


def lesson_draft_range(runs):
    ups = [r["speedup"] for r in best_rows(runs) if r["draft"] == "draft"
           and r["setup"].startswith("torch/")]
    return f"{min(ups):.2f}-{max(ups):.2f}x"


def predicted_ratio(runs, setup, draft):
    """measured / predicted over every fixed k of one pair: "0.84-0.93"."""
    ratios = [r["speedup"] / r["predicted_speedup"] for r in runs["benchmark"]["runs"]
              if isinstance(r["k"], int) and r["setup"] == setup and r["draft"] == draft]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


# ----------------------------------------------------------------------------------------------
# Threads (python -m beyond.benchmark --threads: "CONDITION / WORK / N threads": milliseconds)


LARGER = ("plain decoding, 200 characters", "lesson's loop (no cache), 100 characters",
          "training step, big model (20 x 128)")   # the passes large enough to split


def thread_times(runs):
    """{(condition, work, threads): milliseconds}, in the run's order."""
    split = (key.removesuffix(" threads").split(" / ") for key in runs["threads"]
             if key.count(" / ") == 2)
    return {(c, work, int(n)): runs["threads"][f"{c} / {work} / {n} threads"]
            for c, work, n in split}


def milliseconds(ms):
    return f"{ms:.2f}" if ms < 10 else grouped(ms)


def threads_table(runs):
    times_ = thread_times(runs)
    conditions = list(dict.fromkeys(c for c, _, _ in times_))
    rows = [[work if n == min(n for _, w, n in times_ if w == work) else "", n,
             *[milliseconds(times_[c, work, n]) for c in conditions]]
            for work, n in dict.fromkeys((w, n) for _, w, n in times_)]
    return table(["work", "torch threads", *conditions], rows)


def two_against_one(runs, condition, work):
    return thread_times(runs)[condition, work, 2] / thread_times(runs)[condition, work, 1]


def quiet_small(runs):
    """A one-token step and a 5-token check on a quiet machine: about as dear on 2 threads."""
    works = ("decoding step, big model (1 token)", "verification pass, big model (5 tokens)")
    claim(all(0.8 < two_against_one(runs, "quiet", w) < 1.25 for w in works),
          "On a quiet machine a one-token step and a 5-token check cost about the same on 1 and 2 "
          "threads")
    t = thread_times(runs)
    return " and ".join(f"{milliseconds(t['quiet', w, 1])} against "
                        f"{milliseconds(t['quiet', w, 2])}" for w in works)


def collapse(runs):
    """How much longer every larger pass takes on 2 threads beside a busy program."""
    ratios = [two_against_one(runs, c, w) for c, w, n in thread_times(runs)
              if c != "quiet" and w in LARGER and n == 1]
    claim(min(ratios) > 1, "Beside a busy program, every larger pass is slower on 2 threads")
    return span(ratios, "{:.1f}".format)


def plain_on_one(runs):
    """Plain decoding on one thread: never slower than on 2, in any condition."""
    work = "plain decoding, 200 characters"
    conditions = {c for c, w, _ in thread_times(runs) if w == work}
    claim(all(two_against_one(runs, c, work) >= 1 for c in conditions),
          "plain decoding is fastest on one thread in every condition")
    t = thread_times(runs)
    return f"{milliseconds(t['quiet', work, 1])} against {milliseconds(t['quiet', work, 2])}"


def training_on_two(runs):
    ratio = 1 / two_against_one(runs, "quiet", "training step, big model (20 x 128)")
    claim(ratio > 1, "every core for training on a quiet machine")
    return times(ratio)


# ----------------------------------------------------------------------------------------------
# The main job and training


def stage_table(runs, nothing="lesson", again="lesson-again"):
    """The main job's stages from nothing and again, each with its forecast."""
    nothing, again = runs[nothing], runs[again]

    def cell(record):
        if record is None:
            return "none"
        said = f" (forecast {machine.duration(record['forecast_s'])})" \
            if record.get("forecast_s") is not None else ""
        return machine.duration(record["seconds"]) + said

    labels = [s["label"].split(" (training")[0] for s in nothing["stages"]]
    rows = []
    for label, record in zip(labels, nothing["stages"]):
        twin = next((s for s in again["stages"] if s["label"].startswith(label)), None)
        rows.append([label, cell(record), cell(twin)])
    def whole(run, said):
        took = f"**{machine.duration(run['total_s'])}**"
        return took + (f" ({said} {machine.duration(run['forecast_s'])})"
                       if run.get("forecast_s") else "")
    rows.append(["**the job** (`python -m exercises`)", whole(nothing, "forecast at the start"),
                 whole(again, "forecast")])
    return table(["stage", "from nothing (training the models it needs first)",
                  "again (models cached)"], rows)


def studies_table(runs):
    """Each study's stage of `make studies`, and the whole run."""
    run = runs["studies"]
    rows = [[s["label"].split(" (training")[0], machine.duration(s["seconds"])]
            for s in run["stages"]]
    rows.append(["**all of them** (`python -m studies`)",
                 f"**{machine.duration(run['total_s'])}**"])
    return table(["study", "time (models trained already)"], rows)


LESSON_ROWS = [  # the lesson's figure, where the project reproduces it, what we measured (figures)
    ("about a quarter of proposals accepted",
     "exercise 3 (five lesson prompts x 100 characters); `python speculative.py`",
     "{ex3.kept} kept (exercise 3)"),
    ("about 2 tokens per pass", "exercise 3; `Stats.tokens_per_pass`",
     "{ex3.pass} (exercise 3); {bench.draft.numpy.pass} at k = {bench.draft.numpy.k} "
     "(benchmark, all in NumPy)"),
    ("no wall-clock gain, about 1.0x (no KV cache, Python overhead)",
     "exercise 3 times the lesson's no-cache loop and predicts its speed-up from measured c and "
     "α; `beyond/benchmark.py`",
     "{ex3.lesson_loop} for the no-cache speculative loop over the no-cache plain loop; with KV "
     "caches, the lesson's draft gives {bench.lesson_draft}"),
    ("37% next-token agreement, Shakespeare draft", "exercise 4; `speculative.measure_agreement`",
     "{ex4.draft} (exercise 4; the benchmark: {bench.alpha.draft} on held-out text)"),
    ("3% next-token agreement, names draft", "exercise 4", "{ex4.names}"),
    ("break-even α 0.46 (c = 0.2) and 0.17 (c = 0.05), k = 4, from a 0.01 grid",
     "exercise 4; `speculative.break_even_alpha`",
     "0.4553 and 0.1668 by bisection; the same 0.01 grid prints 0.46 and 0.17"),
    ("3.36 tokens per pass for α = 0.8, k = 4",
     "exercise 2; `speculative.expected_tokens_per_pass`",
     "3.3616, exactly, and a simulation of the accept/reject process agrees"),
]


def lesson_table(runs):
    """LESSON.md's table of the lesson's figures against ours."""
    fill = lambda text: re.sub(r"\{([\w.]+)\}", lambda m: FIGURES[m.group(1)](runs), text)
    return table(["the lesson's figure", "where this project reproduces or explains it",
                  "what this project measured"],
                 [(figure, where, fill(ours)) for figure, where, ours in LESSON_ROWS])


def trained(runs, name):
    return next(r for r in runs["lesson"]["trained"] if r["preset"] == name)


MODEL_SHAPES = {"big": "`Config()`", "draft": "`Config(n_embd=32, n_layer=1, n_head=2)`",
                "names": "1 x 32, on first names", "distilled": "1 x 128, imitating `big`"}


OPTIMIZERS = {"adamw": "AdamW", "muon": "Muon"}


def models_table(runs):
    agreement = runs["benchmark"]["agreement"]
    names = runs["ex4_break"]["drafts"]["names"]["greedy_agreement"]
    rows = []
    for record in runs["lesson"]["trained"]:
        name = record["preset"]
        alpha = agreement[name]["greedy_agreement"] if name in agreement else \
            names if name == "names" else None
        rows.append([f"`{name}`", MODEL_SHAPES[name],
                     f"{record['n_layer']} x {record['n_embd']}, "
                     f"{record['parameters'] / 1e6:.2f}M", OPTIMIZERS[record["optimizer"]],
                     record["steps"], record["precision"], machine.duration(record["seconds"]),
                     f"{record['val_loss']:.3f}", "" if alpha is None else percent(alpha, 1)])
    return table(["preset", "what", "layers x width, parameters", "optimizer", "steps",
                  "products in", "time", "validation loss", "greedy agreement with big"], rows)


# ----------------------------------------------------------------------------------------------
# The training ladder (python -m studies.training) and the big model held to AVX2


def seconds_or_not(record, prices):
    """A record's time to the target at the prices of the quiet run (training-prices): the
    ladder's losses repeat to the last digit on any load at the same thread count, a step's
    price does not."""
    seconds = study_training.seconds_to_target(record, prices)
    return machine.duration(seconds) if seconds else "not reached"


def ladder_claims(study, prices):
    """What "The models" says of the ladder and the prices, checked against them."""
    rungs, tried = study["ladder"], {r["rung"]: r for r in study["tried"]}
    last = rungs[-1]["final"]
    for name, lever in (("3 Newton-Schulz iterations instead of 5", "newton-schulz 3"),
                        ("batch 10 instead of 20", "batch 10")):
        claim(tried[name]["final"] > last, f"{name} trains worse (the tried rows)")
        claim(prices[lever]["ratio"] < 1, f"{name} is cheaper")
    claim(study["preset"]["final"] <= study["target"], "the big preset reaches the target")


def ladder_table(runs):
    """Each rung (a lever on top of the rungs above), then each lever tried and not kept."""
    study = runs["training"]
    target = study["target"]
    ladder_claims(study, runs["training-prices"]["levers"])
    prices = runs["training-prices"]["levers"]
    rungs, last = study["ladder"], study["ladder"][-1]

    def row(name, record, against):
        change = f"{round(record['final'] - against['final'], 3) + 0.0:+.3f}" if against \
            else ""                                           # (+ 0.0: never "-0.000")
        return [name, f"{record['final']:.3f}", change, record["reached_at"] or "-",
                seconds_or_not(record, prices)]
    steps = rungs[0]["steps"]
    rows = [row(("" if i == 0 else "+ ") + r["rung"], r, rungs[i - 1] if i else None)
            for i, r in enumerate(rungs)]
    rows += [row(f"*tried on top, not kept:* {r['rung']}"
                 + (f" ({r['steps']} steps)" if r["steps"] != steps else ""), r, last)
             for r in study["tried"]]
    kept = study["preset"]
    rows.append(row(f"**the big preset** ({kept['steps']} steps)", kept, None))
    return table(["rung", f"validation loss after {steps} steps", "against the rung above "
                  "(tried: the last rung)", f"first evaluation at or below {target}",
                  f"time to {target} (steps x a step's price)"], rows)


LEVER_WORDS = {"preset": "the big preset's step", "adamw": "AdamW for every matrix (no Muon)",
               "float32": "float32 products", "bfloat16": "bfloat16 products",
               "batch 10": "batch 10 instead of 20", "newton-schulz 3": "3 Newton-Schulz iterations",
               "compile": "torch.compile"}


def lever_table(runs, name="training-prices"):
    """Each lever's step: its price, its arithmetic and the share of the machine's float32
    matrix product speed it reaches (studies/training.py, arithmetic)."""
    run = runs[name]
    peak = run["peak"]["peak_gflops"]
    rows = [[LEVER_WORDS.get(lever, lever), f"{row['ms']:.0f}", times(row["ratio"]),
             f"{row['first_step_s']:.1f}", f"{row['gflop']:.1f}",
             f"{row['gflop'] / row['ms'] * 1e3:.0f}", f"{row['of_peak']:.0%}"]
            for lever, row in run["levers"].items()]
    return table(["step", "ms (median)", "against the first", "first step (s)", "GFLOP a step",
                  "GFLOP/s", f"of the float32 product peak ({peak:.0f} GFLOP/s)"], rows)


def compiled(runs, name):
    """torch.compile's step against the preset's in the prices `name`. The sentence quoting it
    says compiling does not pay within one training of the big preset: what its steps save is
    less than what its first step spends compiling (checked)."""
    levers, steps = runs[name]["levers"], runs["training"]["preset"]["steps"]
    saved = (levers["preset"]["ms"] - levers["compile"]["ms"]) / 1e3 * steps
    spent = levers["compile"]["first_step_s"] - levers["preset"]["first_step_s"]
    claim(saved < spent, f"torch.compile does not pay within one training ({name})")
    return times(levers["compile"]["ratio"])


def held_to_avx2(runs):
    """The big preset's training record from the run with torch held to AVX2 (a stand-in for
    a machine without AVX-512)."""
    return next(r for r in runs["train-avx2"]["models"] if r["preset"] == "big")


GOAL_LOSS, GOAL_SECONDS = 1.70, 60   # the speedrun's goal (issue 35): 1.70 in a minute there


def steps_in_goal(runs):
    """How many of the big preset's steps, at their price held to AVX2, fit in the goal's
    seconds; the sentence that quotes it says they are fewer than the preset needs."""
    steps = int(GOAL_SECONDS / (runs["training-prices-avx2"]["levers"]["preset"]["ms"] / 1e3))
    claim(steps < runs["training"]["preset"]["reached_at"],
          "fewer steps than the preset needs fit in the goal's time")
    return str(steps)


def faster_step_needed(runs):
    """How many times faster than its price held to AVX2 the preset's step would have to be
    for its steps to the target to fit in the goal's seconds. The sentence that quotes it says
    no rung or lever tried reaches the target in that time at those prices, and that no
    lever's step reaches the share of the machine's float32 product speed that a step so fast
    would use: both checked."""
    prices = runs["training-prices-avx2"]["levers"]
    study = runs["training"]
    for record in study["ladder"] + study["tried"] + [study["preset"]]:
        claim(record["reached_at"] is None or record["reached_at"]
              * prices[record["priced_as"]]["ms"] / 1e3 > GOAL_SECONDS,
              "no lever above reaches the target in a minute there")
    needed = study["preset"]["reached_at"] * prices["preset"]["ms"] / 1e3 / GOAL_SECONDS
    claim(all(row["of_peak"] < needed * prices["preset"]["of_peak"] for row in prices.values()),
          "no lever's step uses the share of the machine's product speed a minute needs")
    return needed


def tried_row(runs, rung):
    """The training study's tried row whose name starts with `rung`."""
    return next(r for r in runs["training"]["tried"] if r["rung"].startswith(rung))


def fitted(runs, rung):
    """The tried row `rung` (its name's start), a recipe whole in fewer or cheaper steps: its
    loss at the end. The sentence quoting it says the row trained at least the steps a minute
    holds held to AVX2 at its step's price, and ended above the goal (both checked)."""
    record = tried_row(runs, rung)
    price = runs["training-prices-avx2"]["levers"][record["priced_as"]]["ms"] / 1e3
    claim(record["steps"] * price >= GOAL_SECONDS, f"{rung}: at least a minute's steps there")
    claim(record["final"] > GOAL_LOSS, f"{rung}: above the goal after a minute's steps there")
    return f"{record['final']:.3f}"


def avx2_goal(runs):
    record = held_to_avx2(runs)
    met = record["val_loss"] <= GOAL_LOSS and runs["train-avx2"]["run"]["seconds"] <= GOAL_SECONDS
    return (f"{'within' if met else '**short of**'} the goal of {GOAL_LOSS:.2f} in "
            f"{GOAL_SECONDS} s on such a machine")


# ----------------------------------------------------------------------------------------------
# Every figure and block by name: what a marker in a document may ask for


FIGURES = {
    # the benchmark (make benchmark)
    "bench.minutes": lambda r: minutes(r["benchmark"]["run"]["seconds"]),
    "bench.date": lambda r: r["benchmark"]["run"]["date"][:10],
    "bench.machine": lambda r: about_machine(r["benchmark"]["run"]),
    "bench.ngram": lambda r: times(bench_row(r, "torch/numpy", "ngram")["speedup"]),
    "bench.ngram.c": lambda r: f"{bench_row(r, 'torch/numpy', 'ngram')['c']:.3f}",
    "bench.ngram.alpha": lambda r: f"{r['benchmark']['agreement']['ngram']['greedy_agreement']:.2f}",
    "bench.distilled.numpy": lambda r: times(bench_row(r, "torch/numpy", "distilled")["speedup"]),
    "bench.distilled.numpy.k": lambda r: str(bench_row(r, "torch/numpy", "distilled")["k"]),
    "bench.distilled.torch": lambda r: times(bench_row(r, "torch/torch", "distilled")["speedup"]),
    "bench.draft.numpy": lambda r: times(bench_row(r, "torch/numpy", "draft")["speedup"]),
    "bench.draft.numpy.pass": lambda r: f"{bench_row(r, 'numpy/numpy', 'draft')['tokens_per_pass']:.2f}",
    "bench.draft.numpy.k": lambda r: str(bench_row(r, "numpy/numpy", "draft")["k"]),
    "bench.verify": verify_range,
    "bench.verify5.torch": lambda r: verify_at(r, "torch/torch", 4),
    "bench.verify5.numpy": lambda r: verify_at(r, "numpy/numpy", 4),
    "bench.lesson_draft": lesson_draft_range,
    "bench.alpha.draft": lambda r: f"{r['benchmark']['agreement']['draft']['greedy_agreement']:.3f}",
    "bench.alpha.distilled": lambda r: f"{r['benchmark']['agreement']['distilled']['greedy_agreement']:.3f}",
    "bench.alpha.distilled.percent": lambda r: percent(r["benchmark"]["agreement"]["distilled"]["greedy_agreement"]),
    "bench.alpha.draft.percent": lambda r: percent(r["benchmark"]["agreement"]["draft"]["greedy_agreement"]),
    "bench.kv": lambda r: f"{r['benchmark']['recompute']['speedup']:.1f}x",
    "bench.kv.numpy": lambda r: f"{r['benchmark']['recompute']['speedup_numpy']:.1f}x",
    "bench.kv.recompute": lambda r: grouped(r["benchmark"]["recompute"]["recompute_tokens_per_s"]),
    "bench.kv.cached": lambda r: grouped(r["benchmark"]["recompute"]["cached_tokens_per_s"]),
    "bench.ratio.distilled.torch": lambda r: predicted_ratio(r, "torch/torch", "distilled"),
    "bench.ratio.draft.torch": lambda r: predicted_ratio(r, "torch/torch", "draft"),
    "bench.ratio.distilled.numpy": lambda r: predicted_ratio(r, "torch/numpy", "distilled"),
    # the main job (make lesson) from nothing and again, and the models it trained
    "lesson.minutes": lambda r: minutes(r["lesson"]["total_s"]),
    "lesson.nothing": lambda r: machine.duration(r["lesson"]["total_s"]),
    "lesson.again": lambda r: machine.duration(r["lesson-again"]["total_s"]),
    "lesson.big": lambda r: machine.duration(trained(r, "big")["seconds"]),
    "lesson.distilled": lambda r: machine.duration(trained(r, "distilled")["seconds"]),
    "lesson.machine": lambda r: about_machine(r["lesson"]["run"]),
    "lesson.date": lambda r: r["lesson"]["run"]["date"][:10],
    "big.loss": lambda r: f"{trained(r, 'big')['val_loss']:.3f}",
    "big.steps": lambda r: str(trained(r, "big")["steps"]),
    # the training ladder, and the big preset held to AVX2
    "training.target": lambda r: str(r["training"]["target"]),
    "training.threads": lambda r: str(r["training"]["peak"]["threads"]),
    "training.before": lambda r: f"{r['training']['ladder'][0]['final']:.3f}",
    "training.preset.steps": lambda r: str(r["training"]["preset"]["steps"]),
    "training.preset.loss": lambda r: f"{r['training']['preset']['final']:.3f}",
    "avx2.big.time": lambda r: machine.duration(held_to_avx2(r)["seconds"]),
    "avx2.big.loss": lambda r: f"{held_to_avx2(r)['val_loss']:.3f}",
    "avx2.big.steps": lambda r: str(held_to_avx2(r)["steps"]),
    "avx2.command.time": lambda r: machine.duration(r["train-avx2"]["run"]["seconds"]),
    "avx2.goal": avx2_goal,
    "avx2.steps_in_goal": steps_in_goal,
    "avx2.faster_step": lambda r: f"{faster_step_needed(r):.1f}",
    "avx2.preset_of_peak": lambda r: percent(r["training-prices-avx2"]["levers"]["preset"]["of_peak"]),
    "avx2.needed_of_peak": lambda r: percent(
        faster_step_needed(r) * r["training-prices-avx2"]["levers"]["preset"]["of_peak"]),
    "avx2.goal_seconds": lambda r: str(GOAL_SECONDS),
    "training.preset.reached": lambda r: str(r["training"]["preset"]["reached_at"]),
    "training.compile": lambda r: compiled(r, "training-prices"),
    "avx2.compile": lambda r: compiled(r, "training-prices-avx2"),
    "avx2.compile.first": lambda r: machine.duration(
        r["training-prices-avx2"]["levers"]["compile"]["first_step_s"]),
    "training.compile.first": lambda r: machine.duration(
        r["training-prices"]["levers"]["compile"]["first_step_s"]),
    "training.fitted": lambda r: fitted(r, "the same recipe fitted"),
    "training.fitted.batch10": lambda r: fitted(r, "batch 10 instead"),
    "training.fitted.steps": lambda r: str(tried_row(r, "the same recipe fitted")["steps"]),
    # exercises 3 and 4 of that run
    "ex3.kept": lambda r: percent(r["ex3_build"]["acceptance_rate"]),
    "ex3.pass": lambda r: f"{r['ex3_build']['tokens_per_pass']:.2f}",
    "ex3.formula_pass": lambda r: f"{r['ex3_build']['formula_tokens_per_pass']:.2f}",
    "ex3.lesson_loop": lambda r: times(r["ex3_build"]["measured_speedup"]["lesson"]),
    "ex4.draft": lambda r: percent(r["ex4_break"]["drafts"]["draft"]["greedy_agreement"], 1),
    "ex4.names": lambda r: percent(r["ex4_break"]["drafts"]["names"]["greedy_agreement"], 1),
    # the test suite
    "tests.minutes": lambda r: minutes(r["tests"]["seconds"]),
    "tests.time": lambda r: machine.duration(r["tests"]["seconds"]),
    "tests.count": lambda r: str(r["tests"]["passed"] + r["tests"]["skipped"]),
    "tests-fast.time": lambda r: machine.duration(r["tests-fast"]["seconds"]),
    "tests-fast.count": lambda r: str(r["tests-fast"]["passed"] + r["tests-fast"]["skipped"]),
    # threads, quiet and busy (python -m beyond.benchmark --threads)
    "threads.time": lambda r: machine.duration(r["threads"]["run"]["seconds"]),
    "threads.quiet": quiet_small,
    "threads.training": training_on_two,
    "threads.collapse": collapse,
    "threads.plain": plain_on_one,
    **render_studies.FIGURES,   # the study sections of docs/RESULTS.md
}

BLOCKS = {
    "lesson.figures": lesson_table,
    "bench.table": benchmark_table,
    "bench.readme": readme_benchmark,
    "bench.provenance": lambda r: provenance(r, "benchmark") + "\n",
    "lesson.stages": stage_table,
    "lesson.provenance": lambda r: provenance(r, "lesson") + "\n" + provenance(r, "lesson-again")
    + "\n",
    "lesson.stages.avx2": lambda r: stage_table(r, "lesson-avx2", "lesson-again-avx2"),
    "lesson.provenance.avx2": lambda r: provenance(r, "lesson-avx2") + "\n"
    + provenance(r, "lesson-again-avx2") + "\n",
    "models.table": models_table,
    "training.ladder": ladder_table,
    "training.levers": lever_table,
    "training.levers.avx2": lambda r: lever_table(r, "training-prices-avx2"),
    "training.provenance": lambda r: "\n".join(provenance(r, name) for name in
                                                ("training", "training-prices",
                                                 "training-prices-avx2", "train-avx2")) + "\n",
    "studies.table": studies_table,
    "studies.provenance": lambda r: provenance(r, "studies") + "\n",
    "tests.provenance": lambda r: provenance(r, "tests") + "\n" + provenance(r, "tests-fast") + "\n",
    "threads.table": threads_table,
    "threads.provenance": lambda r: provenance(r, "threads") + "\n",
    **render_studies.BLOCKS,
}


def value(kind, name, runs):
    table_ = FIGURES if kind == "fig" else BLOCKS
    if name not in table_:
        raise RenderError(f"no {'figure' if kind == 'fig' else 'block'} named {name!r} "
                          f"(studies/render.py knows: {', '.join(sorted(table_))})")
    try:
        return table_[name](runs)
    except (KeyError, TypeError, StopIteration, ValueError, statistics.StatisticsError) as e:
        if isinstance(e, RenderError):
            raise
        raise RenderError(f"{name}: {runs.folder / runs.last}.json lacks what it needs "
                          f"({type(e).__name__}: {e}); measure it again") from None


def render(text, runs, where=""):
    """text with every marker filled from runs."""
    try:
        text = BLOCK.sub(lambda m: m[1] + value("block", m[2], runs) + m[4], text)
        return FIGURE.sub(lambda m: f"<!-- fig {m[1]} -->{value('fig', m[1], runs)}<!-- /fig -->",
                          text)
    except RenderError as e:
        raise RenderError(f"{where}: {e}" if where else str(e)) from None


def render_all(root=ROOT, runs_folder=RUNS):
    """{document path: (old text, new text)}, every document rendered first."""
    runs = Runs(runs_folder)
    out = {}
    for name in DOCUMENTS:
        path = Path(root) / name
        if not path.exists():   # the student repository leaves README.md and TESTING.md out
            continue
        old = path.read_text()
        out[path] = (old, render(old, runs, name))
    return out


def changed_figures(old, new):
    """The markers whose text differs: [(name, old text, new text)]."""
    before = {m[1]: m[2] for m in FIGURE.finditer(old)} | {m[2]: m[3] for m in BLOCK.finditer(old)}
    after = {m[1]: m[2] for m in FIGURE.finditer(new)} | {m[2]: m[3] for m in BLOCK.finditer(new)}
    return [(k, before[k], after[k]) for k in after if before.get(k) != after[k]]


def main(argv=None):
    parser = cli.Parser(prog="python -m studies.render", description=__doc__.strip().split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any document would change")
    parser.add_argument("--runs", default=str(RUNS), metavar="DIR",
                        help="the results files to render from (default: docs/results/)")
    args = parser.parse_args(argv)
    rendered = render_all(runs_folder=args.runs)
    stale = [(path, changes) for path, (old, new) in rendered.items()
             if (changes := changed_figures(old, new)) or old != new]
    for path, changes in stale:
        names = ", ".join(name for name, _, _ in changes)
        print(f"{path.relative_to(ROOT)}: {names or 'changed'}")
    if args.check:
        if stale:
            sys.exit("the documents are not what their results files say: run make docs")
        print("every figure is its results file's")
        return
    for path, (old, new) in rendered.items():
        if old != new:
            path.write_text(new)
    print(f"rendered {len(stale)} of {len(rendered)} documents from {args.runs}")


if __name__ == "__main__":
    cli.run(main)
