"""
classroom/runner.py: run checks in worker processes, score them, print and save the results.

A check scores its points when it passes for every seed it runs with: seed 0 (the public
checks a student runs) and, when grading, the teacher's hidden seed too. Fixtures (random tiny
models and what they must produce) are made once per seed in this process.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from classroom import checks, making, parts

PUBLIC_SEED = 0
TIMEOUT = 60  # seconds per check and seed


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


def run_checks(root, selected, seeds, *, jobs=None, timeout=TIMEOUT, missing=()):
    """Run every check in `selected` for every seed, in the repository at `root`.

    missing: student files absent from a submission; their checks are not run."""
    root = Path(root).resolve()
    jobs = jobs or min(2, os.cpu_count() or 1)
    results = [Result(c) for c in selected]
    with tempfile.TemporaryDirectory(prefix="classroom-") as scratch:
        fixture_dirs = {seed: making.make(Path(scratch) / f"seed{seed}", seed) for seed in seeds}
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

        def work(task):
            result, seed = task
            if result.check.part in stalled:  # its other checks would only loop again
                result.outcomes[seed] = {"status": "timeout", "message": "not run: another "
                                         f"check of part {result.check.part} did not finish "
                                         f"within {timeout} s"}
                return
            out = Path(scratch) / f"{result.check.name}-{seed}.json"
            env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1",
                   "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"}
            command = [sys.executable, "-m", "classroom.worker", result.check.name, str(seed),
                       str(fixture_dirs[seed]), str(out)]
            # A session of its own: when the worker ends, every process it started goes too.
            # Its output goes to a file, not a pipe: a forked child holding a pipe open would
            # keep the grader waiting.
            log = out.with_suffix(".log")
            with open(log, "w") as sink:
                worker = subprocess.Popen(command, cwd=root, env=env, stdout=sink, stderr=sink,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
                try:
                    finished = worker.wait(timeout=timeout) is not None
                except subprocess.TimeoutExpired:
                    finished = False
                finally:
                    kill_group(worker)
            if not finished:
                stalled.add(result.check.part)
                result.outcomes[seed] = {"status": "timeout", "message":
                                         f"did not finish within {timeout} s (an endless loop?)"}
                return
            done = subprocess.CompletedProcess(command, worker.returncode, "",
                                               log.read_text(errors="replace"))
            if out.exists():
                result.outcomes[seed] = json.loads(out.read_text())
            else:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                result.outcomes[seed] = {"status": "crashed", "message":
                                         f"the check's process ended (exit {done.returncode}) "
                                         f"before reporting: {last}"}

        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(work, tasks))
    return results


def kill_group(process):
    """Kill the process group a worker leads: the processes a submission forked go too."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass                                          # already gone
    process.wait()


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
