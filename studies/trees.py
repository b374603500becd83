"""
studies/trees.py: token trees against chains of the same drafter, at the same number of
checked tokens: characters per pass of the big model and wall-clock speed, on both backends,
next to the formula's prediction (beyond/tree_grow.py).

    python -m studies.trees                 # the lesson's models: many minutes
    python -m studies.trees --quick         # tiny models: what the tests run

What it measures: docs/DESIGN.md, "studies/, study by study".
"""

import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

import speculative as sd
from beyond import presets
from harness import common, registry, report
from beyond import tree as tr
from beyond.heads import HeadsDraft, final_states
from beyond.tree_grow import (
    as_brancher,
    drafter_calls,
    fastest_shape,
    tree_speedup,
    tree_tokens_per_pass,
)
from lessonkit import cli, corpus, machine
from studies.drafters import checked_stats, drafters_and_backends, load_target


@dataclass
class Args(common.ExerciseArgs):
    drafts: str = "draft,distilled,ngram,heads"  # drafters compared (GPT presets, ngram, heads)
    backends: str = "torch,numpy"          # big model's backends (drafts in NumPy where they can)
    budgets: str = "4,8,16,32"             # guesses checked per round (chain k = tree nodes)
    prompts: int = 6                       # held-out prompts (and as many to calibrate on)
    new_tokens: int = 200                  # characters written per prompt
    repeats: int = 3                       # timings are medians over this many alternated pairs
    width: int = 4                         # guesses per position measured (accept's length)


def rank_acceptance(big, brancher, prompts, n, width):
    """(accept, seconds per drafter call): accept[r] is the fraction of positions of the big
    model's greedy text after `prompts` where its token is the drafter's r-th guess."""
    hits, positions, seconds = [0] * width, 0, 0.0
    for prompt in prompts:
        text = sd.generate(big, prompt, n)[0].tolist()
        for t in range(prompt.shape[1], len(text)):
            started = time.perf_counter()
            guesses, _ = brancher.branch(text[:t], 1, width, sd.Sampling())
            seconds += time.perf_counter() - started
            positions += 1
            if text[t] in guesses:
                hits[guesses.index(text[t])] += 1
    return [h / positions for h in hits], seconds / positions


def heads_acceptance(big, draft, prompts, n, width):
    """rank_acceptance for the extra heads, one list per depth: accept[d - 1][r] is the fraction
    of states of the big model's greedy text (its last window after each prompt) where head d's
    r-th guess is the token d after the next one; and the seconds of one head's guesses."""
    hits, positions = np.zeros((draft.n_heads, width)), 0
    for prompt in prompts:
        text = sd.generate(big, prompt, n)[0, -big.c.block_size:]                  # (T,)
        with torch.no_grad():
            states = final_states(big, text[None])[1][0].numpy()                  # (T, C)
        for t in range(len(text) - 1 - draft.n_heads):
            ranked = np.argsort(-draft.logits(states[t], draft.n_heads), -1)[:, :width]
            hits += ranked == text[t + 2:t + 2 + draft.n_heads, None].numpy()    # (h, width)
            positions += 1
    seconds = machine.median_time(lambda: draft.logits(states[0], 1), 200)
    return (hits / positions).tolist(), seconds


def one_round(big, draft, prompt, shape):
    """The first greedy round after `prompt` with a tree of `shape` (a chain is one too): its
    nodes, its mask and what the big model kept, as text (what the mask looks like)."""
    seq = prompt[0].tolist()
    brancher = as_brancher(draft)
    scorer = tr.tree_scorer(big, brancher, len(shape))
    tree = tr.grow(brancher, seq, shape, scorer.room(seq), sd.Sampling())
    path, token = tr.greedy_walk(tree, scorer.score_tree(seq, tree).argmax(-1).tolist())
    label = [repr(corpus.decode([t]))[1:-1] or " " for t in tree.tokens]
    visible = tr.tree_mask(tree.parents, 0, 0)                            # (N+1, N+1)
    lines = [f"one round after {corpus.decode(seq)[-20:]!r}: node (parent, depth) token; the "
             "mask over the round's slots (x: may attend; every node also sees the cached "
             "context)"]
    for i, row in enumerate(visible):
        lines.append(f"  {i:2d} ({tree.parents[i]:2d}, {tree.depths[i]}) {label[i]:>3}  "
                     + " ".join("x" if v else "." for v in row))
    kept = corpus.decode([tree.tokens[i] for i in path])
    lines.append(f"the big model keeps {len(path)} of {len(tree.tokens) - 1} guesses (nodes "
                 f"{', '.join(map(str, path)) or 'none'}: {kept!r}) and adds "
                 f"{corpus.decode([token])!r}: {len(path) + 1} characters for one pass")
    return "\n".join(lines)


