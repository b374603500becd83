"""What the grader's tests share: submissions made from the reference, planted bugs loaded into
this process (the zoos judge hints and verdicts here, LocalContext), and grades run end to end
through a sandbox (runner.read, runner.grade) or, where namespaces are refused, through
tests/container.py."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from classroom import checks, expected, plan, project, regions, report, runner, sandbox
from lessonkit import parts

ROOT = project.ROOT
HIDDEN = 4321            # a hidden seed for the tests (small: a control's search finds it)


def blank_submission(folder):
    """The student version of every student file: nothing earns a point."""
    folder = Path(folder)
    for name in parts.STUDENT_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(regions.student_version((ROOT / name).read_text(),
                                                           parts.message))
    return folder


def reference_submission(folder):
    """The reference's student files: every point."""
    folder = Path(folder)
    for name in parts.STUDENT_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes((ROOT / name).read_bytes())
    return folder


def edit(folder, file, old, new):
    path = Path(folder) / file
    text = path.read_text()
    assert text.count(old) >= 1, f"{file}: {old[:60]!r} not found"
    path.write_text(text.replace(old, new, 1))


def stub(function):
    """The line that stands for `function`'s solution in the student version."""
    return f"raise NotImplementedError({parts.message(function)!r})"


def box(how="bwrap"):
    """A Sandbox of this kind: "bwrap" (the grader here), or "plain" (the control)."""
    if how == "plain":
        return sandbox.Sandbox("plain", "a test's control")
    found = sandbox.probe(ROOT, grading=True, scratch="/nowhere")
    assert found.how == how, found
    return found


def grade(submission, chosen, seeds=(0,), how="bwrap", budget=None):
    """(results, notes) of a grade of the checks of the parts `chosen` (hidden ones included)."""
    notes = []
    files = runner.read(box(how), submission, notes)
    selected = [c for p in chosen for c in plan.select(part=p, hidden=True)]
    return runner.grade(box(how), files, selected, list(seeds), notes, budget=budget), notes


def scores(results):
    found = {}
    for r in results:
        found[r.check.part] = found.get(r.check.part, 0) + r.score
    return found


def said(results):
    return " ".join(line for r in results for line in r.lines())


def full(part):
    return sum(c.points for c in plan.select(part=part, hidden=True))


# ----------------------------------------------------------------------------------------------
# Planted bugs, in this process


def planted(edits):
    """{module name: a module object}: each file of `edits` ([(file, old, new)]) as the student
    would have it, loaded apart from the project's own modules."""
    texts = {}
    for file, old, new in edits:
        text = texts.get(file, (ROOT / file).read_text())
        assert text.count(old) == 1, f"{file}: the reference changed; update {old[:60]!r}"
        texts[file] = text.replace(old, new)
    modules = [project.load_apart(file, text) for file, text in texts.items()]
    return {module.__name__: module for module in modules}


class TimedOut(Exception):
    pass


def in_process(chosen, edits=(), source=None, seeds=(0,), references=False, timeout=60):
    """Results of the checks of the parts `chosen` (the hidden ones too at other seeds) run
    here, on the reference with `edits` planted (planted()). source: where ctx.ref answers (the
    references by default; recorded() for a student's own check). references: as the grader
    does, each part gets the reference of every other part's function."""
    source, results = source or expected.Live(), []
    for part in chosen:
        modules = planted(edits)
        for (home, function), reference in (plan.references(part) if references else {}
                                            ).items():
            if home in modules:
                setattr(modules[home], function, reference)
        for seed in seeds:
            for check in plan.select(part=part, hidden=seed != 0):
                result = next((r for r in results if r.check is check), None)
                if result is None:
                    result = report.Result(check)
                    results.append(result)
                ctx = checks.LocalContext(seed, plan.fixtures(seed), source, modules=modules)
                result.outcomes[seed] = within(timeout, lambda: checks.run_check(check, ctx))
    return results


def within(seconds, run):
    def alarm(signum, frame):
        raise TimedOut
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return run()
    except TimedOut:
        return {"status": "timeout", "message": f"did not finish within {seconds} s"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def recorded(student_build):
    """What a student's own `make check` compares with: the build's recorded answers."""
    return expected.Recorded(Path(student_build) / "classroom" / expected.FILE.name)


# ----------------------------------------------------------------------------------------------
# Where namespaces are refused: Gradescope's container


def user_mode_refused():
    """Why this machine cannot run the grader as in a Docker container (tests/container.py),
    or None."""
    if os.geteuid() != 0:
        return "tests/container.py needs root"
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "container.py"), "v", "--",
                           "true"], capture_output=True, text=True, timeout=60)
    return None if done.returncode == 0 else f"tests/container.py: {done.stderr.strip()}"


def course(folder):
    """The course as Gradescope holds it: a copy of this repository, closed to other users."""
    folder = Path(folder)
    for f in project.files(ROOT):
        target = folder / f.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    folder.chmod(0o700)
    return folder


def graded_in_a_container(course_folder, submission, out, *args, env=None):
    """`python -m classroom grade` as root where namespaces and cgroups are refused: the
    CompletedProcess, and results.json's data."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "container.py"),
                           "classroom-venv", "--", "/mnt/classroom-venv/bin/python", "-m",
                           "classroom", "grade", str(submission), "--out", str(out), *args],
                          cwd=course_folder, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CLASSROOM_SEED": str(HIDDEN), **(env or {})})
    data = json.loads(Path(out).read_text()) if Path(out).exists() else None
    return done, data
