"""
classroom/checks_exercise_3.py: the checks of exercise 3, the NumPy forward pass and the
decoders built on it (parts 3a, 3b, 3c). The models the decoders get are the grader's
stand-ins: it computes their logits and counts every pass and every token fed.
"""

import numpy as np

from classroom import making
from classroom.checks import (
    LETTERS,
    Fail,
    check,
    chi_square_fails,
    fix_first,
    kept_as_often,
    named,
    text,
)
from classroom.checks_part_one import VERDICT_CHECKS

# ----------------------------------------------------------------------------------------------
# Exercise 3: build, with NumPy alone


WIDTH_SCALED = ("these are the logits of attention scaled by sqrt(C), the model's width: scale "
                "each head's scores by sqrt(head size) = sqrt(C / n_head)")
FROM_ZERO = ("these are the logits of positions that start at 0 in every call: the new tokens "
             "sit at positions cache.length, cache.length + 1, ... (wpe[start:start + T])")
NO_MASK = ("these are the logits of attention without its causal mask: token i may attend to "
           "itself and the tokens before it only (set the later ones' scores to -inf)")


def logits_close(got, want, what, suspects=(), hint=None):
    """Fail unless got is want within 1e-5. suspects: (logits, hint) of known mistakes (an
    array, a function that makes it, or None): when got is one of them, its hint names it."""
    got = np.asarray(got)
    if got.shape != want.shape:
        raise Fail(f"{what}: logits of shape {want.shape} (new tokens, vocabulary)",
                   f"shape {got.shape}", "one row per new token, one column per vocabulary entry")
    if not np.isfinite(got).all():
        raise Fail(f"{what}: finite logits", "nan or inf", "look for a division by zero or a "
                   "mask applied after the softmax")
    error = float(np.abs(got - want).max())
    if error > 1e-5:
        row = int(np.abs(got - want).max(-1).argmax())
        for logits, named in suspects:
            logits = logits() if callable(logits) else logits
            if logits is not None and np.abs(got - logits).max() < 1e-5:
                hint = named
                break
        hint = hint or ("positions start at cache.length; attention may look at earlier tokens "
                        "only; LayerNorm uses the variance, not the std")
        raise Fail(f"{what}: the torch model's logits within 1e-5", f"off by {error:.2g} (first "
                   f"at new token {row})", hint)


LAYER_NORM_HINTS = {
    "no weight": "multiply the normalised rows by weight, then add bias",
    "no bias": "add bias after multiplying by weight",
    "bias first": "that adds bias before multiplying by weight: (x - mean) / sqrt(variance + "
                  "eps) * weight + bias",
    "the std": "that divides by the std plus eps: divide by sqrt(variance + eps)",
}


@check("3a", 1, torch_free=True)
def layer_norm_normalises(ctx):
    """The student's layer_norm on rows of mean 1 and spread 3, a random weight and bias."""
    x = ctx.rng.normal(1, 3, (4, 12))
    weight, bias = ctx.rng.uniform(0.5, 1.5, 12), ctx.rng.normal(0, 0.5, 12)
    got = np.asarray(ctx.student("numpy_speculative").layer_norm(x, weight, bias), dtype=float)
    if got.shape != x.shape:
        raise Fail("layer_norm keeps the shape of x", f"{got.shape}", "one row out per row in")
    answer = ctx.ref.layer_norm(x, weight, bias)
    if not np.abs(got - answer["want"]).max() < 1e-5:
        rows = (got - bias) / weight               # what it made of the rows before weight, bias
        mean, variance = float(np.abs(rows.mean(-1)).max()), float(rows.var(-1).mean())
        raise Fail("rows of mean 0 and variance 1, then times weight plus bias",
                   f"mean up to {mean:.3g}, variance {variance:.3g}",
                   named([(got, answer["mistakes"])], LAYER_NORM_HINTS,
                         "subtract each row's mean" if mean > 1e-4 else
                         f"rows of variance {variance:.3g}, not 1: divide by sqrt(variance + "
                         "eps), not by the std" if abs(variance - 1) > 1e-4 else
                         "multiply by weight, then add bias"))


def forward_close(ctx, got, want, what, suspects=(), hint=None):
    """logits_close, whose hint says first where the student's layer_norm is wrong."""
    try:
        logits_close(got, want, what, suspects, hint)
    except Fail as e:
        e.hint = fix_first(ctx, "layer_norm", (layer_norm_normalises,), e.hint, "forward calls")
        raise


