"""
studies/training.py: what makes the big model train faster, lever by lever: the ladder (each
rung adds one lever and trains a fresh big model) and each lever's price a step, against the
machine's float32 matrix product speed. Results in results/training.json.

    python -m studies.training        # the ladder and its step prices (a big model a row)
    python -m studies.training --quick --steps 2    # the quick big model: what the tests run
    python -m studies.training --levers_only --json results/training-prices.json

What it measures: docs/DESIGN.md, "studies/, study by study".
"""

import contextlib
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from unittest import mock

import torch

import gpt
from beyond import presets, training
from beyond.training import Muon, Recipe
from lessonkit import cli, machine, results_file

TARGET = 1.70   # the validation loss the issue asks for: the lesson's big model at its best
BEFORE = {"optimizer": "muon", "steps": 600}    # the big preset before the ladder (2026-12-03)
LADDER = [   # (what the rung adds, Recipe's fields it changes)
    ("the big preset before: Muon, cosine decay, 600 steps", BEFORE),
    ("warm-up, stable, then a linear decay to 0 over the last 40%",
     {"schedule": "wsd", "min_lr": 0.0}),
    ("twice the peak learning rates (Muon 0.04, AdamW 8e-3)", {"muon_lr": 0.04, "lr": 8e-3}),
    ("residual projections initialised to zero", {"init": "zero"}),
    ("20 warm-up steps instead of 50", {"warmup_steps": 20}),
]
TRIED = [    # on top of the last rung, each alone, not kept; (name, changes, the step's price)
    ("three times the peak learning rates", {"muon_lr": 0.06, "lr": 1.2e-2}, "preset"),
    ("batch 10 instead of 20", {"batch_size": 10}, "batch 10"),
    ("3 Newton-Schulz iterations instead of 5", {"newton_schulz": 3}, "newton-schulz 3"),
    # fewer steps, the whole schedule in them: a little more than a minute holds without
    # AVX-512 (docs/RESULTS.md: the step's price held to AVX2; batch 10's 600 steps above too)
    ("the same recipe fitted into fewer steps", {"steps": 330}, "preset"),
]
# name -> what it changes in the big preset's Recipe, for the step-price table (--levers)
LEVERS = {
    "preset": {},                                     # the big preset as beyond/presets.py keeps it
    "adamw": {"optimizer": "adamw"},                  # AdamW alone: Muon's price is the rest
    "float32": {"precision": "float32"},
    "bfloat16": {"precision": "bfloat16"},   # autocast: matrix products in bfloat16
    "batch 10": {"batch_size": 10},
    "newton-schulz 3": {"newton_schulz": 3},
    "compile": {"compile": True},
}


@dataclass
class TrainingArgs:
    levers: str = "preset,adamw,float32,batch 10,newton-schulz 3,compile"  # comma-separated LEVERS
    rungs: int = len(LADDER)   # the first this many rungs of the ladder (0: none)
    tried: bool = True         # and the levers tried on top of the last rung
    preset: bool = True        # and the big preset as beyond/presets.py keeps it, its own steps
    steps: int = 600           # steps each rung trains (the loss at a fixed budget)
    time_steps: int = 20       # steps per timed run of a lever (after one untimed step)
    repeats: int = 3           # timed runs per lever (the median is kept)
    threads: int = 0           # torch threads (0: training's own choice)
    levers_only: bool = False  # only the step prices, no ladder
    quick: bool = False        # the quick presets' big model and batches (seconds: the tests)
    json: str = "results/training.json"


def big(args):
    """The big preset the study trains: the lesson's, or with --quick the tests' size."""
    return presets.preset("big", "quick" if args.quick else "lesson")


def sized(tc, args):
    """tc on the run's threads (run() chose them), in the --quick size's batches if asked."""
    quick = big(args).training
    return replace(tc, threads=args.threads, **({"batch_size": quick.batch_size, "eval_batches":
                                                 quick.eval_batches} if args.quick else {}))


def recipe(changes, args):
    """The big preset's Recipe with `changes` (the ladder's rungs start from BEFORE instead)."""
    return sized(replace(presets.preset("big").training, **changes), args)


