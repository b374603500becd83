"""
studies/drafters.py: every drafter against the same big model on the same held-out prompts,
to answer the question a user asks: what is the fastest way to generate this text exactly?

    python -m studies.drafters                  # every drafter, both backends: minutes
    python -m studies.drafters --quick          # tiny models: what the tests run

What it measures: docs/DESIGN.md, "studies/, study by study".
"""

import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

import gpt
import speculative as sd
from beyond import adaptive, heads, ngram, presets
from harness import common, registry, report
from harness.benchmark import calibrate
from beyond.early_exit import first_layers
from beyond.ngram import NGramDraft
from harness.registry import by_name, check_name
from lessonkit import cli, corpus, machine

ADAPTIVE = ("heuristic", "best", "confidence", "oracle")
BACKEND = {"numpy": "NumPy", "torch": "torch"}   # a target backend in words


@dataclass
class Args(common.ExerciseArgs):
    drafts: str = "ngram,ngram-big,distilled,draft,exit2,heads"  # drafters compared (registry.NAMES)
    backends: str = "numpy,torch"  # target backends to try (drafts in NumPy where they can)
    ks: str = "1,2,4,6,8"          # fixed draft lengths; every adaptive schedule runs as well
    prompts: int = 8               # held-out prompts (and as many others to calibrate on)
    new_tokens: int = 200          # characters written per prompt
    repeats: int = 3               # timings are medians over this many alternated pairs


def load_target(args, names, log):
    """The big model, once the presets among drafter `names` are trained, and the extra heads
    if named (trained here first when missing, once: beyond/heads.py)."""
    big = common.load_models(args, ["big"] + [n for n in names if n in presets.PRESETS],
                             log=log)["big"]
    if "heads" in names:
        heads.load(big, common.checkpoint_folder(args), log=log)
    return big


def drafters_and_backends(args):
    """--drafts and --backends as lists, every name checked: a one-line error before any work."""
    names, backends = ([x for x in text.split(",") if x] for text in (args.drafts, args.backends))
    for name in names:
        check_name(name)
    for backend in backends:
        registry.check_backend(backend)
    return names, backends


def checked_stats(runs, plain_out, what):
    """The Stats of runs [(output, Stats)] added up, once every output equals plain greedy
    decoding's (plain_out); one that differs is a bug, said in one line naming `what`."""
    if any(not torch.equal(out, want) for (out, _), want in zip(runs, plain_out)):
        raise SystemExit(f"{what} wrote something other than plain greedy decoding: a bug, "
                         f"please report it")
    stats = sd.Stats(k=max(s.k for _, s in runs))
    for _, s in runs:
        stats.add(s)
    return stats


def schedules(name, traces):
    """prompt index -> the k argument of that prompt's run. An adaptive schedule is one object
    for every prompt and run: what it learned carries over, as it would for a user."""
    if name == "oracle":
        return lambda i: adaptive.Oracle(traces[i])
    if name in ADAPTIVE:
        schedule = adaptive.by_name(name, 4)()
        return lambda i: schedule
    return lambda i: name