@check("3a", 3, torch_free=True)
def forward_matches_torch(ctx):
    ns = ctx.student("numpy_speculative")
    expected = ctx.expected_logits()
    tokens = expected["tokens"].tolist()
    for name in ("target", "draft"):
        forward_close(ctx, ns.forward(ctx.model(name), tokens), expected[name],
                      f"the {name} model over {len(tokens)} tokens",
                      [(expected.get(f"{name}_width_scaled"), WIDTH_SCALED),
                       (lambda name=name: making.mistaken(ctx.fixture_dir, name, tokens,
                                                          [(0, len(tokens))], "no mask"),
                        NO_MASK)])


@check("3a", 2, torch_free=True)
def forward_continues_its_cache(ctx):
    ns = ctx.student("numpy_speculative")
    expected = ctx.expected_logits()
    tokens, model, want = expected["tokens"].tolist(), ctx.model("target"), expected["target"]
    cache = ns.Cache(model)
    pieces = [ns.forward(model, tokens[a:b], cache) for a, b in ((0, 5), (5, 6), (6, 11))]
    # mistakes to name, fed in this check's pieces (with positions from 0, the last piece as
    # after forget_from(6): attention is causal, so its first 5 rows are those of (6, 11))
    def zero():
        return making.mistaken(ctx.fixture_dir, "target", tokens,
                               [(0, 5), (5, 6), (6, len(tokens))], "from 0")
    scaled = expected.get("target_width_scaled")
    first = np.asarray(pieces[0])
    started = first.shape == (5, want.shape[1]) and np.abs(first - want[:5]).max() < 1e-5
    forward_close(ctx, np.concatenate(pieces), want[:11],
                  "tokens fed through one cache in three pieces (5, 1 and 5 tokens)",
                  [(lambda: zero()[:11], FROM_ZERO),
                   (lambda: making.mistaken(ctx.fixture_dir, "target", tokens,
                                            [(0, 5), (5, 6), (6, 11)], "no mask"), NO_MASK),
                   (None if scaled is None else scaled[:11], WIDTH_SCALED)],
                  "the first 5 tokens, fed to an empty cache, are right, the ones fed after "
                  "them are not: they sit at positions cache.length + i and attend to the "
                  "cached keys and values as well as their own" if started else None)
    cache.forget_from(6)
    forward_close(ctx, ns.forward(model, tokens[6:], cache), want[6:],
                  "after forget_from(6), the rest fed again", [(lambda: zero()[6:], FROM_ZERO)],
                  "the same tokens fed in pieces were right (above): after forget_from(6) the "
                  "cache must hold the first 6 tokens' keys and values only (keep them in "
                  "cache.keys and cache.values, which forget_from cuts)")


def greedy_run(ctx, draft_name, case, k=None):
    """The student's speculative_greedy on one case with stand-ins of the fixture models (the
    grader computes their logits and counts their passes): (reported passes, recorder), the
    output checked on the way."""
    ns = ctx.student("numpy_speculative")
    models, recorder = ctx.standins({"target": "target", "draft": draft_name})
    prompt, n, k = case["prompt"], case["n"], k or case["k"]
    result = ns.speculative_greedy(models["target"], models["draft"], list(prompt), n, k)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise Fail("speculative_greedy returns (tokens, target passes)", repr(result)[:80])
    tokens, passes = result[0], result[1]
    tokens = list(tokens) if isinstance(tokens, (list, tuple, np.ndarray)) else [tokens]
    want = case["expected"]
    if tokens != want:
        i = next((i for i, (a, b) in enumerate(zip(tokens, want)) if a != b),
                 min(len(tokens), len(want)))
        new = len(tokens) - len(prompt)            # positions in the new text, from 1
        where = (f"from new token {i - len(prompt) + 1}" if i < min(len(tokens), len(want))
                 and i >= len(prompt) else "in the prompt (return the prompt, then the new "
                 "tokens)" if i < min(len(tokens), len(want)) else
                 f"in length ({new} new tokens, not {n})")
        hint = ("the output must not depend on the draft: compare guess i with the big "
                "model's choice at position i (not i + 1), forget rejected tokens in both "
                "caches, and score with score() so both decoders use the same windows")
        if i + k >= making.BLOCK:  # this round's check reached past the window
            hint += (f"; it goes wrong where the context reaches past the window "
                     f"({making.BLOCK} tokens): let score() pick every context, for "
                     f"drafting and for verifying alike, as generate() does")
        raise Fail(f"the big model's own greedy output (prompt {text(prompt)!r}, {n} new "
                   f"tokens, k = {k}, draft {draft_name}): {text(want[len(prompt):])!r}",
                   f"differs {where}: {text(tokens[len(prompt):])!r}",
                   fix_first(ctx, "greedy_verdict", VERDICT_CHECKS, hint))
    return passes, recorder


