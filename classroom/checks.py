"""
classroom/checks.py: what every check is made of: Check and Fail, the contexts a check runs in,
and the judging every part shares (numbers, chi-square, "fix X first").

A check calls the student's functions through its context and compares what comes back with
ctx.ref.NAME(...): the teacher's reference (classroom/references.py, which the student
repository lacks) where it exists, else the value it gave, recorded by `classroom build`
(classroom/expected.py). The checks themselves are in checks_part_one.py and checks_part_two.py.
"""

import contextlib
import copy
import functools
import importlib
import json
import math
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from classroom import helpers, making, wire
from classroom.helpers import FakeGPU  # noqa: F401 (notebook 6 shows it from here)
from lessonkit import parts

LETTERS = making.VOCAB
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


class Refs:
    """ctx.ref.NAME(*args): what the reference answers, from `source` (expected.py)."""

    def __init__(self, ctx, source):
        self._ctx, self._source = ctx, source

    def __getattr__(self, name):
        return lambda *args: self._source.call(self._ctx, name, args)


class Context:
    """What a check gets: its seed and rng, its fixtures (making.py), ctx.ref, and the student's
    code, which a subclass reaches:

    - student(module): the module whose functions the check calls;
    - model(name): a fixture model with its weights, as the exercise's Model;
    - standins(roles, memo=False): {role: model} and a making.Recorder that counts each role's
      forward passes (None where nothing counts them); memo: asked once per window;
    - helper(name, module, function, *args): helpers.NAME(module.function, *args) beside the
      student's code;
    - lend(obj, methods): obj as the student's code may use it (only those methods);
    - on_gpu(gpu): with torch.cuda standing in for gpu (a helpers.FakeGPU that stays here).

    The cases come from ctx.rng (the seed's); a generator handed to the student's code comes
    from worker_rng(): at a hidden seed one of a fresh random key, so that no state the worker
    sees leads back to the seed (and such draws differ on a regrade)."""

    def __init__(self, seed, fixture_dir, source):
        self.seed, self.fixture_dir = seed, Path(fixture_dir)
        self.rng = np.random.default_rng(seed)
        self.cases = json.loads((self.fixture_dir / "cases.json").read_text())
        self.ref = Refs(self, source)
        self._torch, self._standins, self.recorders = {}, {}, []

    def fresh(self):
        """The same context with its rng from the start: another check run inside this one
        (fix_first) draws the cases it draws on its own."""
        other = copy.copy(self)
        other.rng = np.random.default_rng(self.seed)
        other.ref = Refs(other, self.ref._source)
        return other

    def worker_rng(self, salt):
        """A generator to hand to the student's code: at the public seed one of its own (anyone
        may know it); at any other, one from a fresh random key."""
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

    def standins(self, roles, memo=False):
        key = (tuple(sorted(roles.items())), memo)
        if key not in self._standins:
            recorder = making.Recorder({role: self.torch_model(name)
                                        for role, name in roles.items()})
            models = {}
            for role, name in roles.items():
                _, config, vocab = self.model_files(name)
                models[role] = self.standin(config, vocab, functools.partial(recorder.logits,
                                                                             role), memo)
            self._standins[key] = models, recorder
            self.recorders.append(recorder)
        models, recorder = self._standins[key]
        if not memo:               # memo: the student's code asks once per window: no counts
            recorder.reset()
        return models, recorder


class LocalContext(Context):
    """The student's code in this process (a notebook's kernel, the zoos' tests, mutants).
    overrides: {function name: function} used instead of the modules' own (a notebook's cells:
    nothing counts the passes of its models); modules: {name: a module object} used instead of
    the imported one (the zoo's planted bugs, mutants: the grader's stand-ins count passes)."""

    def __init__(self, seed, fixture_dir, source, overrides=None, modules=None):
        super().__init__(seed, fixture_dir, source)
        self.overrides, self.modules = overrides or {}, modules or {}

    def student(self, module):
        found = self.modules.get(module) or importlib.import_module(module)
        return _Overridden(found, self.overrides) if self.overrides else found

    def model(self, name):
        return self.student("numpy_speculative").load(self.fixture_dir / f"{name}.npz")

    def standins(self, roles, memo=False):
        if "numpy_speculative" in self.modules:
            return super().standins(roles, memo)
        return {role: self.model(name) for role, name in roles.items()}, None

    def standin(self, config, vocab, logits_of, memo):
        return helpers.standin(self.modules["numpy_speculative"], config, vocab, logits_of, memo)

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


class RemoteContext(Context):
    """A check's view of a worker: the student's modules, models and helpers live there; the
    fixtures, expected values, comparisons and every figure judged stay here."""

    def __init__(self, seed, fixture_dir, source, worker):
        super().__init__(seed, fixture_dir, source)
        self.worker, self._modules = worker, {}

    def student(self, module):
        if module not in self._modules:
            self._modules[module] = self.worker.module(module)
        return self._modules[module]

    def model(self, name):
        return self.worker.model(*self.model_files(name))

    def standin(self, config, vocab, logits_of, memo):
        return self.worker.standin(config, vocab, wire.Exposed(logits_of), memo)

    def helper(self, name, module, function, *args):
        return self.worker.helper(name, module, function, *args)

    def lend(self, obj, methods=("__call__",)):
        return wire.Exposed(obj, methods)

    @contextlib.contextmanager
    def on_gpu(self, gpu):
        self.worker.use_gpu(wire.Exposed(LentGPU(gpu), helpers.GPU_CALLS))
        try:
            yield
        finally:
            self.worker.restore_gpu()


