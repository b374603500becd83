"""
classroom/runner.py: run checks against a student's code in worker processes, score them, print
and save the results.

Each check runs here, in the grader's process; the student's code runs in a worker (worker.py,
started in sandbox.py's copy of the project), which the check calls through wire.py. So the
fixtures, the expected values, the seed and the results never reach the student's code, and
whatever it does to its own process changes nothing here. A check scores its points when it
passes for every seed it runs with: seed 0 (the public checks a student runs) and, when
grading, the teacher's hidden seed too. Fixtures (random tiny models and what they must
produce) are made once per seed in this process.
"""

import functools
import importlib
import os
import signal
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from classroom import checks, making, parts, regions, sandbox, wire
from classroom.submissions import ROOT

PUBLIC_SEED = 0
TIMEOUT = 60  # seconds per check and seed
LARGEST = 10 ** 6  # the largest whole number a call back to a reference takes (see bounded)


def hidden_seed():
    """The teacher's seed for hidden checks: CLASSROOM_SEED, else the one in checks.py."""
    value = os.environ.get("CLASSROOM_SEED") or getattr(checks, "HIDDEN_SEED", None)
    if value is None:
        raise SystemExit("error: hidden checks need CLASSROOM_SEED (this is a student copy)")
    return int(value)


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
        hidden seed's run said stays out (it may quote the hidden inputs); only that it failed."""
        for seed, o in sorted(self.outcomes.items(), key=lambda item: item[0] != PUBLIC_SEED):
            if o["status"] == "pass":
                continue
            which = "" if seed == PUBLIC_SEED else " (hidden seed)"
            if seed != PUBLIC_SEED and not reveal_hidden:
                return [f"{o['status']} on the hidden seed (what it said is shown after the "
                        "grades are published)"]
            if o["status"] == "fail":
                out = [f"expected{which}: {o['expected']}", f"got: {o['got']}"]
                return out + ([f"hint: {o['hint']}"] if o.get("hint") else [])
            return [o.get("message", o["status"]) + which]
        return []


class RemoteContext(checks.Context):
    """A check's view of a worker (worker.py): the student's modules, models and helpers live
    there; the fixtures, the expected values and every comparison stay here."""

    def __init__(self, seed, fixture_dir, peer, check, references):
        super().__init__(seed, fixture_dir)
        self.worker = wire.Remote(peer, 1)
        if check.torch_free:
            self.worker.block_torch()
        if references:
            self.worker.use_references([(key, wire.Exposed(bounded(function)))
                                        for key, function in references.items()])
        self._modules, self._standins = {}, {}

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
        models, recorder = self._standins[key]
        if not memo:               # memo: the worker asks once per window, so counts add up
            recorder.reset()
        return models, recorder

    def helper(self, name, module, function, *args):
        return self.worker.helper(name, module, function, *args)

    def lend(self, obj, methods=("__call__",)):
        return wire.Exposed(obj, methods)


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
        for other in parts.PARTS:
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


def run_checks(root, selected, seeds, *, jobs=None, timeout=TIMEOUT, missing=(), grading=True):
    """Run every check in `selected` for every seed, on the student files in `root` (the rest
    of the project is the student version of this one: sandbox.project_copy).

    missing: student files absent from a submission; their checks are not run. grading: False
    for a student's own check of their own files, which needs no isolation (sandbox.start)."""
    root = Path(root).resolve()
    jobs = jobs or min(2, os.cpu_count() or 1)
    results = [Result(c) for c in selected]
    # The scratch folder (fixtures, logs) is the grader's alone; the copies the workers use lie
    # apart, in a folder that a worker running as a user of its own may pass (sandbox.py).
    with tempfile.TemporaryDirectory(prefix="classroom-") as scratch, \
            tempfile.TemporaryDirectory(prefix="classroom-copy-") as copies:
        fixture_dirs = {seed: making.make(Path(scratch) / f"seed{seed}", seed) for seed in seeds}
        project = sandbox.project_copy(Path(copies) / "project", root)
        tasks = []
        for result in results:
            file = parts.BY_ID[result.check.part].file
            for seed in seeds:
                if file in missing:
                    result.outcomes[seed] = {"status": "missing",
                                             "message": f"missing file {file}"}
                else:
                    tasks.append((result, seed))

        stalled = set()  # parts with a check that ran out of time: an endless loop, likely
        zygotes, starting = {}, threading.Lock()

        def zygote(torch_free):
            with starting:
                if torch_free not in zygotes:
                    zygotes[torch_free] = sandbox.Zygote(project, scratch, torch=not torch_free,
                                                         grading=grading)
                return zygotes[torch_free]

        def work(task):
            result, seed = task
            check = result.check
            if check.part in stalled:  # its other checks would only loop again
                result.outcomes[seed] = {"status": "timeout", "message": "not run: another "
                                         f"check of part {check.part} did not finish "
                                         f"within {timeout} s"}
                return
            ours, theirs = socket.socketpair()
            # A process of its own, in a session of its own (and, sandboxed, in the zygote's PID
            # namespace): when the check ends, its process group is killed. Its output goes to
            # a file that no student sees.
            with open(Path(scratch) / f"{check.name}-{seed}.log", "w+") as log:
                pid = None
                try:
                    pid = zygote(check.torch_free).spawn(theirs.fileno(), log)
                    theirs.close()
                    peer = wire.Peer(ours, lends_anything=False,
                                     deadline=time.monotonic() + timeout)
                    ctx = RemoteContext(seed, fixture_dirs[seed], peer, check,
                                        references(check.part))
                    outcome = checks.run_check(check, ctx, root)
                except wire.Timeout:
                    stalled.add(check.part)
                    outcome = {"status": "timeout", "message":
                               f"did not finish within {timeout} s (an endless loop?)"}
                except wire.Gone:
                    outcome = {"status": "crashed"}
                finally:
                    theirs.close()
                    ours.close()                    # the worker's end of the socket ...
                    try:                                    # ... and its process group
                        code = zygote(check.torch_free).kill(pid) if pid else None
                    except wire.Gone:
                        code = None
                if outcome["status"] == "crashed":
                    log.seek(0)
                    lines = log.read().strip().splitlines() or ["no output"]
                    outcome["message"] = (f"the check's process ended (exit {code}) before "
                                          f"reporting: {lines[-1][:300]}")
            result.outcomes[seed] = outcome

        try:
            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(work, tasks))
        finally:
            for z in zygotes.values():
                z.close()
            sandbox.kill_leftovers()
    return results


def select(exercise=None, part=None, hidden=False):
    chosen = checks.all_checks(hidden)
    if part is not None:
        if part not in parts.BY_ID:
            raise ValueError(f"no part {part!r}; the parts are {', '.join(parts.BY_ID)}")
        chosen = [c for c in chosen if c.part == part]
    if exercise is not None:
        if exercise not in parts.EXERCISES:
            raise ValueError(f"no exercise {exercise}; the exercises are 1 to 5")
        chosen = [c for c in chosen if parts.BY_ID[c.part].exercise == exercise]
    return chosen


def table(results, colour=False):
    """The report a student reads: one line per check with points, a few lines per failure."""
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
