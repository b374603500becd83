"""
harness/batch_curve.py: what batching buys, on the lesson's big model, measured. Plain decoding of
16 rows batched against the same rows one at a time (NumPy and torch); batched speculative
against batched plain decoding at batch 16 for each backend and drafter, with the bound a free,
always-right drafter would meet there; then the speed-up against batch size with the best of
them, next to the formula's prediction from passes timed at each size (batch_curve; exercise 5
draws the same curve).

    python -m harness.batch_curve                 # the lesson's big model in NumPy: minutes
    python -m harness.batch_curve --sizes 1,4,16 --ks 1,3 --drafts ngram
"""

from dataclasses import dataclass

import torch

import speculative as sd
from beyond import batched, presets
from harness import common, registry
from harness.registry import by_name
from lessonkit import cli, corpus, machine, results_file


def pass_seconds(model, tokens, batch=1, *, repeats=100, measure=None, context=64):
    """machine.pass_time for the pass beyond/batched.py makes: median seconds of one BatchScorer
    pass over batch rows x `tokens` new tokens after `context` cached ones. measure(fn, repeats)
    -> median seconds; by default the wall clock on one torch thread."""
    context = min(context, model.c.block_size - tokens)
    ids = torch.randint(0, model.c.vocab_size, (batch, context + tokens),
                        generator=torch.Generator().manual_seed(0)).tolist()
    scorer = batched.BatchScorer(model, batch)
    with machine.threads():                          # the untimed set-up pass too
        scorer.run([(b, row[:context], 0) for b, row in enumerate(ids)])
    new = [(b, row[context:], context) for b, row in enumerate(ids)]
    return (measure or machine.median_time)(lambda: scorer.run(new), repeats)


def rows_vs_batch(target, prompts, new_tokens=100, repeats=5):
    """Plain decoding of the prompts one row at a time (speculative.generate) against all at
    once (generate here), timed alternately: (seconds of rows, seconds of the batch, median
    ratio, ratios). Checks that the outputs are the same first."""
    batch = [p[0].tolist() if torch.is_tensor(p) and p.dim() == 2 else list(p) for p in prompts]
    one = [sd.generate(target, torch.tensor([p]), new_tokens)[0].tolist() for p in batch]
    if one != batched.generate(target, batch, new_tokens):
        raise AssertionError("batched plain decoding differs from row-by-row: a bug")
    return machine.paired_times(
        lambda: [sd.generate(target, torch.tensor([p]), new_tokens) for p in batch],
        lambda: batched.generate(target, batch, new_tokens), repeats)


def decoders(target, draft, rows, new_tokens):
    """(plain(), speculative(k)) decoding `rows`: one row on speculative.py's own path (tuned for
    one sequence), more rows together in beyond/batched.py. Both give lists of token lists;
    speculative(k) gives its Stats too."""
    if len(rows) > 1:
        return (lambda: batched.generate(target, rows, new_tokens),
                lambda k: batched.speculative_generate(target, draft, rows, new_tokens, k=k))
    idx = torch.tensor(rows)

    def speculative(k):
        out, stats = sd.speculative_generate(target, draft, idx, new_tokens, k=k)
        return out.tolist(), stats
    return lambda: sd.generate(target, idx, new_tokens).tolist(), speculative


