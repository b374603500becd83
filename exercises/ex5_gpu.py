"""
Exercise 5, GPU timing: what "checking k tokens costs about the same as generating one" means.

    python -m exercises.ex5_gpu               # on a GPU if torch sees one, else on the CPU
    python -m exercises.ex5_gpu --device cpu

Three measurements, each a median over repeats after a warm-up. On a GPU the clock is read with
CUDA events after torch.cuda.synchronize(): kernels run asynchronously, and a wall clock around
a launch times the launch, not the work.
1. One forward pass of the big model over 1, 2, 4, 8, 16 new tokens (64 already cached). When a
   step is memory-bound (weights streamed from memory once per pass) or overhead-bound, the
   extra tokens ride along almost free; that is what speculation spends.
2. Plain vs speculative decoding for k = 1..8 on the lesson's prompts (greedy, both models on
   the device).
3. The speed-up against batch size, measured with batched decoding (beyond/batched.py: every
   row of a batch speculates at once), next to the formula fed with passes timed at each batch
   size B: c_B = draft pass / target pass over B x 1 tokens, verify_B = target pass over
   B x (k+1) / over B x 1. As B grows the device fills up, a pass over B x (k+1) tokens costs
   up to k+1 times one over B x 1, and the gain fades: a busy accelerator has no idle capacity
   left for checking guesses.

With a GPU it first trains a bigger pair there (8 x 512 target, 2 x 256 draft; a few minutes,
cached in checkpoints/gpu/) so that the target is worth speeding up; without one it measures the
lesson's CPU models (the big model and --draft, the lesson's draft unless said) and says so. Writes results/ex5_forward.png,
results/ex5_k.png, results/ex5_batch.png and the raw timings in results/ex5_gpu.json.
"""

import statistics
import time
from dataclasses import dataclass

import torch

import gpt
import speculative as sd
from beyond import presets
from harness import batch_curve, common, report
from lessonkit import corpus, machine


@dataclass
class Args(common.ExerciseArgs):
    device: str = "auto"        # auto, cpu or cuda
    max_new_tokens: int = 100   # characters per prompt when decoding
    repeats: int = 30           # timing repeats per measurement (decoding: a tenth of it)
    draft: str = "draft"        # on a CPU, the draft preset: draft, distilled or names


def gpu_pair(args, device):
    """Whether this run trains and times the GPU-sized pair (on a GPU, unless --quick)."""
    return device == "cuda" and not args.quick


def models(args):
    """The trained presets this exercise uses from the checkpoint folder (the main job trains
    the missing ones first); on a GPU it trains its own pair instead (models_for)."""
    return [] if gpu_pair(args, machine.resolve_device(args.device)) else ["big", args.draft]


def timer(device):
    """A function measure(fn, repeats, warmup=3) -> the median seconds of one call of fn().

    Call fn `warmup` times untimed first (the first calls pay for allocation, caches and, on a
    GPU, kernel selection), then time `repeats` calls. On a GPU kernels run asynchronously: a
    clock read right after fn() returns times the launch, not the work. So wait for the device
    (torch.cuda.synchronize()) before starting the clock and again before reading it, or time
    with torch.cuda.Event(enable_timing=True) pairs on the GPU's own clock.
    """
    # BEGIN SOLUTION
    def seconds(fn):
        if device != "cuda":
            started = time.perf_counter()
            fn()
            return time.perf_counter() - started
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()          # earlier work must not land in this measurement
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()          # wait for fn's kernels before reading the events
        return start.elapsed_time(end) / 1e3

    def measure(fn, repeats, warmup=3):
        with machine.threads():  # on the CPU: one torch thread (see lessonkit/machine.py)
            for _ in range(warmup):
                fn()
            return statistics.median(seconds(fn) for _ in range(repeats))
    return measure
    # END SOLUTION


