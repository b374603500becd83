"""
studies/transformers.py: our decoders against Hugging Face transformers' own, on the same
weights, to answer: how fast is the lesson's code next to the library everybody uses?

    python -m studies.transformers              # the full comparison: a few minutes
    python -m studies.transformers --quick      # tiny models: what the tests run

What it measures: docs/DESIGN.md, "studies/, study by study".
"""

import contextlib
import copy
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import gpt
import speculative as sd
from beyond import hf, presets
from harness import common, registry, report
from harness.registry import by_name, check_name
from lessonkit import cli, corpus, machine

FAMILIES = ("transformers", "ours via the adapter", "ours native")
COLOURS = {"transformers": "tab:orange", "ours via the adapter": "tab:blue",
           "ours native": "tab:green"}
# Our own fastest exact setups (drafter/target backend/k); heads only where they are trained.
NATIVE = "ngram/numpy/8,ngram-big/numpy/8,ngram-big/numpy/10,distilled/numpy/4,heads/torch/4"
GOALS = {"fastest": 10.0, "adapter plain": 1.5, "adapter speculative": 1.5}


@dataclass
class Args(common.ExerciseArgs):
    prompts: int = 8             # held-out prompts, spread through the validation text
    prompt_chars: int = 24       # characters per prompt (prompt + new must fit GPT-2's window)
    new_tokens: int = 100        # characters written per prompt
    drafts: str = "distilled,draft"  # drafts (GPT presets) for assisted generation and the adapter
    ks: str = "2,4"              # fixed draft lengths, the same for transformers and the adapter
    lookups: str = "3,5"         # prompt_lookup_num_tokens values for transformers' prompt lookup
    native: str = NATIVE         # our exact setups, drafter/target backend/k (untrained: skipped)
    repeats: int = 5             # timings are medians over this many alternated pairs


class Mismatch(Exception):
    """One of our decoders wrote something other than the big model's greedy output."""


@dataclass
class Mode:
    name: str                    # as the table shows it
    family: str                  # one of FAMILIES
    run: object                  # prompt -> (output (1, T + n), Stats or None)
    target: object = None        # the big model this mode runs (forward calls timed)
    draft: object = None         # the draft model, if it is one
    k: object = None             # draft length: an int, "default", or None (plain decoding)
    draft_name: str = ""
    differs: list = field(default_factory=list)   # prompt indices whose output differs
    times: list = field(default_factory=list)     # seconds per run of every prompt
    split: dict = field(default_factory=dict)

    @property
    def ours(self):
        return self.family != "transformers"

    @property
    def exact(self):
        return not self.differs


# ----------------------------------------------------------------------------------------------
# The modes


def their_generate(model, n, **options):
    """transformers' generate, greedy, exactly n new tokens: no end-of-text token (eos None,
    min_new_tokens n) and an explicit attention mask (a pad_token_id that is a real character
    would mask that character out of the prompt: the output would differ)."""
    return lambda p: (model.generate(p, attention_mask=torch.ones_like(p), do_sample=False,
                                     max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                                     **options), None)


def assistant(draft_hf, k):
    """A copy of the draft as transformers' assistant: its default schedule (k "default"), or
    exactly k guesses a round (schedule "constant", no confidence threshold to stop earlier)."""
    helper = copy.deepcopy(draft_hf)
    if k != "default":
        config = helper.generation_config
        config.num_assistant_tokens = k
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0   # 0: no early stop (> 0 adds one)
    return helper


def default_schedule():
    """What generate(assistant_model=...) does when the assistant's config sets nothing."""
    tf = hf.transformers()
    defaults = getattr(tf.GenerationConfig, "_get_default_generation_params", lambda: {})()
    tokens, schedule, threshold = (defaults.get(key, "?") for key in (
        "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"))
    adapts = getattr(tf.utils, "is_sklearn_available", lambda: False)()
    return (f"up to {tokens} guesses a round (schedule {schedule!r}), the draft stopping early "
            f"when its probability for its guess falls under {threshold}"
            + (" (a threshold it retunes as it goes, with scikit-learn)" if adapts else
               " (fixed: scikit-learn, which would retune it, is not installed)"))