def step_seconds(tc, steps, config):
    """(seconds of the first step, seconds per step of the next `steps`) of a fresh big model."""
    model = gpt.GPT(config)
    started = time.perf_counter()
    training.train(model, replace(tc, steps=1, eval_every=10**9))
    first, started = time.perf_counter() - started, time.perf_counter()
    training.train(model, replace(tc, steps=steps, eval_every=10**9))
    return first, (time.perf_counter() - started) / steps


@contextlib.contextmanager
def cold_compiler_cache():
    """torch.compile's cache on disk in a new, empty folder for the while: a compiled lever's
    first step pays the whole compilation, as on a machine that never compiled the model (the
    cache an earlier run left would make it look seconds cheap)."""
    with tempfile.TemporaryDirectory(prefix="inductor-") as folder, \
            mock.patch.dict(os.environ, TORCHINDUCTOR_CACHE_DIR=folder):
        yield


def step_prices(names, args, log):
    """Each lever's median milliseconds a step and its ratio to the first's, timed in turn
    (A B C A B C ...: a drift of the machine's speed hits every lever alike), and the seconds
    of its first step (compiling, for torch.compile: from a cold cache)."""
    for name in names:
        if name not in LEVERS:
            raise ValueError(f"unknown lever {name!r}; choose from: {', '.join(LEVERS)}")
    configs = {name: recipe(LEVERS[name], args) for name in names}
    times, first = {name: [] for name in names}, {}
    config = big(args).config
    step_seconds(configs[names[0]], 1, config)  # the process's first step pays for start-up
    with cold_compiler_cache():
        for _ in range(args.repeats):
            for name, tc in configs.items():
                once, per_step = step_seconds(tc, args.time_steps, config)
                first.setdefault(name, once)
                times[name].append(per_step)
    rows = {name: {"ms": 1e3 * statistics.median(t), "first_step_s": first[name],
                   "spread": machine.spread(t)} for name, t in times.items()}
    for name, row in rows.items():
        row["ratio"] = row["ms"] / rows[names[0]]["ms"]
        log(f"{name:16s} {row['ms']:6.0f} ms a step ({row['ratio']:.2f}x {names[0]}), first "
            f"step {row['first_step_s']:.1f} s")
    return rows


def step_flops(tc, config):
    """The arithmetic of one training step of the big model under tc, in floating-point
    operations: forward and backward (three times the forward's two per multiply-add) through
    every weight matrix and the attention's two products (T x T per head), and Muon's
    Newton-Schulz iterations on the matrices it updates (for sides m <= n, 4 m^2 n + 2 m^3 per
    iteration: X X^T, its square, the product with X). Layer norms, softmax, GELU and AdamW
    are left out: a few percent."""
    model = gpt.GPT(config)
    c, tokens = model.c, tc.batch_size * model.c.block_size
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attention = 2 * 2 * c.block_size * c.n_embd * c.n_layer        # a token's, forward
    flops = 3 * tokens * (2 * matrices + attention)
    for optimizer, _ in training.optimizers(tc, model, torch.device("cpu")):
        if isinstance(optimizer, Muon):
            for p in (p for group in optimizer.param_groups for p in group["params"]):
                m, n = sorted(p.shape)
                flops += tc.newton_schulz * (4 * m * m * n + 2 * m ** 3)
    return flops


def matmul_peak(threads, size=2048, repeats=5):
    """The machine's float32 matrix product speed, in FLOP/s: the median of `repeats` products
    of two size x size matrices on `threads` torch threads, after one untimed."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    seconds = statistics.median(machine.times_of(lambda: a @ b, repeats + 1, threads)[1:])
    return 2 * size ** 3 / seconds


def arithmetic(prices, args, log):
    """Each lever's FLOP a step and the speed its measured step reaches, against the float32
    matrix product peak of the same threads: how far a step is from the machine's arithmetic."""
    peak = matmul_peak(args.threads, size=256 if args.quick else 2048)
    log(f"float32 matrix products: {peak / 1e9:.0f} GFLOP/s on {args.threads} thread(s)")
    for name, row in prices.items():
        row["gflop"] = step_flops(recipe(LEVERS[name], args), big(args).config) / 1e9
        row["of_peak"] = row["gflop"] / (row["ms"] / 1e3) / (peak / 1e9)
        log(f"{name:16s} {row['gflop']:5.1f} GFLOP a step: {row['of_peak']:.0%} of that peak")
    return {"peak_gflops": peak / 1e9, "threads": args.threads}


