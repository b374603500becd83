"""
studies/render_studies.py: the figures and tables of docs/RESULTS.md's study sections, rendered
from the results files `python -m studies` writes (drafters, transformers, batch_curve,
sampling_costs, trees); studies/render.py merges FIGURES and BLOCKS below into its own.

A sentence that draws a conclusion from the figures is RESULTS.md's, and checked here
(figures.claim), most often by the table it comments on; a few phrases the data chooses (a goal
met or not, the fastest setup) are written here. What each field means: the study that writes
it (studies/NAME.py).
"""

from beyond import batch_curve
from studies import drafters, sampling_costs, transformers, trees
from studies.figures import claim, grouped, percent, span, table, times

BACKEND = drafters.BACKEND
SCHEDULE = {"heuristic": "the +2/-1 heuristic's k", "best": "the formula's k (`--adaptive best`)",
            "confidence": "`--adaptive confidence`'s k"}
CLOSE = 0.10            # "within a tenth": measured against predicted
# The goals two studies were built to meet (RESULTS.md quotes them; the studies do not hold them;
# batch_curve.GOAL_AT_16 and transformers.json's "goals" hold the others).
DRAFTERS_GOAL = 3.0     # the fastest exact setup against the fastest plain decoding
TREE_GOAL = 0.20        # a tree's characters per pass over the best chain's, minus one


