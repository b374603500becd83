"""
classroom/checks.py: the checks of every part, each a function that passes or raises Fail.

A check tests a property or compares with an independent reference (the torch model through
fixtures.py, exact arithmetic, an enumeration of every random draw), never with the reference
solution, which the student repository does not have. Each one says, when it fails, what was
expected, what happened and where to look. Points belong to checks; a part's checks add up to
its points (parts.py). Checks marked torch_free run with torch and the project's own decoding
unimportable (exercise 3 is built with NumPy alone).

Hidden checks (the teacher's only) sit between the HIDDEN markers: `build` removes them.
"""

import contextlib
import importlib
import json
import math
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from classroom import fixtures, helpers, making, parts, wire
from classroom.helpers import FakeGPU  # (notebook 6 shows it from here)

LETTERS = fixtures.VOCAB
PUBLIC_SEED = 0   # the public checks' seed, which a student's own `make check` runs
SHOWN = 300       # characters of what was expected, what came back or a hint that a student sees


class Skip(Exception):
    """A check that cannot run on this machine (the GPU check without a GPU): no points."""


class Fail(Exception):
    """A failed check: what was expected, what happened, and a hint."""

    def __init__(self, expected, got, hint=""):
        super().__init__(expected)
        self.expected, self.got, self.hint = expected, got, hint


@dataclass
class Check:
    name: str
    part: str
    points: int
    function: object
    torch_free: bool = False
    hidden: bool = False


CHECKS = {}


def check(part, points, *, torch_free=False, hidden=False):
    def register(function):
        CHECKS[function.__name__] = Check(function.__name__, part, points, function, torch_free,
                                          hidden)
        return function
    return register


class Context:
    """What a check gets: its seed, its fixtures (the expected values stay in the grader's
    process), and the student's code, which a subclass reaches:

    - student(module): the module whose functions the check calls;
    - model(name): a fixture model with its weights, as the exercise's Model;
    - standins(roles, memo=False): {role: model} for speculative decoding, and a
      making.Recorder that counts each role's forward passes, or None where nothing counts
      them (a notebook's kernel); memo: the worker asks once per window (nothing is counted);
    - helper(name, module, function, *args): helpers.NAME(module.function, *args) beside the
      student's code;
    - lend(obj, methods): obj as the student's code may use it (only those methods);
    - on_gpu(gpu): with torch.cuda standing in for gpu (a helpers.FakeGPU that stays here).

    Random numbers the student's code sees come from worker_rng(): nothing derived from a hidden
    seed crosses to the worker.

    LocalContext runs them in this process (a notebook's check cell); runner.py's RemoteContext
    in a worker that holds nothing but the student's copy."""

    def __init__(self, seed, fixture_dir):
        self.seed, self.fixture_dir = seed, Path(fixture_dir)
        self.rng = np.random.default_rng(seed)
        self.cases = fixtures.load(fixture_dir)
        self._torch = {}

    def worker_rng(self, salt):
        """A generator to hand to the student's code (or draw its numbers from): at the public
        seed, one of its own (anyone may know it); at any other, one from a fresh random key, so
        that no state the student's code sees leads back to the hidden seed."""
        key = [self.seed, salt] if self.seed == PUBLIC_SEED else secrets.randbits(128)
        return np.random.default_rng(key)

    def expected_logits(self):
        with np.load(self.fixture_dir / "logits.npz", allow_pickle=False) as f:
            return {k: f[k] for k in f.files}

    def torch_model(self, name):
        if name not in self._torch:
            self._torch[name] = making.torch_model(self.fixture_dir, name)
        return self._torch[name]

    def model_files(self, name):
        """(params, config, vocab) of fixture model `name`, read here (numbers only)."""
        with np.load(self.fixture_dir / f"{name}.npz", allow_pickle=False) as f:
            params = {k: f[k] for k in f.files if not k.startswith("meta.")}
            return params, json.loads(str(f["meta.config"])), json.loads(str(f["meta.vocab"]))


class LocalContext(Context):
    """The student's code in this process. overrides: {function name: function} used instead
    of the module's own, for the functions a student wrote in a notebook cell."""

    def __init__(self, seed, fixture_dir, overrides=None):
        super().__init__(seed, fixture_dir)
        self.overrides = overrides or {}

    def student(self, module):
        imported = importlib.import_module(module)
        return _Overridden(imported, self.overrides) if self.overrides else imported

    def model(self, name):
        return self.student("numpy_speculative").load(self.fixture_dir / f"{name}.npz")

    def standins(self, roles, memo=False):
        return {role: self.model(name) for role, name in roles.items()}, None

    def helper(self, name, module, function, *args):
        return getattr(helpers, name)(getattr(self.student(module), function), *args)

    def lend(self, obj, methods=("__call__",)):
        return obj

    @contextlib.contextmanager
    def on_gpu(self, gpu):
        real = helpers.use_gpu(gpu)
        try:
            yield
        finally:
            helpers.restore_gpu(real)


class _Overridden:
    """A module whose attributes are the module's own, except the overridden ones."""

    def __init__(self, module, overrides):
        self._module, self._overrides = module, overrides

    def __getattr__(self, name):
        return self._overrides.get(name, getattr(self._module, name))


def run_check(check, ctx, root=None):
    """Run one check: {"status": ..., and what went wrong, as text}. Errors are one line each.
    Raises wire.Timeout and wire.Gone (the worker's end), for the runner to report. The text may
    quote the student's values: runner.shown() makes it fit to print (escaped, SHOWN characters)."""
    outcome = _run_check(check, ctx, root)
    return {key: value if isinstance(value, str) else str(value)
            for key, value in outcome.items()}


def _run_check(check, ctx, root):
    try:
        check.function(ctx)
        return {"status": "pass"}
    except Skip as e:
        return {"status": "skipped", "message": str(e)}
    except Fail as e:
        return {"status": "fail", "expected": e.expected, "got": e.got, "hint": e.hint}
    except NotImplementedError as e:
        return {"status": "not started", "message": str(e) or "not written yet"}
    except (wire.Timeout, wire.Gone):
        raise
    except wire.StudentError as e:
        return {"status": "error", "message": e.message}
    except wire.ProtocolError as e:
        return {"status": "error", "message": f"the check's process sent what the grader "
                                              f"cannot read: {e}"}
    except BaseException as e:  # noqa: BLE001 (SystemExit too: a check never exits)
        where = helpers.student_frame(e.__traceback__, root or Path.cwd().resolve(),
                                      parts.STUDENT_FILES)
        return {"status": "error", "message": wire.describe(e, where)}


def why_stuck(part, recorders):
    """The likely cause of a check that ran out of time, from what the grader counted of the
    models' passes (making.Recorder) while it ran."""
    target = [length for r in recorders for length in r.lengths.get("target", ())]
    asked = sum(r.calls.get("target", 0) for r in recorders)
    if part in ("3b", "3c") and len(target) >= 20 and len(set(target[-20:])) == 1:
        return (f"the text stayed at {target[-1]} tokens for the last 20 passes of the big "
                "model: a round that adds no token? (each round adds its kept guesses and one "
                "token of the big model's)")
    if part in ("3b", "3c") and asked > 200:
        return (f"the big model was asked {asked} times: a loop that never reaches "
                "max_new_tokens? (stop when that many new tokens are written)")
    if part in ("3b", "3c") and recorders and asked == 0:
        return "the big model was never asked: an endless loop (or a sleep) before the first round"
    return "an endless loop, or a sleep?"


def text(tokens):
    return "".join(LETTERS[t] if isinstance(t, (int, np.integer)) and 0 <= t < len(LETTERS)
                   else f"<{t!r}>" for t in tokens)


def pair_of_ints(value, what):
    if not (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, (int, np.integer)) for v in value)):
        raise Fail(f"{what} returns a pair of whole numbers (kept, token)", repr(value),
                   "return kept, token")
    return int(value[0]), int(value[1])


def a_float(value, what):
    if isinstance(value, (np.ndarray,)) and value.shape == ():
        value = value.item()
    if not isinstance(value, (float, int, np.floating, np.integer)) or isinstance(value, bool):
        raise Fail(f"{what} returns a number", f"{type(value).__name__}: {value!r}")
    if math.isnan(value):
        raise Fail(f"{what} returns a number", "nan", "look for 0/0 or an empty mean")
    return float(value)


# ----------------------------------------------------------------------------------------------
# Exercise 1: explain (the auto-graded part)


def verdict_oracle(draft_tokens, choices):
    kept = 0
    while kept < len(draft_tokens) and draft_tokens[kept] == choices[kept]:
        kept += 1
    return kept, choices[kept]


def random_round(rng, k=None):
    k = k or int(rng.integers(1, 9))
    choices = rng.integers(0, 3, k + 1).tolist()
    draft_tokens = rng.integers(0, 3, k).tolist()
    agree = int(rng.integers(0, k + 1))            # long agreements happen: copy a prefix
    draft_tokens[:agree] = choices[:agree]
    return draft_tokens, choices


def explain_round(draft_tokens, choices, got, want):
    shown = f"draft guessed {text(draft_tokens)!r}, the big model chose {text(choices)!r}"
    if got[0] > want[0]:
        i = want[0]
        return (shown, f"draft token {i + 1} was kept although the big model chose "
                       f"{LETTERS[choices[i]]!r} there: compare with the big model's choice at "
                       f"the same position")
    if got[0] < want[0]:
        i = got[0]
        return (shown, f"draft token {i + 1} ({LETTERS[draft_tokens[i]]!r}) equals the big "
                       f"model's choice there, so it is kept: keep guesses while they match")
    return (shown, f"after {want[0]} kept guesses the big model adds its own choice at the same "
                   f"position ({LETTERS[want[1]]!r}): the correction, or the bonus when all "
                   f"were kept")


def judge(greedy_verdict, draft_tokens, choices, case=""):
    """Fail unless greedy_verdict gives the oracle's (kept, token) for this round."""
    want = verdict_oracle(draft_tokens, choices)
    got = pair_of_ints(greedy_verdict(list(draft_tokens), list(choices)), "greedy_verdict")
    if got != want:
        shown, hint = explain_round(draft_tokens, choices, got, want)
        raise Fail(f"{case}(kept, token) = ({want[0]}, {LETTERS[want[1]]!r}) when {shown}",
                   f"({got[0]}, {text([got[1]])!r})", hint)


def fix_first(ctx, function, tests, hint, how="this part's code may call"):
    """`hint`, preceded by "fix X first: ..." when the student's `function` (X: its part, or the
    function where its part has several), which the code that failed calls, fails one of
    `tests` (checks of its own, run here on the same ctx): a part that calls a wrong earlier one
    says so before anything else. Where the grader gives the failing part its reference for
    another part's function (runner.references), that reference passes and nothing is added."""
    for test in tests:
        try:
            test(ctx)
        except (Fail, NotImplementedError, wire.StudentError) as e:
            part = parts.part_of(function)
            name = part.id if part.functions == (function,) else function
            # a check's own report says why; a test that is no check (layer_norm's) says it here
            why = "" if test.__name__ in CHECKS or not isinstance(e, Fail) else f" ({e.hint})"
            return (f"fix {name} first: your {function}, which {how}, fails {test.__name__}"
                    f"{why}; then: {hint}")
    return hint


@check("1a", 2, torch_free=True)
def verdict_on_random_rounds(ctx):
    greedy_verdict = ctx.student("numpy_speculative").greedy_verdict
    for _ in range(300):
        judge(greedy_verdict, *random_round(ctx.rng))


