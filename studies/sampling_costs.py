"""
studies/sampling_costs.py: sampling's price list: alpha and speed-up against temperature, the
lenience relaxation, and the arithmetic that speculation wastes.

    python -m studies.sampling_costs           # cached models: a few minutes
    python -m studies.sampling_costs --quick   # tiny models: what the tests run

What it measures: docs/DESIGN.md, "studies/, study by study".
"""

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import gpt
import speculative as sd
from beyond import heads
from harness import common, report
from harness.registry import by_name, check_name
from lessonkit import cli, corpus, machine
from studies.cost_arithmetic import run_costs
from studies.drafters import load_target
from studies.lenience import lenience_small, lenient_step, total_variation

# Leviathan, Kalman, Matias (2023), Table 2: T5-XXL with T5-small drafting, English to German.
LEVIATHAN_TABLE_2 = {"argmax": {"alpha": 0.75, "k": 7, "speedup": 3.4},
                     "temperature 1": {"alpha": 0.62, "k": 7, "speedup": 2.6}}
DRAFTS = ("draft", "distilled", "names", "heads")   # drafters this comparison can measure


@dataclass
class Args(common.ExerciseArgs):
    drafts: str = "draft,distilled,heads"  # drafters (draft, distilled, names, heads); big in torch
    temperatures: str = "0,0.25,0.5,0.75,1,1.5"  # temperatures swept (0: greedy), >= 0
    top_k: int = 10          # each temperature above 0 also runs with this top-k (0: not)
    top_p: float = 0.9       # ... and with this top-p, in (0, 1] (1 keeps everything: not run)
    k: int = 4               # draft tokens per round in the sweeps
    ks: str = "1,2,3,4,5,6,8,10,12"  # draft lengths for the best k (greedy, best model drafter)
    leniences: str = "1,0.8,0.6,0.4,0.2"  # leniences, each in (0, 1] (1: the exact rule)
    lenience_draft: str = "draft"  # drafter for the lenience sweep (temperature 1)
    samples: int = 2000      # sampled outputs per lenience on the 4-token pair
    prompts: int = 4         # held-out prompts per measurement
    new_tokens: int = 96     # characters written per prompt (32 + 96 fit the 128 window)
    repeats: int = 3         # timings: median of this many alternated plain/speculative pairs
    k_repeats: int = 5       # ... for the best k, whose speed-ups differ by little
    windows: int = 64        # held-out windows alpha is measured on


def numbers_of(args, name, ok, error):
    """Flag `name`: comma-separated numbers, each ok(); else a one-line error (`error`)."""
    text = getattr(args, name)
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name} takes numbers, comma-separated, not {text!r}") from None
    if not values or not all(map(ok, values)):
        raise ValueError(error)
    return values


def check(args):
    """One-line errors for flags out of range; returns (temperatures, leniences, ks, drafts)."""
    temperatures = numbers_of(args, "temperatures", lambda t: 0 <= t < math.inf,
                              f"--temperatures must be numbers >= 0 (0 is greedy), not "
                              f"{args.temperatures!r}")
    leniences = numbers_of(args, "leniences", lambda x: 0 < x <= 1,
                           f"--leniences must each be in (0, 1] (1 is the exact rule), not "
                           f"{args.leniences!r}")
    ks = numbers_of(args, "ks", lambda k: k == int(k) and k >= 1 and args.k >= 1,
                    f"--k and --ks take whole numbers >= 1, not {args.k!r} / {args.ks!r}")
    if not (0 < args.top_p <= 1):
        raise ValueError(f"--top_p must be in (0, 1] (1 keeps every token), not {args.top_p}")
    if args.top_k < 0:
        raise ValueError(f"--top_k must be a whole number >= 1 (0: no top-k runs), not "
                         f"{args.top_k}")
    common.at_least_one(args, "samples", "prompts", "new_tokens", "repeats", "k_repeats",
                        "windows")
    drafts = [d for d in args.drafts.split(",") if d]
    for name in drafts + [args.lenience_draft]:
        check_name(name)
        if name not in DRAFTS:
            raise ValueError(f"this comparison measures {', '.join(DRAFTS)}, not {name!r}")
    if args.lenience_draft == "heads":
        raise ValueError("--lenience_draft must be a model (draft, distilled, names)")
    return temperatures, leniences, [int(k) for k in ks], drafts


