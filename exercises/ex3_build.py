"""
Exercise 3, build: greedy speculative decoding with the big model and the small draft.

    python -m exercises.ex3_build
    python -m exercises.ex3_build --k 2 --max_new_tokens 80

speculative_recompute() below is the lesson's version, written the simple way: no KV cache, so
every draft step and every verification recomputes the whole context. On the lesson's prompts
it must write exactly what the big model writes alone, and it does (checked). Then the same
decoding is timed three ways: the lesson's recompute-everything loops, plain decoding with a KV
cache (speculative.generate), and speculative decoding with KV caches for both models
(speculative.speculative_generate), with the draft in torch and in NumPy.

What to look at: tokens per pass and acceptance are the same in every version (same models,
same greedy choices); only the cost of a step changes. The lesson's own run saw no wall-clock
gain (about 1.0x); the measured c (draft step / target step) and alpha say why a loop like its
own gains little, and how much the same loop gains on your machine.

Generations stay inside the 128-character window, so all versions see the same contexts.
Writes results/ex3_build.json and results/ex3_build.png.
"""

import statistics
from dataclasses import dataclass

import torch

import gpt
import speculative as sd
from harness import common, registry, report
from lessonkit import machine
from lessonkit.machine import median_time


@dataclass
class Args(common.ExerciseArgs):
    k: int = 4                 # draft tokens per round
    max_new_tokens: int = 100  # characters per prompt (prompt + these stay in the window)
    draft: str = "draft"       # the draft preset: draft, distilled or names
    repeats: int = 3           # timing repeats (medians)


@torch.no_grad()
def speculative_recompute(target, draft, idx, max_new_tokens, k):
    """The lesson's greedy speculative decoding, without a KV cache. Returns (idx, passes)."""
    goal, passes = idx.shape[1] + max_new_tokens, 0
    while idx.shape[1] < goal:
        n = idx.shape[1]
        k_round = min(k, goal - n - 1)
        # 1. The draft guesses k_round tokens, one full forward pass each.
        guess = idx
        for _ in range(k_round):
            logits, _ = draft(guess[:, -draft.c.block_size:])
            guess = torch.cat([guess, logits[:, -1:].argmax(-1)], dim=1)
        # 2. One target pass scores the last accepted token and every guess: k_round+1 choices.
        logits, _ = target(guess)                                       # (1, n+k_round, V)
        choices = logits[0, n - 1:].argmax(-1)                          # (k_round+1,)
        passes += 1
        # 3. Keep guesses while they match the target's choices; then add the target's token.
        kept = 0
        while kept < k_round and guess[0, n + kept] == choices[kept]:
            kept += 1
        idx = torch.cat([guess[:, :n + kept], choices[kept].view(1, 1)], dim=1)
    return idx, passes


def check_outputs(outputs):
    """Every version wrote exactly what the big model writes alone (outputs: version -> runs)."""
    want = outputs["lesson: plain, recompute everything"]
    for name, runs in outputs.items():
        for run, expected in zip(runs, want):
            got = run[0] if isinstance(run, tuple) else run   # (idx, passes or stats) or idx
            assert torch.equal(got, expected), f"{name}: speculative decoding changed the big " \
                f"model's output"


def models(args):
    """The trained presets this exercise uses (the main job trains the missing ones first)."""
    return ["big", args.draft]


