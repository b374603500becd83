"""
Exercise 2, derive: how many tokens does one pass of the big model give, on average?

    python -m exercises.ex2_derive
    python -m exercises.ex2_derive --alpha 0.6 --k 3

The model of the lesson: each of the k draft tokens is accepted with probability alpha,
independently, and a round stops at the first rejection. The round always writes one token of
the target's own (the correction, or the bonus when all k pass), plus one for every accepted
draft token. Draft token i (1-based) is kept only if tokens 1..i all are: probability alpha^i.
So, counting the target's token as alpha^0,

    E[tokens per pass] = 1 + alpha + alpha^2 + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)

(the second form is the geometric series). For alpha = 0.8, k = 4: 1 + 0.8 + 0.64 + 0.512 +
0.4096 = 3.3616. What to look at: the exact sum, the closed form and a simulation of the
accept/reject process agree; longer drafts help less and less (alpha^i shrinks), and no k
gets past 1 / (1 - alpha) tokens per pass.

Writes results/ex2_derive.png and results/ex2_derive.json.
"""

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

import speculative as sd
from harness import common, report


@dataclass
class Args(common.ExerciseArgs):
    alpha: float = 0.8      # probability that a draft token is accepted, in [0, 1)
    k: int = 4              # draft tokens per round
    rounds: int = 200_000   # simulated rounds


def by_sum(alpha, k):
    return sum(alpha ** i for i in range(k + 1))


def simulate(alpha, k, rounds, rng):
    """Simulate `rounds` rounds of the accept/reject process: each of k draft tokens is accepted
    with probability alpha (draw uniforms with rng.random), a round stops at the first
    rejection and always adds the target's own token. Returns the tokens per pass as
    (mean, standard error of the mean), two floats. rounds may be 1 (the checks look at single
    rounds too): its standard error is then nan."""
    # BEGIN SOLUTION
    accepted = rng.random((rounds, k)) < alpha                    # (rounds, k)
    kept = np.cumprod(accepted, axis=1).sum(axis=1)               # leading accepts per round
    tokens = kept + 1                                             # plus the target's own token
    return float(tokens.mean()), float(tokens.std(ddof=1) / np.sqrt(rounds))
    # END SOLUTION


def models(args):
    """The trained presets this exercise uses: none, it works from the formulas."""
    return []


def run(args, log=print):
    common.shrink_if_quick(args, rounds=20_000)
    if not 0 <= args.alpha < 1:
        raise ValueError(f"--alpha must be in [0, 1), not {args.alpha}")
    if args.k < 1:
        raise ValueError(f"--k must be at least 1, not {args.k}")
    rng = np.random.default_rng(args.seed)
    exact = Fraction(args.alpha).limit_denominator(10**6)
    exact_sum = sum(exact ** i for i in range(args.k + 1))       # rational arithmetic: exact
    closed = sd.expected_tokens_per_pass(args.alpha, args.k)
    mc, se = simulate(args.alpha, args.k, args.rounds, rng)
    log(f"alpha = {args.alpha}, k = {args.k}:")
    log(f"  {f'1 + alpha + ... + alpha^{args.k}':<32} = {float(exact_sum):.4f} (exactly {exact_sum})")
    log(f"  {f'(1 - alpha^{args.k + 1}) / (1 - alpha)':<32} = {closed:.4f}")
    log(f"  {f'simulated, {args.rounds:,} rounds':<32} = {mc:.4f} +- {se:.4f}")
    assert abs(by_sum(args.alpha, args.k) - closed) < 1e-12
    assert abs(mc - closed) < 5 * se, "the simulation disagrees with the formula"

    alphas, ks = [0.2, 0.4, 0.6, 0.8, 0.9], [1, 2, 3, 4, 6, 8]
    table = [[a] + [round(sd.expected_tokens_per_pass(a, k), 3) for k in ks] for a in alphas]
    log("\nexpected tokens per pass (rows alpha, columns k):")
    log("  alpha " + "".join(f"{'k=' + str(k):>8}" for k in ks))
    for row in table:
        log(f"  {row[0]:5} " + "".join(f"{v:8.3f}" for v in row[1:]))

    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    grid = np.linspace(0, 0.99, 100)
    for k in ks:
        ax.plot(grid, [sd.expected_tokens_per_pass(a, k) for a in grid], label=f"k = {k}")
        points = [simulate(a, k, 20_000, rng)[0] for a in alphas]
        ax.scatter(alphas, points, s=12, color=ax.lines[-1].get_color())
    ax.plot(grid, 1 / (1 - grid), "k:", label="1 / (1 - alpha), k = infinity")
    ax.scatter([args.alpha], [closed], marker="*", s=150, color="black", zorder=3,
               label=f"alpha {args.alpha}, k {args.k}: {closed:.4f}")
    ax.set(xlabel="alpha (probability a draft token is accepted)", ylabel="tokens per target pass",
           ylim=(0.9, 9.5), title="Expected tokens per pass (lines: formula, dots: simulation)")
    ax.legend(fontsize=8)
    common.figure(args, "ex2_derive.png", fig)
    numbers = {"alpha": args.alpha, "k": args.k, "by_sum": float(exact_sum), "exact": str(exact_sum),
               "closed_form": closed, "simulated": mc, "simulated_se": se,
               "table": {"alphas": alphas, "ks": ks, "rows": table}}
    common.save_json(args, "ex2_derive.json", numbers)
    markdown = (f"For alpha = {args.alpha}, k = {args.k}: the sum 1 + alpha + ... + alpha^{args.k} "
                f"= **{float(exact_sum):.4f}**, the closed form (1 - alpha^{args.k + 1}) / (1 - alpha) "
                f"= {closed:.4f}, and {args.rounds:,} simulated rounds give {mc:.4f} +- {se:.4f} "
                f"(lesson: 3.36).\n\n"
                + common.markdown_table(["alpha"] + [f"k={k}" for k in ks], table)
                + "\n\n![](ex2_derive.png)")
    return {"numbers": numbers, "markdown": markdown}


def main(argv=None):
    args = common.parse_args(__doc__, Args, argv)
    report.record(args, 2, run(args))


if __name__ == "__main__":
    from exercises import stubs
    stubs.run(2, main)   # a part not written yet: one line, exit 0
