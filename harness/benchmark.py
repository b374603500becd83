"""
harness/benchmark.py: plain vs speculative decoding on the same held-out prompts, same machine,
one run.

    python -m harness.benchmark            # greedy, 8 prompts x 200 new tokens, a few minutes
    python -m harness.benchmark --ks 1,2,3 --drafts draft --setups torch/numpy

A setup is target backend / draft backend (torch: gpt.GPT; numpy: beyond.fast_numpy.NumpyGPT).
What it prints and how it times: docs/DESIGN.md, "beyond/, module by module".
"""

import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import torch

import gpt
import speculative as sd
from beyond import adaptive as schedules
from beyond import presets
from harness import registry
from lessonkit import cli, corpus, machine, results_file


@dataclass
class BenchArgs:
    prompts: int = 8            # held-out prompts, spread through the validation text
    prompt_chars: int = 32      # characters per prompt
    new_tokens: int = 200       # characters written per prompt
    ks: str = "1,2,3,4,5,6"     # draft lengths to try; heuristic or best: an adaptive k
    drafts: str = "draft,distilled,ngram"  # drafters, comma-separated (registry.NAMES)
    setups: str = "torch/numpy,torch/torch,numpy/numpy"  # target backend / draft backend
    repeats: int = 7            # timings are medians over this many runs
    recompute: bool = True      # also time the lesson's recompute-everything loop
    checkpoints: str = ""       # checkpoint folder (default: checkpoints/)
    json: str = ""              # every figure, with the run's machine and date, here (default:
    #                             results/benchmark.json; results/threads.json with --threads)
    threads: bool = False       # instead: time 1, 2 and all torch threads, quiet and busy


def calibrate(target, draft, prompts, n, k=4):
    """alpha (guesses kept / guesses checked) and seconds per guess inside the loop, from greedy
    runs at k on `prompts`, for any drafter (a model, the table, layers sharing the cache)."""
    stats = sd.Stats(k=k)
    for p in prompts:
        stats.add(sd.speculative_generate(target, draft, p, n, k=k)[1])
    return stats.kept_of_checked, stats.draft_time / max(1, stats.proposed)