def models_for(args, device, log):
    if gpu_pair(args, device):
        folder = common.checkpoint_folder(args) / "gpu"
        for name in ("big", "draft"):
            presets.ensure_trained(presets.preset(name, "gpu"), folder=folder, device="cuda",
                                   log=log)
        return (presets.load_trained("big", folder, "cuda"),
                presets.load_trained("draft", folder, "cuda"),
                "gpu pair (8 x 512 target, 2 x 256 draft: presets.SIZES['gpu'])")
    trained = common.load_models(args, models(args), log=log)
    return (trained["big"].to(device), trained[args.draft].to(device),
            f"lesson's big model and {common.DRAFT_NAMES.get(args.draft, args.draft)}")


def run(args, log=print):
    common.shrink_if_quick(args, max_new_tokens=30, repeats=3)
    device = machine.resolve_device(args.device)
    measure = timer(device)
    target, draft, pair = models_for(args, device, log)
    gpu = machine.describe()["gpu"]
    log(f"device: {device} ({gpu or 'no GPU: CPU timings'}); models: {pair}")
    repeats = 3 if args.quick else args.repeats

    with machine.Busy() as busy:  # timings on a crowded machine get a note
        # 1. One pass over 1..16 new tokens.
        sizes = [1, 2, 4, 8, 16]
        forward = {t: machine.pass_time(target, t, measure=measure, repeats=repeats)
                   for t in sizes}
        log("target pass over t new tokens: " + ", ".join(
            f"{t}: {s * 1e3:.2f} ms ({s / forward[1]:.2f}x)" for t, s in forward.items()))

        # 2. Plain vs speculative, k = 1..8.
        prompts = [common.encode_prompt(p).to(device) for p in common.LESSON_PROMPTS]
        n = args.max_new_tokens
        decode_repeats = max(1, repeats // 10)
        runs = []
        plain = measure(lambda: runs.append([sd.generate(target, p, n) for p in prompts]),
                        decode_repeats, warmup=1)
        plain_outputs = runs[0]   # the warm-up's: what every k must give
        agreement = sd.measure_agreement(target, draft, gpt.val_data, windows=64).greedy_agreement
        by_k = {}
        for k in range(1, 9):
            runs, stats = [], sd.Stats(k=k)
            # The first call is checked (and, on a GPU, is the warm-up for the new shapes).
            spec = measure(lambda: runs.append([sd.speculative_generate(target, draft, p, n, k=k)
                                                for p in prompts]),
                           decode_repeats, warmup=int(device == "cuda"))
            for (out, s), expected in zip(runs[0], plain_outputs):
                assert torch.equal(out, expected), f"k = {k}: greedy output changed"
                stats.add(s)
            by_k[k] = {"seconds": spec, "speedup": plain / spec, "tokens_per_pass": stats.tokens_per_pass}
            log(f"k = {k}: speculative {plain / spec:.2f}x plain, {stats.tokens_per_pass:.2f} tokens "
                f"per pass")

        # 3. The speed-up against batch size, measured with real batched decoding
        # (beyond/batched.py: one draft pass per guessed position and one check for all rows),
        # next to the formula's prediction from passes timed at each size.
        k = max(by_k, key=lambda j: by_k[j]["speedup"])
        # The whole grid on a GPU, where it is the lesson; on a CPU three sizes show the same
        # fade in a third of the time (the batch study, python -m harness.batch_curve,
        # draws every size and k).
        if args.quick:
            batches, ks = [1, 4], [1, 2]
        elif device == "cuda":
            batches, ks = [1, 2, 4, 8, 16, 32, 64], sorted({1, 2, 4, k})
        else:
            batches, ks = [1, 8, 64], sorted({1, k})
        many = [p.to(device) for p in corpus.held_out_prompts(max(batches), 32)]
        curve = batch_curve.batch_curve(target, draft, many, batches, ks, measure,
                                    new_tokens=n, repeats=max(1, decode_repeats // 2),
                                    pass_repeats=repeats, log=log)
        best = batch_curve.best_by_size(curve)
        at_k = {r["batch"]: r for r in curve if r["k"] == ks[-1]}
    note = busy.note()
    if note:
        log(note)

    plt = common.pyplot()
    where = "GPU" if device == "cuda" else "CPU (no GPU found)"
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(sizes, [forward[t] * 1e3 for t in sizes], "o-", label="measured")
    ax.plot(sizes, [forward[1] * 1e3 * t for t in sizes], ":", label="if each token cost a pass")
    ax.set(xlabel="new tokens in one pass", ylabel="ms", xscale="log", xticks=sizes,
           xticklabels=sizes, title=f"One pass of the target over t tokens, {where}")
    ax.legend()
    common.figure(args, "ex5_forward.png", fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(list(by_k), [v["speedup"] for v in by_k.values()])
    ax.axhline(1, color="black", lw=0.8)
    ax.set(xlabel="k", ylabel="speed-up over plain decoding", title=f"Speculative decoding, {where}")
    common.figure(args, "ex5_k.png", fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for rows, label, style in ((at_k, f"k = {ks[-1]}", "o"), (best, "best k at each size", "s")):
        line, = ax.plot(batches, [rows[b]["speedup"] for b in batches], style + "-",
                        label=f"{label}, measured")
        ax.plot(batches, [rows[b]["predicted"] for b in batches], style + ":",
                color=line.get_color(), label=f"{label}, predicted from timed passes")
    ax.axhline(1, color="black", lw=0.8)
    ax.set(xlabel="batch size", ylabel="speed-up over batched plain decoding", xscale="log",
           xticks=batches, xticklabels=batches, title=f"The gain fades as the device fills up, "
           f"{where}")
    ax.legend(fontsize=7)
    common.figure(args, "ex5_batch.png", fig)

    numbers = {"device": device, "gpu": gpu, "models": pair, "busy": note,
               "greedy_agreement": agreement, "forward_seconds": forward,
               "plain_seconds": plain, "by_k": by_k, "best_k": k, "by_batch": curve}
    common.save_json(args, "ex5_gpu.json", numbers)
    rows = [[t, f"{s * 1e3:.2f} ms", f"{s / forward[1]:.2f}x"] for t, s in forward.items()]
    markdown = ((f"Measured on the GPU ({gpu}) with the {pair}." if device == "cuda" else
                 f"Measured on the CPU with the {pair}: no GPU was found, so a tiny model's pass "
                 f"here is bound by framework overhead rather than by memory.")
                + (f" **{note}**" if note else "")
                + "\n\n" + common.markdown_table(["new tokens", "one pass", "vs one token"], rows)
                + "\n\n" + common.markdown_table(
                    ["k", "speed-up", "tokens/pass"],
                    [[j, f"{v['speedup']:.2f}x", f"{v['tokens_per_pass']:.2f}"] for j, v in by_k.items()])
                + "\n\nAgainst batch size, measured with batched decoding (every row's output "
                "checked against plain decoding) next to the prediction from passes timed at "
                "that size:\n\n"
                + common.markdown_table(
                    ["batch", f"k = {ks[-1]}", "predicted", "best k", "speed-up", "predicted",
                     "verify cost", "c", "why they differ"],
                    [[b, f"{at_k[b]['speedup']:.2f}x", f"{at_k[b]['predicted']:.2f}x",
                      best[b]["k"], f"{best[b]['speedup']:.2f}x", f"{best[b]['predicted']:.2f}x",
                      f"{best[b]['verify_cost']:.2f}x", f"{best[b]['c']:.2f}",
                      batch_gap(best[b])] for b in batches])
                + "\n\n![](ex5_forward.png) ![](ex5_k.png) ![](ex5_batch.png)")
    return {"numbers": numbers, "markdown": markdown}


def batch_gap(row):
    """Why a measured batch speed-up is off its prediction by more than 15%, from the run."""
    if abs(row["speedup"] / row["predicted"] - 1) <= 0.15:
        return ""
    return (f"{row['tokens_per_row_round']:.2f} characters per row and round; rows wait for the "
            f"batch's slowest, and the loop's own work per round is left out of the formula")


def main(argv=None):
    args = common.parse_args(__doc__, Args, argv)
    report.record(args, 5, run(args))


if __name__ == "__main__":
    from exercises import stubs
    stubs.run(5, main)   # a part not written yet: one line, exit 0
