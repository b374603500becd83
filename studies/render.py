"""
studies/render.py: the documents' measured figures, rendered from the results files of the runs
that measured them (docs/results/*.json, each with its command, machine and date).

    python -m studies.render           # fill every marker in README.md and docs/*.md (make docs)
    python -m studies.render --check   # change nothing; exit 1 naming each figure that would change

A document marks a figure inline, `<!-- fig NAME -->1.60x<!-- /fig -->`, and a generated block
(a table, a provenance line) between `<!-- begin NAME -->` and `<!-- end NAME -->` lines; the
text between is this script's, NAME one of FIGURES or BLOCKS below or provenance.FILE.FILE...
(figures.provenance). A results file that cannot be rendered from, or a claim in a document
that it contradicts, stops the rendering in one line naming it, before any document is written.
A new measurement: copy the run's results/NAME.json into docs/results/, run `make docs`, review
the diff. Beside this script: studies/figures.py (what the two share) and
studies/render_studies.py (the study sections of RESULTS.md).
"""

import re
import sys
from pathlib import Path

from lessonkit import cli, waiting
from studies import render_studies
from studies import training as study_training
from studies.figures import (RUNS, RenderError, Runs, claim, grouped, percent, provenance, read,
                             span, table, times)

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["README.md", "docs/LESSON.md", "docs/RESULTS.md", "docs/TESTING.md"]
FIGURE = re.compile(r"<!-- fig ([\w.-]+) -->(.*?)<!-- /fig -->", re.S)
BLOCK = re.compile(r"(<!-- begin ([\w.-]+) -->\n)(.*?)(<!-- end \2 -->)", re.S)


# ----------------------------------------------------------------------------------------------
# The benchmark


SETUP_WORDS = {"torch/numpy": "in NumPy", "torch/torch": "in torch"}
DRAFT_WORDS = {"draft": "the lesson's (1 layer x 32)", "distilled": "distilled (1 layer x 128)",
               "ngram": "n-gram table"}


def best(runs):
    """{(setup, draft): its row at its best fixed k}, in the benchmark's order."""
    rows = [r for r in runs["benchmark"]["runs"] if isinstance(r["k"], int)]
    pairs = dict.fromkeys((r["setup"], r["draft"]) for r in rows)
    return {p: max((r for r in rows if (r["setup"], r["draft"]) == p), key=lambda r: r["speedup"])
            for p in pairs}


def benchmark_table(runs):
    rows = best(runs)
    claim(rows["torch/numpy", "draft"]["speedup"] < rows["torch/numpy", "distilled"]["speedup"],
          "the lesson's 1 x 32 draft [gains] less: it writes only about 2 characters per pass")
    return table(["big model / draft backend", "draft", "best k", "plain tokens/s",
                  "speculative tokens/s", "speed-up", "predicted", "tokens per pass",
                  "guesses kept", "c", "verify cost"],
                 [[r["setup"].replace("/", " / "), r["draft"], r["k"],
                   grouped(r["plain_tokens_per_s"]), grouped(r["spec_tokens_per_s"]),
                   times(r["speedup"]), times(r["predicted_speedup"]),
                   f"{r['tokens_per_pass']:.2f}", percent(r["acceptance_rate"]), f"{r['c']:.3f}",
                   f"{r['verify_cost']:.2f}"]
                  for r in rows.values()])


def readme_benchmark(runs):
    rows = []
    for setup in SETUP_WORDS:   # the draft's shape once, in its first rows
        for draft in ("draft", "distilled"):
            r, name = best(runs)[setup, draft], DRAFT_WORDS[draft]
            rows.append([f"{name if setup == 'torch/numpy' else name.split(' (')[0]}, "
                         f"{SETUP_WORDS[setup]}", r["k"], f"{r['tokens_per_pass']:.2f}",
                         percent(r["acceptance_rate"]), times(r["speedup"]),
                         times(r["predicted_speedup"])])
    return table(["draft", "best k", "tokens per pass", "guesses kept", "speed-up", "predicted"],
                 rows)


def verify_at(runs, setup, k):
    """What a pass over k + 1 tokens costs in one-token passes, in one setup (the distilled
    draft's row: every drafter's check is the same pass)."""
    return next(f"{r['verify_cost']:.1f}" for r in runs["benchmark"]["runs"]
                if (r["setup"], r["draft"], r["k"]) == (setup, "distilled", k))