def bench(args, log=print):
    folder = args.checkpoints or None
    target = presets.load_trained("big", folder)
    drafts = {name: registry.by_name(name, folder, "torch") for name in args.drafts.split(",")}
    prompts = corpus.held_out_prompts(args.prompts, args.prompt_chars)
    ks = [int(k) if k.isdigit() else k for k in args.ks.split(",")]
    n_new = args.new_tokens * len(prompts)
    results = {"settings": asdict(args), "recompute": None, "agreement": {}, "runs": []}

    def timed(fn):
        return machine.median_time(lambda: [fn(p) for p in prompts], args.repeats)

    if args.recompute:
        with machine.Busy() as busy:
            slow = machine.median_time(lambda: [gpt.recompute_generate(target, p, args.new_tokens)
                                                for p in prompts], max(1, args.repeats // 2))
            cached = timed(lambda p: sd.generate(target, p, args.new_tokens))
            fast = registry.with_backend(target, "numpy")
            cached_numpy = timed(lambda p: sd.generate(fast, p, args.new_tokens))
            results["recompute"] = {"recompute_tokens_per_s": n_new / slow,
                                    "cached_tokens_per_s": n_new / cached, "speedup": slow / cached,
                                    "cached_numpy_tokens_per_s": n_new / cached_numpy,
                                    "speedup_numpy": slow / cached_numpy}
            log(f"{len(prompts)} prompts x {args.new_tokens} tokens: the lesson's "
                f"recompute-everything loop {n_new / slow:,.0f} tokens/s; KV-cached plain "
                f"decoding {n_new / cached:,.0f} tokens/s in torch ({slow / cached:.1f}x), "
                f"{n_new / cached_numpy:,.0f} with the NumPy forward ({slow / cached_numpy:.1f}x)")
        if busy.note():
            log(busy.note())

    for name, draft in drafts.items():
        if hasattr(draft, "score") or hasattr(draft, "new_cache"):
            agreement = asdict(sd.measure_agreement(target, draft, gpt.val_data, windows=256))
        else:  # extra heads read the big model's own pass: alpha from a greedy run instead
            kept = calibrate(target, draft, prompts[:2], args.new_tokens)[0]
            agreement = {"alpha": float("nan"), "greedy_agreement": kept}
        results["agreement"][name] = agreement
        log(f"draft {name!r} on held-out text: alpha {agreement['alpha']:.3f}, "
            f"greedy agreement {agreement['greedy_agreement']:.3f}")

    for setup in args.setups.split(","):
        target_backend, draft_backend = setup.split("/")
        spreads = []
        with machine.Busy() as busy:
            big = registry.with_backend(target, target_backend)

            def plain():
                return [sd.generate(big, p, args.new_tokens) for p in prompts]
            plain_out = plain()
            plain_s = machine.median_time(plain, args.repeats)  # for the headline
            target_step = machine.pass_time(big, 1)
            verify = {k: machine.pass_time(big, k + 1) / target_step
                      for k in ks if isinstance(k, int)}
            log(f"\ntarget {target_backend}, draft {draft_backend}: plain decoding "
                f"{n_new / plain_s:,.0f} tokens/s (one step {target_step * 1e6:.0f} us)")
            for name, draft in drafts.items():
                small = registry.with_backend(draft, draft_backend)
                c = calibrate(big, small, prompts[:2], args.new_tokens)[1] / target_step
                a = results["agreement"][name]["greedy_agreement"]
                log(f"  draft {name!r}: c {c:.3f}")
                log(f"  {'k':>3} {'tokens/s':>9} {'speed-up':>9} {'predicted':>9} {'tok/pass':>9} "
                    f"{'accepted':>9} {'verify':>7}")
                for k in ks:
                    fixed = isinstance(k, int)   # else an adaptive k, starting at 4
                    new_k = (lambda k=k: k) if fixed else schedules.by_name(k, 4)

                    def speculate():
                        return [sd.speculative_generate(big, small, p, args.new_tokens, k=new_k())
                                for p in prompts]
                    runs = speculate()
                    if any(not torch.equal(out, want) for (out, _), want in zip(runs, plain_out)):
                        raise SystemExit(f"greedy speculative output differs from plain decoding "
                                         f"({setup}, {name}, k={k}): a bug, please report it")
                    plain_s, spec_s, speedup, ratios = machine.paired_times(plain, speculate,
                                                                            args.repeats)
                    spreads.append(machine.spread(ratios))
                    stats = sd.Stats(k=runs[0][1].k)
                    for _, s in runs:
                        stats.add(s)
                    nan = float("nan")  # an adaptive k has no single prediction
                    verify_k = verify[k] if fixed else nan
                    predicted = sd.expected_speedup(a, k, c, verify_k) if fixed else nan
                    results["runs"].append({
                        "setup": setup, "draft": name, "k": k, "agreement": a, "c": c,
                        "verify_cost": verify_k, "target_step_s": target_step,
                        "plain_tokens_per_s": n_new / plain_s, "spec_tokens_per_s": n_new / spec_s,
                        "speedup": speedup, "predicted_speedup": predicted,
                        "tokens_per_pass": stats.tokens_per_pass, "expected_tokens_per_pass":
                            sd.expected_tokens_per_pass(a, k) if fixed else nan,
                        "acceptance_rate": stats.acceptance_rate})
                    log(f"  {k:>3} {n_new / spec_s:>9,.0f} {speedup:>8.2f}x "
                        f"{predicted:>8.2f}x {stats.tokens_per_pass:>9.2f} "
                        f"{stats.acceptance_rate:>9.1%} {verify_k:>6.2f}x")
        note = busy.note(spreads)
        results.setdefault("busy", {})[setup] = {"other_cores": busy.other_cores,
                                                 "ratio_spread": max(spreads, default=0.0),
                                                 "note": note}
        if note:
            log("  " + note)
    return results


# ----------------------------------------------------------------------------------------------
# python -m harness.benchmark --threads: how many torch threads, on a quiet and on a busy machine


SPINNER = "while True: pass"                         # keeps one core busy
TORCH_LOAD = ("import torch\nx = torch.randn(256, 256)\n"  # another torch program, on its own
              "while True: x @ x")                   # default threads (all cores)
CONDITIONS = {"quiet": None, "one core busy": SPINNER, "another torch program": TORCH_LOAD}


def train_step_time(model, threads, repeats=10, batch_size=20):
    """Median seconds of one training step (forward, backward, AdamW) on a random batch."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, model.c.vocab_size, (batch_size, model.c.block_size))

    def step():
        _, loss = model(x, x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return statistics.median(machine.times_of(step, repeats + 1, threads)[1:])  # 1st: warm-up


def thread_table(log=print):
    """Each workload at 1, 2 and all torch threads, quiet and beside two kinds of busy program,
    in milliseconds (medians), on untrained models (timing does not depend on the weights)."""
    torch.manual_seed(0)
    big = gpt.GPT(presets.preset("big").config).eval()
    draft = gpt.GPT(presets.preset("draft").config).eval()
    prompt = torch.tensor([gpt.encode("ROMEO:\n")])
    workloads = {
        "decoding step, big model (1 token)":
            lambda t: machine.pass_time(big, 1, repeats=200, n_threads=t),
        "verification pass, big model (5 tokens)":
            lambda t: machine.pass_time(big, 5, repeats=200, n_threads=t),
        "decoding step, lesson's draft":
            lambda t: machine.pass_time(draft, 1, repeats=200, n_threads=t),
        "plain decoding, 200 characters":  # (threads=None: decode on the threads timed)
            lambda t: machine.times_of(lambda: sd.generate(big, prompt, 200, threads=None), 2,
                                       t)[1],  # the first run warms up
        "lesson's loop (no cache), 100 characters":
            lambda t: machine.median_time(lambda: gpt.recompute_generate(big, prompt, 100), 1, t),
        "training step, big model (20 x 128)": lambda t: train_step_time(big.train(), t),
    }
    counts = sorted({1, 2, machine.cpu_cores()})
    table = {}
    for condition, program in CONDITIONS.items():
        other = subprocess.Popen([sys.executable, "-c", program]) if program else None
        try:
            time.sleep(1 if other else 0)  # let it start
            with machine.Busy() as busy:
                for name, fn in workloads.items():
                    for n in counts:
                        table[condition, name, n] = fn(n) * 1e3
            log(f"{condition}: other programs used {busy.other_cores:.1f} of "
                f"{machine.cpu_cores()} cores")
        finally:
            if other:
                other.kill()
                other.wait()
    log(f"\nmilliseconds (median), {machine.cpu_cores()} cores, torch {torch.__version__}:\n")
    log("| workload | torch threads | " + " | ".join(CONDITIONS) + " |")
    log("|---|---|" + "---|" * len(CONDITIONS))
    for name in workloads:
        for n in counts:
            log(f"| {name} | {n} | " + " | ".join(f"{table[c, name, n]:.2f}" for c in CONDITIONS)
                + " |")
    return {f"{c} / {name} / {n} threads": ms for (c, name, n), ms in table.items()}


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    cli.add_fields(parser, BenchArgs, title="benchmark")
    args = cli.take(BenchArgs, parser.parse_args(argv))
    for setup in args.setups.split(","):
        if len(setup.split("/")) != 2 or set(setup.split("/")) - {"torch", "numpy"}:
            raise ValueError(f"a setup is TARGET/DRAFT, each torch or numpy, not {setup!r}")
    ks = args.ks.split(",")
    if not all((k.strip().isdigit() and int(k) >= 1) or k in ("heuristic", "best") for k in ks):
        raise ValueError(f"--ks takes whole numbers >= 1 (or heuristic, best: an adaptive k), "
                         f"comma-separated, not {args.ks!r}")
    for name in args.drafts.split(","):
        registry.check_name(name)
    print(f"machine: {machine.describe()}")
    results = thread_table() if args.threads else bench(args)
    path = args.json or f"results/{'threads' if args.threads else 'benchmark'}.json"
    # the worst setup's note stands for the run (each setup's is in results["busy"])
    worst = max(results.get("busy", {}).values(), default={"note": ""},
                key=lambda b: (bool(b["note"]), b["ratio_spread"] + b["other_cores"]))
    print(f"wrote {results_file.write_results(path, results, busy=worst['note'])}")


if __name__ == "__main__":
    cli.run(main)