def batch_curve(target, draft, prompts, sizes=(1, 2, 4, 8, 16, 32, 64), ks=(1, 2, 3, 4, 6, 8),
                measure=None, *, new_tokens=100, repeats=3, pass_repeats=100, log=print):
    """Speculative against plain decoding of the first b prompts, for each batch size b in
    `sizes` and each k in `ks` (batch 1: speculative.py's one-row path). One dict per (b, k):
    tokens/s of both, the measured speed-up (the median of `repeats` alternating pairs) and the
    formula's prediction from passes timed at that size: verify = a target pass over b x (k+1)
    new tokens / over b x 1; c = a draft pass over b x 1 / a target pass over b x 1 (a drafter
    that is not a GPT: its seconds per guess in the run instead); alpha = guesses kept / guesses
    checked in the run. Passes are timed as decoding makes them (pass_seconds; machine.pass_time
    at batch 1); measure(fn, repeats) -> median seconds, default the wall clock on one torch
    thread. Every greedy output is checked against plain decoding's first. pass_repeats: calls
    per timed pass."""
    batch = [p[0].tolist() if torch.is_tensor(p) and p.dim() == 2 else list(p) for p in prompts]
    if max(sizes) > len(batch):
        raise ValueError(f"batch sizes up to {max(sizes)} need as many prompts, not {len(batch)}")
    model = batched.batch_draft(draft)
    out = []
    for b in sizes:
        plain, speculative = decoders(target, draft, batch[:b], new_tokens)
        timer = machine.pass_time if b == 1 else pass_seconds

        def timed(m, tokens):
            return timer(m, tokens, batch=b, measure=measure, repeats=pass_repeats)
        plain_split = batched.BatchStats()           # where plain decoding's time went
        want = batched.generate(target, batch[:b], new_tokens, stats=plain_split) if b > 1 \
            else plain()
        one = timed(target, 1)
        small = timed(model, 1) if model else None
        for k in ks:
            got, stats = speculative(k)
            if got != want:
                raise AssertionError(f"greedy batched speculative output differs from plain "
                                     f"decoding (batch {b}, k {k}): a bug, please report it")
            plain_s, spec_s, speedup, ratios = machine.paired_times(
                plain, lambda: speculative(k), repeats)
            rounds = getattr(stats, "batch_rounds", stats.rounds)
            c = small / one if model else stats.draft_time / max(1, rounds * k) / one
            a, verify_cost = stats.kept_of_checked, timed(target, k + 1) / one
            split = encoding(plain_split, stats if b > 1 else None)  # the checked run's
            out.append({"batch": b, "k": k, "plain_s": plain_s, "spec_s": spec_s,
                        "plain_tokens_per_s": b * new_tokens / plain_s,
                        "spec_tokens_per_s": b * new_tokens / spec_s, "speedup": speedup,
                        "spread": machine.spread(ratios), "alpha": a, "c": c,
                        "verify_cost": verify_cost,
                        "predicted": sd.expected_speedup(a, k, c, verify_cost),
                        "tokens_per_pass": stats.tokens_per_pass,  # a row's, per pass
                        "tokens_per_batch_pass": getattr(stats, "tokens_per_batch_pass",
                                                         stats.tokens_per_pass),
                        "tokens_per_row_round": stats.new_tokens / max(1, stats.rounds),
                        "rounds_over_row_mean": rounds / max(1, stats.rounds / b),
                        "expected_tokens_per_row_round": sd.expected_tokens_per_pass(a, k),
                        "target_pass_1_s": one, **split})
            log(f"batch {b:3} k {k}: plain {b * new_tokens / plain_s:8,.0f} tokens/s, "
                f"speculative {b * new_tokens / spec_s:8,.0f} tokens/s, {speedup:.2f}x "
                f"(predicted {out[-1]['predicted']:.2f}x: alpha {a:.2f}, c {c:.3f}, "
                f"verify {verify_cost:.2f}; tokens per row and round "
                f"{out[-1]['tokens_per_row_round']:.2f}, "
                f"{out[-1]['expected_tokens_per_row_round']:.2f} from alpha; rounds of the "
                f"batch {out[-1]['rounds_over_row_mean']:.2f}x a row's" + split_text(split) + ")")
    return out


def encoding(plain, speculative):
    """How much of each run encoded rows afresh (the prompts; windows that jumped), from a
    BatchStats of each (None at batch 1: speculative.py's path does not count it), and the
    speed-up of everything else: the decoding steps and rounds alone."""
    if speculative is None:
        return {"encode_share_plain": None, "encode_share_spec": None, "steps_speedup": None}
    spec_s = speculative.draft_time + speculative.target_time
    return {"encode_share_plain": plain.encode_time / plain.target_time,
            "encode_share_spec": speculative.encode_time / spec_s,
            "steps_speedup": (plain.target_time - plain.encode_time)
            / (spec_s - speculative.encode_time)}


def split_text(split):
    if split["steps_speedup"] is None:
        return ""
    return (f"; encoding prompts and jumped windows {split['encode_share_plain']:.0%} of plain, "
            f"{split['encode_share_spec']:.0%} of speculative; the rest "
            f"{split['steps_speedup']:.2f}x")


GOAL_AT_16 = 1.5   # issue 12: batched speculative over batched plain decoding at batch 16


def ceiling(rows, goal):
    """What the checks timed in batch_curve's rows (one batch size) allow: a drafter that cost
    nothing and was always right gains (k+1) / verify(k); and the agreement alpha the rows'
    own drafter (its measured c) would need for `goal` at each k (nan: none suffices).
    -> {"free": {k: gain}, "alpha": {k: alpha}, "measured_alpha": {k: alpha}}."""
    free = {r["k"]: (r["k"] + 1) / r["verify_cost"] for r in rows}
    alpha = {r["k"]: common.alpha_for(goal, r["k"], r["c"], r["verify_cost"]) for r in rows}
    return {"free": free, "alpha": alpha, "measured_alpha": {r["k"]: r["alpha"] for r in rows}}


def ceiling_text(bound, goal):
    k = max(bound["free"], key=bound["free"].get)
    need = {k: a for k, a in bound["alpha"].items() if a == a}
    best = f"an alpha of {min(need.values()):.2f} (k = {min(need, key=need.get)})" if need else \
        "more than any alpha"
    return (f"the bound: a free, always-right drafter would gain at most "
            f"{bound['free'][k]:.2f}x (k = {k}); {goal}x needs {best} at this drafter's c, "
            f"and it agreed on {max(bound['measured_alpha'].values()):.2f}")