def transformers_modes(args, big_hf, drafts_hf, ks, lookups):
    n = args.new_tokens
    modes = [Mode("generate(do_sample=False)", "transformers", their_generate(big_hf, n),
                  target=big_hf)]
    for name, small in drafts_hf.items():
        for k in ["default"] + ks:
            helper = assistant(small, k)
            label = "default schedule" if k == "default" else f"k = {k}"
            modes.append(Mode(f"assisted, {name}, {label}", "transformers",
                              their_generate(big_hf, n, assistant_model=helper), target=big_hf,
                              draft=helper, k=k, draft_name=name))
    return modes + [Mode(f"prompt lookup, {L} tokens", "transformers",
                         their_generate(big_hf, n, prompt_lookup_num_tokens=L), target=big_hf,
                         k=L, draft_name="prompt lookup") for L in lookups]


def adapter_modes(args, big_hf, drafts_hf, ks):
    n, target = args.new_tokens, hf.HFModel(big_hf)
    modes = [Mode("adapter: generate", "ours via the adapter",
                  lambda p: (sd.generate(target, p, n), None), target=big_hf)]
    for name, small in drafts_hf.items():
        draft = hf.HFModel(small)
        modes += [Mode(f"adapter: speculative, {name}, k = {k}", "ours via the adapter",
                       lambda p, d=draft, k=k: sd.speculative_generate(target, d, p, n, k=k),
                       target=big_hf, draft=small, k=k, draft_name=name) for k in ks]
    return modes


def native_modes(args, big, folder, log):
    """Plain decoding in torch and NumPy, and the --native speculative setups; a drafter that
    cannot load (heads not trained) is skipped with a note."""
    n, notes = args.new_tokens, []
    targets = {b: registry.with_backend(big, b) for b in ("torch", "numpy")}
    modes = [Mode(f"{label}: generate", "ours native",
                  lambda p, m=targets[b]: (sd.generate(m, p, n), None), target=targets[b])
             for b, label in (("torch", "torch"), ("numpy", "NumPy"))]
    for name, backend, k in parse_native(args.native):
        try:
            draft = by_name(name, folder, "numpy")
        except (ValueError, ImportError, OSError) as e:  # no trained heads, say
            notes.append(f"{name} skipped: {str(e).splitlines()[0]}")
            log(f"  {notes[-1]}")
            continue
        model = draft if hasattr(draft, "new_cache") else None
        label = "NumPy" if backend == "numpy" else "torch"
        modes.append(Mode(f"{label} target, {name}, k = {k}", "ours native",
                          lambda p, t=targets[backend], d=draft, k=k: sd.speculative_generate(
                              t, d, p, n, k=k),
                          target=targets[backend], draft=model, k=k, draft_name=name))
    return modes, notes


def parse_native(text):
    specs = []
    for item in filter(None, text.split(",")):
        parts = item.split("/")
        if len(parts) != 3 or parts[1] not in ("torch", "numpy") or not parts[2].isdigit() \
                or int(parts[2]) < 1:
            raise ValueError(f"--native takes drafter/backend/k items (backend torch or numpy, "
                             f"k >= 1), comma-separated, such as ngram/numpy/6; not {item!r}")
        check_name(parts[0])
        specs.append((parts[0], parts[1], int(parts[2])))
    return specs


# ----------------------------------------------------------------------------------------------
# Checking and timing


def check(mode, want):
    """Run every prompt once (this also warms the mode up) and compare with plain greedy
    decoding: our own modes must match (Mismatch otherwise); transformers' are recorded."""
    mode.differs = [i for i, (p, expected) in enumerate(zip(want["prompts"], want["outputs"]))
                    if not torch.equal(mode.run(p)[0].cpu(), expected)]
    if mode.differs and mode.ours:
        raise Mismatch(f"{mode.name} wrote something other than plain greedy decoding on prompt "
                       f"{mode.differs[0]}: a bug, please report it")
    return mode