def warps(temperature, args):
    """The warps a temperature runs with: plain, top-k, top-p (greedy: plain only)."""
    out = [("none", {})]
    if temperature > 0 and args.top_k:
        out.append((f"top-k {args.top_k}", {"top_k": args.top_k}))
    if temperature > 0 and args.top_p < 1:
        out.append((f"top-p {args.top_p:g}", {"top_p": args.top_p}))
    return out


# ----------------------------------------------------------------------------------------------
# Alpha on held-out text and on the target's own sampled text, and the timed runs


class Scored:
    """Both models' logits (float32 arrays) on some token windows (B, T), to measure alpha at
    any warp. first: the first token that counts (those generated, or all of held-out text).
    Row t of the target's logits predicts token t + 1, and so does a draft model's; head i
    (1..h) of the heads reads the state at t and guesses token t + 1 + i, which the target
    predicts at row t + i: one alpha per head."""

    def __init__(self, big, draft, x, first=0):
        self.first = first
        self.shift = 0           # guess j (0-based) from row t: the target's row t + j + shift
        with torch.no_grad():
            if hasattr(draft, "fc_w"):                                   # the extra heads
                self.shift = 1
                logits, states = (a.float().numpy() for a in heads.final_states(big, x))
                self.guesses = [(states + heads.silu(states @ draft.fc_w[i] + draft.fc_b[i]))
                                @ draft.head_w[i] for i in range(draft.n_heads)]
            else:
                logits = big(x)[0].float().numpy()
                self.guesses = [draft(x)[0].float().numpy()]
        self.target = logits

    def agreement(self, k, temperature, top_k=None, top_p=None):
        """([alpha of guess 1..k], [greedy agreement of guess 1..k]): one entry per guess (the
        heads), or one for every guess (a model drafts each guess alike)."""
        alphas, agree = [], []
        T = self.target.shape[1]
        for i, guess in enumerate(self.guesses[:k]):
            ahead = i + self.shift
            rows = slice(max(0, self.first - 1 - ahead), T - 1 - ahead)  # guesses from row t
            want = slice(rows.start + ahead, T - 1)       # the target's for the same tokens
            a, g = sd.agreement_of(self.target[:, want], guess[:, rows],
                                   temperature=temperature, top_k=top_k, top_p=top_p)
            alphas.append(a)
            agree.append(g)
        if len(self.guesses) == 1:
            alphas, agree = alphas * k, agree * k
        return alphas, agree


def held_out(args, big, draft):
    """Scored on args.windows windows of held-out text, spread through it, as long as both
    models see."""
    window, data = min(big.c.block_size, getattr(draft, "c", big.c).block_size), gpt.val_data
    starts = torch.linspace(0, len(data) - window - 1, args.windows).long()
    return Scored(big, draft, torch.stack([data[s:s + window] for s in starts]))


def chain_tokens_per_pass(alphas, is_model):
    """Predicted tokens per pass: expected_tokens_per_pass(alpha, k) for a model (one alpha);
    1 + a1 + a1 a2 + ... for the heads (head i kept with probability a_i)."""
    if is_model:
        return sd.expected_tokens_per_pass(alphas[0], len(alphas))
    return 1 + sum(math.prod(alphas[:i + 1]) for i in range(len(alphas)))


def timed(args, big, draft, prompts, step, repeats, k, **decoding):
    """Plain and speculative decoding of the same prompts at one setting, timed alternately:
    seconds, speed-up, the Stats of every speculative run and their c (seconds per guess / one
    target step), and the last pair's runs."""
    generator, n, last, every = torch.Generator().manual_seed(args.seed), args.new_tokens, {}, []
    plain_decoding = {a: b for a, b in decoding.items() if a != "lenience"}

    def plain():
        last["plain"] = [sd.generate(big, p, n, generator=generator, **plain_decoding)
                         for p in prompts]

    def speculative():
        last["runs"] = [(p.shape[1], sd.speculative_generate(big, draft, p, n, k=k,
                                                             generator=generator, **decoding)[1])
                        for p in prompts]
        every.extend(s for _, s in last["runs"])
    plain_s, spec_s, speedup, ratios = machine.paired_times(plain, speculative, repeats)
    stats = sd.Stats(k=k)
    for s in every:
        stats.add(s)
    return {"plain_s": plain_s, "spec_s": spec_s, "speedup": speedup, "stats": stats,
            "c": stats.draft_time / max(1, stats.proposed) / step,
            "spread": machine.spread(ratios), "runs": last["runs"],
            "plain_out": [o[0].tolist() for o in last["plain"]]}