# ----------------------------------------------------------------------------------------------
# Threads (python -m beyond.benchmark --threads: "CONDITION / WORK / N threads": milliseconds)


TRAINING = "training step, big model (20 x 128)"
LARGER = ("plain decoding, 200 characters", "lesson's loop (no cache), 100 characters",
          TRAINING)   # the passes large enough to split


def thread_times(runs):
    """{(condition, work, threads): milliseconds}, in the run's order."""
    return {(c, work, int(n.removesuffix(" threads"))): ms for key, ms in runs["threads"].items()
            if key.count(" / ") == 2 for c, work, n in [key.split(" / ")]}


def threads_table(runs):
    times_ = thread_times(runs)
    conditions = list(dict.fromkeys(c for c, _, _ in times_))
    small = ("decoding step, big model (1 token)", "verification pass, big model (5 tokens)")
    # what the paragraph under the table says of it
    claim(all(0.8 < two_against_one(runs, "quiet", work) < 1.25 for work in small),
          "On a quiet machine a one-token step and a 5-token check cost about the same on 1 and "
          "2 threads")
    claim(two_against_one(runs, "quiet", TRAINING) < 1,
          "a training step is faster on 2 threads [on a quiet machine]")
    claim(min(collapse(runs)) > 1,
          "Beside a busy program, every larger pass is slower on 2 threads")
    claim(all(two_against_one(runs, c, "plain decoding, 200 characters") >= 1 for c in conditions),
          "plain decoding is fastest on one thread in every condition")
    rows = [[work if n == min(n for _, w, n in times_ if w == work) else "", n,
             *[f"{ms:.2f}" if (ms := times_[c, work, n]) < 10 else grouped(ms) for c in conditions]]
            for work, n in dict.fromkeys((w, n) for _, w, n in times_)]
    return table(["work", "torch threads", *conditions], rows)


def two_against_one(runs, condition, work):
    return thread_times(runs)[condition, work, 2] / thread_times(runs)[condition, work, 1]


def collapse(runs):
    """How much longer each larger pass takes on 2 threads than on 1 beside a busy program."""
    return [two_against_one(runs, c, w) for c, w, n in thread_times(runs)
            if c != "quiet" and w in LARGER and n == 1]


# ----------------------------------------------------------------------------------------------
# The main job and training


def stage_table(runs, header, whole, *names):
    """Each stage of one run or more (the main job from nothing, then again), with the forecast
    the job printed before it, then the whole run."""
    def took(record, seconds, said="forecast", bold=""):
        said = f" ({said} {waiting.duration(record['forecast_s'])})" \
            if record.get("forecast_s") is not None else ""
        return f"{bold}{waiting.duration(record[seconds])}{bold}{said}"
    rows = []
    for stage in runs[names[0]]["stages"]:
        label = stage["label"].split(" (training")[0]
        twins = [next((s for s in runs[n]["stages"] if s["label"].startswith(label)), None)
                 for n in names]
        rows.append([label, *[took(twin, "seconds") if twin else "none" for twin in twins]])
    rows.append([whole, took(runs[names[0]], "total_s", "forecast at the start", "**"),
                 *[took(runs[n], "total_s", bold="**") for n in names[1:]]])
    return table(header, rows)


JOB = (["stage", "from nothing (training the models it needs first)", "again (models cached)"],
       "**the job** (`python -m exercises`)")   # the main job's stage table: header, last row


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
    """LESSON.md's table of the lesson's figures against ours ({NAME}: the figure NAME)."""
    def fill(text):
        return re.sub(r"\{([\w.]+)\}", lambda m: value("fig", m[1], runs), text)
    return table(["the lesson's figure", "where this project reproduces or explains it",
                  "what this project measured"],
                 [(figure, where, fill(ours)) for figure, where, ours in LESSON_ROWS])


def trained(runs, name):
    return next(r for r in runs["lesson"]["trained"] if r["preset"] == name)


MODEL_SHAPES = {"big": "`Config()`", "draft": "`Config(n_embd=32, n_layer=1, n_head=2)`",
                "names": "1 x 32, on first names", "distilled": "1 x 128, imitating `big`"}


OPTIMIZERS = {"adamw": "AdamW", "muon": "Muon"}