def compare(args, target, draft_names, folder, log):
    prompts = corpus.held_out_prompts(args.prompts, 32)
    calibration = corpus.held_out_prompts(2 * args.prompts, 32)[1::2]   # between the timed ones
    n, ks = args.new_tokens, common.whole_numbers(args.ks, "ks")
    n_new = n * len(prompts)
    rows, busy_notes, backends = [], [], {}
    for backend in args.backends.split(","):
        big = registry.with_backend(target, backend)

        def plain():
            return [sd.generate(big, p, n) for p in prompts]
        plain_out, step = plain(), machine.pass_time(big, 1)
        verify = {k: machine.pass_time(big, k + 1) / step for k in range(1, max(ks) + 2)}
        plain_s = machine.median_time(plain, args.repeats)
        backends[backend] = limits(step, verify, ks, n_new / plain_s)
        log(f"\ntarget in {backend}: {ceiling_text(backends[backend])}")
        for name in draft_names:
            draft = by_name(name, folder, "numpy")
            alpha, guess_s = calibrate(big, draft, calibration, n)
            c = guess_s / step
            traces = [sd.speculative_generate(big, draft, p, n, k=16)[1].trace for p in prompts]
            with machine.Busy() as busy:
                for k in ks + list(ADAPTIVE):
                    new_k = schedules(k, traces)
                    drafting = adaptive.drafting_for(k, draft)      # confidence: a ConfidentDraft
                    stats = checked_stats([sd.speculative_generate(big, drafting, p, n, k=new_k(i))
                                           for i, p in enumerate(prompts)], plain_out,
                                          f"{name} at k={k}")
                    outside = []   # per timed run: seconds outside both models (the loop)

                    def speculative():
                        started, inside = time.perf_counter(), 0.0
                        for i, p in enumerate(prompts):
                            s = sd.speculative_generate(big, drafting, p, n, k=new_k(i))[1]
                            inside += s.draft_time + s.target_time
                        outside.append(time.perf_counter() - started - inside)
                    _, spec_s, speedup, ratios = machine.paired_times(plain, speculative,
                                                                      args.repeats)
                    fixed = isinstance(k, int)
                    rows.append({
                        "backend": backend, "draft": name, "k": k, "alpha": alpha, "c": c,
                        "step_us": step * 1e6, "verify": verify[k] if fixed else None,
                        "tokens_per_pass": stats.tokens_per_pass,
                        "predicted_tokens_per_pass":
                            sd.expected_tokens_per_pass(alpha, k) if fixed else None,
                        "speedup": speedup,
                        "predicted_speedup":
                            sd.expected_speedup(alpha, k, c, verify[k]) if fixed else None,
                        "tokens_per_s": n_new / spec_s, "plain_tokens_per_s": n_new / plain_s,
                        # Where a round's time goes, per new character (microseconds).
                        "draft_us": stats.draft_time / stats.new_tokens * 1e6,
                        "check_us": stats.target_time / stats.new_tokens * 1e6,
                        "loop_us": statistics.median(outside) / n_new * 1e6,
                        "spread": machine.spread(ratios)})   # of the paired ratios
            note = busy.note([r["spread"] for r in best_fixed(rows, backend, name)[1].values()])
            if note:
                busy_notes.append(f"{backend}, {name}: {note}")
            log(describe(rows, backend, name))
    return rows, busy_notes, backends


def limits(step, verify, ks, plain_per_s):
    """What no drafter can beat: a drafter that costs nothing and is always right gains
    (k+1) / verify(k); each further token checked costs `per_token` of a step, so even an
    endless run of right guesses gains at most 1 / per_token."""
    per_token = (verify[max(ks)] - verify[1]) / (max(ks) - 1)
    return {"plain_tokens_per_s": plain_per_s, "step_us": step * 1e6,
            "verify": {k: verify[k] for k in ks},
            "ceiling": {k: (k + 1) / verify[k] for k in ks},
            "per_token": per_token, "limit": 1 / per_token if per_token > 0 else float("inf")}


def ceiling_text(b):
    k = max(b["ceiling"], key=b["ceiling"].get)
    return (f"plain decoding {b['plain_tokens_per_s']:,.0f} characters/s (one step "
            f"{b['step_us']:.0f} us). Checking k+1 tokens costs "
            + ", ".join(f"{v:.2f}" for v in b["verify"].values())
            + f" steps at k = {', '.join(map(str, b['verify']))}: a free drafter that is always "
            f"right would gain at most {b['ceiling'][k]:.2f}x (k = {k}), and with endless right "
            f"guesses at most {b['limit']:.2f}x, since every further token checked costs "
            f"{b['per_token']:.2f} of a step")


def best_fixed(rows, backend, name):
    """(the drafter's row at its fastest fixed k, {k or schedule: its row})."""
    mine = {r["k"]: r for r in rows if (r["backend"], r["draft"]) == (backend, name)}
    return max((r for k, r in mine.items() if isinstance(k, int)),
               key=lambda r: r["speedup"]), mine


def describe(rows, backend, name):
    best, mine = best_fixed(rows, backend, name)
    off = best["speedup"] / best["predicted_speedup"]
    why = "" if abs(off - 1) <= 0.10 else f" ({why_off(best)})"
    return (f"  {name:10} alpha {best['alpha']:.2f}, c {best['c']:.3f}: best fixed k {best['k']} "
            f"{best['speedup']:.2f}x ({best['tokens_per_s']:,.0f}/s), predicted "
            f"{best['predicted_speedup']:.2f}x, {best['tokens_per_pass']:.2f} per pass "
            f"(predicted {best['predicted_tokens_per_pass']:.2f}){why}; adaptive "
            + ", ".join(f"{a} {mine[a]['speedup']:.2f}x" for a in ADAPTIVE))


