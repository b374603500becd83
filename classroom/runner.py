"""
classroom/runner.py: run checks against a student's code in worker processes, score them, print
and save the results.

Each check runs here, in the grader's process; the student's code runs in a worker (worker.py,
started in sandbox.py's copy of the project), which the check calls through wire.py. So the
fixtures, the expected values, the seed and the results never reach the student's code, and
whatever it does to its own process changes nothing here. A check scores its points when it
passes for every seed it runs with: seed 0 (the public checks a student runs) and, when
grading, the teacher's hidden seed too. Fixtures (random tiny models and what they must
produce) are made once per seed in this process, in a folder of its own.

Time: each check and seed has TIMEOUT seconds; after a check of a part runs out of time, the
part's other checks are not run (they would loop again), and the checks of different parts run
side by side, so a submission whose every function sleeps costs about one limit per part and
job. A grade may also have a budget (grade-all's per-submission cap): checks that would start
after it are not run.
"""

import atexit
import contextlib
import functools
import importlib
import itertools
import os
import shutil
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from classroom import checks, helpers, making, parts, regions, sandbox, wire
from classroom.submissions import ROOT, is_student_repository

PUBLIC_SEED = checks.PUBLIC_SEED
TIMEOUT = 20  # seconds per check and seed (an honest check takes a second or two)
GRACE = 2     # seconds past a check's limit before the grader kills its worker outright
LARGEST = 10 ** 6  # the largest whole number a call back to a reference takes (see bounded)


def hidden_seed():
    """The teacher's seed for hidden checks: CLASSROOM_SEED, else the one in checks.py (128
    bits: no search finds it back from what the checks show)."""
    value = os.environ.get("CLASSROOM_SEED") or getattr(checks, "HIDDEN_SEED", None)
    if value is None:
        raise SystemExit("error: hidden checks need CLASSROOM_SEED (this is a student copy)")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"CLASSROOM_SEED must be a whole number, not {value!r}") from None


@dataclass
class Result:
    check: checks.Check
    outcomes: dict = field(default_factory=dict)   # seed -> the worker's result

    @property
    def status(self):
        statuses = [o["status"] for o in self.outcomes.values()]
        for status in ("not started", "missing", "error", "timeout", "crashed", "fail",
                       "skipped"):
            if status in statuses:
                return status
        return "pass"

    @property
    def score(self):
        return self.check.points if self.status == "pass" else 0

    def lines(self, reveal_hidden=True):
        """What went wrong, in a few lines (nothing when it passed). reveal_hidden=False: what a
        hidden seed's run said stays out (it may quote the hidden inputs); only that it failed.
        Every field is shown(): it may be the student's text (an exception's message, a value
        returned, a hint that quotes one, what the worker printed before it crashed)."""
        for seed, o in sorted(self.outcomes.items(), key=lambda item: item[0] != PUBLIC_SEED):
            if o["status"] == "pass":
                continue
            which = "" if seed == PUBLIC_SEED else " (hidden seed)"
            if seed != PUBLIC_SEED and not reveal_hidden:
                return [f"{o['status']} on the hidden seed (what it said is shown after the "
                        "grades are published)"]
            if o["status"] == "fail":
                out = [f"expected{which}: {shown(o['expected'])}", f"got: {shown(o['got'])}"]
                return out + ([f"hint: {shown(o['hint'])}"] if o.get("hint") else [])
            return [shown(o.get("message", o["status"])) + which]
        return []


def escaped(text):
    """text as one line of printable characters: a newline as the two characters \\n, every
    other control or format character (an ANSI escape's ESC, a carriage return, a
    right-to-left override) as Python writes it in a string (\\x1b, \\r, \\u202e), so that
    nothing a student writes can move the cursor, hide, colour or forge a line of what the
    grader prints."""
    return "".join(ch if ch.isprintable() or ch == " " else
                   ch.encode("unicode_escape").decode("ascii") for ch in text)


def shown(value, cap=None):
    """What the grader prints of a text that may be the student's: escaped(), and cut at `cap`
    characters (checks.SHOWN by default; 0: whole) with how long it was."""
    cap = checks.SHOWN if cap is None else cap
    text = escaped(value if isinstance(value, str) else str(value))
    if not cap or len(text) <= cap:
        return text
    return f"{text[:cap]}... ({len(text):,} characters in all)"