def models_table(runs):
    agreement = {name: row["greedy_agreement"] for name, row in   # names: exercise 4's only
                 (runs["ex4_break"]["drafts"] | runs["benchmark"]["agreement"]).items()}
    rows = []
    for record in runs["lesson"]["trained"]:
        name, alpha = record["preset"], agreement.get(record["preset"])
        rows.append([f"`{name}`", MODEL_SHAPES[name],
                     f"{record['n_layer']} x {record['n_embd']}, "
                     f"{record['parameters'] / 1e6:.2f}M", OPTIMIZERS[record["optimizer"]],
                     record["steps"], record["precision"], waiting.duration(record["seconds"]),
                     f"{record['val_loss']:.3f}", "" if alpha is None else percent(alpha, 1)])
    return table(["preset", "what", "layers x width, parameters", "optimizer", "steps",
                  "products in", "time", "validation loss", "greedy agreement with big"], rows)


# ----------------------------------------------------------------------------------------------
# The training ladder (python -m studies.training) and the big model held to AVX2


def ladder_table(runs):
    """Each rung (a lever on top of the rungs above), then each lever tried and not kept. A
    rung's time is at the prices of the quiet run (training-prices): the ladder's losses repeat
    to the last digit on any load at the same thread count, a step's price does not."""
    study, prices = runs["training"], runs["training-prices"]["levers"]
    rungs, tried, target = study["ladder"], study["tried"], study["target"]
    for name, lever in (("3 Newton-Schulz iterations instead of 5", "newton-schulz 3"),
                        ("batch 10 instead of 20", "batch 10")):   # what "The models" says
        claim(next(r for r in tried if r["rung"] == name)["final"] > rungs[-1]["final"],
              f"{name} trains worse (the tried rows)")
        claim(prices[lever]["ratio"] < 1, f"{name} is cheaper")
    claim(study["preset"]["final"] <= target, "the big preset reaches the target")

    def row(name, record, against):
        change = f"{round(record['final'] - against['final'], 3) + 0.0:+.3f}" if against \
            else ""                                           # (+ 0.0: never "-0.000")
        seconds = study_training.seconds_to_target(record, prices)
        return [name, f"{record['final']:.3f}", change, record["reached_at"] or "-",
                waiting.duration(seconds) if seconds else "not reached"]
    steps = rungs[0]["steps"]
    rows = [row(("" if i == 0 else "+ ") + r["rung"], r, rungs[i - 1] if i else None)
            for i, r in enumerate(rungs)]
    rows += [row(f"*tried on top, not kept:* {r['rung']}"
                 + (f" ({r['steps']} steps)" if r["steps"] != steps else ""), r, rungs[-1])
             for r in tried]
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
    levers, steps = runs[name]["levers"], runs["training"]["preset"]["steps"]
    saved = (levers["preset"]["ms"] - levers["compile"]["ms"]) / 1e3 * steps
    spent = levers["compile"]["first_step_s"] - levers["preset"]["first_step_s"]
    claim(saved < spent, f"torch.compile does not pay within one training ({name})")
    rows = [[LEVER_WORDS.get(lever, lever), f"{row['ms']:.0f}", times(row["ratio"]),
             f"{row['first_step_s']:.1f}", f"{row['gflop']:.1f}",
             f"{row['gflop'] / row['ms'] * 1e3:.0f}", f"{row['of_peak']:.0%}"]
            for lever, row in levers.items()]
    return table(["step", "ms (median)", "against the first", "first step (s)", "GFLOP a step",
                  "GFLOP/s", f"of the float32 product peak "
                  f"({runs[name]['peak']['peak_gflops']:.0f} GFLOP/s)"], rows)


GOAL_SECONDS = 60   # the speedrun's goal (issue 35): the ladder's target in a minute there