def why_off(row):
    """What makes measured and predicted differ, from what the run recorded."""
    passes = row["tokens_per_pass"] / row["predicted_tokens_per_pass"]
    if abs(passes - 1) > 0.10:
        return (f"{passes:.2f}x the characters per pass the formula gives: guesses are not "
                f"independent, hits and misses come in runs")
    per_pass = row["step_us"] / row["tokens_per_pass"]     # us per character, per step paid
    return (f"per character, checking took {row['check_us']:.0f} us (a pass over k+1 tokens "
            f"timed alone: {row['verify'] * per_pass:.0f}), guessing {row['draft_us']:.0f} us "
            f"({row['k'] * row['c'] * per_pass:.0f} from c), and the loop around both "
            f"{row['loop_us']:.0f} us, which the formula leaves out")


OWN_TEXT = "6-gram of the big model's text"   # the ladder's name for ngram-big's table


def ladder(target, folder, log, own_runs=ngram.OWN_RUNS):
    """alpha and c for n-gram tables of growing order and models of growing size (Leviathan et
    al., Table 3): the cheaper the draft, the less it agrees. Measured on held-out text, where
    the table of the big model's own text agrees less than it does while decoding (markdown)."""
    big = registry.with_backend(target, "numpy")
    step = machine.pass_time(big, 1)
    tokens = gpt.val_data[:64].tolist()
    candidates = [(f"{n}-gram", NGramDraft.from_data(gpt.train_data.numpy(),
                                                     target.c.vocab_size, n))
                  for n in (1, 2, 3, 4, 5)]
    candidates.append((OWN_TEXT, NGramDraft.of_target(target, folder, runs=own_runs, log=log)))
    candidates += [(f"GPT {name}", presets.load_trained(name, folder))
                   for name in ("draft", "distilled")
                   if presets.checkpoint_path(name, folder).exists()]
    candidates += [(f"big, first {n} layer(s)", first_layers(target, n))
                   for n in range(1, target.c.n_layer)] + [("big itself", target)]
    rows = []
    for name, draft in candidates:
        a = sd.measure_agreement(target, draft, gpt.val_data, windows=128)
        if hasattr(draft, "c"):
            cost = machine.pass_time(registry.with_backend(draft, "numpy"), 1) / step
            size = f"{draft.c.n_layer} x {draft.c.n_embd}"
        else:
            cost = machine.median_time(lambda: draft.propose(tokens, 1, sd.Sampling()), 300) / step
            size = "table"
        rows.append({"draft": name, "size": size, "alpha": a.alpha,
                     "greedy_agreement": a.greedy_agreement, "c": cost})
        log(f"  {name:31} alpha {a.alpha:.3f}, greedy agreement {a.greedy_agreement:.3f}, "
            f"c {cost:.3f}")
    return rows


def plot(args, rows, ladder_rows):
    plt = common.pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    alphas = np.linspace(0.01, 0.99, 200)
    for c, style in ((0.0, "-"), (0.1, "--"), (0.3, ":")):
        left.plot(alphas, [sd.expected_speedup(a, 4, c) for a in alphas], "k" + style,
                  lw=0.8, label=f"formula, k 4, c {c}, verify 1")
    for backend, marker in (("numpy", "o"), ("torch", "s")):
        for name in sorted({r["draft"] for r in rows if r["backend"] == backend}):
            best = best_fixed(rows, backend, name)[0]
            left.plot(best["alpha"], best["speedup"], marker, ms=8,
                      label=f"{name} ({backend} target, k {best['k']})")
    left.axhline(1, color="grey", lw=0.5)
    left.set(xlabel="alpha (guesses kept / checked)", ylabel="speed-up over plain decoding",
             title="Measured speed-up of each drafter at its best k")
    left.legend(fontsize=7, loc="upper left")
    for r in ladder_rows:
        right.plot(r["c"], r["greedy_agreement"], "o")
        right.annotate(r["draft"], (r["c"], r["greedy_agreement"]), fontsize=7,
                       xytext=(4, 2), textcoords="offset points")
    right.set(xlim=(-0.03, 1.1), xlabel="c: draft step / target step (NumPy)",
              ylabel="greedy agreement with the big model",
              title="The ladder: agreement against draft cost")
    fig.tight_layout()
    return common.figure(args, "drafters", fig)


def best_rows(rows):
    """{(backend, drafter): (its row at its fastest fixed k, {k or schedule: its row})}, fastest
    first within each backend."""
    best = {pair: best_fixed(rows, *pair) for pair in dict.fromkeys(
        (r["backend"], r["draft"]) for r in rows)}
    return dict(sorted(best.items(), key=lambda kv: (kv[0][0], -kv[1][0]["speedup"])))