class RemoteContext(checks.Context):
    """A check's view of a worker (worker.py): the student's modules, models and helpers live
    there; the fixtures, the expected values, every comparison and every figure judged (the
    simulated GPU's clock, the models' passes) stay here."""

    def __init__(self, seed, fixture_dir, peer, check, references):
        super().__init__(seed, fixture_dir)
        self.worker = wire.Remote(peer, 1)
        if references:
            self.worker.use_references([(key, wire.Exposed(bounded(function)))
                                        for key, function in references.items()])
        self._modules, self._standins = {}, {}
        self.recorders = []

    def student(self, module):
        if module not in self._modules:
            self._modules[module] = self.worker.module(module)
        return self._modules[module]

    def model(self, name):
        return self.worker.model(*self.model_files(name))

    def standins(self, roles, memo=False):
        key = (tuple(sorted(roles.items())), memo)
        if key not in self._standins:
            recorder = making.Recorder({role: self.torch_model(name)
                                        for role, name in roles.items()})
            models = {}
            for role, name in roles.items():
                _, config, vocab = self.model_files(name)
                models[role] = self.worker.standin(
                    config, vocab, wire.Exposed(functools.partial(recorder.logits, role)), memo)
            self._standins[key] = models, recorder
            self.recorders.append(recorder)
        models, recorder = self._standins[key]
        if not memo:               # memo: the worker asks once per window, so counts add up
            recorder.reset()
        return models, recorder

    def helper(self, name, module, function, *args):
        return self.worker.helper(name, module, function, *args)

    def lend(self, obj, methods=("__call__",)):
        return wire.Exposed(obj, methods)

    @contextlib.contextmanager
    def on_gpu(self, gpu):
        self.worker.use_gpu(wire.Exposed(LentGPU(gpu), helpers.GPU_CALLS))
        yield


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


def too_big(value):
    if isinstance(value, (list, tuple)):
        return any(too_big(v) for v in value)
    return isinstance(value, int) and abs(value) > LARGEST


def bounded(reference):
    """`reference` as the worker may call it back, here in the grader: with whole numbers up to
    LARGEST (the exercises use far less), so that one call is short. The check's time limit
    cuts a call at its next Python function call (wire.within), but not one long step of C:
    expected_tokens_per_pass(3, 10 ** 8) is a power of a whole number that takes minutes."""
    @functools.wraps(reference)
    def call(*args, **kwargs):
        if too_big([*args, *kwargs.values()]):
            raise ValueError(f"{reference.__name__} (the grader's) takes whole numbers up to "
                             f"{LARGEST:,} here")
        return reference(*args, **kwargs)
    return call


_references = {}


def references(part):
    """{(module, function): the reference} for every other part's function, where this
    process's own copy of the project holds the solutions (a teacher's; never a student's
    file), so that each part is graded on its own. 3a's functions are left out: stand-ins
    (helpers.standin) already give exercise 3 the big model's logits."""
    if part not in _references:
        found = {}
        for other in parts.PARTS if not is_student_repository() else ():
            if other.id in (part, "3a"):
                continue
            path = ROOT / other.file
            if not set(other.functions) <= set(regions.functions_with_solutions(path.read_text())):
                continue
            module = importlib.import_module(other.file[:-3].replace("/", "."))
            if Path(module.__file__).resolve() != path.resolve():
                continue
            for function in other.functions:
                found[(module.__name__, function)] = getattr(module, function)
        _references[part] = found
    return _references[part]


_fixtures = {}   # seed -> the folder of its fixtures, made once per process


def fixtures_of(seed):
    """The fixtures of `seed` (making.make), in a private folder that lasts as long as this
    process."""
    if "folder" not in _fixtures:
        _fixtures["folder"] = Path(tempfile.mkdtemp(prefix="classroom-fixtures-"))
        atexit.register(shutil.rmtree, _fixtures["folder"], True)
    if seed not in _fixtures:
        _fixtures[seed] = making.make(_fixtures["folder"] / f"seed{seed}", seed)
    return _fixtures[seed]


def interleaved(tasks, key):
    """tasks reordered so that neighbours belong to different keys (parts): the first of each
    part, then the second of each, ..."""
    groups = {}
    for task in tasks:
        groups.setdefault(key(task), []).append(task)
    return [t for row in itertools.zip_longest(*groups.values()) for t in row if t is not None]


def phases(tasks):
    """The public seed's runs first, every other seed's after them all: a hidden seed's run
    never overlaps or comes before a public one, so nothing it leaves (in /tmp, say) can reach
    what a student sees before the grades are published."""
    return [[t for t in tasks if t[1] == PUBLIC_SEED], [t for t in tasks if t[1] != PUBLIC_SEED]]