# ----------------------------------------------------------------------------------------------
# 1. The temperature sweep


def sweep(args, big, draft, name, temperatures, step, verify, log):
    scored, prompts = held_out(args, big, draft), corpus.held_out_prompts(args.prompts, 32)
    window, P, k, rows = scored.target.shape[1], prompts[0].shape[1], args.k, []
    is_model = not hasattr(draft, "fc_w")
    for temperature in temperatures:
        for warp_name, warp in warps(temperature, args):
            alphas, agree = scored.agreement(k, temperature, **warp)
            m = timed(args, big, draft, prompts, step, args.repeats, k, temperature=temperature,
                      **warp)
            stats, c = m["stats"], m["c"]
            own = Scored(big, draft, torch.tensor(m["plain_out"])[:, -window:],
                         first=P - max(0, P + args.new_tokens - window))
            own_alphas, _ = own.agreement(k, temperature, **warp)
            in_run = stats.kept_of_checked
            predicted = chain_tokens_per_pass(alphas, is_model)
            row = {"draft": name, "temperature": temperature, "warp": warp_name, "k": k,
                   "alpha": alphas[0], "alphas": alphas, "greedy_agreement": agree[0],
                   "alpha_own_text": own_alphas[0], "alpha_in_run": in_run,
                   "c": c, "verify": verify[k],
                   "tokens_per_pass": stats.tokens_per_pass,
                   "predicted_tokens_per_pass": predicted,
                   "own_text_tokens_per_pass": chain_tokens_per_pass(own_alphas, is_model),
                   "in_run_tokens_per_pass": sd.expected_tokens_per_pass(in_run, k),
                   "speedup": m["speedup"],
                   "predicted_speedup": predicted / (k * c + verify[k]),
                   "plain_us_per_token": m["plain_s"] / (len(prompts) * args.new_tokens) * 1e6,
                   "spread": m["spread"],
                   "costs": run_costs(big.c, draft, m["runs"])}
            row["why"] = why_tokens(row)
            rows.append(row)
            log(f"  {name:9} T {temperature:<4g} {warp_name:9} alpha {alphas[0]:.2f} "
                f"(own text {own_alphas[0]:.2f}), {stats.tokens_per_pass:.2f} per pass "
                f"(predicted {predicted:.2f}), {m['speedup']:.2f}x "
                f"(predicted {row['predicted_speedup']:.2f}x)")
    return rows


def why_tokens(row):
    """"" when measured tokens per pass are within 10% of the prediction, else why not."""
    measured, predicted = row["tokens_per_pass"], row["predicted_tokens_per_pass"]
    if abs(measured / predicted - 1) <= 0.10:
        return ""
    own, in_run = row["own_text_tokens_per_pass"], row["in_run_tokens_per_pass"]
    if abs(measured / own - 1) <= 0.10:
        return (f"the text differs: on the target's own sampled text alpha is "
                f"{row['alpha_own_text']:.2f} (held-out {row['alpha']:.2f}), which predicts "
                f"{own:.2f} per pass")
    if abs(measured / in_run - 1) <= 0.10:
        return (f"alpha differs on the text written: inside the run {row['alpha_in_run']:.0%} "
                f"of checked guesses were kept (held-out alpha {row['alpha']:.2f}), which "
                f"predicts {in_run:.2f}")
    runs = "more" if measured > in_run else "fewer"
    return (f"misses come in runs: {measured:.2f} per pass, {runs} than the {in_run:.2f} that "
            f"independent guesses kept at the run's own rate ({row['alpha_in_run']:.0%}) give; "
            f"own-text alpha {row['alpha_own_text']:.2f}")


# ----------------------------------------------------------------------------------------------
# 2. Lenience: what it buys on the trained pair (the rule itself: studies/lenience.py)