@check("1a", 1, torch_free=True)
def verdict_at_the_edges(ctx):
    greedy_verdict = ctx.student("numpy_speculative").greedy_verdict
    for draft_tokens, choices, case in (([1, 2, 0], [1, 2, 0, 2], "every guess kept: the bonus"),
                                        ([1, 2, 0], [2, 2, 0, 1], "the first guess rejected"),
                                        ([], [1], "no guesses (the last token of a run)"),
                                        ([0], [0, 1], "one guess, kept")):
        judge(greedy_verdict, draft_tokens, choices, f"{case}: ")


VERDICT_CHECKS = (verdict_on_random_rounds, verdict_at_the_edges)   # 1a's, for fix_first


@check("1b", 2, torch_free=True)
def replay_writes_the_text(ctx):
    replay = ctx.student("numpy_speculative").replay
    for _ in range(50):
        prompt = ctx.rng.integers(0, 3, 3).tolist()
        rounds = [random_round(ctx.rng) for _ in range(int(ctx.rng.integers(1, 6)))]
        want = list(prompt)
        for draft_tokens, choices in rounds:
            kept, token = verdict_oracle(draft_tokens, choices)
            want += draft_tokens[:kept] + [token]
        got = replay(list(prompt), [(list(d), list(c)) for d, c in rounds])
        if not isinstance(got, (list, tuple)) or list(got) != want:
            raise Fail(f"{text(want)!r} from prompt {text(prompt)!r} and {len(rounds)} rounds",
                       repr(text(got)) if isinstance(got, (list, tuple)) else repr(got),
                       fix_first(ctx, "greedy_verdict", VERDICT_CHECKS, "each round adds its "
                                 "kept guesses, then the big model's own token"))


# ----------------------------------------------------------------------------------------------
# Exercise 2: derive


def tokens_per_pass(alpha, k):
    return sum(alpha ** i for i in range(k + 1))


@check("2a", 2)
def tokens_per_pass_is_the_sum(ctx):
    f = ctx.student("speculative").expected_tokens_per_pass
    for alpha, k in [(0.8, 4), (0.0, 3), (0.5, 1)] + [
            (float(ctx.rng.random()), int(ctx.rng.integers(1, 13))) for _ in range(200)]:
        got, want = a_float(f(alpha, k), "expected_tokens_per_pass"), tokens_per_pass(alpha, k)
        if not abs(got - want) <= 1e-9 * want:
            raise Fail(f"1 + alpha + ... + alpha^k = {want:.6f} for alpha {alpha:.4f}, k {k}",
                       f"{got:.6f}", "a round always writes the target's token (alpha^0), plus "
                       "draft token i with probability alpha^i")


@check("2a", 1)
def tokens_per_pass_limits(ctx):
    f = ctx.student("speculative").expected_tokens_per_pass
    for k in (1, 4, 9):
        got = a_float(f(1.0, k), "expected_tokens_per_pass")
        if abs(got - (k + 1)) > 1e-9:
            raise Fail(f"k + 1 = {k + 1} tokens when every guess is kept (alpha = 1)", f"{got}",
                       "the closed form divides 0 by 0 at alpha = 1: treat it apart")
        if abs(a_float(f(1 - 1e-9, k), "expected_tokens_per_pass") - (k + 1)) > 1e-5:
            raise Fail(f"close to {k + 1} for alpha just below 1", f"{f(1 - 1e-9, k)}")
    grid = np.linspace(0, 0.99, 50)
    for k in (1, 4):
        values = [a_float(f(float(a), k), "expected_tokens_per_pass") for a in grid]
        if any(b <= a for a, b in zip(values, values[1:])):
            raise Fail("tokens per pass grows with alpha", "it does not", "")
    if not all(f(0.7, k + 1) > f(0.7, k) for k in range(1, 8)):
        raise Fail("tokens per pass grows with k", "it does not", "")


TOKENS_CHECKS = (tokens_per_pass_is_the_sum, tokens_per_pass_limits)   # 2a's, for fix_first


def round_law(alpha, k):
    """P(one round writes n tokens), n = 1 .. k + 1: alpha^(n-1) (1 - alpha) for n <= k (n - 1
    guesses kept, then a rejection), alpha^k for k + 1 (every guess kept, then the bonus)."""
    return np.array([alpha ** (n - 1) * (1 - alpha) for n in range(1, k + 1)] + [alpha ** k])


def simulates_rounds(ctx, simulate, alpha, k, runs, salt, law=True):
    """Fail unless simulate is a simulation: `runs` runs of one round each (a fresh rng each)
    write a whole number of tokens, 1 to k + 1 (the closed form plus noise does not), and (law)
    as often as the process writes them (round_law, by chi-square). One round is where the
    process shows: its tokens are the round's own, not an average. Its standard error, 0/0 for
    one round, is not read."""
    counts = np.zeros(k + 1)
    for run in range(runs):
        result = simulate(alpha, k, 1, ctx.worker_rng(salt + run))
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise Fail("simulate returns (mean, standard error)", repr(result)[:80])
        tokens = a_float(result[0], "simulate")
        if tokens != round(tokens) or not 1 <= tokens <= k + 1:
            raise Fail(f"a simulation of one round (alpha {alpha:.3f}, k {k}) writes a whole "
                       f"number of tokens, 1 to {k + 1}", f"{tokens!r}",
                       "simulate each round: keep guesses while rng.random() < alpha, stop at "
                       "the first rejection, add the target's own token; return the mean of "
                       "the rounds' tokens (the formula plus noise is not a simulation)")
        counts[int(tokens) - 1] += 1
    want = round_law(alpha, k)
    if law and chi_square_fails(counts, want):
        n = int(np.abs(counts / runs - want).argmax())
        raise Fail(f"the tokens of one round as often as the process writes them: n with "
                   f"probability alpha^(n-1) (1 - alpha) for n <= k, alpha^k for n = k + 1 "
                   f"(alpha {alpha:.3f}, k {k})", f"{n + 1} tokens in {counts[n] / runs:.3f} "
                   f"of {runs} one-round runs; the process: {want[n]:.3f}",
                   "each round on its own: keep draft tokens up to the first rejection (each "
                   "accepted with probability alpha), then the target's own token")


@check("2b", 2)
def simulation_agrees_with_the_formula(ctx):
    simulate = ctx.student("exercises.ex2_derive").simulate
    for i in range(4):
        alpha, k, rounds = float(ctx.rng.uniform(0.1, 0.95)), int(ctx.rng.integers(1, 9)), 20_000
        result = simulate(alpha, k, rounds, ctx.worker_rng(i))
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise Fail("simulate returns (mean, standard error)", repr(result))
        mean, se = (a_float(v, "simulate") for v in result)
        want = tokens_per_pass(alpha, k)
        sd = math.sqrt(sum((2 * i + 1) * alpha ** i for i in range(k + 1)) - want ** 2)
        if abs(mean - want) > 5 * sd / math.sqrt(rounds):
            every = 1 + k * alpha          # what counting every accepted guess gives
            counts_every = abs(mean - every) <= 5 * math.sqrt(k * alpha * (1 - alpha) / rounds)
            raise Fail(f"a mean within 5 standard errors of {want:.4f} (alpha {alpha:.3f}, "
                       f"k {k})", f"{mean:.4f}",
                       f"that is 1 + k alpha = {every:.4f}: it counts every accepted guess; a "
                       "round keeps only the guesses before the first rejection (the leading "
                       "run), plus one token of the target's own" if counts_every else
                       "a round stops at the first rejection; it always writes one token of "
                       "the target's own")
        if not abs(se - sd / math.sqrt(rounds)) < 0.15 * sd / math.sqrt(rounds):
            raise Fail(f"standard error about {sd / math.sqrt(rounds):.4f} (the spread of tokens "
                       f"per round over the square root of {rounds:,} rounds)", f"{se:.4f}",
                       "std(tokens) / sqrt(rounds)")
        if i < 2:                          # the mean is right: is it a simulation's?
            simulates_rounds(ctx, simulate, alpha, k, 400, 1000 * (i + 1))


@check("2b", 1)
def simulation_draws_from_the_given_rng(ctx):
    simulate = ctx.student("exercises.ex2_derive").simulate
    simulates_rounds(ctx, simulate, 0.6, 4, 20, 100, law=False)   # whole rounds, then the rng
    same = [simulate(0.6, 4, 2000, np.random.default_rng(7))[0] for _ in range(2)]
    other = [simulate(0.6, 4, 2000, np.random.default_rng(s))[0] for s in (8, 9, 10)]
    if same[0] != same[1] or len(set(map(float, other + same[:1]))) < 3:
        raise Fail("the same rng seed gives the same result, other seeds other results",
                   f"seed 7 twice: {same}; seeds 8-10: {other}",
                   "draw every random number from the rng argument; never reseed")


# ----------------------------------------------------------------------------------------------
# Exercise 3: build, with NumPy alone


WIDTH_SCALED = ("these are the logits of attention scaled by sqrt(C), the model's width: scale "
                "each head's scores by sqrt(head size) = sqrt(C / n_head)")
FROM_ZERO = ("these are the logits of positions that start at 0 in every call: the new tokens "
             "sit at positions cache.length, cache.length + 1, ... (wpe[start:start + T])")
NO_MASK = ("these are the logits of attention without its causal mask: token i may attend to "
           "itself and the tokens before it only (set the later ones' scores to -inf)")


def logits_close(got, want, what, suspects=(), hint=None):
    """Fail unless got is want within 1e-5. suspects: (logits, hint) of known mistakes (logits:
    an array, a function that makes it, only then, or None): when got is one of them, its hint
    names the mistake; else `hint` (what the check measured), else the usual suspects."""
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


def layer_norm_normalises(ctx):
    """The student's layer_norm on rows of mean 1 and spread 3 with a random weight and bias:
    (x - mean) / sqrt(variance + eps) * weight + bias. Its hint says what the rows came out as."""
    x = ctx.rng.normal(1, 3, (4, 12))
    weight, bias = ctx.rng.uniform(0.5, 1.5, 12), ctx.rng.normal(0, 0.5, 12)
    normal = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    got = np.asarray(ctx.student("numpy_speculative").layer_norm(x, weight, bias), dtype=float)
    if got.shape != x.shape:
        raise Fail("layer_norm keeps the shape of x", f"{got.shape}", "one row out per row in")
    if not np.abs(got - (normal * weight + bias)).max() < 1e-5:
        rows = (got - bias) / weight               # what it made of the rows before weight, bias
        mean, variance = float(np.abs(rows.mean(-1)).max()), float(rows.var(-1).mean())
        raise Fail("rows of mean 0 and variance 1, then times weight plus bias",
                   f"mean up to {mean:.3g}, variance {variance:.3g}",
                   "subtract each row's mean" if mean > 1e-4 else
                   f"rows of variance {variance:.3g}, not 1: divide by "
                   "sqrt(variance + eps), not by the std" if abs(variance - 1) > 1e-4
                   else "multiply by weight, then add bias")


def forward_close(ctx, got, want, what, suspects=(), hint=None):
    """logits_close, whose hint says first where the student's layer_norm is wrong."""
    try:
        logits_close(got, want, what, suspects, hint)
    except Fail as e:
        e.hint = fix_first(ctx, "layer_norm", (layer_norm_normalises,), e.hint, "forward calls")
        raise