class ForwardClock:
    """Seconds and calls inside a model's forward (a torch module: hooks; a NumpyGPT: its
    logits method wrapped), and the tokens it was fed, while the `with` block runs."""

    def __init__(self, model):
        self.model, self.seconds, self.calls, self.tokens, self.undo = model, 0.0, 0, 0, []

    def __enter__(self):
        m = self.model
        if isinstance(m, torch.nn.Module):
            def before(module, args, kwargs):
                ids = kwargs.get("input_ids", args[0] if args else None)
                self.tokens += ids.shape[-1] if ids is not None else 0
                self.started = time.perf_counter()

            def after(module, args, kwargs, output):
                self.seconds += time.perf_counter() - self.started
                self.calls += 1
            self.undo = [m.register_forward_pre_hook(before, with_kwargs=True).remove,
                         m.register_forward_hook(after, with_kwargs=True).remove]
        elif m is not None and hasattr(m, "logits"):     # beyond.fast_numpy.NumpyGPT
            # Wrapped in its class, not on the instance: a drafter may copy the model (the heads
            # widen a shallow copy's head), and a copy shares its config `c` with the original.
            kind, inner = type(m), type(m).logits

            def logits(model, idx, cache):
                if model.c is not m.c:
                    return inner(model, idx, cache)
                started = time.perf_counter()
                try:
                    return inner(model, idx, cache)
                finally:
                    self.seconds += time.perf_counter() - started
                    self.calls += 1
                    self.tokens += idx.shape[-1]
            kind.logits = logits
            self.undo = [lambda: setattr(kind, "logits", inner)]
        return self

    def __exit__(self, *exc):
        for undo in self.undo:
            undo()
        return False


def split(mode, prompts, n_new):
    """One more run of every prompt with the forward calls timed: microseconds per character
    inside the target's forward, the draft's and everything else, passes per character; for
    ours also what Stats counted (model calls and their bookkeeping)."""
    draft = mode.draft if mode.draft is not mode.target else None
    with machine.threads(), ForwardClock(mode.target) as target, ForwardClock(draft) as drafted:
        started = time.perf_counter()
        runs = [mode.run(p) for p in prompts]
        wall = time.perf_counter() - started
    per = 1e6 / n_new
    mode.split = {"wall_us": wall * per, "target_us": target.seconds * per,
                  "draft_us": drafted.seconds * per,
                  "rest_us": (wall - target.seconds - drafted.seconds) * per,
                  "target_passes": target.calls, "draft_passes": drafted.calls,
                  "chars_per_target_pass": n_new / max(1, target.calls)}
    stats = [s for _, s in runs if s is not None]
    if stats:
        mode.split["stats_target_us"] = sum(s.target_time for s in stats) * per
        mode.split["stats_draft_us"] = sum(s.draft_time for s in stats) * per
    return mode.split


def pair(first, second, repeats, prompts):
    """Time two modes alternately; each keeps its times; the median ratio first / second."""
    times = [[machine.times_of(lambda: [m.run(p) for p in prompts], 1)[0]
              for m in (first, second)] for _ in range(repeats)]
    first.times += [a for a, _ in times]
    second.times += [b for _, b in times]
    ratios = [a / b for a, b in times]
    return {"first": first.name, "second": second.name, "ratio": statistics.median(ratios),
            "spread": machine.spread(ratios)}


def fastest(modes, family_test):
    exact = [m for m in modes if family_test(m) and m.exact and m.times]
    return min(exact, key=lambda m: statistics.median(m.times)) if exact else None