def check_greedy(ctx, draft_name, ks=(None,)):
    """The output is the big model's own (every case first: what it writes matters most), the
    reported passes are the rounds the draft's agreement makes, and (where the grader counts
    them) the big model's forward passes and tokens fed match that count while the draft
    proposed every guess: plain decoding with a made-up count fails."""
    runs = []
    for case in ctx.cases["greedy"]:
        for k in ks:
            passes, recorder = greedy_run(ctx, draft_name, case, k)
            counts = None if recorder is None else (dict(recorder.calls), dict(recorder.tokens))
            runs.append((case, k or case["k"], passes, counts))
    what = {"target": "a perfect draft (the big model itself)",
            "hopeless": "a draft that never agrees"}.get(draft_name, "the draft")
    for case, k, passes, counts in runs:
        done = ctx.ref.greedy_rounds(case["expected"], draft_name, len(case["prompt"]), k)
        if passes != done["rounds"]:
            raise Fail(f"{done['rounds']} passes of the big model for {case['n']} tokens with "
                       f"k = {k} and {what}", f"{passes!r}",
                       "count one pass per verification; when all k guesses are kept the big "
                       "model adds a bonus token, so a round writes k + 1")
        if counts is not None:
            counted_passes(Counts(*counts), done, f"{case['n']} tokens with k = {k} and {what}")


class Counts:
    """What a making.Recorder counted, kept apart."""

    def __init__(self, calls, tokens):
        self.calls, self.tokens = calls, tokens


def counted_passes(recorder, done, what):
    """Fail unless the stand-ins' forward passes, counted here, are those of `done`."""
    calls, rounds, crossing = recorder.calls["target"], done["rounds"], done["crossing"]
    if not rounds <= calls <= rounds + crossing:
        raise Fail(f"{rounds} forward passes of the big model, one a round (or "
                   f"{rounds + crossing}: {crossing} rounds check across a window jump, two "
                   f"passes each) for {what}", f"{calls} forward passes, counted by the grader",
                   "score the last token and every guess of a round in one score() of the "
                   "big model; never decode with it token by token")
    if recorder.tokens["target"] > done["fed"]:
        raise Fail(f"the big model fed {done['fed']} tokens through its cache for {what} (each "
                   "token once, a window's again after it jumps)",
                   f"{recorder.tokens['target']} tokens fed, counted by the grader",
                   "the big model recomputed tokens it had: score each round with score(target, "
                   "target_cache, seq, n), which feeds the cache only what it lacks, and after "
                   "it forget the rejected guesses only, cache.forget_from(n + kept)")
    if recorder.calls["draft"] < done["guesses"]:
        raise Fail(f"the draft proposes {done['guesses']} guesses (one forward pass each, at "
                   f"least) for {what}", f"{recorder.calls['draft']} forward passes of the "
                   "draft, counted by the grader", "each round, the draft proposes min(k, tokens "
                   "left - 1) tokens, "
                   "one score() of the draft each")


@check("3b", 3, torch_free=True)
def greedy_is_the_big_models_output(ctx):
    check_greedy(ctx, "draft")


@check("3b", 2, torch_free=True)
def greedy_with_a_perfect_draft(ctx):
    check_greedy(ctx, "target")    # the big model drafts for itself: every guess is kept


@check("3b", 1, torch_free=True)
def greedy_with_a_draft_that_never_agrees(ctx):
    check_greedy(ctx, "hopeless")


GRID = 50   # uniforms per axis: 2,500 (u1, u2) pairs at the cells' midpoints, off by 1/100 at most


def verify_pairs(rng):
    """Target/draft distribution pairs (k = 1 and 2) where the usual mistakes show."""
    V = 4
    peaked = np.array([0.7, 0.1, 0.1, 0.1])
    pairs = [(np.stack([peaked, np.full(V, 0.25)]), np.roll(peaked, 1)[None]),
             (np.stack([np.array([0.5, 0.5, 0, 0]), peaked]), np.array([[0, 0.2, 0.3, 0.5]])),
             (np.stack([peaked, peaked]), peaked[None])]
    for _ in range(2):
        target, draft = rng.dirichlet(np.ones(V), 2), rng.dirichlet(np.ones(V) * 0.5, 1)
        pairs.append((target, draft))
    return pairs