def lenience_trained(args, big, draft, leniences, step, verify, log):
    """Per lenience on the trained pair at temperature 1: speed-up and tokens per pass,
    measured and predicted (alpha of the lenient rule: sum_x min(q, p / l)), and the exact
    per-token TV distance from the target's distribution over held-out contexts."""
    scored = held_out(args, big, draft)
    p, q = sd.warp(scored.target, 1.0), sd.warp(scored.guesses[0], 1.0)
    prompts = corpus.held_out_prompts(args.prompts, 32)
    rows = []
    for lenience in leniences:
        written, alpha = lenient_step(p, q, lenience)
        m = timed(args, big, draft, prompts, step, args.repeats, args.k, temperature=1.0,
                  lenience=lenience)
        stats, predicted = m["stats"], sd.expected_tokens_per_pass(float(alpha.mean()), args.k)
        r = {"lenience": lenience, "alpha": float(alpha.mean()),
             "tv_per_token": float(total_variation(written, p).mean()),
             "tokens_per_pass": stats.tokens_per_pass, "predicted_tokens_per_pass": predicted,
             "speedup": m["speedup"],
             "predicted_speedup": predicted / (args.k * m["c"] + verify[args.k]),
             "spread": m["spread"], "acceptance_rate": stats.acceptance_rate}
        rows.append(r)
        log(f"  lenience {lenience:<4g} alpha {r['alpha']:.2f}, TV per token "
            f"{r['tv_per_token']:.3f}, {r['tokens_per_pass']:.2f} per pass (predicted "
            f"{predicted:.2f}), {r['speedup']:.2f}x")
    return rows


# ----------------------------------------------------------------------------------------------
# 4. The best k: measured against the formula


def best_k_sweep(args, big, draft, name, ks, step, verify, log):
    """Greedy runs at every k: the measured speed-ups and their best k, against
    speculative.best_k with two cost models (studies/sections/sampling_costs.md): the lesson's
    pieces timed apart (c per guess, verify(k) of a pass alone), and a round's cost as the runs
    paid it."""
    prompts = corpus.held_out_prompts(args.prompts, 32)
    n_tokens = args.prompts * args.new_tokens
    rows = []
    for k in ks:
        m = timed(args, big, draft, prompts, step, args.k_repeats, k)
        s, plain_step = m["stats"], m["plain_s"] / n_tokens   # one plain character, all included
        rows.append({"k": k, "speedup": m["speedup"], "tokens_per_pass": s.tokens_per_pass,
                     "alpha_in_run": s.kept_of_checked, "c": m["c"], "verify": verify[k],
                     # seconds of a round (the wall clock: both models and the loop) in plain
                     # characters' time
                     "round_cost": m["spec_s"] / (s.rounds / args.k_repeats) / plain_step})
    agree = held_out(args, big, draft).agreement(1, 0.0)[1][0]
    in_run = statistics.median(r["alpha_in_run"] for r in rows)
    c = statistics.median(r["c"] for r in rows)
    kk = np.array([r["k"] for r in rows], float)

    def line(key):   # least squares: row[key] ~ intercept + slope k
        values = np.array([r[key] for r in rows])
        if len(kk) < 2:
            return 0.0, float(values[0])
        slope, intercept = np.polyfit(kk, values, 1)
        return float(slope), float(intercept)
    # A check that grows by `slope` steps per token checked is a dearer draft: a round costs
    # k c + verify(k) = k (c + slope) + verify(0), which best_k(alpha, c + slope, verify(0)) takes.
    slope, intercept = line("verify")
    per_guess, fixed = line("round_cost")
    measured = max(rows, key=lambda r: r["speedup"])["k"]
    best = {"measured": measured,
            "best_k_lesson": sd.best_k(agree, c),                       # verify 1: the lesson's
            "best_k_pieces": sd.best_k(in_run, c + slope, intercept),
            "best_k_rounds": sd.best_k(in_run, per_guess, fixed, k_max=max(ks)),
            "best_k_rounds_unbounded": sd.best_k(in_run, per_guess, fixed),
            "alpha": agree, "alpha_in_run": in_run, "c": c, "slope": slope,
            "intercept": intercept, "round_per_guess": per_guess, "round_fixed": fixed}
    for r in rows:
        r["predicted_speedup"] = sd.expected_speedup(in_run, r["k"], c, r["verify"])
        r["predicted_speedup_rounds"] = sd.expected_speedup(in_run, r["k"], per_guess, fixed)
        r["draft"] = name
    best["within_one"] = abs(best["best_k_rounds"] - measured) <= 1
    best["pieces_within_one"] = abs(best["best_k_pieces"] - measured) <= 1
    log(f"  best k for {name} (greedy): measured {measured}; speculative.best_k "
        f"{best['best_k_rounds']} from the runs' round costs ({fixed:.2f} + {per_guess:.2f} k "
        f"plain steps, alpha {in_run:.2f}), {best['best_k_pieces']} from the pieces timed apart "
        f"(c {c:.3f}, verify {intercept:.2f} + {slope:.2f} k), {best['best_k_lesson']} with "
        f"verify 1")
    return rows, best