def mistaken(ctx, name, tokens, pieces, mistake):
    """The logits (T, V) of fixture model `name` for tokens fed through one cache in `pieces`
    (a, b), computed with a known mistake, to name it: "from 0", each call's positions start at
    0, not at the cache's length; "no mask", every token attends to all of its call's tokens."""
    import torch
    model = making.torch_model(ctx.fixture_dir, name)      # a copy of its own, to change
    if mistake == "no mask":
        for block in model.transformer.h:
            block.attn.mask.fill_(True)                    # (the mask a call with a cache uses)
    cache, wpe, rows = model.new_cache(), model.transformer.wpe.weight, []
    with torch.no_grad():
        right = wpe.clone()
        for a, b in pieces:
            if mistake == "from 0":
                wpe[a:b] = right[:b - a]                   # positions a .. b-1 look like 0 ..
            rows.append(model(torch.tensor([tokens[a:b]]), cache=cache)[0][0].numpy())
            wpe.copy_(right)
    return np.concatenate(rows)


def over_the_cost(ctx, got, alpha, k, cost):
    """True when `got`, the student's expected_speedup, is the student's own
    expected_tokens_per_pass(alpha, k) over the right cost: 2c calls 2a (and its cost is right),
    so 2c is as wrong as 2a is. (Graded, 2a is the grader's reference and this is False.)"""
    try:
        tokens = a_float(ctx.student("speculative").expected_tokens_per_pass(alpha, k), "")
    except (Fail, NotImplementedError, wire.StudentError):
        return False
    return abs(got - tokens / cost) <= 1e-9 * abs(got)


@check("2c", 2)
def speedup_is_tokens_over_cost(ctx):
    f = ctx.student("speculative").expected_speedup
    for _ in range(200):
        alpha, k = float(ctx.rng.random()), int(ctx.rng.integers(1, 11))
        c, verify_cost = float(ctx.rng.uniform(0, 0.6)), float(ctx.rng.choice([1.0, 1.5, 2.0]))
        want = tokens_per_pass(alpha, k) / (k * c + verify_cost)
        got = a_float(f(alpha, k, c, verify_cost), "expected_speedup")
        if abs(got - want) > 1e-9 * want:
            hint = ("a round costs k draft steps of c each plus one verification pass of "
                    "verify_cost target steps")
            if over_the_cost(ctx, got, alpha, k, k * c + verify_cost):
                hint = fix_first(ctx, "expected_tokens_per_pass", TOKENS_CHECKS, "the cost, "
                                 "k c + verify_cost, is right", "expected_speedup calls")
            raise Fail(f"{want:.6f} for alpha {alpha:.3f}, k {k}, c {c:.3f}, verify cost "
                       f"{verify_cost}", f"{got:.6f}", hint)
        if verify_cost == 1.0 and abs(a_float(f(alpha, k, c), "expected_speedup") - want) > 1e-9:
            raise Fail("verify_cost defaults to 1 (the lesson's formula)", "another default")