def curve_of(tc, config):
    """Train a fresh big model with tc, evaluating every 50 steps: its record."""
    torch.manual_seed(tc.seed)   # before the weights, as presets.ensure_trained does
    model = tc.initialise(gpt.GPT(config))
    curve, started = [], time.perf_counter()
    training.train(model, replace(tc, eval_every=50),
                   on_eval=lambda step, loss: curve.append([step, round(loss, 4)]))
    reached = next((step for step, loss in curve if loss <= TARGET), None)
    return {"steps": tc.steps, "final": curve[-1][1], "reached_at": reached, "curve": curve,
            "seconds": time.perf_counter() - started}


def ladder(args, log):
    rungs, tc, config = [], sized(Recipe(), args), big(args).config
    for name, changes in LADDER[:args.rungs]:
        tc = replace(tc, **{**changes, "steps": args.steps})
        rungs.append({"rung": name, "changes": changes, "priced_as": "preset",
                      **curve_of(tc, config)})
        log(f"{name}: {rungs[-1]['final']:.3f} after {args.steps} steps, {TARGET} at step "
            f"{rungs[-1]['reached_at']}")
    tried = []
    for name, changes, price in TRIED if args.tried and args.rungs else []:
        if "steps" in changes:                      # never more than the rungs (a short look)
            changes = {**changes, "steps": min(changes["steps"], args.steps)}
        tried.append({"rung": name, "changes": changes, "priced_as": price,
                      **curve_of(replace(tc, **changes), config)})
        log(f"  tried, {name}: {tried[-1]['final']:.3f}, {TARGET} at step "
            f"{tried[-1]['reached_at']}")
    if not args.preset:
        return rungs, tried, None
    preset = recipe({}, args)
    kept = {"rung": "the big preset (beyond/presets.py)", "changes": {}, "priced_as": "preset",
            **curve_of(preset, config)}
    log(f"{kept['rung']}: {kept['final']:.3f} after {preset.steps} steps")
    return rungs, tried, kept


def seconds_to_target(record, prices):
    """A ladder record's seconds to the target: its steps to it times its step's price in
    `prices` (a run's "levers"); None where it never reached it or its lever was not priced."""
    lever = prices.get(record["priced_as"])
    return record["reached_at"] * lever["ms"] / 1e3 if lever and record["reached_at"] else None


def price(records, prices):
    """Each record's seconds to the target at this run's prices."""
    for record in records:
        record["seconds_to_target"] = seconds_to_target(record, prices)


def run(args, log=print):
    names = [n.strip() for n in args.levers.split(",") if n.strip()]
    # one thread count for the whole run, chosen here once and recorded with the peak: the
    # ladder's losses repeat to the last digit at the same count, and differ between counts
    args = replace(args, threads=args.threads or machine.training_threads())
    with machine.Busy() as busy:
        prices = step_prices(names, args, log)
        peak = arithmetic(prices, args, log)
        rungs, tried, kept = ([], [], None) if args.levers_only else ladder(args, log)
    price(rungs + tried + ([kept] if kept else []), prices)
    note = busy.note([row["spread"] for row in prices.values()])
    if note:
        log(note)
    results = {"target": TARGET, "levers": prices, "peak": peak, "ladder": rungs,
               "tried": tried, "preset": kept}
    if args.json:
        log(f"wrote {results_file.write_results(args.json, results, busy=note)}")
    return results


def main(argv=None):
    parser = cli.Parser(description=__doc__.strip().split("\n\n")[0])
    cli.add_fields(parser, TrainingArgs, title="flags")
    args = cli.take(TrainingArgs, parser.parse_args(argv))
    if min(args.steps, args.time_steps, args.repeats) < 1 or not 0 <= args.rungs <= len(LADDER):
        raise ValueError(f"--steps, --time_steps and --repeats must be at least 1, --rungs "
                         f"0 to {len(LADDER)}")
    return run(args)


if __name__ == "__main__":
    cli.run(main)