def held_to_avx2(runs):
    """The big preset trained with torch held to AVX2 (a stand-in for a machine without
    AVX-512), and how many times as fast its step would have to be, at its price there, for its
    steps to the target to fit in the goal's minute; what "Without AVX-512" says of them."""
    record = next(r for r in runs["train-avx2"]["models"] if r["preset"] == "big")
    study, levers = runs["training"], runs["training-prices-avx2"]["levers"]
    price = {lever: row["ms"] / 1e3 for lever, row in levers.items()}   # a step's seconds there
    claim(record["val_loss"] > study["target"] or
          runs["train-avx2"]["run"]["seconds"] > GOAL_SECONDS,
          "**short of** the goal of the target in a minute on such a machine")
    faster = study["preset"]["reached_at"] * price["preset"] / GOAL_SECONDS
    claim(faster > 1, "fewer steps than the preset needs fit in the goal's time")
    for r in study["ladder"] + study["tried"] + [study["preset"]]:
        claim(r["reached_at"] is None or r["reached_at"] * price[r["priced_as"]] > GOAL_SECONDS,
              "no lever above reaches the target in a minute there")
    for rung in ("the same recipe fitted", "batch 10 instead"):
        r = next(r for r in study["tried"] if r["rung"].startswith(rung))
        claim(r["steps"] * price[r["priced_as"]] >= GOAL_SECONDS,
              f"{rung}: at least a minute's steps there")
        claim(r["final"] > study["target"], f"{rung}: above the goal after a minute's steps there")
    claim(all(row["of_peak"] < faster * levers["preset"]["of_peak"] for row in levers.values()),
          "no lever's step uses the share of the machine's product speed a minute needs")
    return record, faster


# ----------------------------------------------------------------------------------------------
# Every figure and block by name: what a marker in a document may ask for. A string is read
# straight from the results files (figures.read: "{FILE[key][key]:FORMAT}").


FIGURES = {
    # the benchmark (make benchmark)
    "bench.minutes": "{benchmark[run][seconds]:minutes}",
    "bench.date": "{benchmark[run][date]:.10}",
    "bench.machine": "{benchmark[run][machine]:machine}",
    "bench.ngram": lambda r: times(best(r)["torch/numpy", "ngram"]["speedup"]),
    "bench.ngram.alpha": "{benchmark[agreement][ngram][greedy_agreement]:.2f}",
    "bench.distilled.numpy": lambda r: times(best(r)["torch/numpy", "distilled"]["speedup"]),
    "bench.distilled.numpy.k": lambda r: str(best(r)["torch/numpy", "distilled"]["k"]),
    "bench.draft.numpy.pass": lambda r: f"{best(r)['numpy/numpy', 'draft']['tokens_per_pass']:.2f}",
    "bench.draft.numpy.k": lambda r: str(best(r)["numpy/numpy", "draft"]["k"]),
    "bench.verify": lambda r: span([x["verify_cost"] for x in best(r).values()]),
    "bench.verify5.torch": lambda r: verify_at(r, "torch/torch", 4),
    "bench.verify5.numpy": lambda r: verify_at(r, "numpy/numpy", 4),
    "bench.lesson_draft": lambda r: span([x["speedup"] for (setup, draft), x in best(r).items()
                                          if draft == "draft" and setup != "numpy/numpy"], times),
    "bench.alpha.draft": "{benchmark[agreement][draft][greedy_agreement]:.3f}",
    "bench.alpha.distilled.percent": "{benchmark[agreement][distilled][greedy_agreement]:.0%}",
    "bench.kv": "{benchmark[recompute][speedup]:.1f}x",
    "bench.kv.numpy": "{benchmark[recompute][speedup_numpy]:.1f}x",
    "bench.kv.recompute": "{benchmark[recompute][recompute_tokens_per_s]:,.0f}",
    "bench.kv.cached": "{benchmark[recompute][cached_tokens_per_s]:,.0f}",
    # the main job (make lesson) from nothing and again, and the models it trained
    "lesson.nothing": "{lesson[total_s]:duration}",
    "lesson.again": "{lesson-again[total_s]:duration}",
    "lesson.big": lambda r: waiting.duration(trained(r, "big")["seconds"]),
    "lesson.distilled": lambda r: waiting.duration(trained(r, "distilled")["seconds"]),
    "lesson.date": "{lesson[run][date]:.10}",
    "big.loss": lambda r: f"{trained(r, 'big')['val_loss']:.3f}",
    "big.steps": lambda r: str(trained(r, "big")["steps"]),
    # the training ladder, and the big preset held to AVX2
    "training.target": "{training[target]}",
    "training.threads": "{training[peak][threads]}",
    "avx2.big.time": lambda r: waiting.duration(held_to_avx2(r)[0]["seconds"]),
    "avx2.big.loss": lambda r: f"{held_to_avx2(r)[0]['val_loss']:.3f}",
    "avx2.big.steps": lambda r: str(held_to_avx2(r)[0]["steps"]),
    "avx2.command.time": "{train-avx2[run][seconds]:duration}",
    "avx2.steps_in_goal": lambda r: str(int(   # the preset's steps a minute holds there
        GOAL_SECONDS / (r["training-prices-avx2"]["levers"]["preset"]["ms"] / 1e3))),
    "avx2.faster_step": lambda r: f"{held_to_avx2(r)[1]:.1f}",
    "avx2.needed_of_peak": lambda r: percent(
        held_to_avx2(r)[1] * r["training-prices-avx2"]["levers"]["preset"]["of_peak"]),
    # exercises 3 and 4 of that run (LESSON.md's table of the lesson's figures)
    "ex3.kept": "{ex3_build[acceptance_rate]:.0%}",
    "ex3.pass": "{ex3_build[tokens_per_pass]:.2f}",
    "ex3.formula_pass": "{ex3_build[formula_tokens_per_pass]:.2f}",
    "ex3.lesson_loop": "{ex3_build[measured_speedup][lesson]:.2f}x",
    "ex4.draft": "{ex4_break[drafts][draft][greedy_agreement]:.1%}",
    "ex4.names": "{ex4_break[drafts][names][greedy_agreement]:.1%}",
    # the test suite
    "tests.time": "{tests[seconds]:duration}",
    "tests.count": lambda r: str(r["tests"]["passed"] + r["tests"]["skipped"]),
    "tests-fast.time": "{tests-fast[seconds]:duration}",
    "tests-fast.count": lambda r: str(r["tests-fast"]["passed"] + r["tests-fast"]["skipped"]),
    # threads, quiet and busy (python -m beyond.benchmark --threads)
    "threads.time": "{threads[run][seconds]:duration}",
    "threads.training": lambda r: times(1 / two_against_one(r, "quiet", TRAINING)),
    "threads.collapse": lambda r: span(collapse(r), "{:.1f}".format),
    **render_studies.FIGURES,   # the study sections of docs/RESULTS.md
}