@check("3c", 3, torch_free=True)
def verify_keeps_the_target_distribution_exactly(ctx):
    """Every (draft token, u1, u2) on a grid: the first token's distribution must be the
    target's, and after a kept guess the bonus token's must be the target's next one."""
    grid = (np.arange(GRID) + 0.5) / GRID
    for target_probs, draft_probs in verify_pairs(ctx.rng):
        V = target_probs.shape[1]
        first, bonus, kept_mass = np.zeros(V), np.zeros(V), 0.0
        outcomes = ctx.helper("verify_grid", "numpy_speculative", "verify", target_probs,
                              draft_probs, grid)
        if not isinstance(outcomes, dict) or "draws" in outcomes:
            raise Fail("verify draws one uniform to test each guess and one to sample the "
                       "token it adds", "more draws than that", "use rng.random() only")
        if "bad" in outcomes:
            raise Fail("verify returns a pair of whole numbers (kept, token)", outcomes["bad"],
                       "return kept, token")
        for x, pairs in outcomes.items():
            pairs = np.asarray(pairs)
            if not (isinstance(x, int) and 0 <= x < V and pairs.shape == (len(grid) ** 2, 2)
                    and ((0 <= pairs) & (pairs < V)).all() and (pairs[:, 0] <= 1).all()):
                raise Fail("verify returns (kept, token): kept 0 or 1 for one guess, a token "
                           "of the vocabulary", "other values")
            weight = draft_probs[0, x] / len(grid) ** 2
            kept = pairs[:, 0] == 1
            first[x] += weight * kept.sum()
            np.add.at(bonus, pairs[kept, 1], weight)
            kept_mass += weight * kept.sum()
            np.add.at(first, pairs[~kept, 1], weight)
        if abs(sum(draft_probs[0, x] for x in outcomes) - 1) > 1e-9:
            raise Fail("verify called for every token the draft can propose", "fewer")
        if float(np.abs(first - target_probs[0]).max()) > 0.03:
            raise Fail(f"first token distributed as the target's {np.round(target_probs[0], 3)}"
                       f" (draft's: {np.round(draft_probs[0], 3)})", f"{np.round(first, 3)}",
                       "keep a guess with probability min(1, target/draft); after a rejection "
                       "draw from max(0, target - draft), renormalised (not from the target)")
        kept_as_often(ctx, kept_mass, target_probs[0], draft_probs[0], 0.02, "on a grid of draws")
        if kept_mass > 0.05:
            bonus /= kept_mass
            if np.abs(bonus - target_probs[1]).max() > 0.05:
                raise Fail(f"after a kept guess, the bonus token distributed as the target's "
                           f"next {np.round(target_probs[1], 3)}", f"{np.round(bonus, 3)}",
                           "when every guess is kept, sample one more token from the target's "
                           "distribution at the next position")


VERIFY_CHECKS = (verify_keeps_the_target_distribution_exactly,)   # verify's, for fix_first


def draft_was_asked(recorder):
    """Sampling from the big model alone has the right distribution, and is not the exercise."""
    if recorder is not None and recorder.calls["draft"] == 0:
        raise Fail("guesses sampled from the draft's distribution", "the draft was never "
                   "called (counted by the grader)", "the draft proposes k tokens a round, "
                   "one score() each; the big model checks them in one pass")


def sampled_pairs(ctx, runs, **options):
    """Counts (V, V) of the first two tokens of `runs` runs of the student's speculative_sample
    with the fixture models (3 new tokens, k = 2)."""
    models, recorder = ctx.standins({"target": "target", "draft": "draft"}, memo=True)
    prompt = ctx.cases["sampling"]["prompt"]
    rng = ctx.worker_rng(17)
    outputs = ctx.helper("sample_many", "numpy_speculative", "speculative_sample",
                         models["target"], models["draft"], prompt, 3, 2, rng, runs, options)
    if isinstance(outputs, str):
        raise Fail("speculative_sample returns the list of tokens", outputs)
    draft_was_asked(recorder)
    counts = np.zeros((len(LETTERS), len(LETTERS)))
    for out in outputs:
        if len(out) != len(prompt) + 3 or not all(isinstance(t, int) and 0 <= t < len(LETTERS)
                                                  for t in out):
            raise Fail(f"{len(prompt) + 3} tokens (prompt + 3 new)", f"{len(out)}: {out}"[:80],
                       "stop when max_new_tokens are written; a round adds kept guesses plus "
                       "one token")
        counts[out[len(prompt)], out[len(prompt) + 1]] += 1
    if counts.sum() != runs:
        raise Fail(f"{runs} runs", f"{int(counts.sum())}")
    return counts