def compare(args, big_model, drafts, log):
    prompts = corpus.held_out_prompts(args.prompts, 32)
    calibration = corpus.held_out_prompts(2 * args.prompts, 32)[1::2]   # between the timed ones
    budgets, n = common.whole_numbers(args.budgets, "budgets"), args.new_tokens
    rows, duels, notes = [], [], []
    for backend in args.backends.split(","):
        big = registry.with_backend(big_model, backend)
        plain_out = [sd.generate(big, p, n) for p in prompts]
        step = machine.pass_time(big, 1)
        verify = {b: machine.pass_time(big, b + 1) / step for b in budgets}
        log(f"\nbig model in {backend}: one step {step * 1e6:.0f} us; a pass over N+1 tokens "
            f"costs " + ", ".join(f"{verify[b]:.2f}" for b in budgets) + f" steps at N = "
            f"{', '.join(map(str, budgets))}")
        for name, draft in drafts.items():
            if isinstance(draft, HeadsDraft):           # one accept per depth (head)
                accept, call_s = heads_acceptance(big_model, draft, calibration, n, args.width)
            else:
                accept, call_s = rank_acceptance(big, as_brancher(draft), calibration, n,
                                                 args.width)
            c = call_s / step
            log(f"  {name}: accept by rank {np.round(accept, 3).tolist()}; c {c:.3f}")
            spreads = []
            with machine.Busy() as busy:
                for budget in budgets:
                    for kind, shape in shapes(accept, budget, c, verify[budget]):
                        row = measure(big, draft, prompts, n, kind, shape, plain_out,
                                      args.repeats)
                        predicted = tree_tokens_per_pass(shape, accept)
                        row.update(backend=backend, draft=name, budget=budget, c=c,
                                   accept=accept, verify=verify[budget],
                                   depth=max(map(len, shape)), calls=drafter_calls(shape),
                                   predicted_tokens_per_pass=predicted,
                                   predicted_speedup=tree_speedup(shape, accept, c,
                                                                  verify[budget]))
                        spreads.append(machine.spread(row.pop("ratios")))
                        rows.append(row)
                        log(f"    N {budget:2d} {kind:9} (depth {row['depth']:2d}, "
                            f"{row['calls']:2d} calls): "
                            f"{row['tokens_per_pass']:.2f} per pass (predicted "
                            f"{predicted:.2f}), {row['speedup']:.2f}x plain (predicted "
                            f"{row['predicted_speedup']:.2f}x)")
                duel = head_to_head(big, draft, prompts, n, rows, backend, name, args.repeats)
                spreads.append(machine.spread(duel.pop("ratios")))
                duels.append(duel)
                log(f"  head to head: the {duel['tree']} is {duel['tree_over_chain']:.2f}x as "
                    f"fast as the lesson's chain at {duel['chain']}")
            note = busy.note(spreads)
            if note:
                notes.append(f"{backend}, {name}: {note}")
                log(f"  {note}")
    return rows, duels, notes


def shapes(accept, budget, c, verify_cost):
    """The shapes compared at one budget: the chain, the tree with the most characters per
    pass, and the tree the formula expects to be fastest, where it differs."""
    out = {"chain": tr.chain_shape(budget), "tree": tr.best_shape(accept, budget)}
    fast = fastest_shape(accept, budget, c, verify_cost)
    if fast not in out.values():
        out["fast tree"] = fast
    return out.items()


def runner(big, draft, prompts, n, kind, shape):
    """The runs of one setup, all through tree_generate (the same drafter, the same code: only
    the shape differs), or "lesson chain": speculative_generate, the lesson's loop."""
    if kind == "lesson chain":
        return lambda: [sd.speculative_generate(big, draft, p, n, k=len(shape)) for p in prompts]
    return lambda: [tr.tree_generate(big, draft, p, n, shape=shape) for p in prompts]