BLOCKS = {
    "lesson.figures": lesson_table,
    "bench.table": benchmark_table,
    "bench.readme": readme_benchmark,
    "lesson.stages": lambda r: stage_table(r, *JOB, "lesson", "lesson-again"),
    "lesson.stages.avx2": lambda r: stage_table(r, *JOB, "lesson-avx2", "lesson-again-avx2"),
    "models.table": models_table,
    "training.ladder": ladder_table,
    "training.levers": lever_table,
    "training.levers.avx2": lambda r: lever_table(r, "training-prices-avx2"),
    "studies.table": lambda r: stage_table(r, ["study", "time (models trained already)"],
                                           "**all of them** (`python -m studies`)", "studies"),
    "threads.table": threads_table,
    **render_studies.BLOCKS,
}


def value(kind, name, runs):
    """The text of marker `name` (kind "fig" or "block"), from the results files."""
    if kind == "block" and name.startswith("provenance."):   # the files it names, one line each
        return provenance(runs, *name.split(".")[1:])
    known = FIGURES if kind == "fig" else BLOCKS
    if name not in known:
        raise RenderError(f"no {'figure' if kind == 'fig' else 'block'} named {name!r} "
                          f"(studies/render.py knows: {', '.join(sorted(known))})")
    try:
        return read(runs, known[name]) if isinstance(known[name], str) else known[name](runs)
    except RenderError:
        raise
    except (LookupError, TypeError, StopIteration, ValueError) as e:
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
    """{document path: (old text, new text)}, every document rendered first (the student
    repository leaves README.md and TESTING.md out)."""
    runs, out = Runs(runs_folder), {}
    for name in DOCUMENTS:
        if (path := Path(root) / name).exists():
            out[path] = (path.read_text(), render(path.read_text(), runs, name))
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
    stale = {path: (old, new) for path, (old, new) in rendered.items() if old != new}
    for path, (old, new) in stale.items():
        names = ", ".join(name for name, _, _ in changed_figures(old, new))
        print(f"{path.relative_to(ROOT)}: {names or 'changed'}")
    if args.check and stale:
        sys.exit("the documents are not what their results files say: run make docs")
    if not args.check:
        for path, (_, new) in stale.items():
            path.write_text(new)
    print("every figure is its results file's" if args.check else
          f"rendered {len(stale)} of {len(rendered)} documents from {args.runs}")


if __name__ == "__main__":
    cli.run(main)