def one_pass(big, big_hf, context=64, repeats=300):
    """Microseconds of one cached forward over one token after `context` cached ones:
    transformers' GPT-2, gpt.GPT and NumpyGPT; for the two torch models, also how much of it
    their transformer blocks take (hooks on each block)."""
    out = {}
    ids = torch.randint(0, big.c.vocab_size, (1, context + 1),
                        generator=torch.Generator().manual_seed(0))
    arg = hf.HFModel(big_hf).cache_arg
    kv = hf.DynamicKV()
    with machine.threads(), torch.inference_mode():
        big_hf(input_ids=ids[:, :context], use_cache=True, **{arg: kv.kv})
    kv.length = context

    def their_pass():
        kv.rollback(context)    # crop the token the last pass added
        with torch.inference_mode():
            big_hf(input_ids=ids[:, context:], use_cache=True, **{arg: kv.kv})
        kv.length = context + 1

    cache = big.new_cache(1)
    with machine.threads(), torch.inference_mode():
        big(ids[:, :context], cache=cache)

    def ours_pass():
        cache.rollback(context)
        with torch.inference_mode():
            big(ids[:, context:], cache=cache)
    for name, fn, blocks in (("transformers GPT2LMHeadModel", their_pass, big_hf.transformer.h),
                             ("gpt.GPT (torch)", ours_pass, big.transformer.h)):
        total = machine.median_time(fn, repeats)
        inside = []                              # per pass: seconds inside the blocks' forwards
        with contextlib.ExitStack() as stack, machine.threads():
            clocks = [stack.enter_context(ForwardClock(b)) for b in blocks]
            for _ in range(repeats):
                before = sum(c.seconds for c in clocks)
                fn()
                inside.append(sum(c.seconds for c in clocks) - before)
        out[name] = {"pass_us": total * 1e6, "blocks_us": statistics.median(inside) * 1e6,
                     "blocks": len(blocks)}
    numpy_big = registry.with_backend(big, "numpy")
    step = machine.pass_time(numpy_big, 1, repeats=repeats, context=context)
    out["NumpyGPT"] = {"pass_us": step * 1e6, "blocks_us": None,
                       "verify": {k: machine.pass_time(numpy_big, k + 1, repeats=repeats,
                                                       context=context) / step
                                  for k in CEILING_KS}}
    return out


# The draft lengths at which the bound on our fastest setup is measured (see ceiling()).
CEILING_KS = (1, 2, 4, 6, 8)


def ceiling(rows, passes):
    """What no drafter beside the NumPy big model can beat: one that costs nothing and is always
    right gains (k+1) / verify(k) over plain NumPy decoding (as drafters.limits says); alpha:
    the agreement such a drafter needs for the fastest-setup goal (nan: none suffices)."""
    verify = passes["NumpyGPT"]["verify"]
    k = max(verify, key=lambda k: (k + 1) / verify[k])
    gain = (k + 1) / verify[k]
    plain = next(r for r in rows if r["mode"] == "NumPy: generate")
    needed = GOALS["fastest"] / plain["vs_fastest_transformers"]   # over plain NumPy
    alphas = [common.alpha_for(needed, k, 0.0, v) for k, v in verify.items()]
    return {"k": k, "gain": gain, "chars_per_s": plain["chars_per_s"] * gain,
            "vs_theirs": plain["vs_fastest_transformers"] * gain,
            "alpha": min((a for a in alphas if a == a), default=math.nan)}


# ----------------------------------------------------------------------------------------------
# The comparison


def load(args, log):
    names = [n for n in args.drafts.split(",") if n]
    for name in names:
        if name not in presets.PRESETS or name == "big":
            raise ValueError(f"--drafts takes trained GPT presets ({', '.join(presets.PRESETS)} "
                             f"but big), not {name!r}: transformers' assistant must be a model")
    models = common.load_models(args, ["big"] + names, log=log)
    big = models.pop("big")
    with torch.no_grad():
        big_hf = hf.to_transformers(big)
        drafts_hf = {name: hf.to_transformers(m) for name, m in models.items()}
        x = torch.tensor([gpt.encode(gpt.decode(gpt.val_data[:big.c.block_size]))])
        difference = max((theirs(x).logits - ours(x)[0]).abs().max().item() for theirs, ours in
                         [(big_hf, big)] + [(drafts_hf[n], models[n]) for n in models])
    return big, big_hf, drafts_hf, difference