def measure(big, draft, prompts, n, kind, shape, plain_out, repeats):
    """One setup: its runs checked against plain decoding's (plain_out: its outputs, the same
    prompts), then timed against it, alternately."""
    run = runner(big, draft, prompts, n, kind, shape)
    stats = checked_stats(run(), plain_out, f"a {kind} of {len(shape)}")
    _, spec_s, speedup, ratios = machine.paired_times(
        lambda: [sd.generate(big, p, n) for p in prompts], run, repeats)
    return {"kind": kind, "shape": shape, "tokens_per_pass": stats.tokens_per_pass,
            "speedup": speedup, "ratios": ratios,
            "tokens_per_s": len(prompts) * n / spec_s}


def head_to_head(big, draft, prompts, n, rows, backend, name, repeats):
    """The fastest tree of the sweep against the chain at the fastest chain's k, run by the
    lesson's loop (speculative_generate), timed alternately with twice the repeats: on a busy
    machine a ratio of two ratios to plain decoding is noisy."""
    tree, chain = fastest(rows, backend, name, True), fastest(rows, backend, name, False)
    _, _, ratio, ratios = machine.paired_times(
        runner(big, draft, prompts, n, "lesson chain", chain["shape"]),
        runner(big, draft, prompts, n, tree["kind"], tree["shape"]), 2 * repeats)
    return {"backend": backend, "draft": name, "tree": f"{tree['kind']} N {tree['budget']}",
            "chain": f"k {chain['budget']}", "tree_over_chain": ratio, "ratios": ratios}


def fastest(rows, backend, name, trees):
    """The fastest row of a drafter on a backend: among its trees, or among its chains."""
    return max((r for r in rows if (r["backend"], r["draft"]) == (backend, name)
                and (r["kind"] != "chain") == trees), key=lambda r: r["speedup"])


def verdicts(rows, duels):
    """Per backend and drafter: the tree against the chain at each budget, characters per pass;
    the fastest of each against plain decoding, and against each other, head to head."""
    lines = []
    for duel in duels:
        backend, name = duel["backend"], duel["draft"]
        mine = {(r["budget"], r["kind"]): r for r in rows
                if (r["backend"], r["draft"]) == (backend, name)}
        chains = [r for (_, kind), r in mine.items() if kind == "chain"]
        top = max(chains, key=lambda r: r["tokens_per_pass"])
        tree, chain = fastest(rows, backend, name, True), fastest(rows, backend, name, False)
        lines.append(
            f"{backend}, {name}: tree / chain, characters per pass at the same N: "
            + ", ".join(f"N {r['budget']}: {gain:.2f}" for r, gain in (
                (r, mine[r["budget"], "tree"]["tokens_per_pass"] / r["tokens_per_pass"])
                for r in chains))
            + f" (the best chain writes {top['tokens_per_pass']:.2f} per pass, at N "
            f"{top['budget']}); fastest tree ({tree['kind']}, N {tree['budget']}) "
            f"{tree['speedup']:.2f}x plain, fastest chain (k {chain['budget']}) "
            f"{chain['speedup']:.2f}x; head to head the tree is {duel['tree_over_chain']:.2f}x "
            f"as fast as the lesson's chain at k {chain['budget']}")
    return lines