def corollary(rows, verify1):
    """Corollary 3.9 per drafter at each temperature (no warp): is alpha above c, and above
    c + verify(1) - 1 once the check of 2 tokens costs verify(1) steps?"""
    return [{"draft": r["draft"], "temperature": r["temperature"], "alpha": r["alpha"],
             "c": r["c"], "alpha_above_c": r["alpha"] > r["c"],
             "speedup_k1": (1 + r["alpha"]) / (r["c"] + verify1),
             "alpha_above_c_and_check": r["alpha"] > r["c"] + verify1 - 1}
            for r in rows if r["warp"] == "none"]
# ----------------------------------------------------------------------------------------------
# Figures and the report


COLOURS = {"draft": "tab:blue", "distilled": "tab:orange", "names": "tab:purple",
           "heads": "tab:green"}


def plot_temperature(args, rows):
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    keys = ("alpha", "tokens_per_pass", "speedup")
    markers = {}                                           # warp -> its marker
    for name in dict.fromkeys(r["draft"] for r in rows):
        colour = COLOURS.get(name, "k")
        plain = [r for r in rows if r["draft"] == name and r["warp"] == "none"]
        t = [r["temperature"] for r in plain]
        axes[0].plot(t, [r["alpha"] for r in plain], "o-", color=colour,
                     label=f"{name}: held-out alpha")
        axes[0].plot(t, [r["alpha_own_text"] for r in plain], "o:", color=colour,
                     label=f"{name}: on the target's own text")
        for ax, key in zip(axes[1:], keys[1:]):
            ax.plot(t, [r[key] for r in plain], "o-", color=colour, label=f"{name} measured")
            ax.plot(t, [r[f"predicted_{key}"] for r in plain], "x--", color=colour,
                    label=f"{name} predicted")
        for r in rows:
            if r["draft"] == name and r["warp"] != "none":
                marker = markers.setdefault(r["warp"], "^" if r["warp"].startswith("top-k")
                                            else "s")
                for ax, key in zip(axes, keys):
                    ax.plot(r["temperature"], r[key], marker, color=colour, mfc="none", ms=7)
    for warp, marker in markers.items():
        axes[2].plot([], [], marker, color="grey", mfc="none", label=f"{warp} (measured)")
    axes[2].axhline(1, color="grey", lw=0.5)
    axes[0].set(ylabel="alpha (greedy agreement at 0)", title="Agreement against temperature",
                ylim=(0, 1.0))
    axes[1].set(ylabel=f"characters per target pass (k {args.k})",
                title="Tokens per pass: measured and expected_tokens_per_pass")
    axes[2].set(ylabel="speed-up over plain sampling",
                title="Speed-up: measured and expected_speedup")
    for ax in axes[1:]:
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.45 * (high - low))      # room for the legend above the lines
    for ax in axes:
        ax.set(xlabel="temperature")
        ax.legend(fontsize=7, ncol=2, loc="lower center" if ax is axes[0] else "upper center")
    fig.tight_layout()
    return common.figure(args, "sampling_temperature.png", fig)


def plot_lenience(args, trained, small):
    plt = common.pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    tv = [r["tv_per_token"] for r in trained]
    left.plot(tv, [r["speedup"] for r in trained], "o-", label="measured speed-up")
    left.plot(tv, [r["predicted_speedup"] for r in trained], "x--", label="predicted")
    for r in trained:
        left.annotate(f"l = {r['lenience']:g}", (r["tv_per_token"], r["speedup"]), fontsize=8,
                      xytext=(4, 4), textcoords="offset points")
    left.axhline(1, color="grey", lw=0.5)
    left.set(xlabel="total variation from the target, per token (exact, held-out contexts)",
             ylabel="speed-up over plain sampling",
             title=f"Lenience: speed against distance ({args.lenience_draft}, T = 1, k {args.k})")
    ls = [r["lenience"] for r in small]
    right.plot(ls, [r["exact_tv"] for r in small], "o-", label="exact (enumerated)")
    right.plot(ls, [r["sampled_tv"] for r in small], "s", mfc="none",
               label=f"from {args.samples} samples")
    right.set(xlabel="lenience (1: the exact rule)", ylabel="total variation, 3-token outputs",
              title="The 4-token pair: whole outputs against the target's")
    right.invert_xaxis()
    for ax in (left, right):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return common.figure(args, "sampling_lenience.png", fig)