@check("3c", 1, torch_free=True)
def sampling_has_the_target_distribution(ctx):
    for name, options in (("plain", {"temperature": 1.0}),
                          ("top_k", {"temperature": 0.8, "top_k": 3})):
        probs = np.array(ctx.cases["sampling"][name])
        counts = sampled_pairs(ctx, 2000, **options)
        if chi_square_fails(counts, probs):
            worst = np.unravel_index(np.abs(counts / counts.sum() - probs).argmax(), probs.shape)
            raise Fail(f"the first two tokens distributed as the big model samples them "
                       f"({', '.join(f'{k}={v}' for k, v in options.items())})",
                       f"{int(counts.sum())} runs: {text(worst)!r} came "
                       f"{counts[worst] / counts.sum():.3f} of the time, the big model "
                       f"gives it {probs[worst]:.3f}",
                       fix_first(ctx, "verify", VERIFY_CHECKS, "the draft must sample its "
                                 "guesses from the same warped distribution that verify() is "
                                 "given (not its argmax, not an unfiltered one)",
                                 "speculative_sample calls"))


class Draws:
    """An rng for the student's code that counts its draws (random() only, as the docstrings
    ask: sample() and verify() need nothing else)."""

    def __init__(self, rng):
        self.rng, self.count = rng, 0

    def random(self):
        self.count += 1
        return float(self.rng.random())


@check("3c", 1, torch_free=True)
def sampling_with_a_perfect_draft(ctx):
    """The big model drafts for itself: every guess is kept (min(1, p/p) = 1), so each round of
    k guesses draws 2k + 1 numbers (k guesses, k tests, one bonus) and takes one pass of the big
    model. Sampling from the big model alone, one token a pass, fails."""
    ns = ctx.student("numpy_speculative")
    models, recorder = ctx.standins({"target": "target", "draft": "target"})
    prompt = ctx.cases["sampling"]["prompt"]
    for n, k in ((12, 3), (2 * making.BLOCK, 4)):
        done = ctx.ref.perfect_rounds(len(prompt), n, k)
        draws = Draws(ctx.worker_rng(n))
        out = ns.speculative_sample(models["target"], models["draft"], list(prompt), n, k,
                                    ctx.lend(draws, ("random",)))
        out = list(out) if isinstance(out, (list, tuple, np.ndarray)) else [out]
        if len(out) != len(prompt) + n:
            raise Fail(f"{len(prompt) + n} tokens (prompt + {n} new)", f"{len(out)}")
        if recorder is None:
            continue
        what = f"{n} tokens with k = {k} and a draft equal to the big model"
        if draws.count != done["draws"]:
            raise Fail(f"{done['draws']} draws of rng.random() for {what} ({done['rounds']} "
                       "rounds, every guess kept)", f"{draws.count} draws",
                       fix_first(ctx, "verify", VERIFY_CHECKS, "the draft draws one number per "
                                 "guess, verify one per guess tested and one for the token the "
                                 "big model adds", "speculative_sample calls"))
        counted_passes(recorder, done, what)
        recorder.reset()


@check("3c", 1, torch_free=True)
def sampling_draws_from_the_given_rng(ctx):
    ns = ctx.student("numpy_speculative")
    models, recorder = ctx.standins({"target": "target", "draft": "draft"})
    target, draft = models["target"], models["draft"]
    prompt = ctx.cases["sampling"]["prompt"]

    def run(seed):
        out = ns.speculative_sample(target, draft, list(prompt), 12, 3,
                                    np.random.default_rng(seed))
        return list(out) if isinstance(out, (list, tuple, np.ndarray)) else [out]
    outputs = {tuple(run(seed)) for seed in range(8)}
    draft_was_asked(recorder)
    if run(3) != run(3) or len(outputs) < 4:
        raise Fail("the same rng seed gives the same text, other seeds other texts",
                   f"{len(outputs)} different texts from 8 seeds",
                   "draw every random number from the rng argument; never reseed")