class LentGPU:
    """The grader's FakeGPU as a worker's torch.cuda calls it: its events lent too."""

    def __init__(self, gpu):
        self.gpu = gpu

    def synchronize(self):
        self.gpu.synchronize()

    def is_available(self):
        return True

    def Event(self, enable_timing=False):
        return wire.Exposed(self.gpu.Event(enable_timing), helpers.EVENT_CALLS)


class _Overridden:
    def __init__(self, module, overrides):
        self._module, self._overrides = module, overrides

    def __getattr__(self, name):
        return self._overrides.get(name, getattr(self._module, name))


def run_check(check, ctx, root=None):
    """Run one check: {"status": ..., and what went wrong, as text}. What ends the worker (a
    timeout, its end, a message the grader cannot read) is raised for the runner. The text may
    quote the student's values."""
    try:
        check.function(ctx)
        outcome = {"status": "pass"}
    except Skip as e:
        outcome = {"status": "skipped", "message": str(e)}
    except Fail as e:
        outcome = {"status": "fail", "expected": e.expected, "got": e.got, "hint": e.hint}
    except NotImplementedError as e:
        outcome = {"status": "not started", "message": str(e) or "not written yet"}
    except (wire.Timeout, wire.Gone, wire.ProtocolError, ConnectionError, TimeoutError):
        raise                               # the worker's end: the runner ends it
    except wire.StudentError as e:
        outcome = {"status": "error", "message": e.message}
    except BaseException as e:  # noqa: BLE001 (SystemExit too: a check never exits)
        where = helpers.student_frame(e.__traceback__, root or Path.cwd().resolve(),
                                      parts.STUDENT_FILES)
        outcome = {"status": "error", "message": helpers.describe(e, where)}
    return {key: value if isinstance(value, str) else str(value) for key, value in outcome.items()}


def why_stuck(part, recorders):
    """The likely cause of a check that ran out of time, from the passes the grader counted."""
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


# ----------------------------------------------------------------------------------------------
# Judging that every part shares


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
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if not isinstance(value, (float, int, np.floating, np.integer)) or isinstance(value, bool):
        raise Fail(f"{what} returns a number", f"{type(value).__name__}: {value!r}")
    if math.isnan(value):
        raise Fail(f"{what} returns a number", "nan", "look for 0/0 or an empty mean")
    return float(value)


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


def kept_as_often(ctx, kept, target, draft, error, how):
    """Fail unless the first guess is kept as often as the exact rule keeps it, within `error`:
    a rule that keeps nothing and samples every token from the target has the right
    distribution, and no speed-up."""
    want = ctx.ref.alpha(target, draft)
    if abs(kept - want) > error:
        raise Fail(f"the first guess kept as often as the exact rule keeps it: sum of min(target,"
                   f" draft) = {want:.3f} (target {np.round(target, 3)}, draft "
                   f"{np.round(draft, 3)})", f"kept {kept:.3f} of the time ({how})",
                   "keep guess x with probability min(1, target(x)/draft(x)); a rule that "
                   "rejects more often keeps the distribution but throws away the speed-up"
                   if kept < want else "keep guess x with probability min(1, target(x)/"
                   "draft(x)), not more often")


def fix_first(ctx, function, tests, hint, how="this part's code may call"):
    """`hint`, preceded by "fix X first: ..." when the student's `function`, which the code that
    failed calls, fails one of `tests` (checks of its own, run on a fresh ctx of the same seed).
    Graded, the grader lends its reference for another part's function: it passes."""
    for test in tests:
        try:
            test(ctx.fresh())
        except (Fail, NotImplementedError, wire.StudentError) as e:
            part = parts.part_of(function)
            name = part.id if part.functions == (function,) else function
            why = f" ({e.hint})" if isinstance(e, Fail) and e.hint else ""
            return (f"fix {name} first: your {function}, which {how}, fails {test.__name__}"
                    f"{why}; then: {hint}")
    return hint




# ----------------------------------------------------------------------------------------------
# Naming a mistake from every case


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool(np.allclose(a, b, atol=1e-6, rtol=1e-5))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            abs(a - b) <= 1e-4 * max(1.0, abs(b))
    return a == b


def named(runs, hints, default):
    """runs: [(what the student's function gave, {mistake: what it gives})] for every case it
    ran on. The hint of the mistake that gives what the student's gave on every case; of each,
    where several do; else `default`."""
    fits = [name for name in hints if all(name in mistakes and same(got, mistakes[name])
                                          for got, mistakes in runs)]
    if not fits:
        return default
    if len(fits) == 1:
        return hints[fits[0]]
    return "these outputs fit more than one mistake: " + "; or ".join(hints[n] for n in fits)


def judge_cases(ctx, cases, student, reference, describe, hints, default):
    """Run `student` on every case, then fail at the first that differs from the reference's
    answer, naming the mistake that fits every case. reference(case) -> {"want", "mistakes"};
    describe(case, want, got) -> (expected, got, hint or None); default: a hint, or a function
    (case, want, got) -> one."""
    runs, failed = [], None
    for case in cases:
        answer = reference(case)
        got = student(case)
        runs.append((got, answer["mistakes"]))
        if failed is None and not same(got, answer["want"]):
            failed = case, answer["want"], got
    if failed is not None:
        case, want, got = failed
        expected, shown, hint = describe(case, want, got)
        if callable(default):
            default = default(case, want, got)
        raise Fail(expected, shown, hint or named(runs, hints, default))