def plot_costs(args, rows, k_rows, best):
    plt = common.pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    picked = [r for r in rows if r["warp"] == "none" and r["temperature"] in
              (min(r["temperature"] for r in rows), max_t1(rows))]
    x = np.arange(len(picked))

    def cost(key):
        return np.array([r["costs"][key] for r in picked])
    a = axes[0, 0]
    a.bar(x, cost("positions_per_token"), color="tab:red", label="scored, per token kept")
    a.axhline(1, color="k", lw=1, label="plain decoding (1)")
    a.set(ylabel="target positions per token", title="Positions the target scores per token kept")
    a = axes[0, 1]
    spec, share = cost("spec_flops_per_token") / 1e6, cost("draft_flops_share")
    a.bar(x - 0.19, cost("plain_flops_per_token") / 1e6, 0.38, color="grey", label="plain")
    a.bar(x + 0.19, spec * (1 - share), 0.38, color="tab:blue", label="speculative: target")
    a.bar(x + 0.19, spec * share, 0.38, bottom=spec * (1 - share), color="tab:orange",
          label="speculative: draft")
    a.set(ylabel="MFLOP per token", title="Arithmetic per token (from the shapes)")
    a = axes[1, 0]
    for dx, speedups, label in (
            (-0.27, cost("memory_bound_speedup"), "if time followed bytes read (memory-bound)"),
            (0, [r["speedup"] for r in picked], "measured here (CPU)"),
            (0.27, cost("compute_bound_speedup"), "if time followed FLOPs (compute-bound)")):
        a.bar(x + dx, speedups, 0.27, label=label)
    a.axhline(1, color="k", lw=0.8)
    a.set(ylabel="speed-up", title="Three machines, one run")
    for a in axes.flat[:3]:
        a.set_xticks(x, [f"{r['draft']}\nT {r['temperature']:g}" for r in picked])
    a = axes[1, 1]
    ks = [r["k"] for r in k_rows]
    a.plot(ks, [r["speedup"] for r in k_rows], "o-", label="measured (greedy)")
    a.plot(ks, [r["predicted_speedup"] for r in k_rows], "x--",
           label="expected_speedup(alpha, k, c, verify(k)): pieces timed apart")
    a.plot(ks, [r["predicted_speedup_rounds"] for r in k_rows], "+:",
           label="expected_speedup with the runs' round cost (a line in k)")
    a.axvline(best["measured"], color="tab:blue", lw=0.6)
    a.axvline(best["best_k_rounds"], color="tab:green", lw=0.6, ls=":",
              label=f"speculative.best_k: {best['best_k_rounds']}")
    a.set(xlabel="k", ylabel="speed-up", title="The best k: measured and by the formula")
    for a in axes.flat:
        a.legend(fontsize=7)
    fig.tight_layout()
    return common.figure(args, "sampling_costs.png", fig)


def max_t1(rows):
    """The temperature closest to 1 that ran (the paper's sampling setting)."""
    return min({r["temperature"] for r in rows}, key=lambda t: abs(t - 1))


SECTION = Path(__file__).parent / "sections" / "sampling_costs.md"   # the report's prose


def gap_table(rows, theirs=LEVIATHAN_TABLE_2):
    """Each drafter's alpha and speed-up at argmax and at temperature 1 (no warp), next to
    Leviathan et al.'s Table 2 (the report's and docs/RESULTS.md's table)."""
    t0, t1, cells = min(r["temperature"] for r in rows), max_t1(rows), []
    for name in dict.fromkeys(r["draft"] for r in rows):
        at = {r["temperature"]: r for r in rows if r["draft"] == name and r["warp"] == "none"}
        if t0 in at and t1 in at and t0 != t1:
            a, b = at[t0], at[t1]
            cells.append([name, f"{a['alpha']:.2f} -> {b['alpha']:.2f}",
                          f"{a['speedup']:.2f}x -> {b['speedup']:.2f}x",
                          f"{a['speedup'] / b['speedup']:.2f}"])
    a, b = theirs["argmax"], theirs["temperature 1"]
    cells.append([f"Leviathan et al., Table 2 (T5-small for T5-XXL, EnDe, k {a['k']})",
                  f"{a['alpha']:.2f} -> {b['alpha']:.2f}",
                  f"{a['speedup']:g}x -> {b['speedup']:g}x",
                  f"{a['speedup'] / b['speedup']:.2f}"])
    return common.markdown_table(["drafter", "alpha, argmax -> T 1", "speed-up, argmax -> T 1",
                                  "argmax over T 1"], cells)