@check("3a", 4, torch_free=True)
def forward_matches_torch(ctx):
    ns = ctx.student("numpy_speculative")
    expected = ctx.expected_logits()
    tokens = expected["tokens"].tolist()
    for name in ("target", "draft"):
        forward_close(ctx, ns.forward(ctx.model(name), tokens), expected[name],
                      f"the {name} model over {len(tokens)} tokens",
                      [(expected.get(f"{name}_width_scaled"), WIDTH_SCALED),
                       (lambda name=name: mistaken(ctx, name, tokens, [(0, len(tokens))],
                                                   "no mask"), NO_MASK)])


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
        return mistaken(ctx, "target", tokens, [(0, 5), (5, 6), (6, len(tokens))], "from 0")
    scaled = expected.get("target_width_scaled")
    first = np.asarray(pieces[0])
    started = first.shape == (5, want.shape[1]) and np.abs(first - want[:5]).max() < 1e-5
    forward_close(ctx, np.concatenate(pieces), want[:11],
                  "tokens fed through one cache in three pieces (5, 1 and 5 tokens)",
                  [(lambda: zero()[:11], FROM_ZERO),
                   (lambda: mistaken(ctx, "target", tokens, [(0, 5), (5, 6), (6, 11)], "no mask"),
                    NO_MASK), (None if scaled is None else scaled[:11], WIDTH_SCALED)],
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
    """Run the student's speculative_greedy on one case with stand-ins of the fixture models
    (the grader computes their logits and counts their passes). Returns (tokens, reported
    passes); checks the output on the way."""
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
        if i + k >= fixtures.BLOCK:  # this round's check reached past the window
            hint += (f"; it goes wrong where the context reaches past the window "
                     f"({fixtures.BLOCK} tokens): let score() pick every context, for "
                     f"drafting and for verifying alike, as generate() does")
        raise Fail(f"the big model's own greedy output (prompt {text(prompt)!r}, {n} new "
                   f"tokens, k = {k}, draft {draft_name}): {text(want[len(prompt):])!r}",
                   f"differs {where}: {text(tokens[len(prompt):])!r}",
                   fix_first(ctx, "greedy_verdict", VERDICT_CHECKS, hint))
    return passes, recorder


def check_greedy(ctx, draft_name):
    """The output is the big model's own, the reported passes are the rounds the draft's
    agreement makes, and (where the grader counts them) the big model's forward passes match
    that count while the draft proposed every guess: plain decoding with a made-up count fails."""
    draft = ctx.torch_model(draft_name)
    for case in ctx.cases["greedy"]:
        passes, recorder = greedy_run(ctx, draft_name, case)
        prompt, n, k = case["prompt"], case["n"], case["k"]
        done = making.greedy_rounds(case["expected"], draft, len(prompt), k)
        what = {"target": "a perfect draft (the big model itself)",
                "hopeless": "a draft that never agrees"}.get(draft_name, "the draft")
        if passes != done.rounds:
            raise Fail(f"{done.rounds} passes of the big model for {n} tokens with k = {k} and "
                       f"{what}", f"{passes!r}",
                       "count one pass per verification; when all k guesses are kept the big "
                       "model adds a bonus token, so a round writes k + 1")
        if recorder is not None:
            counted_passes(recorder, done, f"{n} tokens with k = {k} and {what}")


def counted_passes(recorder, done, what):
    """Fail unless the stand-ins' forward passes, counted here, are those of `done` (Rounds)."""
    calls = recorder.calls["target"]
    if not done.rounds <= calls <= done.rounds + done.crossing:
        raise Fail(f"{done.rounds} forward passes of the big model, one a round (or "
                   f"{done.rounds + done.crossing}: {done.crossing} rounds check across a "
                   f"window jump, two passes each) for {what}",
                   f"{calls} forward passes, counted by the grader",
                   "score the last token and every guess of a round in one score() of the "
                   "big model; never decode with it token by token")
    if recorder.calls["draft"] < done.guesses:
        raise Fail(f"the draft proposes {done.guesses} guesses (one forward pass each, at "
                   f"least) for {what}", f"{recorder.calls['draft']} forward passes of the "
                   "draft", "each round, the draft proposes min(k, tokens left - 1) tokens, "
                   "one score() of the draft each")


@check("3b", 3, torch_free=True)
def greedy_is_the_big_models_output(ctx):
    check_greedy(ctx, "draft")


@check("3b", 2, torch_free=True)
def greedy_with_a_perfect_draft(ctx):
    # The big model drafts for itself: every guess is kept, every round writes k + 1 tokens.
    check_greedy(ctx, "target")


@check("3b", 1, torch_free=True)
def greedy_with_a_draft_that_never_agrees(ctx):
    check_greedy(ctx, "hopeless")


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
    grid = (np.arange(100) + 0.5) / 100
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
        error = float(np.abs(first - target_probs[0]).max())
        if error > 0.03:
            raise Fail(f"first token distributed as the target's {np.round(target_probs[0], 3)}"
                       f" (draft's: {np.round(draft_probs[0], 3)})", f"{np.round(first, 3)}",
                       "keep a guess with probability min(1, target/draft); after a rejection "
                       "draw from max(0, target - draft), renormalised (not from the target)")
        kept_as_often(kept_mass, target_probs[0], draft_probs[0], 0.02, "on a grid of draws")
        if kept_mass > 0.05:
            bonus /= kept_mass
            if np.abs(bonus - target_probs[1]).max() > 0.05:
                raise Fail(f"after a kept guess, the bonus token distributed as the target's "
                           f"next {np.round(target_probs[1], 3)}", f"{np.round(bonus, 3)}",
                           "when every guess is kept, sample one more token from the target's "
                           "distribution at the next position")


VERIFY_CHECKS = (verify_keeps_the_target_distribution_exactly,)   # verify's, for fix_first


def kept_as_often(kept, target, draft, error, how):
    """Fail unless the first guess is kept with the exact rule's probability, sum over tokens of
    min(target, draft), within `error`: a rule that keeps nothing and samples every token from
    the target has the right distribution, and no speed-up."""
    want = float(np.minimum(target, draft).sum())
    if abs(kept - want) > error:
        raise Fail(f"the first guess kept as often as the exact rule keeps it: sum of min(target,"
                   f" draft) = {want:.3f} (target {np.round(target, 3)}, draft "
                   f"{np.round(draft, 3)})", f"kept {kept:.3f} of the time ({how})",
                   "keep guess x with probability min(1, target(x)/draft(x)); a rule that "
                   "rejects more often keeps the distribution but throws away the speed-up"
                   if kept < want else "keep guess x with probability min(1, target(x)/"
                   "draft(x)), not more often")


def chi_square_fails(counts, probs, threshold_z=4.75):
    """True when counts are too unlikely under probs (about p < 1e-6), by Pearson's
    chi-square with the Wilson-Hilferty approximation of its quantile."""
    counts, probs = np.asarray(counts, float).ravel(), np.asarray(probs, float).ravel()
    n = counts.sum()
    if (counts[probs == 0] > 0).any():
        return True
    expected = probs * n
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    keep = expected > 0
    statistic = float((((observed - expected) ** 2)[keep] / expected[keep]).sum())
    df = max(1, int(keep.sum()) - 1)
    quantile = df * (1 - 2 / (9 * df) + threshold_z * math.sqrt(2 / (9 * df))) ** 3
    return statistic > quantile


def draft_was_asked(recorder):
    """Speculative sampling samples its guesses from the draft: sampling from the big model
    alone has the right distribution, and is not the exercise."""
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
    for n, k in ((12, 3), (2 * fixtures.BLOCK, 4)):
        done = making.perfect_rounds(len(prompt), n, k, fixtures.BLOCK)
        draws = Draws(ctx.worker_rng(n))
        out = ns.speculative_sample(models["target"], models["draft"], list(prompt), n, k,
                                    ctx.lend(draws, ("random",)))
        out = list(out) if isinstance(out, (list, tuple, np.ndarray)) else [out]
        if len(out) != len(prompt) + n:
            raise Fail(f"{len(prompt) + n} tokens (prompt + {n} new)", f"{len(out)}")
        if recorder is None:
            continue
        what = f"{n} tokens with k = {k} and a draft equal to the big model"
        if draws.count != done.draws:
            raise Fail(f"{done.draws} draws of rng.random() for {what} ({done.rounds} rounds, "
                       "every guess kept)", f"{draws.count} draws",
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


# ----------------------------------------------------------------------------------------------
# Exercise 4: break


@check("4a", 2)
def agreement_from_logits(ctx):
    sd = ctx.student("speculative")
    warp = fixtures.warp  # the grader's own, never the student's copy
    for temperature, top_k in ((1.0, None), (0.7, None), (1.0, 3)):
        target = ctx.rng.normal(size=(4, 9, 8)) * 2
        draft = target + ctx.rng.normal(size=target.shape) * 1.5
        result = sd.agreement_of(target, draft, temperature=temperature, top_k=top_k)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise Fail("agreement_of returns (alpha, greedy agreement)", repr(result)[:80])
        alpha, agree = (a_float(v, "agreement_of") for v in result)
        want_alpha = float(np.minimum(warp(target, temperature, top_k),
                                      warp(draft, temperature, top_k)).sum(-1).mean())
        want_agree = float((target.argmax(-1) == draft.argmax(-1)).mean())
        if abs(alpha - want_alpha) > 1e-6:
            raise Fail(f"alpha = mean over positions of sum_x min(target(x), draft(x)) = "
                       f"{want_alpha:.6f} (temperature {temperature}, top_k {top_k})",
                       f"{alpha:.6f}", "both distributions warped as decoding would; the sum "
                       "runs over the vocabulary, the mean over every position")
        if abs(agree - want_agree) > 1e-12:
            raise Fail(f"greedy agreement {want_agree:.4f}", f"{agree:.4f}",
                       "the fraction of positions where both argmaxes are the same")


@check("4a", 1)
def agreement_at_temperature_zero(ctx):
    sd = ctx.student("speculative")
    target = ctx.rng.normal(size=(3, 7, 8))
    draft = target + ctx.rng.normal(size=target.shape)
    alpha, agree = (a_float(v, "agreement_of") for v in
                    sd.agreement_of(target, draft, temperature=0.0))
    if abs(alpha - agree) > 1e-12:
        raise Fail("at temperature 0 alpha equals the greedy agreement (both distributions are "
                   "one-hot)", f"alpha {alpha:.4f}, agreement {agree:.4f}",
                   "warp the logits with the temperature before comparing distributions")


def speedup(alpha, k, c, verify_cost=1.0):
    return tokens_per_pass(alpha, k) / (k * c + verify_cost)


@check("4b", 2)
def break_even_gives_speedup_one(ctx):
    f = ctx.student("speculative").break_even_alpha
    for _ in range(60):
        k, c = int(ctx.rng.integers(1, 9)), float(ctx.rng.uniform(0.01, 0.5))
        verify_cost = float(ctx.rng.choice([1.0, 1.3]))
        if speedup(1.0, k, c, verify_cost) <= 1:
            continue
        alpha = a_float(f(k, c, verify_cost), "break_even_alpha")
        if not (0 <= alpha < 1) or abs(speedup(alpha, k, c, verify_cost) - 1) > 1e-6:
            ignored = (verify_cost != 1.0 and 0 <= alpha < 1 and
                       abs(speedup(alpha, k, c) - 1) <= 1e-6)
            raise Fail(f"an alpha where the speed-up is exactly 1 (k {k}, c {c:.3f}, verify "
                       f"cost {verify_cost})", f"{alpha!r}, whose speed-up is "
                       f"{speedup(alpha, k, c, verify_cost) if 0 <= alpha < 1 else 'undefined'}",
                       f"that is the break-even point for a verify cost of 1: break_even_alpha "
                       f"ignores verify_cost; a round costs k c + verify_cost target steps"
                       if ignored else "the speed-up grows with alpha: bisect between 0 and 1 "
                       "until the interval is tiny (a 0.01 grid is not precise enough)")


@check("4b", 1)
def break_even_lesson_values_and_hopeless_costs(ctx):
    f = ctx.student("speculative").break_even_alpha
    for c, want in ((0.2, 0.4553), (0.05, 0.1668)):
        got = a_float(f(4, c), "break_even_alpha")
        if round(got, 4) != want:
            raise Fail(f"{want} for k 4, c {c}", f"{got:.6f}", "")
    got = f(4, 1.5)
    if not (isinstance(got, float) and math.isnan(got)):
        raise Fail("nan when no alpha helps (k 4, c 1.5: a round costs 7 steps, it writes at "
                   "most 5 tokens)", repr(got), "return math.nan")


# ----------------------------------------------------------------------------------------------
# Exercise 5: GPU timing (on the CPU, with a simulated GPU)


class Counted:
    """A function to time: the first `slow` calls sleep `slow_s`, the others `fast_s`."""

    def __init__(self, fast_s, slow=0, slow_s=0.0):
        self.calls, self.fast_s, self.slow, self.slow_s = 0, fast_s, slow, slow_s

    def __call__(self):
        self.calls += 1
        time.sleep(self.slow_s if self.calls <= self.slow else self.fast_s)


@check("5a", 2)
def timer_warms_up_and_takes_the_median(ctx):
    timer = ctx.student("exercises.ex5_gpu").timer
    measure = timer("cpu")
    fn = Counted(0.002, slow=3, slow_s=0.15)
    seconds = a_float(measure(ctx.lend(fn), 5, warmup=3), "measure")
    if fn.calls != 8:
        raise Fail("3 warm-up calls and 5 timed ones: 8 calls of fn", f"{fn.calls}",
                   "run fn warmup times before timing it")
    if not 0.0015 < seconds < 0.05:
        raise Fail("about 2 ms, the time of a call after warm-up", f"{seconds * 1e3:.1f} ms",
                   "exclude the warm-up calls (they pay for caches and compilation) and "
                   "return seconds per call")
    times = [a_float(measure(ctx.lend(Counted(t)), 3, warmup=1), "measure")
             for t in (0.002, 0.01, 0.03)]
    if not times[0] < times[1] < times[2]:
        raise Fail("longer calls measure longer (2, 10, 30 ms)",
                   ", ".join(f"{t * 1e3:.1f} ms" for t in times), "")


@check("5a", 2)
def timer_waits_for_the_gpu(ctx):
    """timer("cuda") with a simulated GPU standing in for torch.cuda: its work, its clock and its
    queue live in the grader (helpers.FakeGPU), so what the timer did is measured here."""
    gpu = FakeGPU()
    with ctx.on_gpu(gpu):
        measure = ctx.student("exercises.ex5_gpu").timer("cuda")
        seconds = a_float(measure(ctx.lend(gpu.launch), 5, warmup=2), "measure")
        returned = time.perf_counter()
    if gpu.launches != 7:
        raise Fail("2 warm-up calls and 5 timed ones: 7 calls of fn", f"{gpu.launches}",
                   "run fn warmup times, then the timed calls")
    if gpu.busy_until > returned + 1e-3:
        raise Fail("measure returns after the work it timed has finished on the GPU",
                   f"{(gpu.busy_until - returned) * 1e3:.0f} ms of it still queued",
                   "kernels run asynchronously: call torch.cuda.synchronize() before reading "
                   "the clock, or synchronize the end event before elapsed_time")
    if not 0.015 < seconds < 0.06:
        raise Fail("about 20 ms: the work fn queued on the GPU, not the time to queue it",
                   f"{seconds * 1e3:.2f} ms", "kernels run asynchronously: call "
                   "torch.cuda.synchronize() before starting the clock and before reading it, "
                   "or record torch.cuda.Event pairs and synchronize before elapsed_time")


@check("5a", 0)
def timer_on_a_real_gpu(ctx):
    """With a CUDA GPU, the student's timer against CUDA events around the same work."""
    measured = ctx.helper("time_on_real_gpu", "exercises.ex5_gpu", "timer")
    if measured is None:
        raise Skip("no CUDA GPU here: this check runs where torch sees one")
    if not (isinstance(measured, (tuple, list)) and len(measured) == 2):
        raise Fail("measure returns seconds", repr(measured)[:80])
    want, got = a_float(measured[0], "CUDA events"), a_float(measured[1], "measure")
    if not 0.7 * want < got < 1.5 * want:
        raise Fail(f"about {want * 1e3:.2f} ms (CUDA events around the same work)",
                   f"{got * 1e3:.2f} ms", "synchronise before reading the clock")


# ----------------------------------------------------------------------------------------------
# Exercise 6: drafts without a second model


def lookup_oracle(seq, k, longest, shortest, *, longest_first=True, latest=True, after=True):
    """Prompt lookup by enumeration: every earlier occurrence of every tail, the longest tail
    first, then the latest start. The options plant a mistake (LOOKUP_MISTAKES)."""
    found = [(n if longest_first else -n, start if latest else -start)
             for n in range(shortest, longest + 1) if n < len(seq)
             for start in range(len(seq) - n) if seq[start:start + n] == seq[-n:]]
    if not found:
        return []
    n, start = (abs(v) for v in max(found))
    return seq[start + n:start + n + k] if after else seq[start:start + k]


LOOKUP_MISTAKES = (  # realistic mistakes, as lookup_oracle's options, and the hint for each
    ({"longest_first": False}, "that is the match of a shorter tail: try the longest tail "
                               "first, from longest down to shortest"),
    ({"latest": False}, "that is what followed the first earlier occurrence: search from the "
                        "end, the latest occurrence first (its continuation is the likelier one)"),
    ({"after": False}, "that starts at the matched tokens themselves: propose what followed them"),
)


def judge_lookup(prompt_lookup, seq, k, longest, shortest):
    want = lookup_oracle(seq, k, longest, shortest)
    got = prompt_lookup(list(seq), k, longest, shortest)
    if not isinstance(got, (list, tuple)) or \
            not all(isinstance(t, (int, np.integer)) for t in got):
        raise Fail("prompt_lookup returns a list of tokens", repr(got)[:80])
    got = [int(t) for t in got]
    if got == want:
        return
    hint = next((hint for options, hint in LOOKUP_MISTAKES
                 if lookup_oracle(seq, k, longest, shortest, **options) == got),
                "the longest tail (from longest down to shortest) that occurred earlier decides, "
                "at its latest earlier occurrence")
    if want and got == []:
        hint = ("nothing proposed where the tail occurred earlier: did the search find the tail "
                "itself, at the end of seq? It is no earlier occurrence (the latest earlier "
                "one starts at len(seq) - n - 1 or before)")
    elif got and not want:
        hint = ("no tail of shortest to longest tokens occurred earlier: propose nothing (the "
                "tail itself is not an earlier occurrence)")
    raise Fail(f"{want!r} for seq = {seq!r}, k = {k}, longest = {longest}, shortest = {shortest}",
               repr(got), hint)


def random_lookup_case(rng, size):
    seq = rng.integers(0, 4, size).tolist()                # few letters: repeats are common
    longest = int(rng.integers(1, 5))
    return seq, int(rng.integers(0, 7)), longest, int(rng.integers(1, longest + 1))


@check("6a", 2)
def prompt_lookup_finds_the_longest_latest_match(ctx):
    prompt_lookup = ctx.student("beyond.ngram").prompt_lookup
    for _ in range(300):
        judge_lookup(prompt_lookup, *random_lookup_case(ctx.rng, int(ctx.rng.integers(2, 25))))


@check("6a", 1)
def prompt_lookup_at_the_edges(ctx):
    prompt_lookup = ctx.student("beyond.ngram").prompt_lookup
    for seq, k, longest, shortest in (
            ([5], 3, 3, 1), ([5, 6], 3, 3, 1), ([5, 5], 3, 3, 1),    # too short; the tail itself
            ([1, 2, 3, 9, 1, 2, 3], 8, 3, 1),                       # shorter than k: seq ends
            ([7, 7, 7, 7], 2, 2, 1),                                # overlapping the tail
            ([1, 2, 8, 2, 9, 1, 2], 2, 2, 1),                       # longest wins, though older
            ([1, 2, 8, 2, 9, 1, 2], 2, 2, 2),
            ([1, 2, 8, 4, 9, 3, 2], 2, 3, 2),                       # nothing long enough
            ([1, 2, 3], 0, 3, 1)):                                  # k = 0
        judge_lookup(prompt_lookup, seq, k, longest, shortest)


def random_heads(rng, h, C, V):
    """Heads' weights as a torch Head holds them (c_fc.weight (C, C), lm_head.weight (V, C)),
    scaled so that SiLU's curve matters."""
    return [(rng.normal(size=(C, C)) * 0.7, rng.normal(size=C) * 0.5, rng.normal(size=(V, C)))
            for _ in range(h)]


def reference_head_logits(state, heads):
    """The Medusa heads as beyond.heads.Head computes them, in torch."""
    import torch                               # the grader's own torch, not the student's
    from torch.nn import functional as F
    x = torch.tensor(state)
    rows = []
    for fc_w, fc_b, head_w in heads:
        hidden = x + F.silu(x @ torch.tensor(fc_w).T + torch.tensor(fc_b))
        rows.append(hidden @ torch.tensor(head_w).T)
    return torch.stack(rows).numpy()


HEAD_MISTAKES = (  # (how a head's block was written wrong, the hint that names it)
    (lambda x, w, b: x + (x @ w + b) / (1 + np.exp(-(x @ w + b))),
     "that is x @ W where the head computes x @ W.T: fc_w comes transposed already"),
    (lambda x, w, b: x + 1 / (1 + np.exp(-(x @ w.T + b))),
     "that is the sigmoid; SiLU(z) = z * sigmoid(z)"),
    (lambda x, w, b: (x @ w.T + b) / (1 + np.exp(-(x @ w.T + b))),
     "without the residual: each head's block is x + SiLU(x W + b)"),
)


@check("6b", 2)
def head_logits_match_the_heads(ctx):
    head_logits = ctx.student("beyond.heads").head_logits
    for h, C, V in ((1, 4, 6), (3, 5, 7), (5, 8, 4)):
        heads = random_heads(ctx.rng, h, C, V)
        state = ctx.rng.normal(size=C)
        fc_w = np.stack([w.T for w, _, _ in heads])                      # (h, C, C)
        fc_b = np.stack([b for _, b, _ in heads])                        # (h, C)
        head_w = np.stack([w.T for _, _, w in heads])                    # (h, C, V)
        got = np.asarray(head_logits(state, fc_w, fc_b, head_w), dtype=float)
        want = reference_head_logits(state, heads)
        if got.shape != want.shape:
            raise Fail(f"logits of shape {want.shape} (h, V) for {h} heads", f"{got.shape}",
                       "one row per head: head i's block, then its projection")
        if not np.allclose(got, want, atol=1e-6):
            hint = "each head: x + SiLU(x @ fc_w[i] + fc_b[i]), then @ head_w[i]"
            for mistake, hinted in HEAD_MISTAKES:
                wrong = np.stack([mistake(state, w, b) @ hw.T for w, b, hw in heads])
                if np.allclose(got, wrong, atol=1e-6):
                    hint = hinted
            raise Fail(f"head 1's logits {np.round(want[0], 4)} ({h} heads, C = {C})",
                       f"{np.round(got[0], 4)}", hint)


def reference_heads_loss(guesses, logits, targets, shift=0):
    """The heads' loss by enumeration, in float64: head i at position t against the big model's
    prediction at t + i (+ shift: a planted mistake), wherever that position exists."""
    def log_softmax(z):
        z = z - z.max()
        return z - np.log(np.exp(z).sum())
    B, T, h, _ = guesses.shape
    per_head = []
    for i in range(1, h + 1):
        terms = []
        for b in range(B):
            for t in range(max(0, -(i + shift)), T - (i + shift)):
                teacher = logits[b, t + i + shift]                  # predicts token t + 1 + i
                want = np.exp(log_softmax(teacher)) if targets == "soft" else \
                    np.eye(len(teacher))[teacher.argmax()]
                terms.append(-(want * log_softmax(guesses[b, t, i - 1])).sum())
        per_head.append(np.mean(terms))
    return float(np.mean(per_head))


def judge_heads_loss(ctx, guesses, logits, targets):
    got = ctx.helper("torch_loss", "beyond.heads", "heads_loss", guesses, logits, targets)
    if isinstance(got, str):
        raise Fail("heads_loss returns a torch scalar that training can differentiate", got)
    want = reference_heads_loss(guesses, logits, targets)
    value = a_float(got, "heads_loss")
    if abs(value - want) > 1e-4 * max(1.0, abs(want)):
        hint = ("head i at position t guesses token t + 1 + i: pair guesses[:, t, i - 1] with "
                "the big model's prediction at t + i (logits[:, t + i]); the mean over heads "
                "of each head's mean cross-entropy")
        for shift, named in ((1, "one position too far"), (-1, "one position too near: that "
                             "is the big model's own target, head 0")):
            if abs(value - reference_heads_loss(guesses, logits, targets, shift)) < 1e-4:
                hint = (f"each head is paired with the big model's prediction {named}; head i "
                        f"at t guesses token t + 1 + i, predicted at t + i")
        raise Fail(f"loss {want:.5f} ({targets} targets, guesses of shape {guesses.shape})",
                   f"{value:.5f}", hint)


@check("6b", 2)
def heads_loss_pairs_each_head_with_its_token(ctx):
    for targets in ("hard", "soft"):
        B, T, h, V = 2, 7, 3, 5
        guesses = ctx.rng.normal(size=(B, T, h, V)).astype(np.float32)
        logits = (ctx.rng.normal(size=(B, T, V)) * 2).astype(np.float32)
        judge_heads_loss(ctx, guesses, logits, targets)


# ----------------------------------------------------------------------------------------------
# Exercise 7: a draft that reads the big model's features (EAGLE)


def random_eagle(rng, C, V, n_head, window):
    """A random EAGLE draft as the worker builds it (helpers.eagle_draft): (its weights, by
    their state_dict names, float32; n_head; window), and the big model's wte and lm_head
    (V, C) each, different from each other (so that a swap shows). Scaled so that every piece
    of the block matters: attention that prefers some positions, a residual that does not
    drown the rest."""
    def w(*shape, scale=1.0):
        return (rng.normal(size=shape) * scale).astype(np.float32)
    weights = {"fc.weight": w(C, 2 * C, scale=(2 * C) ** -0.5), "fc.bias": w(C, scale=0.1),
               "h.ln_1.weight": 1 + w(C, scale=0.2), "h.ln_1.bias": w(C, scale=0.2),
               "h.attn.c_attn.weight": w(3 * C, C, scale=1.5 * C ** -0.5),
               "h.attn.c_attn.bias": w(3 * C, scale=0.2),
               "h.attn.c_proj.weight": w(C, C, scale=C ** -0.5),
               "h.attn.c_proj.bias": w(C, scale=0.1),
               "h.ln_2.weight": 1 + w(C, scale=0.2), "h.ln_2.bias": w(C, scale=0.2),
               "h.mlp.c_fc.weight": w(4 * C, C, scale=C ** -0.5),
               "h.mlp.c_fc.bias": w(4 * C, scale=0.2),
               "h.mlp.c_proj.weight": w(C, 4 * C, scale=(4 * C) ** -0.5),
               "h.mlp.c_proj.bias": w(C, scale=0.1)}
    return (weights, n_head, window), w(V, C), w(V, C)


def reference_draft(draft, states, tokens, wte):
    """The draft's output (T, C) at every position of the pairs [states[t] ; wte[tokens[t]]]
    (states (T, C)), one position at a time, in float64 torch: fc, then x + attention over the
    last `window` inputs (itself included; LayerNorm ln_1 first), then x + the GELU MLP (ln_2
    first), as beyond.eagle.Eagle's docstrings say."""
    import torch                               # the grader's own torch, not the student's
    from torch.nn import functional as F
    weights, n_head, window = draft
    W = {name: torch.tensor(value, dtype=torch.float64) for name, value in weights.items()}
    wte = torch.tensor(np.asarray(wte), dtype=torch.float64)

    def norm(x, name):
        return F.layer_norm(x, x.shape, W[f"h.{name}.weight"], W[f"h.{name}.bias"])
    xs = [W["fc.weight"] @ torch.cat([torch.as_tensor(s, dtype=torch.float64), wte[int(t)]]) +
          W["fc.bias"] for s, t in zip(states, tokens)]
    C = len(xs[0])
    hs = C // n_head
    qkv = [W["h.attn.c_attn.weight"] @ norm(x, "ln_1") + W["h.attn.c_attn.bias"] for x in xs]
    out = []
    for i, x in enumerate(xs):
        seen = range(max(0, i - window + 1), i + 1)
        heads = []
        for h in range(n_head):
            q = qkv[i][h * hs:(h + 1) * hs]
            scores = torch.stack([q @ qkv[j][C + h * hs:C + (h + 1) * hs] for j in seen])
            att = torch.softmax(scores / math.sqrt(hs), 0)
            heads.append(sum(a * qkv[j][2 * C + h * hs:2 * C + (h + 1) * hs]
                             for a, j in zip(att, seen)))
        x = x + W["h.attn.c_proj.weight"] @ torch.cat(heads) + W["h.attn.c_proj.bias"]
        m = F.gelu(W["h.mlp.c_fc.weight"] @ norm(x, "ln_2") + W["h.mlp.c_fc.bias"],
                   approximate="tanh")
        out.append(x + W["h.mlp.c_proj.weight"] @ m + W["h.mlp.c_proj.bias"])
    return torch.stack(out)


def reference_roll(draft, features, seq, wte, lm_head, k, mistake=None):
    """The draft's k greedy guesses after seq and their logits (k, V), step by step in float64.
    mistake plants one of ROLL_MISTAKES."""
    import torch
    head = torch.tensor(wte if mistake == "swapped" else lm_head, dtype=torch.float64)
    embed = lm_head if mistake == "swapped" else wte
    states = [torch.tensor(f, dtype=torch.float64) for f in features]
    tokens = list(seq[:-1] if mistake == "unshifted" else seq[1:])
    guesses, logits = [], []
    for _ in range(k):
        if mistake == "last pair only":
            feature = reference_draft(draft, states[-1:], tokens[-1:], embed)[-1]
        else:
            feature = reference_draft(draft, states, tokens, embed)[-1]
        logits.append(head @ feature)
        guesses.append(int(logits[-1].argmax()))
        states.append(states[len(features) - 1] if mistake == "big feature" else feature)
        tokens.append(tokens[-1] if mistake == "stale token" else guesses[-1])
    return guesses, torch.stack(logits).numpy()


ROLL_MISTAKES = {  # a planted mistake (reference_roll) -> the hint that names it
    "unshifted": "that pairs each feature f_t with x_t, the token at t: f_t goes with the token "
                 "after it, x_{t+1}, so the features go with seq[1:] (the last, f_{n-1}, with "
                 "seq[-1]), not with seq[:-1]",
    "big feature": "from the second step on, that feeds the big model's last feature again: "
                   "append the draft's OWN predicted feature (its output at the last position), "
                   "which is all the draft has of the positions the big model has not read",
    "stale token": "that pairs the predicted feature with the last token again: append it with "
                   "the guess just made, wte(g)",
    "swapped": "wte and lm_head swapped: the draft embeds the tokens it reads with wte; the big "
               "model's head lm_head turns a feature into logits, F.linear(feature, lm_head)",
    "last pair only": "that runs the draft on only the last pair: run it over all the pairs so "
                      "far (it attends over its last `window` of them) and take its output at "
                      "the last position",
}


def judge_roll(ctx, draft, features, seq, wte, lm_head, k):
    got = ctx.helper("eagle_rollout", "beyond.eagle", "eagle_roll", *draft, features, seq, wte,
                     lm_head, k)
    if isinstance(got, str):
        raise Fail("eagle_roll returns (guesses, logits): a list of k ints and a tensor (k, V)",
                   got)
    guesses, logits = got
    want, want_logits = reference_roll(draft, features, seq, wte, lm_head, k)
    case = f"seq = {list(seq)}, k = {k}, window = {draft[2]}"
    if logits.shape != want_logits.shape or len(guesses) != k:
        raise Fail(f"{k} guesses and logits of shape {want_logits.shape} (k, V) for {case}",
                   f"{len(guesses)} guesses, logits of shape {logits.shape}",
                   "one guess a step, k steps; row i of the logits is step i + 1's")
    close = np.allclose(logits, want_logits, rtol=1e-4, atol=1e-4)
    if close and guesses == want:
        return
    hint = ("step 1: the draft over the pairs [f_t ; wte(x_{t+1})], its output at the last "
            "position through the big model's head; then append (that output, the guess) and "
            "run it again")
    if close:
        hint = "each guess is the argmax of its step's logits (the greedy choice)"
    for mistake, named in ROLL_MISTAKES.items():
        wrong_guesses, wrong_logits = reference_roll(draft, features, seq, wte, lm_head, k,
                                                     mistake)
        if wrong_logits.shape == logits.shape and \
                np.allclose(logits, wrong_logits, rtol=1e-4, atol=1e-4):
            hint = named
            break
    raise Fail(f"guesses {want}, the first logits {np.round(want_logits[0], 3)} ({case})",
               f"{guesses}, {np.round(logits[0], 3)}", hint)


def random_roll_case(rng, n, C=8, V=7, n_head=2, window=3):
    draft, wte, lm_head = random_eagle(rng, C, V, n_head, window)
    features = rng.normal(size=(n, C)).astype(np.float32)
    seq = rng.integers(0, V, n + 1).tolist()
    return draft, features, seq, wte, lm_head


@check("7a", 3)
def eagle_roll_feeds_its_own_features(ctx):
    rng = ctx.worker_rng(71)
    for n, k, window in ((5, 4, 3), (3, 5, 4), (7, 3, 2), (4, 6, 8)):
        draft, features, seq, wte, lm_head = random_roll_case(rng, n, window=window)
        judge_roll(ctx, draft, features, seq, wte, lm_head, k)


@check("7a", 1)
def eagle_roll_at_the_edges(ctx):
    rng = ctx.worker_rng(72)
    for n, k, window in ((1, 4, 3), (2, 1, 3), (11, 2, 1), (9, 3, 16)):   # one feature; k = 1;
        draft, features, seq, wte, lm_head = random_roll_case(rng, n, window=window)  # a window
        judge_roll(ctx, draft, features, seq, wte, lm_head, k)       # of one; longer than seq


def shift_case(rng, B, T, C, V):
    return (rng.normal(size=(B, T, C)).astype(np.float32),
            rng.integers(0, V, (B, T)).astype(np.int64))


SHIFT_MISTAKES = (  # (states, tokens, targets) as written wrong, and the hint that names it
    (lambda f, x: (f[:, :-1], x[:, :-1], f[:, 1:]),
     "that pairs f_t with x_t, the token at t: f_t goes with x_{t+1}, the token that followed "
     "it (idx[:, 1:])"),
    (lambda f, x: (f[:, :-1], x[:, 1:], f[:, :-1]),
     "the target is its own input feature f_t: the draft learns the NEXT feature, f_{t+1} "
     "(features[:, 1:])"),
    (lambda f, x: (f[:, 1:], x[:, 1:], f[:, 1:]),
     "the states start at f_1: the draft reads f_0 .. f_{T-2} (features[:, :-1])"),
)


@check("7b", 1)
def shifted_pairs_each_feature_with_the_next_token(ctx):
    hand = (np.arange(5.0, dtype=np.float32).reshape(1, 5, 1), 100 + np.arange(5).reshape(1, 5))
    for features, idx in (hand, shift_case(ctx.worker_rng(73), 2, 6, 3, 9)):
        got = ctx.helper("eagle_shift", "beyond.eagle", "shifted", features, idx)
        if isinstance(got, str):
            raise Fail("shifted returns the tuple (states, tokens, targets) of tensors", got)
        want = (features[:, :-1], idx[:, 1:], features[:, 1:])
        if all(g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want)):
            continue
        hint = ("states f_0 .. f_{T-2}, tokens x_1 .. x_{T-1}, targets f_1 .. f_{T-1}: at t the "
                "draft reads f_t with x_{t+1} and learns f_{t+1}")
        for mistake, named in SHIFT_MISTAKES:
            if all(g.shape == w.shape and np.array_equal(g, w)
                   for g, w in zip(got, mistake(features, idx))):
                hint = named
        raise Fail(f"{shift_summary(want)} (first row, first channel)", shift_summary(got),
                   hint)


def shift_summary(arrays):
    """The first row (first channel) of each of shifted's three results, to show."""
    shown = []
    for name, a in zip(("states", "tokens", "targets"), arrays):
        a = np.asarray(a)
        if a.ndim >= 2 and a.shape[1] > 0 and a.dtype.kind in "iuf":
            shown.append(f"{name} {np.round(a[0].reshape(a.shape[1], -1)[:, 0], 3).tolist()}")
        else:
            shown.append(f"{name} of shape {a.shape}")
    return "; ".join(shown)


def reference_eagle_loss(draft, features, idx, wte, lm_head, ce_weight, mistake=None,
                         noise=None):
    """The draft's loss by enumeration over positions, in float64: SmoothL1 (beta 1) of each
    guessed feature against the big model's next one, plus ce_weight times the cross-entropy of
    its logits against the head's distribution at the true next feature. noise (B, T - 1, C):
    added to the input features; mistake plants one of LOSS_MISTAKES."""
    import torch
    features = np.asarray(features, dtype=np.float64)
    B, T, C = features.shape
    inputs = features.copy()
    if noise is not None and mistake == "noisy targets":
        inputs = features = features + np.asarray(noise, dtype=np.float64)
    elif noise is not None:
        inputs[:, :-1] += np.asarray(noise, dtype=np.float64)
    embed, head = (lm_head, wte) if mistake == "swapped" else (wte, lm_head)
    head = torch.tensor(head, dtype=torch.float64)
    regression, cross_entropy = [], []
    for b in range(B):
        tokens = idx[b, :-1] if mistake == "unshifted" else idx[b, 1:]
        guesses = reference_draft(draft, inputs[b, :-1], tokens, embed)       # (T - 1, C)
        for t in range(T - 1):
            target = torch.tensor(features[b, t if mistake == "own input" else t + 1])
            d = (guesses[t] - target).abs()
            regression += (d ** 2 if mistake == "squared" else
                           torch.where(d < 1, 0.5 * d ** 2, d - 0.5)).tolist()
            teacher = features[b, t if mistake == "head at f_t" else t + 1]
            want = torch.softmax(head @ torch.tensor(teacher), 0)
            cross_entropy.append(float(-(want * torch.log_softmax(head @ guesses[t], 0)).sum()))
    return float(np.mean(regression) + ce_weight * np.mean(cross_entropy))


LOSS_MISTAKES = {  # a planted mistake (reference_eagle_loss) -> the hint that names it
    "unshifted": "that pairs f_t with x_t, the token at t: f_t goes with x_{t+1}, the token that "
                 "followed it (shifted: idx[:, 1:])",
    "own input": "the regression's target is the draft's own input feature f_t: it learns the "
                 "next one, f_{t+1} (the target is one position on)",
    "head at f_t": "the cross-entropy's target is the head's distribution at f_t, which "
                   "predicts x_{t+1}, the token the draft already reads: the guess of f_{t+1} "
                   "predicts x_{t+2}, so compare with the head at the true f_{t+1}",
    "swapped": "wte and lm_head swapped: the draft embeds the tokens with wte; lm_head makes "
               "the logits, F.linear(feature, lm_head)",
    "squared": "that is the squared error: the regression is SmoothL1, F.smooth_l1_loss",
    "noisy targets": "that adds the noise to every feature, the targets too: add it to the "
                     "input features only, after the shift (torch.rand(states.shape, ...))",
}


def judge_eagle_loss(ctx, draft, features, idx, wte, lm_head, ce_weight, noise=0.0, seed=0):
    got = ctx.helper("eagle_loss_value", "beyond.eagle", "eagle_loss", *draft, features, idx,
                     wte, lm_head, noise, ce_weight, seed)
    if isinstance(got, str):
        raise Fail("eagle_loss returns a torch scalar that training can differentiate", got)
    value = a_float(got, "eagle_loss")
    drawn = None
    if noise:
        import torch
        B, T, C = features.shape
        generator = torch.Generator().manual_seed(seed)
        drawn = ((torch.rand((B, T - 1, C), generator=generator) - 0.5) * noise).numpy()
    want = reference_eagle_loss(draft, features, idx, wte, lm_head, ce_weight, noise=drawn)
    if abs(value - want) <= 1e-4 * max(1.0, abs(want)):
        return
    hint = ("at t the draft reads [f_t ; wte(x_{t+1})] and guesses f_{t+1}: SmoothL1 against "
            "f_{t+1}, plus ce_weight x the cross-entropy of its logits against the head's "
            "distribution at f_{t+1}")
    if noise and abs(value - reference_eagle_loss(draft, features, idx, wte, lm_head,
                                                  ce_weight)) < 1e-4:
        hint = ("that is the loss without the noise: where noise is not 0, add "
                "(torch.rand(states.shape, generator=generator) - 0.5) * noise to the states")
    for mistake, named in LOSS_MISTAKES.items():
        if mistake == "noisy targets" and not noise:
            continue
        wrong_noise = drawn
        if mistake == "noisy targets":
            import torch
            generator = torch.Generator().manual_seed(seed)
            wrong_noise = ((torch.rand(features.shape, generator=generator) - 0.5) *
                           noise).numpy()
        wrong = reference_eagle_loss(draft, features, idx, wte, lm_head, ce_weight, mistake,
                                     wrong_noise)
        if abs(value - wrong) < 1e-4 * max(1.0, abs(wrong)):
            hint = named
            break
    raise Fail(f"loss {want:.5f} (features of shape {features.shape}, ce_weight = {ce_weight}"
               f"{f', noise = {noise}' if noise else ''})", f"{value:.5f}", hint)


def random_loss_case(rng, B, T, C=8, V=7, n_head=2, window=3):
    draft, wte, lm_head = random_eagle(rng, C, V, n_head, window)
    return (draft, *shift_case(rng, B, T, C, V), wte, lm_head)


@check("7b", 2)
def eagle_loss_learns_the_next_feature(ctx):
    rng = ctx.worker_rng(74)
    for (B, T, window), ce_weight in (((2, 6, 3), 0.1), ((1, 8, 2), 1.0), ((3, 4, 5), 0.5)):
        judge_eagle_loss(ctx, *random_loss_case(rng, B, T, window=window), ce_weight)


@check("7b", 1)
def eagle_loss_noise_and_gradient(ctx):
    rng = ctx.worker_rng(75)
    judge_eagle_loss(ctx, *random_loss_case(rng, 2, 5), 0.1, noise=0.5,
                     seed=int(rng.integers(1 << 30)))


# ----------------------------------------------------------------------------------------------
# Exercise 8: trees of guesses


def random_parents(rng, n):
    """A tree of n guesses besides the root: each node's parent, an earlier node."""
    return [-1] + [int(rng.integers(0, a)) for a in range(1, n + 1)]


def lineage(parents, a, *, parent_only=False, itself=True):
    """Node a and its ancestors (the options plant a mistake: MASK_MISTAKES)."""
    seen = {a} if itself else set()
    while parents[a] >= 0:
        a = parents[a]
        seen.add(a)
        if parent_only:
            break
    return seen


def mask_oracle(parents, cached, chain, *, causal_nodes=False, chain_seen=True,
                causal_chain=True, **lineage_options):
    """tree_mask by enumeration, slot by slot, from the docstring's rules."""
    T = chain + len(parents)
    visible = np.zeros((T, cached + T), dtype=bool)
    for i in range(T):
        for j in range(cached + T):
            if j < cached:
                visible[i, j] = True
            elif j < cached + chain:                                  # a chain token
                visible[i, j] = (j - cached <= i or not causal_chain) if i < chain else chain_seen
            elif i >= chain:                                          # node over node
                a, b = i - chain, j - cached - chain
                visible[i, j] = b <= a if causal_nodes else \
                    b in lineage(parents, a, **lineage_options)
    return visible


MASK_MISTAKES = (  # (a mistake, as mask_oracle's options; the hint that names it)
    ({"causal_nodes": True}, "that is a causal mask over the nodes: a node sees the nodes listed "
                             "before it, siblings and their branches too; it may see only itself "
                             "and its ancestors"),
    ({"parent_only": True}, "a node sees only itself and its parent there: it sees every "
                            "ancestor, up to the root (its parent's parent, and so on)"),
    ({"itself": False}, "a node does not see itself there: the diagonal, as for any token"),
    ({"chain_seen": False}, "the tree's nodes do not see the chain there: every node sees every "
                            "token of the chain (the text written before the root)"),
    ({"causal_chain": False}, "the chain sees all of itself there: chain token i sees chain "
                              "tokens 0..i only (causally)"),
)


def judge_mask(tree_mask, parents, cached, chain):
    want = mask_oracle(parents, cached, chain)
    got = tree_mask(list(parents), cached, chain)
    case = f"parents = {parents}, cached = {cached}, chain = {chain}"
    if not isinstance(got, np.ndarray) or got.shape != want.shape or \
            not np.isin(got, (0, 1)).all():
        raise Fail(f"a bool array of shape {want.shape} (T, cached + T) for {case}",
                   f"{type(got).__name__} {getattr(got, 'shape', '')}"[:80],
                   "one row per new token (the chain's, then the nodes'), one column per slot "
                   "(the cached ones, then the new ones)")
    got = got.astype(bool)
    if (got == want).all():
        return
    i, j = (int(v) for v in np.argwhere(got != want)[0])
    hint = next((hint for options, hint in MASK_MISTAKES
                 if (got == mask_oracle(parents, cached, chain, **options)).all()),
                "every new token sees the cached slots; the chain causally; a node the whole "
                "chain, itself and its ancestors")
    row = lambda mask: "".join(str(int(v)) for v in mask[i])         # noqa: E731
    raise Fail(f"visible[{i}, {j}] = {bool(want[i, j])} for {case}: row {i} {row(want)}",
               f"row {i} {row(got)}", hint)


def positions_oracle(parents, cached, chain, *, start=None, depth=True, after_chain=True):
    """tree_positions by enumeration (the options plant a mistake: POSITION_MISTAKES)."""
    first = cached if start is None else start
    root = first + (chain if after_chain else 0)
    return list(range(first, first + chain)) + [
        root + (len(lineage(parents, a)) - 1 if depth else a) for a in range(len(parents))]


POSITION_MISTAKES = (
    ({"depth": False}, "that puts node a at the root's position plus a, its index in the list: "
                       "it goes at the root's position plus its depth (siblings share one)"),
    ({"start": 0}, "the chain starts at 0 there: it comes after the cached tokens, at position "
                   "cached"),
    ({"after_chain": False}, "the root sits at cached there: it comes after the chain, at "
                             "cached + chain"),
)


def judge_positions(tree_positions, parents, cached, chain):
    want = positions_oracle(parents, cached, chain)
    got = tree_positions(list(parents), cached, chain)
    case = f"parents = {parents}, cached = {cached}, chain = {chain}"
    try:
        got = [int(p) for p in got]
    except (TypeError, ValueError):
        raise Fail(f"a list of {len(want)} positions for {case}", repr(got)[:80]) from None
    if got != want:
        hint = next((hint for options, hint in POSITION_MISTAKES
                     if positions_oracle(parents, cached, chain, **options) == got),
                    "the chain at cached, cached + 1, ...; then each node at the root's "
                    "position (cached + chain) plus its depth")
        if [p - 1 for p in got] == want:
            hint = "one too far: the first chain token sits at position cached (the cached " \
                   "tokens hold 0..cached - 1), the root at cached + chain, its children one on"
        raise Fail(f"{want} for {case}", f"{got}", hint)


def random_mask_cases(rng, count, largest):
    cases = [([-1], 0, 0), ([-1], 2, 0), ([-1, 0, 0, 1], 3, 0), ([-1, 0], 1, 2),
             ([-1, 0, 1, 2], 0, 1), ([-1, 0, 0, 0], 2, 3)]          # a root; the docstring's;
    for _ in range(count):                                          # a chain; a fan
        cases.append((random_parents(rng, int(rng.integers(1, largest + 1))),
                      int(rng.integers(0, 6)), int(rng.integers(0, 4))))
    return cases


@check("8a", 2)
def tree_mask_shows_each_node_its_ancestors_only(ctx):
    tree_mask = ctx.student("beyond.tree").tree_mask
    for parents, cached, chain in random_mask_cases(ctx.rng, 40, 9):
        judge_mask(tree_mask, parents, cached, chain)


@check("8a", 1)
def tree_positions_go_by_depth(ctx):
    tree_positions = ctx.student("beyond.tree").tree_positions
    for parents, cached, chain in random_mask_cases(ctx.rng, 40, 9):
        judge_positions(tree_positions, parents, cached, chain)


def random_greedy_case(rng, n, V=6):
    """A tree of n guesses, siblings holding different tokens, and the big model's choices,
    which a child holds more often than not (the walk goes deep)."""
    parents = [-1]
    for a in range(1, n + 1):                 # at most V - 1 children: one token held by none
        parents.append(int(rng.choice([p for p in range(a) if parents.count(p) < V - 1])))
    tokens = [int(rng.integers(0, V))]
    for a in range(1, n + 1):
        taken = {tokens[c] for c in range(1, a) if parents[c] == parents[a]}
        tokens.append(int(rng.choice([t for t in range(V) if t not in taken])))
    choices = []
    for a in range(n + 1):
        held = [tokens[c] for c in range(1, n + 1) if parents[c] == a]
        free = [t for t in range(V) if t not in held]
        choices.append(int(rng.choice(held if held and rng.random() < 0.75 else free)))
    return tokens, parents, choices


def greedy_oracle(tokens, parents, choices, *, first_only=False, by_child=False, depth=None):
    """greedy_walk by enumeration (the options plant a mistake: GREEDY_MISTAKES)."""
    node, path = 0, []
    while depth is None or len(path) < depth:
        children = [c for c in range(1, len(parents)) if parents[c] == node][:1 if first_only
                                                                             else None]
        held = [c for c in children if tokens[c] == (choices[c] if by_child else choices[node])]
        if not held:
            break
        node = held[0]
        path.append(node)
    return path, choices[node]


GREEDY_MISTAKES = (
    ({"first_only": True}, "only the first child (rank 0) is tried there: any child may hold "
                           "the big model's choice; look at every child"),
    ({"by_child": True}, "child c is kept there when its token is choices[c]: it is kept when "
                         "its token is the big model's choice after its parent, choices[parent]"),
    ({"depth": 1}, "the walk stops after the root's children there: from a kept child, try its "
                   "own children, down to a leaf"),
)


def judge_greedy(ctx, cases):
    got = ctx.helper("greedy_walks", "beyond.tree_sampling", "greedy_walk", cases)
    if isinstance(got, str):
        raise Fail("greedy_walk returns (path, token): a list of nodes and a token", got)
    for (tokens, parents, choices), (path, token) in zip(cases, got):
        want = greedy_oracle(tokens, parents, choices)
        if (path, token) == want:
            continue
        case = f"tokens = {tokens}, parents = {parents}, choices = {choices}"
        hint = next((hint for options, hint in GREEDY_MISTAKES
                     if greedy_oracle(tokens, parents, choices, **options) == (path, token)),
                    "from the root down, keep the child whose token is choices[node], while one "
                    "does; then the big model adds choices[last kept node]")
        if path == want[0]:
            hint = ("the right path, the wrong token: the big model adds its choice after the "
                    "last kept node, choices[path[-1]] (choices[0] when none is kept)")
        elif path == [0] + want[0]:
            hint = "the root is in the path there: the path starts at the root's child (the " \
                   "root, node 0, is written already)"
        elif path == [tokens[a] for a in want[0]] and path:
            hint = "the path lists tokens there: it lists node numbers (indices into tree.tokens)"
        raise Fail(f"{want} for {case}", f"{(path, token)}", hint)


@check("8b", 2)
def greedy_walk_follows_the_big_models_choices(ctx):
    judge_greedy(ctx, [random_greedy_case(ctx.rng, int(ctx.rng.integers(1, 12)))
                       for _ in range(150)])


@check("8b", 1)
def greedy_walk_at_the_edges(ctx):
    judge_greedy(ctx, [
        ([3], [-1], [4]),                                          # no guess: the token alone
        ([3, 4, 5], [-1, 0, 0], [2, 0, 0]),                        # no child holds it
        ([3, 4, 5], [-1, 0, 0], [5, 0, 1]),                        # the second child holds it
        ([3, 4, 5, 6], [-1, 0, 1, 2], [4, 5, 6, 1]),               # a chain, all kept
        ([3, 4, 5, 4, 5], [-1, 0, 0, 1, 2], [5, 1, 5, 2, 0]),      # the same token, two depths
    ])


def sample_law(probs):
    """The law of numpy_speculative.sample(probs, rng) for any probs >= 0, normalised or not
    (a draw past their sum takes the last token that has any)."""
    probs = np.asarray(probs, dtype=float)
    law = np.diff(np.concatenate([[0.0], np.minimum(np.cumsum(probs), 1.0)]))
    if probs.any():
        law[np.flatnonzero(probs)[-1]] += max(0.0, 1.0 - probs.sum())
    return law


def first_token_law(target, draft, width, rule="multi-candidate"):
    """The first token a round writes, by enumeration of every draw, when `width` guesses are
    drawn from draft one after another without replacement and checked by `rule`: the exact
    one, or a mistaken one of SIBLING_MISTAKES (for the hint only: the checks compare with
    the target itself)."""
    law = np.zeros(len(target))

    def residual(t, d):
        left = np.maximum(t - d, 0.0)
        return left if rule == "unnormalised" or left.sum() == 0 else left / left.sum()

    def go(t, left, n, weight, last):
        if n == 0 or left.sum() <= 0:
            end = {"independent": residual(target, last) if last is not None else target,
                   "no residual": target, "target at the end": target}.get(rule, t)
            law[:] += weight * sample_law(end)
            return
        draft_i = left / left.sum()
        for x in np.flatnonzero(draft_i):
            against = target if rule in ("independent", "no residual") else t
            keep = min(1.0, against[x] / draft_i[x])
            law[x] += weight * draft_i[x] * keep
            if keep < 1:
                rest = left.copy()
                rest[x] = 0.0
                go(residual(t, draft_i), rest, n - 1, weight * draft_i[x] * (1 - keep), draft_i)
    go(np.asarray(target, float), np.asarray(draft, float), width, 1.0, None)
    return law


SIBLING_MISTAKES = (
    ("independent", "each sibling tried against the same, unchanged target (as if each were "
                    "the only guess)"),
    ("no residual", "each sibling tried against the same, unchanged target, and the token "
                    "after the last rejection drawn from it too: no residual at all"),
    ("unnormalised", "a residual that is not renormalised, max(0, target - draft) as it is"),
    ("target at the end", "the token after every rejection drawn from the target itself, not "
                          "from the last residual"),
)


def power(target, law, runs):
    """The chi-square statistic's expected excess in `runs` draws from law, not from target."""
    live = target > 0
    return runs * float(((law[live] - target[live]) ** 2 / target[live]).sum()) + \
        (runs if (law[~live] > 0).any() else 0.0)


def favoured_rows(rng, V, shape=()):
    """Targets and drafts (shape + (V,) each) where the target favours a token that its draft
    under-proposes: then a residual never runs out, and no mistake crashes instead of showing
    in the counts (an unnormalised residual would reach all zeros, and sample() an IndexError)."""
    target, draft = rng.dirichlet(np.ones(V), shape), rng.dirichlet(np.ones(V), shape)
    favourite = np.eye(V)[rng.integers(0, V, shape)]                  # shape + (V,)
    target = 0.6 * target + 0.4 * favourite
    draft = np.where(favourite > 0, 0.0, draft)
    draft = 0.98 * draft / draft.sum(-1, keepdims=True) + 0.02 * favourite
    return target, draft


def sample_walk_case(rng, V, width, runs):
    """(target, draft) at the root, drawn until each mistake of SIBLING_MISTAKES moves the
    first token far enough for `runs` rounds to show it every time."""
    while True:
        target, draft = favoured_rows(rng, V)
        if min(power(target, first_token_law(target, draft, width, rule), runs)
               for rule, _ in SIBLING_MISTAKES) > 150:
            return target, draft


TREE_SHAPE = [-1, 0, 0, 0, 1, 1, 2, 4]   # three guesses after the root, two after the first,...


def sampled_rounds(ctx, parents, root_target, targets, root_draft, drafts, runs, salt=None,
                   seed=None):
    """sample_walk's rounds (helpers.sample_walks), checked for their form: an rng from
    ctx.worker_rng(salt), or one of `seed` (the same rounds for the same seed)."""
    rng = ctx.worker_rng(salt) if seed is None else np.random.default_rng(seed)
    done = ctx.helper("sample_walks", "beyond.tree_sampling", "sample_walk", parents,
                      root_target, targets, root_draft, drafts, rng, runs)
    if isinstance(done, str):
        raise Fail("sample_walk returns (path, token): a list of nodes and a token", done)
    trees, paths, added = (np.asarray(a) for a in done)
    V = len(root_target)
    for tree, path, token in zip(trees, paths, added):
        path = [int(a) for a in path if a >= 0]
        if not all(parents[a] == before for a, before in zip(path, [0] + path)) or \
                not 0 <= token < V:
            raise Fail("a path of nodes from the root's child down, each a child of the one "
                       f"before (parents = {parents}), and a token of the vocabulary",
                       f"path {path}, token {token}")
    return trees, paths, added


def written(trees, paths, added):
    """Each round's written tokens: its kept nodes' tokens, then the token the target added."""
    return [[int(tree[a]) for a in path if a >= 0] + [int(token)]
            for tree, path, token in zip(trees, paths, added)]


def judge_sampled(ctx, root_target, root_draft, runs, salt):
    parents, V = TREE_SHAPE, len(root_target)
    depth = max(len(lineage(parents, a)) - 1 for a in range(len(parents)))
    targets, drafts = favoured_rows(ctx.rng, V, (depth, V))   # after a node of depth d, token x
    trees, paths, added = sampled_rounds(ctx, parents, root_target, targets, root_draft, drafts,
                                         runs, salt)
    rounds = written(trees, paths, added)
    first = np.bincount([r[0] for r in rounds], minlength=V)
    width = len([a for a in parents if a == 0])
    where = f"(target {np.round(root_target, 3)}, {width} guesses drawn from the draft " \
            f"{np.round(root_draft, 3)} without replacement; {runs} rounds)"
    if chi_square_fails(first, root_target):
        seen = first / runs
        fits = [(chi_square_fails(first, law), hint) for law, hint in
                ((first_token_law(root_target, root_draft, width, rule), hint)
                 for rule, hint in SIBLING_MISTAKES)]
        named = next((hint for bad, hint in fits if not bad), None)
        raise Fail(f"the first token of a round distributed as the target's {where}",
                   f"{np.round(seen, 3)}",
                   (f"these counts fit {named}: " if named else "") +
                   "keep child c with min(1, target(x) / draft_c(x)); rejected, the next "
                   "sibling is tried against residual(target, draft_c), renormalised, and the "
                   "token after the last rejection is drawn from the last residual")
    kept = float(np.mean(paths[:, 0] == 1))                      # node 1: the first guess
    kept_as_often(kept, root_target, root_draft, 5 * math.sqrt(0.25 / runs),
                  f"in {runs} rounds")
    for d in range(1, depth + 1):                                 # after a kept node of depth d
        after = np.zeros((V, V))
        for r in rounds:
            if len(r) > d:
                after[r[d - 1], r[d]] += 1
        if after.sum() < 100:
            continue
        if chi_square_fails(after, after.sum(1, keepdims=True) / after.sum() * targets[d - 1]):
            x = int(np.argmax(after.sum(1)))
            raise Fail(f"after a kept guess x at depth {d}, the next token distributed as "
                       f"target_probs[that node]: for x = {x}, {np.round(targets[d - 1, x], 3)}",
                       f"{np.round(after[x] / after[x].sum(), 3)}",
                       "once child c is kept, go on from c: its children against "
                       "target_probs[c] (its own row, not the root's, nor a residual from "
                       "the level above)")


@check("8b", 2)
def sample_walk_keeps_the_target_distribution(ctx):
    for salt in (81, 82):
        target, draft = sample_walk_case(ctx.rng, 5, 3, 12000)
        judge_sampled(ctx, target, draft, 12000, salt)


@check("8b", 1)
def sample_walk_with_a_perfect_draft(ctx):
    """Drafts equal to the targets: every first guess is kept (min(1, p/p) = 1), down to a leaf;
    the same rng seed gives the same rounds."""
    parents, V = TREE_SHAPE, 5
    targets, _ = favoured_rows(ctx.rng, V, (3, V))
    root, _ = favoured_rows(ctx.rng, V)
    runs = [sampled_rounds(ctx, parents, root, targets, root, targets, 200, seed=seed)
            for seed in (3, 3, 4)]
    chain = [1, 4, 7]                                           # the first guesses, down
    paths = runs[0][1]
    if not (paths[:, :3] == chain).all():
        wrong = next(p for p in paths.tolist() if p[:3] != chain)
        raise Fail(f"every first guess kept: path {chain} (drafts equal to the targets)",
                   f"{[a for a in wrong if a >= 0]}",
                   "keep child c with probability min(1, target(x) / draft_c(x)): 1 here, "
                   "for the first child of every node")
    if not all((a == b).all() for a, b in zip(runs[0], runs[1])) or \
            all((a == b).all() for a, b in zip(runs[0], runs[2])):
        raise Fail("the same rng seed gives the same rounds, another seed others",
                   "not so", "draw every random number from the rng argument; never reseed")


# BEGIN HIDDEN
# Hidden checks: the teacher's only (build removes them). They rerun properties on other
# shapes and draws than the public checks, so hard-coding what those print earns nothing.
HIDDEN_SEED = 0x9c1f_35a2_6be0_4d87_b3e1_5f02_c86a_7d19  # 128 bits; CLASSROOM_SEED replaces it


@check("3b", 2, torch_free=True, hidden=True)
def greedy_hidden_lengths_and_k(ctx):
    draft = ctx.torch_model("draft")
    for case in ctx.cases["greedy"]:
        for k in (1, 8):
            passes, recorder = greedy_run(ctx, "draft", case, k)
            done = making.greedy_rounds(case["expected"], draft, len(case["prompt"]), k)
            if passes != done.rounds:
                raise Fail(f"{done.rounds} passes of the big model with k = {k}", f"{passes!r}")
            if recorder is not None:
                counted_passes(recorder, done, f"{case['n']} tokens with k = {k}")


@check("3c", 1, torch_free=True, hidden=True)
def verify_chi_square_at_a_hidden_seed(ctx):
    target_probs, draft_probs = ctx.rng.dirichlet(np.ones(5), 4), ctx.rng.dirichlet(np.ones(5), 3)
    rounds = ctx.helper("first_tokens", "numpy_speculative", "verify", target_probs,
                        draft_probs, ctx.worker_rng(3), 20000)
    if isinstance(rounds, str):
        raise Fail("verify returns a pair of whole numbers (kept, token)", rounds)
    rounds = np.asarray(rounds)
    if rounds.shape != (20000, 3) or not ((0 <= rounds) & (rounds < 5)).all():
        raise Fail("verify returns (kept, token) with a token of the vocabulary", "other values")
    first = np.where(rounds[:, 1] > 0, rounds[:, 0], rounds[:, 2])
    kept = float((rounds[:, 1] > 0).mean())
    kept_as_often(kept, target_probs[0], draft_probs[0], 5 * math.sqrt(0.25 / 20000),
                  "in 20,000 rounds")
    counts = np.bincount(first, minlength=5)
    if chi_square_fails(counts, target_probs[0]):
        raise Fail("the first token distributed as the target's", f"{counts / counts.sum()}")


@check("6a", 1, hidden=True)
def prompt_lookup_on_long_texts(ctx):
    prompt_lookup = ctx.student("beyond.ngram").prompt_lookup
    for _ in range(40):
        seq, k, longest, shortest = random_lookup_case(ctx.rng, int(ctx.rng.integers(40, 200)))
        judge_lookup(prompt_lookup, seq, k, longest + 2, shortest)


@check("6b", 1, hidden=True)
def heads_loss_at_other_shapes(ctx):
    for targets, (B, T, h, V) in (("soft", (3, 9, 5, 6)), ("hard", (1, 12, 4, 3))):
        guesses = ctx.rng.normal(size=(B, T, h, V)).astype(np.float32)
        logits = (ctx.rng.normal(size=(B, T, V)) * 2).astype(np.float32)
        judge_heads_loss(ctx, guesses, logits, targets)

@check("7a", 1, hidden=True)
def eagle_roll_on_longer_texts(ctx):
    rng = ctx.worker_rng(76)
    for n, k, window in ((14, 6, 5), (20, 4, 4)):
        draft, wte, lm_head = random_eagle(rng, 12, 9, 3, window)
        features = rng.normal(size=(n, 12)).astype(np.float32)
        judge_roll(ctx, draft, features, rng.integers(0, 9, n + 1).tolist(), wte, lm_head, k)


@check("7b", 1, hidden=True)
def eagle_loss_at_other_shapes(ctx):
    rng = ctx.worker_rng(77)
    judge_eagle_loss(ctx, *random_loss_case(rng, 3, 9, C=12, V=9, n_head=3, window=4), 0.3)
    judge_eagle_loss(ctx, *random_loss_case(rng, 2, 3, C=6, V=5, n_head=1, window=1), 0.1,
                     noise=0.2, seed=int(rng.integers(1 << 30)))


@check("8a", 1, hidden=True)
def tree_mask_and_positions_on_larger_trees(ctx):
    tree = ctx.student("beyond.tree")
    for parents, cached, chain in random_mask_cases(ctx.rng, 12, 30)[6:]:
        judge_mask(tree.tree_mask, parents, cached + 20, chain)
        judge_positions(tree.tree_positions, parents, cached + 20, chain)


@check("8b", 1, hidden=True)
def tree_walks_at_a_hidden_seed(ctx):
    judge_greedy(ctx, [random_greedy_case(ctx.rng, int(ctx.rng.integers(10, 40)), V=9)
                       for _ in range(40)])
    target, draft = sample_walk_case(ctx.rng, 6, 3, 12000)
    judge_sampled(ctx, target, draft, 12000, 85)
# END HIDDEN


def all_checks(hidden):
    return [c for c in CHECKS.values() if hidden or not c.hidden]