def run_checks(root, selected, seeds, *, jobs=None, timeout=TIMEOUT, missing=(), grading=True,
               budget=None):
    """Run every check in `selected` for every seed, on the student files in `root` (the rest
    of the project is the student version of this one: sandbox.project_copy).

    missing: student files absent from a submission; their checks are not run. grading: False
    for a student's own check of their own files, which needs no isolation (sandbox.start).
    budget: seconds for the whole run; the checks that would start after it are not run."""
    root = Path(root).resolve()
    jobs = jobs or min(2, os.cpu_count() or 1)
    results = [Result(c) for c in selected]
    end = None if budget is None else time.monotonic() + budget
    # The scratch folder is the grader's alone (the views of users of their own: sandbox.py);
    # the copies of the project lie apart.
    with tempfile.TemporaryDirectory(prefix="classroom-") as scratch, \
            tempfile.TemporaryDirectory(prefix="classroom-copy-") as copies:
        fixture_dirs = {seed: fixtures_of(seed) for seed in seeds}
        # Two copies: the student version with the student's files for the checks that may use
        # the whole library, and for exercise 3's only what they may use (TORCH_FREE_FILES)
        projects = {False: sandbox.project_copy(Path(copies) / "project", root),
                    True: sandbox.project_copy(Path(copies) / "numpy-only", root,
                                               only=sandbox.TORCH_FREE_FILES)}
        tasks = []
        for result in results:
            file = parts.BY_ID[result.check.part].file
            for seed in seeds:
                if file in missing:
                    result.outcomes[seed] = {"status": "missing",
                                             "message": f"missing file {file}"}
                else:
                    tasks.append((result, seed))
        tasks = interleaved(tasks, lambda task: task[0].check.part)

        stalled = set()  # parts with a check that ran out of time: an endless loop, likely
        zygotes, starting, numbers = {}, threading.Lock(), itertools.count(1)
        watches = []   # a MemoryWatch, where the checks run as users of their own without cgroups

        def zygote(torch_free):
            with starting:
                if torch_free not in zygotes:
                    zygotes[torch_free] = z = sandbox.Zygote(projects[torch_free], scratch,
                                                             torch=not torch_free,
                                                             grading=grading)
                    if z.how == "user" and not sandbox.cgroups() and not watches:
                        watches.append(sandbox.MemoryWatch())
                return zygotes[torch_free]

        def work(task):
            result, seed = task
            check = result.check
            if check.part in stalled:  # its other checks would only loop again
                result.outcomes[seed] = {"status": "timeout", "message": "not run: another "
                                         f"check of part {check.part} did not finish "
                                         f"within {timeout} s"}
                return
            left = timeout if end is None else min(timeout, end - time.monotonic())
            if left <= 0:
                result.outcomes[seed] = {"status": "timeout", "message": "not run: the "
                                         f"grade's time ({budget} s) ran out"}
                return
            with starting:
                n = next(numbers)
            ours, theirs = socket.socketpair()
            sandbox.expect_credentials(ours)
            # A process of its own, in a session of its own (and, sandboxed, in PID and mount
            # namespaces of its own: confine.py), in cgroups of its own where they can be made:
            # when the check ends, all of it is killed. Its output goes into a pipe read here.
            output = sandbox.Output()
            pid, group, ctx, worker, watchdog, outcome = None, None, None, None, None, None
            try:
                pid = zygote(check.torch_free).spawn(theirs.fileno(), output.write_end, n)
                theirs.close()
                output.sent()
                for watch in watches:
                    watch.watch(sandbox.check_uid(n))
                ours.settimeout(left)
                group = sandbox.check_group(str(n))
                worker = sandbox.Handle(sandbox.peer_pid(ours))
                if group is not None:
                    group.add(worker.pid)
                # The deadline is kept here, whatever the worker does: at its end the worker is
                # killed (in bubblewrap with its whole PID namespace), so every wait here ends.
                watchdog = threading.Timer(left + GRACE, worker.kill)
                watchdog.start()
                peer = wire.Peer(ours, lends_anything=False, deadline=time.monotonic() + left)
                ctx = RemoteContext(seed, fixture_dirs[seed], peer, check,
                                    references(check.part))
                outcome = checks.run_check(check, ctx, root)
            except (wire.Timeout, socket.timeout):
                stalled.add(check.part)
                cause = checks.why_stuck(check.part, ctx.recorders if ctx else [])
                outcome = {"status": "timeout", "message":
                           f"did not finish within {left:.0f} s: {cause}"}
            except (wire.Gone, wire.ProtocolError, OSError):
                outcome = {"status": "crashed"}
            finally:
                theirs.close()
                ours.close()                        # the worker's end of the socket ...
                if watchdog is not None:
                    watchdog.cancel()
                ended = outcome is not None and outcome["status"] == "crashed"
                if worker is not None and not ended:
                    worker.kill()                   # ... the worker, from here ...
                try:                                # ... its process group, by the zygote
                    code = zygote(check.torch_free).kill(pid, n, ended) if pid else None
                except wire.Gone:
                    code = None
                if worker is not None:
                    worker.kill()
                memory = group is not None and group.out_of_memory()
                memory = any([w.forget(sandbox.check_uid(n)) for w in watches]) or memory
                if group is not None:
                    group.close()                   # ... and all in its cgroups
                if worker is not None:
                    worker.close()
            if outcome["status"] == "crashed":
                outcome["message"] = (
                    f"the check's processes used more than {sandbox.MEMORY >> 30} GB "
                    "together: killed" if memory else f"the check's process ended (exit "
                    f"{code}) before reporting: {output.last_line()[:300]}")
            output.sent()
            result.outcomes[seed] = outcome

        try:
            with ThreadPoolExecutor(jobs) as pool:
                for phase in phases(tasks):
                    list(pool.map(work, phase))
        finally:
            for z in zygotes.values():
                z.close()
            for watch in watches:
                watch.close()
    return results