def lenience_table(trained, small):
    """Per lenience, most exact first: what it keeps and buys, and how far it moves the output."""
    small = {r["lenience"]: r for r in small}
    return common.markdown_table(
        ["lenience", "alpha of the rule", "TV per token (exact)", "per pass (predicted)",
         "speed-up (predicted)", "4-token pair: TV of outputs, exact", "sampled"],
        [[f"{r['lenience']:g}", f"{r['alpha']:.2f}", f"{r['tv_per_token']:.3f}",
          f"{r['tokens_per_pass']:.2f} ({r['predicted_tokens_per_pass']:.2f})",
          f"{r['speedup']:.2f}x ({r['predicted_speedup']:.2f}x)",
          f"{small[r['lenience']]['exact_tv']:.3f}", f"{small[r['lenience']]['sampled_tv']:.3f}"]
         for r in sorted(trained, key=lambda r: -r["lenience"])])


def markdown(args, rows, trained, small, k_rows, best, corollary_rows, notes, machine_costs):
    def f2(v):
        return f"{v:.2f}"
    t0, t1 = min(r["temperature"] for r in rows), max_t1(rows)
    close = [r["k"] for r in k_rows if r["speedup"] >= 0.9 * max(r["speedup"] for r in k_rows)]
    per_token = ("plain_flops", "spec_flops", "plain_bytes", "spec_bytes")   # in millions
    tables = {
        "temperature_table": common.markdown_table(
            ["drafter", "T", "warp", "alpha", "greedy agreement", "alpha, target's own text",
             "per pass (predicted)", "speed-up (predicted)", "c", "plain us/char",
             "why per pass differs"],
            [[r["draft"], f"{r['temperature']:g}", r["warp"],
              f2(r["alpha"]) + (f" ({'/'.join(map(f2, r['alphas']))})"
                                if len(set(r["alphas"])) > 1 else ""),
              f2(r["greedy_agreement"]), f2(r["alpha_own_text"]),
              f"{f2(r['tokens_per_pass'])} ({f2(r['predicted_tokens_per_pass'])})",
              f"{f2(r['speedup'])}x ({f2(r['predicted_speedup'])}x)", f"{r['c']:.3f}",
              f"{r['plain_us_per_token']:.0f}", r["why"]] for r in rows]),
        "gap_table": gap_table(rows), "lenience_table": lenience_table(trained, small),
        "waste_table": common.markdown_table(
            ["drafter", "T", "tokens", "target positions", "wasted", "positions per token",
             "MFLOP/token plain", "speculative", "MB weights/token plain", "speculative",
             "memory-bound", "compute-bound", "measured (this CPU)"],
            [[r["draft"], f"{r['temperature']:g}", c["new_tokens"], c["target_positions"],
              c["wasted_positions"], f2(c["positions_per_token"]),
              *(f2(c[key + "_per_token"] / 1e6) for key in per_token),
              f"{f2(c['memory_bound_speedup'])}x", f"{f2(c['compute_bound_speedup'])}x",
              f"{f2(r['speedup'])}x"]
             for r in rows if r["warp"] == "none" and r["temperature"] in (t0, t1)
             for c in [r["costs"]]]),
        "corollary_table": common.markdown_table(
            ["drafter", "T", "alpha", "c", "alpha > c", "(1 + alpha) / (c + verify(1))",
             "alpha > c + verify(1) - 1"],
            [[r["draft"], f"{r['temperature']:g}", f2(r["alpha"]), f"{r['c']:.3f}",
              "yes" if r["alpha_above_c"] else "no", f2(r["speedup_k1"]),
              "yes" if r["alpha_above_c_and_check"] else "no"] for r in corollary_rows]),
        "k_table": common.markdown_table(
            ["k", "speed-up", "predicted: pieces", "predicted: round costs", "per pass",
             "c", "verify(k)", "round cost (plain characters)"],
            [[r["k"], f"{f2(r['speedup'])}x", f"{f2(r['predicted_speedup'])}x",
              f"{f2(r['predicted_speedup_rounds'])}x", f2(r["tokens_per_pass"]),
              f"{r['c']:.3f}", f2(r["verify"]), f2(r["round_cost"])] for r in k_rows])}
    text = report.fill(
        SECTION, args=args, **machine_costs, **tables, checked=args.k + 1,
        check_extra=machine_costs["verify_1"] - 1, explained=sum(not r["why"] for r in rows),
        settings=len(rows), best=best, first=k_rows[0], last=k_rows[-1],
        k_max=max(r["k"] for r in k_rows),
        close=f" (within 10% of its speed-up: k = {', '.join(map(str, close))})"
        if len(close) > 1 else "",
        within="within one of the measured best." if best["within_one"] else
        "more than one away.")
    return "\n\n".join([text] + notes)