def best_table(rows, why=True):
    """Each drafter at its best fixed k, measured (predicted), and each adaptive schedule's
    speed over it; if why, a last column saying why a measurement is off its prediction."""
    cells = []
    for (backend, name), (b, mine) in best_rows(rows).items():
        cells.append([BACKEND[backend], name, f"{b['alpha']:.2f}", f"{b['c']:.3f}", b["k"],
                      f"{b['verify']:.2f}",
                      f"{b['tokens_per_pass']:.2f} ({b['predicted_tokens_per_pass']:.2f})",
                      f"{b['speedup']:.2f}x ({b['predicted_speedup']:.2f}x)",
                      f"{b['tokens_per_s']:,.0f}",
                      " / ".join(f"{mine[a]['speedup'] / b['speedup']:.0%}" for a in ADAPTIVE)])
        if why:
            cells[-1].append(why_off(b) if abs(b["speedup"] / b["predicted_speedup"] - 1) > 0.1
                             else "")
    return common.markdown_table(
        ["big model in", "drafter", "alpha", "c", "best k", "verify", "per pass (predicted)",
         "speed-up (predicted)", "characters/s",
         "heuristic / best / confidence / oracle, of best k"]
        + (["why measured differs"] if why else []), cells)


def ladder_table(ladder_rows):
    return common.markdown_table(["drafter", "size", "alpha (T = 1)", "greedy agreement", "c"],
                                 [[r["draft"], r["size"], f"{r['alpha']:.3f}",
                                   f"{r['greedy_agreement']:.3f}", f"{r['c']:.3f}"]
                                  for r in ladder_rows])


def markdown(rows, ladder_rows, backends, notes):
    fastest = max((r for r in rows if r["k"] != "oracle"), key=lambda r: r["tokens_per_s"])
    plain = max(r["plain_tokens_per_s"] for r in rows)
    return "\n\n".join([
        f"Fastest exact setup: **{fastest['draft']}** drafting for the {fastest['backend']} "
        f"target at k = {fastest['k']}: {fastest['tokens_per_s']:,.0f} characters/s, "
        f"{fastest['tokens_per_s'] / plain:.2f}x the fastest plain decoding ({plain:,.0f}/s).",
        "\n".join(f"- Target in {name}: {ceiling_text(b)}." for name, b in backends.items()),
        best_table(rows), "![every drafter](drafters.png)",
        "The ladder (Leviathan et al., Table 3, on our models): agreement against draft cost.",
        ladder_table(ladder_rows), own_text_note(rows, ladder_rows), *notes])


def own_text_note(rows, ladder_rows):
    """Why the table of the big model's own text sits low on the ladder yet drafts well."""
    by_name = {r["draft"]: r for r in ladder_rows}
    own, four = by_name[OWN_TEXT], by_name["4-gram"]
    than = "less" if own["greedy_agreement"] < four["greedy_agreement"] else "more"
    text = (f"The ladder measures agreement on held-out text, where the table of the big "
            f"model's own text agrees {than} than the 4-gram table of the training text (greedy "
            f"agreement {own['greedy_agreement']:.3f} against {four['greedy_agreement']:.3f})")
    decoding = {r["draft"]: r["alpha"] for r in rows}   # measured while decoding, per drafter
    if {"ngram", "ngram-big"} <= set(decoding):
        than = "more" if decoding["ngram-big"] > decoding["ngram"] else "no more"
        text += (f"; while decoding it keeps {than} of its guesses ({decoding['ngram-big']:.2f} "
                 f"against {decoding['ngram']:.2f} for the training text's table)")
    return text + (". The contexts a drafter meets while decoding are the big model's own "
                   "text, not held-out text: that is where to measure a drafter.")


def run(args, log=print):
    common.shrink_if_quick(args, new_tokens=20, repeats=1, prompts=2)
    if args.quick:
        args.ks, args.drafts = "1,2", "ngram,draft"
    draft_names, _ = drafters_and_backends(args)
    common.whole_numbers(args.ks, "ks")
    common.at_least_one(args, "prompts", "new_tokens", "repeats")
    folder = common.checkpoint_folder(args)
    target = load_target(args, draft_names, log)
    rows, notes, backends = compare(args, target, draft_names, folder, log)
    log("\nthe ladder: alpha against draft cost")
    ladder_rows = ladder(target, folder, log, own_runs=32 if args.quick else ngram.OWN_RUNS)
    plot(args, rows, ladder_rows)
    numbers = {"runs": rows, "ladder": ladder_rows, "backends": backends, "notes": notes}
    common.save_json(args, "drafters.json", numbers)
    return {"numbers": numbers, "markdown": markdown(rows, ladder_rows, backends, notes)}


def main(argv=None):
    args = common.parse_args(__doc__, Args, argv)
    report.record(args, "drafters", run(args))


if __name__ == "__main__":
    cli.run(main)