def plot(args, rows):
    """Characters per pass (measured, and the formula faint) and speed-ups against N: one
    colour per drafter, dashed chains, solid trees, dotted the formula's fastest trees."""
    plt = common.pyplot()
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    fig, axes = plt.subplots(1, 1 + len(backends), figsize=(5 * (1 + len(backends)), 4.2))
    styles = {"chain": "--", "tree": "-", "fast tree": ":"}
    for i, name in enumerate(dict.fromkeys(r["draft"] for r in rows)):
        for kind, style in styles.items():
            for ax, backend in zip(axes, [backends[0]] + backends):
                rs = [r for r in rows if (r["draft"], r["kind"], r["backend"]) ==
                      (name, kind, backend)]
                x, y = [r["budget"] for r in rs], [r["speedup"] for r in rs]
                if ax is axes[0]:
                    y = [r["tokens_per_pass"] for r in rs]
                    ax.plot(x, [r["predicted_tokens_per_pass"] for r in rs], style,
                            color=f"C{i}", alpha=0.3, lw=3)
                ax.plot(x, y, style + "o", color=f"C{i}", label=f"{name} {kind}" if rs else None)
    axes[0].set(title="characters per pass (faint: the formula)", ylabel="per pass")
    for ax, backend in zip(axes[1:], backends):
        ax.axhline(1, color="grey", lw=0.5)
        ax.set(title=f"speed-up over plain decoding, {backend} big model", ylabel="speed-up")
    budgets = sorted({r["budget"] for r in rows})
    for ax in axes:
        ax.set(xscale="log", xlabel="guesses checked per round (N)")
        ax.minorticks_off()
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.legend(fontsize=7)
    fig.tight_layout()
    return common.figure(args, "trees.png", fig)


def markdown(args, rows, duels, notes, mask_text):
    return "\n\n".join([
        f"`python -m studies.trees{' --quick' if args.quick else ''}`, "
        f"{args.prompts} held-out prompts x {args.new_tokens} characters, greedy, every output "
        "equal to plain decoding; speed-ups are medians of alternated pairs.",
        common.markdown_table(
            ["big model", "drafter", "N", "shape", "depth / drafter calls", "per pass (formula)",
             "speed-up (formula)", "characters/s"],
            [[r["backend"], r["draft"], r["budget"], r["kind"], f"{r['depth']} / {r['calls']}",
              f"{r['tokens_per_pass']:.2f} ({r['predicted_tokens_per_pass']:.2f})",
              f"{r['speedup']:.2f}x ({r['predicted_speedup']:.2f}x)",
              f"{r['tokens_per_s']:,.0f}"] for r in rows]),
        "\n".join(f"- {line}" for line in verdicts(rows, duels) + notes),
        f"```\n{mask_text}\n```"])


def run(args, log=print):
    common.at_least_one(args, "prompts", "new_tokens", "repeats", "width")
    common.whole_numbers(args.budgets, "budgets")    # bad flags fail even when --quick shrinks
    common.shrink_if_quick(args, prompts=2, new_tokens=40, repeats=1)
    if args.quick:              # tiny models: two drafters that branch, two budgets
        args.drafts = "draft,ngram" if args.drafts == Args.drafts else args.drafts
        args.budgets = "2,8" if args.budgets == Args.budgets else args.budgets
    names, _ = drafters_and_backends(args)
    # a pass over N guesses and the root, timed after cached text, fits the big model's window
    block = presets.preset("big", "quick" if args.quick else "lesson").config.block_size
    too_big = [b for b in common.whole_numbers(args.budgets, "budgets") if b + 2 > block]
    if too_big:
        raise ValueError(f"--budgets {too_big[0]}: timing a pass over {too_big[0]} guesses, the "
                         f"root and a cached token needs {too_big[0] + 2} of the big model's "
                         f"{block} positions; keep budgets below {block - 1}")
    big = load_target(args, names, log)
    drafts = {name: registry.by_name(name, common.checkpoint_folder(args), "numpy")
              for name in names}
    for draft in drafts.values():
        as_brancher(draft)                                  # a one-line error before any work
    started = time.time()
    mask_text = one_round(big, next(iter(drafts.values())), corpus.held_out_prompts(1, 32)[0],
                          tr.best_shape([0.6, 0.15, 0.08], 8))
    log(mask_text)
    rows, duels, notes = compare(args, big, drafts, log)
    log("")
    for line in verdicts(rows, duels):
        log(line)
    plot(args, rows)
    numbers = {"rows": rows, "head_to_head": duels, "notes": notes, "machine": machine.describe(),
               "seconds": time.time() - started, "median_speedup": statistics.median(
                   r["speedup"] for r in rows)}
    common.save_json(args, "trees.json", numbers)
    text = markdown(args, rows, duels, notes, mask_text)
    (common.results_dir(args) / "trees.md").write_text(text + "\n")
    return {"numbers": numbers, "markdown": text}


def main(argv=None):
    args = common.parse_args(__doc__, Args, argv)
    report.record(args, "trees", run(args))


if __name__ == "__main__":
    cli.run(main)