def run(args, log=print):
    common.shrink_if_quick(args, max_new_tokens=30, repeats=1)
    trained = common.load_models(args, models(args), log=log)
    target, draft = trained["big"], trained[args.draft]
    prompts = [common.encode_prompt(p) for p in common.LESSON_PROMPTS]
    if max(p.shape[1] for p in prompts) + args.max_new_tokens > target.c.block_size:
        raise ValueError(f"--max_new_tokens {args.max_new_tokens} takes the longest prompt past "
                         f"the {target.c.block_size}-character window; use fewer")
    n, fast_draft = args.max_new_tokens, registry.with_backend(draft, "numpy")
    versions = {
        "lesson: plain, recompute everything": lambda p: gpt.recompute_generate(target, p, n),
        "lesson: speculative, recompute everything":
            lambda p: speculative_recompute(target, draft, p, n, args.k),
        "plain, KV cache": lambda p: sd.generate(target, p, n),
        "speculative, KV caches (draft in torch)":
            lambda p: sd.speculative_generate(target, draft, p, n, k=args.k),
        "speculative, KV caches (draft in NumPy)":
            lambda p: sd.speculative_generate(target, fast_draft, p, n, k=args.k),
    }
    times, outputs = {name: [] for name in versions}, {}
    with machine.Busy() as busy:
        for round_ in range(args.repeats):  # round robin: a drift in speed hits every version
            for name, fn in versions.items():
                runs = []
                times[name].append(median_time(lambda: runs.extend(fn(p) for p in prompts), 1))
                outputs.setdefault(name, runs)  # the first round's outputs are checked
            if round_ == 0:
                check_outputs(outputs)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    stats = sd.Stats(k=args.k)
    for _, s in outputs["speculative, KV caches (draft in torch)"]:
        stats.add(s)
    lesson_passes = sum(p for _, p in outputs["lesson: speculative, recompute everything"])
    log(f"{len(prompts)} prompts x {n} characters, k = {args.k}, draft {args.draft!r}: identical "
        f"to the big model alone in every version")
    log(f"  {stats.tokens_per_pass:.2f} characters per pass of the big model "
        f"({len(prompts) * n / lesson_passes:.2f} in the lesson's loop), "
        f"{stats.acceptance_rate:.0%} of guesses kept")
    note, tokens = busy.note([machine.spread(t) for t in times.values()]), len(prompts) * n
    base_lesson, base_cached = seconds["lesson: plain, recompute everything"], seconds["plain, KV cache"]
    rows = []
    for name, s in seconds.items():
        base = base_lesson if name.startswith("lesson") else base_cached
        rows.append([name, f"{s * 1e3:.0f} ms", f"{tokens / s:,.0f}", f"{base / s:.2f}x"])
        log(f"  {name:44} {s * 1e3:7.0f} ms {tokens / s:8,.0f} tokens/s  {base / s:.2f}x")

    # Why about 1.0x. c: the draft's cost per token over the target's, each decoding alone the
    # same way; verify: one target pass over k+1 new tokens over a pass over one.
    def decoding(fn):
        return median_time(lambda: [fn(p) for p in prompts], args.repeats)
    c_lesson = decoding(lambda p: gpt.recompute_generate(draft, p, n)) / base_lesson
    c_cached = decoding(lambda p: sd.generate(draft, p, n)) / base_cached
    c_numpy = decoding(lambda p: sd.generate(fast_draft, p, n)) / base_cached
    verify = machine.pass_time(target, args.k + 1) / machine.pass_time(target, 1)
    agreement = sd.measure_agreement(target, draft, gpt.val_data, windows=64).greedy_agreement
    tpp = stats.tokens_per_pass
    costs = {"lesson": args.k * c_lesson + 1, "cached": args.k * c_cached + verify,
             "numpy": args.k * c_numpy + verify}
    predicted = {name: tpp / cost for name, cost in costs.items()}
    formula_tpp = sd.expected_tokens_per_pass(agreement, args.k)
    lesson_tpp = sd.expected_tokens_per_pass(0.37, args.k)   # the lesson's agreement
    lesson_c = (lesson_tpp - 1) / args.k                      # where lesson_tpp / (k c + 1) = 1
    measured = {"lesson": base_lesson / seconds["lesson: speculative, recompute everything"],
                "cached": base_cached / seconds["speculative, KV caches (draft in torch)"],
                "numpy": base_cached / seconds["speculative, KV caches (draft in NumPy)"]}
    explanation = (
        f"**The lesson's figure:** its own run of this loop saw no wall-clock gain, about 1.0x. "
        f"**Ours, the same loop on this machine:** {measured['lesson']:.2f}x measured, "
        f"{predicted['lesson']:.2f}x predicted. **Why about 1x, and why ours differs:** a round "
        f"writes {tpp:.2f} characters for one pass of the big model (the formula says "
        f"{formula_tpp:.2f} from the {agreement:.0%} greedy agreement on held-out text; misses "
        f"come in runs, so fewer), but it also costs {args.k} draft steps. Without a cache a "
        f"draft step recomputes its whole context and costs c = {c_lesson:.2f} target steps "
        f"here, so a round costs {args.k} x {c_lesson:.2f} + 1 = {costs['lesson']:.2f} target "
        f"steps: {tpp:.2f} / {costs['lesson']:.2f} = {predicted['lesson']:.2f}x. The lesson's "
        f"run had its own draft: at its 37% agreement the formula gives {lesson_tpp:.2f} "
        f"characters per pass, which pays for {args.k} draft steps only while c stays below "
        f"{lesson_c:.2f}; a draft step costing about that much gives the lesson's 1.0x. Ours "
        f"agrees more and its recomputed draft step is cheaper, so the same loop gains here. "
        f"**What changes it:** KV caches make both models' steps cheap, but a tiny torch step "
        f"is mostly framework overhead, so the cached draft still costs c = {c_cached:.2f} and "
        f"checking {args.k + 1} tokens costs {verify:.2f} one-token steps "
        f"({predicted['cached']:.2f}x predicted, {measured['cached']:.2f}x measured). "
        f"The same draft in NumPy costs c = {c_numpy:.2f} ({predicted['numpy']:.2f}x predicted, "
        f"{measured['numpy']:.2f}x measured). The other lever is agreement: a draft that agrees "
        f"more writes more per pass (the distilled draft: exercise 4 with --drafts "
        f"draft,names,distilled, and harness/benchmark.py).")
    log("\n" + explanation.replace("**", ""))
    if note:
        log(note)

    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    names = list(seconds)
    ax.barh(names[::-1], [tokens / seconds[x] for x in names[::-1]],
            color=["#58b4f0", "#58b4f0", "#f5b942", "#888", "#888"])
    ax.set(xlabel="characters per second (higher is better)",
           title=f"Greedy decoding, {len(prompts)} prompts x {n} characters, k = {args.k}")
    common.figure(args, "ex3_build.png", fig)
    numbers = {"k": args.k, "draft": args.draft, "max_new_tokens": n, "identical": True,
               "tokens_per_pass": stats.tokens_per_pass, "acceptance_rate": stats.acceptance_rate,
               "seconds": seconds, "greedy_agreement": agreement,
               "formula_tokens_per_pass": formula_tpp, "c_recompute": c_lesson,
               "c_cached_torch": c_cached, "c_cached_numpy": c_numpy, "verify_cost": verify,
               "predicted_speedup": predicted, "measured_speedup": measured, "busy": note}
    common.save_json(args, "ex3_build.json", numbers)
    markdown = (f"{len(prompts)} lesson prompts x {n} characters, draft `{args.draft}`, k = {args.k}: "
                f"all versions write exactly the big model's text. "
                f"**{stats.tokens_per_pass:.2f} characters per pass**, "
                f"{stats.acceptance_rate:.0%} of guesses kept (lesson: about 2 and a quarter).\n\n"
                + common.markdown_table(["version", "time", "characters/s", "speed-up"], rows)
                + "\n\n(speed-ups against the plain loop of the same kind)"
                + (f" **{note}**" if note else "") + f"\n\n{explanation}"
                + "\n\n![](ex3_build.png)")
    return {"numbers": numbers, "markdown": markdown}


def main(argv=None):
    args = common.parse_args(__doc__, Args, argv)
    report.record(args, 3, run(args))


if __name__ == "__main__":
    from exercises import stubs
    stubs.run(3, main)   # a part not written yet: one line, exit 0