def each(values, write=str):
    """"a, b and c", each value written."""
    words = [write(v) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def off(r, what="speedup"):
    """How far a measurement is from the formula's prediction: 0.1 is a tenth over."""
    return r[what] / r[f"predicted_{what}"] - 1


def within(rows, what="speedup"):
    """How many of the rows the formula predicts within a tenth: "6 of 12"."""
    return f"{sum(abs(off(r, what)) <= CLOSE for r in rows)} of {len(rows)}"


def against(r, what="speedup", write=times, predicted=None):
    """A measurement, then the formula's prediction in brackets: "1.42x (1.50x)"."""
    return f"{write(r[what])} ({write(r[predicted or f'predicted_{what}'])})"


hundredths = "{:.2f}".format   # 1.23


# ----------------------------------------------------------------------------------------------
# Every drafter compared (studies/drafters.py)


def best_fixed(runs):
    """{(backend, drafter): (its row at its fastest fixed k, {k or schedule: its row})}."""
    return drafters.best_rows(runs["drafters"]["runs"])


def drafters_table(runs):
    # what the sentences under the table say of its rows
    best = {pair: b for pair, (b, _) in best_fixed(runs).items()}
    claim(best["torch", "heads"]["speedup"] > 1 >= best["torch", "exit2"]["speedup"],
          "No second model pays with the big model in torch only with the heads")
    claim(min(best[b, "exit2"]["c"] for b in BACKEND) >= 0.5,
          "a guess costs about as much as the step it tries to save")
    claim(all(best[b, "ngram-big"][x] > best[b, "ngram"][x] for b in BACKEND
              for x in ("alpha", "speedup")),
          "a drafter needs to know what the big model writes, not the language")
    numpy, torch = (backend(runs, b) for b in BACKEND)
    claim(all(torch["verify"][k] < numpy["verify"][k] for k in torch["verify"]),
          "With the big model in torch a check is cheaper")
    claim(torch["step_us"] > numpy["step_us"], "a step [in torch] is dearer")
    return drafters.best_table(runs["drafters"]["runs"], why=False) + "\n"


def backend(runs, name):
    """What the run measured of the big model in one backend: plain decoding, a step, checks."""
    return runs["drafters"]["backends"][name]


def fastest_plain(runs):
    return max(backend(runs, b)["plain_tokens_per_s"] for b in BACKEND)


def ideal(runs, name):
    """What a free, always-right drafter gains beside this backend, over the fastest plain."""
    b = backend(runs, name)
    return max(b["ceiling"].values()) * b["plain_tokens_per_s"] / fastest_plain(runs)


def fastest(runs):
    """The fastest exact setup of the run (the oracle, which knows the future, left out). The
    sentence after it says that it falls short of the goal, and so would an ideal drafter."""
    r = max((r for r in runs["drafters"]["runs"] if r["k"] != "oracle"),
            key=lambda r: r["tokens_per_s"])
    claim(r["tokens_per_s"] / fastest_plain(runs) < DRAFTERS_GOAL, "Not the 3x we aimed for")
    claim(max(ideal(runs, b) for b in BACKEND) < DRAFTERS_GOAL,
          "no drafter can get there on this CPU")
    how = f"at k = {r['k']}" if isinstance(r["k"], int) else f"with {SCHEDULE[r['k']]}"
    return r, f"`{r['draft']}` beside the {BACKEND[r['backend']]} big model {how}"


def ceiling(runs, name):
    b = backend(runs, name)
    k = max(b["ceiling"], key=b["ceiling"].get)
    return f"{times(b['ceiling'][k])} (k = {k})"


def drafters_why(runs):
    lines = []
    for (where, name), (r, _) in best_fixed(runs).items():
        if abs(off(r)) > CLOSE:
            lines.append(f"  - `{name}`, {BACKEND[where]} big model: {times(r['speedup'])} "
                         f"against {times(r['predicted_speedup'])}; {drafters.why_off(r)}.")
    return "\n".join(lines) + "\n"


def ladder_table(runs):
    rows = runs["drafters"]["ladder"]
    row = {r["draft"]: r for r in rows}
    tables = [r for r in rows if r["size"] == "table"]
    models = [r for r in rows if r["size"] != "table"]
    layers = [r for r in rows if r["draft"].startswith("big, first")]
    gpts = [r for r in rows if r["draft"].startswith("GPT ")]
    distilled = row["GPT distilled"]["greedy_agreement"]
    claim(max(r["c"] for r in tables) < min(r["c"] for r in models) / 10 and
          max(r["greedy_agreement"] for r in tables) < distilled,
          "The tables cost almost nothing, and none agrees as much as the distilled draft")
    claim(min(r["c"] for r in layers) > max(r["c"] for r in gpts) and
          max(r["greedy_agreement"] for r in layers) < distilled,
          "the big model's own first layers cost more than either GPT draft, and agree less "
          "than the distilled one")
    claim(row[drafters.OWN_TEXT]["greedy_agreement"] < row["4-gram"]["greedy_agreement"],
          "On the ladder, the same table agrees less than the 4-gram table")
    return drafters.ladder_table(rows) + "\n"


# ----------------------------------------------------------------------------------------------
# With Hugging Face transformers (studies/transformers.py)


def hf_mode(runs, mode):
    return next(r for r in runs["transformers"]["rows"] if r["mode"] == mode)


def hf_table(runs):
    claim(hf_mode(runs, "generate(do_sample=False)")["identical"],
          "the same greedy text from `generate(do_sample=False)`")
    return transformers.modes_table(runs["transformers"]["rows"]) + "\n"


def hf_goal(runs, name):
    return transformers.goal_words(runs["transformers"]["goals"][name])


def hf_split(runs):
    fastest = runs["transformers"]["goals"]["fastest"]["pairs"][0]["second"]   # the first goal's
    modes = ["generate(do_sample=False)", "adapter: generate", "assisted, distilled, k = 4",
             "adapter: speculative, distilled, k = 4", "torch: generate", "NumPy: generate",
             fastest]
    rows = [hf_mode(runs, m) for m in modes]
    claim(rows[1]["rest_us"] < rows[0]["rest_us"],
          "Through the adapter our loop spends less around transformers' forward than generate()")
    claim(all(p["ratio"] > 1
              for p in runs["transformers"]["goals"]["adapter speculative"]["pairs"]),
          "ours through the adapter is faster than assisted generation with the same draft and k")
    claim(rows[-1]["target_us"] > rows[-1]["wall_us"] / 2,
          "Our fastest exact setup spends most of its time in the NumPy forward")
    alpha = runs["transformers"]["bound"]["alpha"]   # nan: no agreement would reach the goal
    claim(alpha == alpha, "to reach the goal, even a free drafter would have to be right")
    return transformers.split_table(rows, stats=False) + "\n"


# ----------------------------------------------------------------------------------------------
# Batches (beyond/batch_curve.py)


def batch_sweeps(runs):
    """{(backend, drafter): the rows of its sweep at batch 16}, in the run's order."""
    return {tuple(key.split("_", 2)[1:]): value["rows"]
            for key, value in runs["batch_curve"].items() if key.startswith("batch16_")}


def fastest_row(rows):
    return max(rows, key=lambda r: r["speedup"])


def split_cells(r):
    return ["-", "-"] if r["steps_speedup"] is None else [
        f"{percent(r['encode_share_plain'])} / {percent(r['encode_share_spec'])}",
        times(r["steps_speedup"])]


def batch_table(runs):
    rows = []
    for (backend, name), sweep in batch_sweeps(runs).items():
        r = fastest_row(sweep)
        free = max((x["k"] + 1) / x["verify_cost"] for x in sweep)
        rows.append([BACKEND[backend], name, r["k"], against(r, predicted="predicted"),
                     hundredths(r["alpha"]), f"{r['c']:.3f}", hundredths(r["verify_cost"]),
                     *split_cells(r), times(free)])
    # what the sentences around the table say of batch 16 and of its fastest row
    plain, best = runs["batch_curve"]["rows_vs_batch"], batch_best(runs)[1]
    claim(plain["numpy"]["speedup"] < plain["torch"]["speedup"], "batching gains [NumPy] less")
    claim(best["steps_speedup"] < curve_first(runs)["speedup"],
          "The rounds themselves gain much less than at batch 1")
    claim(best["encode_share_spec"] * best["spec_s"]
          >= best["encode_share_plain"] * best["plain_s"], "Encoding gains nothing")
    claim(best["encode_share_spec"] > best["encode_share_plain"],
          "they re-encode in smaller, dearer passes")
    return table(["big model in", "drafter", "best k", "speed-up (predicted)", "alpha", "c",
                  "verify", "encoding: plain / speculative", "the rest", "bound"], rows)


def batch_best(runs):
    """The fastest setting at batch 16, as ((backend, drafter), row)."""
    return max(((key, fastest_row(rows)) for key, rows in batch_sweeps(runs).items()),
               key=lambda kr: kr[1]["speedup"])


def batch_goal(runs):
    goal = batch_curve.GOAL_AT_16
    return f"{'beyond' if batch_best(runs)[1]['speedup'] >= goal else 'short of'} the {goal:g}x " \
        f"we aimed for"


def curve_by_size(runs):
    """The curve's fastest row at each batch size."""
    return batch_curve.best_by_size(runs["batch_curve"]["curve"]["rows"])


def curve_first(runs):
    curve = runs["batch_curve"]["curve"]
    claim(batch_best(runs)[0] == (curve["backend"], curve["draft"]),
          "batch 1 with the same drafter")
    return curve_by_size(runs)[min(curve_by_size(runs))]


def batch_verify_one(runs):
    """One row's check over k+1 tokens at the best batch-16 setting's k (the curve at batch 1)."""
    best = batch_best(runs)[1]
    one = next(r for r in runs["batch_curve"]["curve"]["rows"]
               if (r["batch"], r["k"]) == (1, best["k"]))
    claim(one["verify_cost"] < best["verify_cost"], "checking k + 1 tokens for 16 rows costs "
                                                    "more steps than one row's")
    return hundredths(one["verify_cost"])


def curve_table(runs):
    by_size = curve_by_size(runs)
    claim(by_size[max(by_size)]["speedup"] < curve_first(runs)["speedup"],
          "The speed-up falls with the batch size")
    k4 = {r["batch"]: r for r in runs["batch_curve"]["curve"]["rows"] if r["k"] == 4}
    rows = [[b, against(k4[b], predicted="predicted") if b in k4 else "-", r["k"],
             against(r, predicted="predicted"), hundredths(r["verify_cost"]), f"{r['c']:.3f}",
             *split_cells(r)] for b, r in by_size.items()]
    return table(["batch", "k = 4", "best k", "speed-up at best k", "verify (best k)", "c",
                  "encoding: plain / speculative", "the rest"], rows)


# ----------------------------------------------------------------------------------------------
# Sampling's price list (studies/sampling_costs.py)


def sampled(runs, name, temperature, warp="none"):
    return next(r for r in runs["sampling_costs"]["temperature"]
                if (r["draft"], r["temperature"], r["warp"]) == (name, temperature, warp))


def argmax_over_t1(runs, name):
    return sampled(runs, name, 0.0)["speedup"] / sampled(runs, name, 1.0)["speedup"]


def temperature_table(runs):
    theirs = runs["sampling_costs"]["leviathan_table_2"]
    claim(min(r["speedup"] for r in runs["sampling_costs"]["temperature"]
              if r["draft"] == "distilled") > 1,
          "The distilled draft pays at every temperature and warp")
    claim(argmax_over_t1(runs, "distilled")
          < theirs["argmax"]["speedup"] / theirs["temperature 1"]["speedup"],
          "[the distilled draft] loses less from argmax to temperature 1 than Leviathan et al.'s")
    claim(argmax_over_t1(runs, "heads") > 1, "the heads fall from argmax to temperature 1")
    return sampling_costs.gap_table(runs["sampling_costs"]["temperature"], theirs) + "\n"


def lenience_table(runs):
    trained, small = (runs["sampling_costs"]["lenience"][key] for key in ("trained", "small_pair"))
    steps = sorted(trained, key=lambda r: -r["lenience"])
    claim(all(a["alpha"] < b["alpha"] and a["tv_per_token"] < b["tv_per_token"]
              for a, b in zip(steps, steps[1:])),
          "The lower the lenience, the more guesses are kept and the further the output moves")
    best_k = runs["sampling_costs"]["best_k"]   # and what the bullets after the table say
    claim(best_k["best_k_rounds"] == best_k["measured"],
          "`speculative.best_k` picks the measured best")
    return sampling_costs.lenience_table(trained, small) + "\n"


def waste(runs):
    """What the distilled draft at temperature 1 made the big model do (Stats and shapes), in
    MFLOP and MB per character; the sentence says more arithmetic, but fewer weights read."""
    w = sampled(runs, "distilled", 1.0)["costs"]
    per = {f"{how}_{kind}": w[f"{how}_{kind}_per_token"] / 1e6
           for how in ("spec", "plain") for kind in ("flops", "bytes")}
    claim(per["spec_flops"] > per["plain_flops"] and per["spec_bytes"] < per["plain_bytes"],
          "more arithmetic, but fewer weights read")
    return w | per


# ----------------------------------------------------------------------------------------------
# Token trees (studies/trees.py)


def tree_rows(runs, name, backend=None):
    """{(N, kind): row} of a drafter; on the first backend unless told (characters per pass are
    the same on both: greedy, the same shapes)."""
    rows = runs["trees"]["rows"]
    backend = backend or rows[0]["backend"]
    return {(r["budget"], r["kind"]): r for r in rows
            if (r["backend"], r["draft"]) == (backend, name)}


def tree_drafters(runs):
    return list(dict.fromkeys(r["draft"] for r in runs["trees"]["rows"]))


def budgets(runs):
    return sorted({r["budget"] for r in runs["trees"]["rows"]})


def ranks(runs, name):
    """A drafter's acceptance by rank, measured on its chain: one list per head (one list for
    the drafters without heads)."""
    accept = tree_rows(runs, name)[budgets(runs)[0], "chain"]["accept"]
    return [accept] if isinstance(accept[0], (int, float)) else accept


def acceptance_words(per):
    """The first three ranks' acceptance; with heads, the first head's and the last's."""
    words = [" / ".join(f"{a:.3f}" for a in accept[:3]) for accept in per]
    return words[0] if len(per) == 1 else f"head 1: {words[0]}, head {len(per)}: {words[-1]}"


def tree_over_chain(runs, name):
    """A drafter's best tree's characters per pass over its best chain's (of any N)."""
    rows = tree_rows(runs, name).items()
    tree, chain = (max(r["tokens_per_pass"] for (_, kind), r in rows if (kind == "chain") == c)
                   for c in (False, True))
    return tree / chain


def passes_table(runs):
    """Characters per pass, chain / tree (the tree's formula), per drafter and N."""
    seconds = {name: ranks(runs, name)[0][1] for name in tree_drafters(runs)}
    claim(max(seconds, key=seconds.get) == "draft",
          "the drafter's second guesses are often right (the lesson's small draft)")
    mine = tree_rows(runs, "draft")
    claim(mine[32, "chain"]["tokens_per_pass"] < 1.02 * mine[16, "chain"]["tokens_per_pass"] and
          mine[32, "tree"]["tokens_per_pass"] > 1.02 * mine[16, "tree"]["tokens_per_pass"],
          "the chain stops gaining past N 16, the tree does not")
    sure = sure_drafters(runs)
    claim(sure, "the best tree of up to 16 nodes is the chain itself [for some drafter]")
    claim(all(ranks(runs, n)[0][1] < ranks(runs, n)[0][0] ** 16 for n in sure),
          "a second guess is kept less often than a sixteenth first guess")
    claim(all(abs(r["tokens_per_pass"] - tree_rows(runs, r["draft"])[r["budget"], r["kind"]]
                  ["tokens_per_pass"]) < 1e-9
              for r in runs["trees"]["rows"] if r["kind"] in ("chain", "tree")),
          "Characters per pass are the same on both backends")
    rows = []
    for name in tree_drafters(runs):
        mine = tree_rows(runs, name)
        cells = [f"{hundredths(mine[n, 'chain']['tokens_per_pass'])} / "
                 f"{against(mine[n, 'tree'], 'tokens_per_pass', hundredths)}"
                 for n in budgets(runs)]
        rows.append([name, acceptance_words(ranks(runs, name)), *cells,
                     hundredths(tree_over_chain(runs, name))])
    return table(["drafter", "acceptance of its 1st / 2nd / 3rd guess",
                  *[f"N {n}: chain / tree" for n in budgets(runs)], "best tree / best chain"], rows)


def tree_gain(runs, name):
    """The tree over the chain at each N, in percent."""
    mine, ns = tree_rows(runs, name), budgets(runs)
    gains = [mine[n, "tree"]["tokens_per_pass"] / mine[n, "chain"]["tokens_per_pass"] - 1
             for n in ns]
    return f"{each(gains, percent)} (N {each(ns)})"


def sure_drafters(runs):
    """The drafters whose best tree of up to 16 nodes is the chain itself."""
    shapes = {name: tree_rows(runs, name) for name in tree_drafters(runs)}
    return [name for name, mine in shapes.items() if all(
        mine[n, "tree"]["shape"] == mine[n, "chain"]["shape"] for n in budgets(runs) if n <= 16)]


def speed_table(runs):
    mine = tree_rows(runs, "draft")   # the formula's fastest trees of the lesson's draft
    fast = [n for n in budgets(runs) if (n, "fast tree") in mine]
    claim(fast and all(mine[n, "fast tree"][x] < mine[n, "tree"][x]
                       for n in fast for x in ("depth", "calls")),
          "the fastest trees are shallow and wide")
    claim(all(checks(runs, b)[-1] > 1.5 * checks(runs, b)[0] for b in BACKEND),
          "checks are not flat on this CPU")
    rows = []
    for duel in runs["trees"]["head_to_head"]:
        tree, chain = (trees.fastest(runs["trees"]["rows"], duel["backend"], duel["draft"], kind)
                       for kind in (True, False))
        rows.append([BACKEND[duel["backend"]], duel["draft"],
                     f"{tree['kind']} N {tree['budget']}: {times(tree['speedup'])}",
                     f"k {chain['budget']}: {times(chain['speedup'])}",
                     times(duel["tree_over_chain"])])
    return table(["big model in", "drafter", "fastest tree (of plain)", "fastest chain (of plain)",
                  "head to head: tree over the lesson's chain"], rows)


def checks(runs, backend):
    """What a pass over N + 1 tokens costs in one-token steps, at each N (the first drafter's
    chains: every drafter's check is the same pass)."""
    mine = tree_rows(runs, tree_drafters(runs)[0], backend)
    return [mine[n, "chain"]["verify"] for n in budgets(runs)]


def tree_goal(runs):
    """Which drafters' best tree beats their best chain by the goal, and which do not."""
    met = [f"`{n}`" for n in tree_drafters(runs) if tree_over_chain(runs, n) - 1 >= TREE_GOAL]
    missed = [f"`{n}`" for n in tree_drafters(runs) if f"`{n}`" not in met]
    return ("met by " + each(met) if met else "met by no drafter") + \
        ("; not by " + each(missed) if missed else "")


# ----------------------------------------------------------------------------------------------
# Every figure and block by name (studies/render.py merges them into its own). A string is read
# straight from the results files (figures.read: "{FILE[key][key]:FORMAT}").


FIGURES = {
    # every drafter compared
    "drafters.plain.numpy": "{drafters[backends][numpy][plain_tokens_per_s]:,.0f}",
    "drafters.plain.torch": "{drafters[backends][torch][plain_tokens_per_s]:,.0f}",
    "drafters.fastest": lambda r: fastest(r)[1],
    "drafters.fastest.speed": lambda r: grouped(fastest(r)[0]["tokens_per_s"]),
    "drafters.fastest.gain": lambda r: times(fastest(r)[0]["tokens_per_s"] / fastest_plain(r)),
    "drafters.goal": lambda r: f"{DRAFTERS_GOAL:g}x",
    "drafters.verify.numpy": lambda r: span(backend(r, "numpy")["verify"].values()),
    "drafters.ceiling.numpy": lambda r: ceiling(r, "numpy"),
    "drafters.limit.numpy": "{drafters[backends][numpy][limit]:.2f}x",
    "drafters.per_token.numpy": "{drafters[backends][numpy][per_token]:.2f}",
    "drafters.verify.torch": lambda r: span(backend(r, "torch")["verify"].values()),
    "drafters.step_ratio":
        lambda r: f"{backend(r, 'torch')['step_us'] / backend(r, 'numpy')['step_us']:.1f}",
    "drafters.ceiling.torch": lambda r: ceiling(r, "torch"),
    "drafters.ceiling.torch.numpy": lambda r: times(ideal(r, "torch")),
    "drafters.within": lambda r: within([b for b, _ in best_fixed(r).values()]),
    # with Hugging Face transformers
    "hf.difference": "{transformers[difference]:.0e}",
    "hf.goal.fastest": lambda r: hf_goal(r, "fastest"),
    "hf.goal.plain": lambda r: hf_goal(r, "adapter plain"),
    "hf.goal.speculative": lambda r: hf_goal(r, "adapter speculative"),
    "hf.pass.theirs": "{transformers[one_pass][transformers GPT2LMHeadModel][pass_us]:,.0f}",
    "hf.pass.torch": "{transformers[one_pass][gpt.GPT (torch)][pass_us]:,.0f}",
    "hf.pass.numpy": "{transformers[one_pass][NumpyGPT][pass_us]:,.0f}",
    # generate()'s whole time over the adapter's forward alone: the most a free loop would gain
    "hf.loop.bound": lambda r: times(hf_mode(r, "generate(do_sample=False)")["wall_us"]
                                     / hf_mode(r, "adapter: generate")["target_us"]),
    "hf.verify": lambda r: span(r["transformers"]["one_pass"]["NumpyGPT"]["verify"].values()),
    "hf.bound": "{transformers[bound][gain]:.2f}x",
    "hf.bound.chars": "{transformers[bound][chars_per_s]:,.0f}",
    "hf.bound.theirs": "{transformers[bound][vs_theirs]:.1f}x",
    "hf.bound.goal": "{transformers[goals][fastest][goal]:g}x",
    "hf.bound.alpha": "{transformers[bound][alpha]:.1%}",
    # batches
    "batch.new_tokens": "{batch_curve[settings][new_tokens]}",
    "batch.plain.torch": "{batch_curve[rows_vs_batch][torch][speedup]:.2f}x",
    "batch.plain.numpy": "{batch_curve[rows_vs_batch][numpy][speedup]:.2f}x",
    "batch.goal": batch_goal,
    "batch.curve.first.verify": batch_verify_one,
    # sampling's price list
    "sampling.within": lambda r: within(r["sampling_costs"]["temperature"], "tokens_per_pass"),
    "sampling.waste.positions": lambda r: str(waste(r)["target_positions"]),
    "sampling.waste.tokens": lambda r: str(waste(r)["new_tokens"]),
    "sampling.waste.flops":
        lambda r: "{spec_flops:.2f} against {plain_flops:.2f}".format(**waste(r)),
    "sampling.waste.bytes":
        lambda r: "{spec_bytes:.2f} against {plain_bytes:.2f}".format(**waste(r)),
    "sampling.waste.memory": lambda r: times(waste(r)["memory_bound_speedup"]),
    "sampling.best_k": "{sampling_costs[best_k][best_k_rounds]}",
    "sampling.best_k.draft": "{sampling_costs[best_k][runs][0][draft]}",
    "sampling.best_k.pieces": "{sampling_costs[best_k][best_k_pieces]}",
    "sampling.best_k.lesson": "{sampling_costs[best_k][best_k_lesson]}",
    # token trees
    "trees.draft.gain": lambda r: tree_gain(r, "draft"),
    "trees.heads.gain": lambda r: tree_gain(r, "heads"),
    "trees.sure": lambda r: each(sure_drafters(r), lambda n: f"`{n}`"),
    "trees.verify.torch": lambda r: ", ".join(hundredths(c) for c in checks(r, "torch")),
    "trees.verify.numpy": lambda r: ", ".join(hundredths(c) for c in checks(r, "numpy")),
    "trees.goal": tree_goal,
}

BLOCKS = {
    "drafters.table": drafters_table,
    "drafters.why": drafters_why,
    "drafters.ladder": ladder_table,
    "hf.table": hf_table,
    "hf.split": hf_split,
    "batch.table": batch_table,
    "batch.curve": curve_table,
    "sampling.temperature": temperature_table,
    "sampling.lenience": lenience_table,
    "trees.passes": passes_table,
    "trees.speed": speed_table,
}