def run(args, log=print):
    started = time.perf_counter()
    check(args)                    # bad flags fail even when --quick replaces them below
    common.shrink_if_quick(args, new_tokens=20, repeats=1, k_repeats=1, prompts=2, samples=300,
                           windows=8)
    if args.quick:
        args.drafts, args.temperatures, args.ks = "draft", "0,1", "1,2"
        args.leniences, args.k = "1,0.5", min(args.k, 2)
    temperatures, leniences, ks, draft_names = check(args)
    big = load_target(args, list(dict.fromkeys(draft_names + [args.lenience_draft])), log)
    with machine.threads():  # one torch thread: these models' passes are too small to share
        return measure(args, big, temperatures, leniences, ks, draft_names, started, log)


def measure(args, big, temperatures, leniences, ks, draft_names, started, log):
    """Every measurement, figure and table of run(), once the models are loaded."""
    torch.manual_seed(args.seed)
    step = machine.pass_time(big, 1)
    verify = {k: machine.pass_time(big, k + 1) / step for k in sorted(set(ks) | {1, args.k})}
    models = [n for n in draft_names if n != "heads"] or [args.lenience_draft]
    best_name = "distilled" if "distilled" in models else models[-1]   # for the best k
    folder = common.checkpoint_folder(args)
    drafters = {name: by_name(name, folder, "numpy")
                for name in dict.fromkeys(draft_names + [args.lenience_draft, best_name])}
    rows = []
    log(f"temperature sweep: k {args.k}, one target step {step * 1e6:.0f} us, verify "
        f"{verify[args.k]:.2f}")
    with machine.Busy() as busy:
        for name in draft_names:
            rows += sweep(args, big, drafters[name], name, temperatures, step, verify, log)
        log(f"lenience ({args.lenience_draft}, temperature 1):")
        trained = lenience_trained(args, big, drafters[args.lenience_draft], leniences, step,
                                   verify, log)
        k_rows, best = best_k_sweep(args, big, drafters[best_name], best_name, ks, step, verify,
                                    log)
    small = lenience_small(leniences, args.samples, args.seed)
    note = busy.note([r["spread"] for r in rows + trained])
    machine_costs = {"step_us": step * 1e6, "verify_k": verify[args.k], "verify_1": verify[1],
                     "verify": verify}
    corollary_rows = corollary(rows, verify[1])
    plot_temperature(args, rows)
    plot_lenience(args, trained, small)
    plot_costs(args, rows, k_rows, best)
    numbers = {"temperature": rows, "lenience": {"trained": trained, "small_pair": small},
               "best_k": {"runs": k_rows, **best}, "corollary": corollary_rows,
               "machine": machine_costs, "leviathan_table_2": LEVIATHAN_TABLE_2,
               "seconds": time.perf_counter() - started}
    common.save_json(args, "sampling_costs.json", numbers)
    log(f"sampling's price list: {numbers['seconds']:.0f}s")
    return {"numbers": numbers,
            "markdown": markdown(args, rows, trained, small, k_rows, best, corollary_rows,
                                 [note] if note else [], machine_costs)}


def main(argv=None):
    args = common.parse_args(__doc__, Args, argv)
    report.record(args, "sampling", run(args))


if __name__ == "__main__":
    cli.run(main)