def best_by_size(rows):
    """For each batch size, the row of the k with the highest measured speed-up."""
    best = {}
    for r in rows:
        if r["batch"] not in best or r["speedup"] > best[r["batch"]]["speedup"]:
            best[r["batch"]] = r
    return best


@dataclass
class CurveArgs:
    new_tokens: int = 100         # characters written per row
    repeats: int = 3              # alternating plain/speculative pairs per figure (medians)
    sizes: str = "1,2,4,8,16,32,64"  # batch sizes of the curve (held-out prompts, 32 characters)
    ks: str = "1,2,3,4,6"         # draft lengths tried at each size
    drafts: str = "distilled,draft,ngram,ngram-big"  # drafters compared at batch 16 (registry.NAMES)
    backends: str = "numpy,torch"  # the big model's backends compared at batch 16
    curve_draft: str = "best"     # the drafter of the curve; best: the fastest at batch 16
    json: str = ""                # also write every figure here


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    cli.add_fields(parser, CurveArgs, title="batch curve")
    args = cli.take(CurveArgs, parser.parse_args(argv))
    sizes, ks = common.whole_numbers(args.sizes, "sizes"), common.whole_numbers(args.ks, "ks")
    backends = args.backends.split(",")
    for backend in backends:
        registry.check_backend(backend)
    big = presets.load_trained("big")
    target = registry.with_backend(big, "numpy")
    prompts = corpus.held_out_prompts(max(sizes + [16]), 32)
    results = {"machine": machine.describe(), "settings": args.__dict__, "rows_vs_batch": {}}
    with machine.Busy() as busy:
        for name, model in (("numpy", target), ("torch", big)):
            rows_s, batch_s, ratio, ratios = rows_vs_batch(model, prompts[:16], args.new_tokens,
                                                           args.repeats)
            results["rows_vs_batch"][name] = {"rows_s": rows_s, "batch_s": batch_s,
                                              "speedup": ratio, "spread": machine.spread(ratios)}
            n = 16 * args.new_tokens
            print(f"plain, 16 rows x {args.new_tokens}, {name}: one row at a time "
                  f"{n / rows_s:,.0f} tokens/s, batched {n / batch_s:,.0f} tokens/s: "
                  f"{ratio:.2f}x", flush=True)
    results["busy_plain"] = busy.note()
    targets = {"numpy": target, "torch": big}
    best = {}
    for backend in backends:
        for name in args.drafts.split(","):
            print(f"\nbatch 16, big model in {backend}, draft {name}:", flush=True)
            with machine.Busy() as busy:
                rows = batch_curve(targets[backend], by_name(name, backend=backend), prompts,
                                   (16,), ks, new_tokens=args.new_tokens, repeats=args.repeats)
            bound = ceiling(rows, GOAL_AT_16)
            results[f"batch16_{backend}_{name}"] = {"rows": rows, "busy": busy.note(),
                                                    "bound": bound}
            best[backend, name] = top = best_by_size(rows)[16]
            print(f"best: k {top['k']}, {top['speedup']:.2f}x{split_text(top)}. {busy.note()}",
                  flush=True)
            print(ceiling_text(bound, GOAL_AT_16), flush=True)
    backend, name = max(best, key=lambda d: best[d]["speedup"])
    if args.curve_draft != "best":
        name = args.curve_draft
    print(f"\nthe speed-up against batch size, big model in {backend}, draft {name}:",
          flush=True)
    with machine.Busy() as busy:
        rows = batch_curve(targets[backend], by_name(name, backend=backend), prompts, sizes, ks,
                           new_tokens=args.new_tokens, repeats=args.repeats)
    results["curve"] = {"backend": backend, "draft": name, "rows": rows, "busy": busy.note()}
    k4 = {r["batch"]: r for r in rows if r["k"] == 4}
    print("\n| batch | k = 4 | predicted | best k | speed-up | predicted | verify cost (best k) "
          "| c | tokens per row and round: run / from alpha | rounds: batch / row | encoding: "
          "plain / speculative | speed-up of the rest |\n" + "|---" * 12 + "|")
    for b, r in best_by_size(rows).items():
        four = f"{k4[b]['speedup']:.2f}x | {k4[b]['predicted']:.2f}x" if b in k4 else "- | -"
        print(f"| {b} | {four} | {r['k']} | {r['speedup']:.2f}x | {r['predicted']:.2f}x | "
              f"{r['verify_cost']:.2f} | {r['c']:.3f} | {r['tokens_per_row_round']:.2f} / "
              f"{r['expected_tokens_per_row_round']:.2f} | {r['rounds_over_row_mean']:.2f} | "
              + ("- | - |" if r["steps_speedup"] is None else
                 f"{r['encode_share_plain']:.0%} / {r['encode_share_spec']:.0%} | "
                 f"{r['steps_speedup']:.2f}x |"))
    print(busy.note() or "(the machine stayed quiet)")
    if args.json:
        results_file.write_results(args.json, results, busy=busy.note())
    return results


if __name__ == "__main__":
    cli.run(main)