def select(exercise=None, part=None, hidden=False):
    chosen = checks.all_checks(hidden)
    if part is not None:
        if part not in parts.BY_ID:
            raise ValueError(f"no part {part!r}; the parts are {', '.join(parts.BY_ID)}")
        chosen = [c for c in chosen if c.part == part]
    if exercise is not None:
        if exercise not in parts.EXERCISES:
            raise ValueError(f"no exercise {exercise}; the exercises are {parts.NUMBERS}")
        chosen = [c for c in chosen if parts.BY_ID[c.part].exercise == exercise]
    return chosen


def table(results, colour=False, instead=None):
    """The report a student reads: one line per check with points, a few lines per failure.
    instead: {part id: one line} shown in place of that part's checks (a part not started)."""
    marks = {"pass": ("pass", "32"), "fail": ("FAIL", "31"), "error": ("ERROR", "31"),
             "timeout": ("TIMEOUT", "31"), "crashed": ("CRASHED", "31"),
             "not started": ("not started", "33"), "missing": ("MISSING", "31"),
             "skipped": ("skipped", "2")}
    lines, by_part = [], {}
    for r in results:
        by_part.setdefault(r.check.part, []).append(r)
    exercise = None
    for part_id, part_results in by_part.items():
        part = parts.BY_ID[part_id]
        if part.exercise != exercise:
            exercise = part.exercise
            lines.append(f"\nExercise {exercise}: {parts.EXERCISES[exercise]}")
        score = sum(r.score for r in part_results)
        total = sum(r.check.points for r in part_results)
        lines.append(f"  {part.id}  {part.title:<62} {score:>2}/{total}")
        if (instead or {}).get(part_id):
            line = instead[part_id]
            lines.append(f"      \033[33m{line}\033[0m" if colour else f"      {line}")
            continue
        for r in part_results:
            word, code = marks[r.status]
            shown = f"\033[{code}m{word:<11}\033[0m" if colour else f"{word:<11}"
            hidden = " (hidden)" if r.check.hidden else ""
            lines.append(f"      {shown} {(r.check.name + hidden):<56} {r.score:>2}/{r.check.points}")
            lines += [f"                  {line}" for line in r.lines()]
    score, total = sum(r.score for r in results), sum(r.check.points for r in results)
    lines.append(f"\ntotal {score}/{total} points"
                 + ("" if not results else f" ({100 * score / total:.0f}%)"))
    return "\n".join(lines)


def gradescope_json(results):
    """Gradescope's results.json: one test per check. The parts graded by hand (TEACHERS.md)
    are questions of their own in Gradescope."""
    tests = []
    for r in results:
        part = parts.BY_ID[r.check.part]
        shown = "\n".join(r.lines(reveal_hidden=r.check.hidden)) or "passed"
        tests.append({"name": f"{part.id} {r.check.name}", "score": r.score,
                      "max_score": r.check.points, "output": shown,
                      "visibility": "after_published" if r.check.hidden else "visible"})
    return {"score": sum(r.score for r in results), "tests": tests,
            "stdout_visibility": "hidden"}   # the grader's log may quote hidden inputs