def compare(args, log=print):
    common.at_least_one(args, "prompts", "prompt_chars", "new_tokens", "repeats")
    ks = common.whole_numbers(args.ks, "ks")
    lookups = common.whole_numbers(args.lookups, "lookups")
    big, big_hf, drafts_hf, difference = load(args, log)
    window = big_hf.config.n_positions
    # Prompt lookup can feed guesses past max_length in its last rounds (measured here: up to
    # position prompt + new + L - 3, 0-based), and GPT-2 has no position past its window: keep
    # room for L - 1 more.
    longest = args.prompt_chars + args.new_tokens + max(lookups, default=1) - 1
    if longest > window:
        raise ValueError(f"--prompt_chars {args.prompt_chars} + --new_tokens {args.new_tokens} "
                         f"+ the longest --lookups - 1 make {longest} positions, more than "
                         f"GPT-2's {window}: transformers would fail past them")
    prompts = corpus.held_out_prompts(args.prompts, args.prompt_chars)
    n_new = args.new_tokens * len(prompts)
    with machine.threads():
        want = {"prompts": prompts, "outputs": [sd.generate(big, p, args.new_tokens)
                                                for p in prompts]}
    native, notes = native_modes(args, big, common.checkpoint_folder(args), log)
    modes = transformers_modes(args, big_hf, drafts_hf, ks, lookups) + \
        adapter_modes(args, big_hf, drafts_hf, ks) + native
    log(f"{len(prompts)} prompts of {args.prompt_chars} characters, {args.new_tokens} new "
        f"characters each, greedy, {machine.DECODE_THREADS} torch thread; logits of "
        f"transformers' copies within {difference:.1e} of ours")
    for mode in modes:
        with machine.threads():
            check(mode, want)
        if mode.differs:
            notes.append(f"transformers' {mode.name} wrote other characters than greedy "
                         f"decoding on {len(mode.differs)} of {len(prompts)} prompts (left out "
                         f"of the fastest exact mode)")
            log(f"  {notes[-1]}")
    named = {m.name: m for m in modes}
    greedy, plain = named["generate(do_sample=False)"], named["adapter: generate"]
    # Who is timed against whom: ours through the adapter against transformers with the same
    # model, draft and k; every other mode against generate(); then the two fastest exact.
    comparisons = [(greedy, plain, "adapter plain")]
    comparisons += [(named[f"assisted, {m.draft_name}, k = {m.k}"], m, "adapter speculative")
                    for m in modes if m.family == "ours via the adapter" and m.k is not None]
    timed = {id(m) for pair_ in comparisons for m in pair_[:2]}
    comparisons += [(greedy, m, "") for m in modes if id(m) not in timed]
    pairs = []
    with machine.Busy() as busy:
        for first, second, goal in comparisons:
            pairs.append({**pair(first, second, args.repeats, prompts), "goal": goal})
            log(f"  {second.name:44} {n_new / statistics.median(second.times):>8,.0f} "
                f"characters/s, {pairs[-1]['ratio']:.2f}x {first.name}")
        theirs, ours = fastest(modes, lambda m: not m.ours), fastest(modes, lambda m: m.ours)
        if theirs is not None:
            pairs.append({**pair(theirs, ours, args.repeats, prompts), "goal": "fastest"})
            log(f"  ours fastest exact ({ours.name}) against transformers' ({theirs.name}): "
                f"{pairs[-1]['ratio']:.2f}x")
    note = busy.note([p["spread"] for p in pairs])
    if note:
        notes.append(note)
        log(note)
    log("\nwhere the time goes (microseconds per character):")
    for mode in modes:
        s = split(mode, prompts, n_new)
        log(f"  {mode.name:44} {s['wall_us']:7.0f} = target forward {s['target_us']:6.0f} + "
            f"draft forward {s['draft_us']:6.0f} + everything else {s['rest_us']:6.0f}")
    passes = one_pass(big, big_hf, context=min(64, big.c.block_size - 1),
                      repeats=30 if args.quick else 300)
    log(f"  one forward over 1 token: {passes_text(passes)}")
    return modes, pairs, passes, notes, {"difference": difference, "n_new": n_new,
                                         "prompts": len(prompts), "ks": ks, "lookups": lookups}


def rows_of(modes, n_new):
    greedy = next(m for m in modes if m.name == "generate(do_sample=False)")
    theirs = fastest(modes, lambda m: not m.ours)
    theirs_s = statistics.median(theirs.times) if theirs else float("nan")
    rows = []
    for m in modes:
        seconds = statistics.median(m.times)
        rows.append({"mode": m.name, "family": m.family, "draft": m.draft_name, "k": m.k,
                     "seconds": seconds, "chars_per_s": n_new / seconds,
                     "vs_generate": statistics.median(greedy.times) / seconds,
                     "vs_fastest_transformers": theirs_s / seconds,
                     "identical": m.exact, "differs_on": m.differs, "repeats": len(m.times),
                     **m.split})
    return rows


def goals(pairs):
    """Each goal with its measured, paired ratio(s) and whether it was met."""
    out = {}
    for name, target in GOALS.items():
        mine = [p for p in pairs if p["goal"] == name]
        if mine:
            out[name] = {"goal": target, "pairs": mine,
                         "met": all(p["ratio"] >= target for p in mine)}
    return out


def goal_words(goal):
    """A goal of goals() in words: the goal, each measured ratio (which mode against which),
    met or not."""
    measured = ", ".join(f"{p['ratio']:.2f}x ({p['second']} against {p['first']})"
                         for p in goal["pairs"])
    return f"goal {goal['goal']:g}x, measured {measured}: **{'met' if goal['met'] else 'not met'}**"


# ----------------------------------------------------------------------------------------------
# The report


def plot(args, rows):
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.5))
    names = [r["mode"] + ("" if r["identical"] else " (output differs)") for r in rows]
    ax.barh(range(len(rows)), [r["chars_per_s"] for r in rows],
            color=[COLOURS[r["family"]] for r in rows],
            edgecolor=["red" if not r["identical"] else "none" for r in rows])
    for i, r in enumerate(rows):
        ax.annotate(f"{r['chars_per_s']:,.0f}", (r["chars_per_s"], i), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    speeds = [r["chars_per_s"] for r in rows]
    theirs = [r["chars_per_s"] for r in rows if r["family"] == "transformers" and r["identical"]]
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    labels = list(COLOURS)
    if theirs:
        goal = GOALS["fastest"] * max(theirs)
        handles.append(ax.axvline(goal, color="grey", ls="--", lw=1))
        labels.append(f"goal: {GOALS['fastest']:.0f}x transformers' fastest exact")
        speeds.append(goal)
    ax.set_xlim(min(speeds) / 1.5, max(speeds) * 1.6)
    ax.set(xlabel="characters per second (log scale), greedy, 1 torch thread",
           title="The same weights: transformers' generate() against our decoders")
    ax.legend(handles=handles, labels=labels, fontsize=8, loc="upper right")
    fig.tight_layout()
    return common.figure(args, "transformers.png", fig)


GOAL_WORDS = {"fastest": "our fastest exact setup against transformers' fastest exact mode",
              "adapter plain": "our plain decoding through the adapter against "
                               "`generate(do_sample=False)`",
              "adapter speculative": "our speculative decoding through the adapter against "
                                     "assisted generation, same draft and k"}


SECTION = Path(__file__).parent / "sections" / "transformers.md"   # the report's prose


def modes_table(rows):
    """Every mode's speed and its output check (the report's and docs/RESULTS.md's table)."""
    return common.markdown_table(
        ["family", "mode", "characters/s", "vs generate()", "vs transformers' fastest exact",
         "characters per target pass", "identical"],
        [[r["family"], r["mode"], f"{r['chars_per_s']:,.0f}", f"{r['vs_generate']:.2f}x",
          f"{r['vs_fastest_transformers']:.2f}x", f"{r['chars_per_target_pass']:.2f}",
          "yes" if r["identical"] else f"**no** (prompts {r['differs_on']})"] for r in rows])


def split_table(rows, stats=True):
    """Where each mode's time goes, microseconds per character; with what our loop counted
    (Stats) where stats."""
    header = ["mode", "wall", "target forward", "draft forward", "everything else",
              "in the models"] + (["Stats: draft / target"] if stats else [])
    cells = []
    for r in rows:
        cells.append([r["mode"], *(f"{r[key]:,.0f}" for key in ("wall_us", "target_us",
                                                               "draft_us", "rest_us")),
                      f"{(r['target_us'] + r['draft_us']) / r['wall_us']:.0%}"])
        if stats:
            cells[-1].append(f"{r['stats_draft_us']:,.0f} / {r['stats_target_us']:,.0f}"
                             if "stats_target_us" in r else "")
    return common.markdown_table(header, cells)


def markdown(rows, pairs, passes, notes, info):
    text = report.fill(SECTION, **info, per_prompt=info["n_new"] // info["prompts"],
                       schedule=default_schedule(), goal_lines="\n".join(
                           f"- {GOAL_WORDS[name]}: {goal_words(goal)}"
                           for name, goal in goals(pairs).items()),
                       table=modes_table(rows), split_table=split_table(rows),
                       passes=passes_text(passes),
                       **explained({r["mode"]: r for r in rows}, passes, info["bound"]))
    return "\n\n".join([text, *(["\n".join(f"- {n}" for n in notes)] if notes else [])])


def passes_text(passes):
    return "; ".join(f"{name} {p['pass_us']:.0f} us" + ("" if p["blocks_us"] is None else
                                                       f" ({p['blocks_us']:.0f} in its blocks)")
                     for name, p in passes.items())


def explained(by_mode, passes, bound):
    """The figures the report's "Why." paragraph explains the ratios with, from the split."""
    g, a = by_mode["generate(do_sample=False)"], by_mode["adapter: generate"]
    theirs, ours = passes["transformers GPT2LMHeadModel"], passes["gpt.GPT (torch)"]
    assisted = ""
    spec = [(r, by_mode.get(f"assisted, {r['draft']}, k = {r['k']}")) for r in by_mode.values()
            if r["family"] == "ours via the adapter" and r["k"] is not None]
    if spec:
        r, t = max(spec, key=lambda rt: rt[0]["k"])
        assisted = (
            f"With a draft ({r['draft']}, k = {r['k']}) both make the same rounds "
            f"({t['chars_per_target_pass']:.2f} and {r['chars_per_target_pass']:.2f} characters "
            f"per target pass), but assisted generation runs the draft through a full "
            f"`generate()` call every round: {t['rest_us']:.0f} us per character around the "
            f"models against our {r['rest_us']:.0f}. ")
    verify = passes["NumpyGPT"]["verify"]
    return {"g": g, "a": a, "theirs": theirs, "ours": ours, "numpy": passes["NumpyGPT"],
            "loop_bound": g["wall_us"] / a["target_us"],
            "theirs_around": theirs["pass_us"] - theirs["blocks_us"],
            "ours_around": ours["pass_us"] - ours["blocks_us"],
            "extra": theirs["pass_us"] - ours["pass_us"],
            "extra_share": (theirs["pass_us"] - ours["pass_us"]) / ours["pass_us"],
            "assisted": assisted, "verify": ", ".join(f"{v:.2f}" for v in verify.values()),
            "verify_ks": ", ".join(map(str, verify)),
            "needed": f"A free drafter would need to agree on {bound['alpha']:.1%} of its guesses "
                      f"to reach {GOALS['fastest']:.0f}x." if bound["alpha"] == bound["alpha"]
                      else f"No drafter at k <= {max(verify)} can reach {GOALS['fastest']:.0f}x."}


def run(args, log=print):
    common.shrink_if_quick(args, prompts=2, new_tokens=16, repeats=1)
    if args.quick:
        args.ks, args.lookups = "2", "2"
        args.native = "ngram/numpy/4,distilled/numpy/2,heads/torch/2"
    tf = hf.transformers()
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity_error()   # no advice on generation configs between the figures
    try:
        modes, pairs, passes, notes, info = compare(args, log)
    finally:
        tf.logging.set_verbosity(verbosity)
    rows = rows_of(modes, info["n_new"])
    bound = info["bound"] = ceiling(rows, passes)
    log(f"  the bound: a free, always-right drafter beside the NumPy big model gains at most "
        f"{bound['gain']:.2f}x (k = {bound['k']}): {bound['chars_per_s']:,.0f} characters/s, "
        f"{bound['vs_theirs']:.1f}x transformers' fastest exact mode; a free drafter needs "
        f"alpha {bound['alpha']:.3f} for {GOALS['fastest']:.0f}x")
    plot(args, rows)
    numbers = {"rows": rows, "pairs": pairs, "goals": goals(pairs), "one_pass": passes,
               "notes": notes, **info}
    common.save_json(args, "transformers.json", numbers)
    return {"numbers": numbers, "markdown": markdown(rows, pairs, passes, notes, info)}


def main(argv=None):
    args = common.parse_args(__doc__, Args, argv)
    report.record(args, "transformers", run(args))


if __name__ == "__main__":
    cli.run(main)
