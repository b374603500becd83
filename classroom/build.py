"""
classroom/build.py: the student repository and the Gradescope autograder, made from this one.

build(dest) writes the student version of the project (project.py: solutions replaced by
NotImplementedError, the teachers' files left out, notebook outputs cleared), a student README,
a CI script, a GitHub Classroom workflow with one step per graded part and the mark of a
student repository; it runs every public check on the reference, recording what each reference
answered (expected.py) into the student repository's data file. Then it proves itself both
ways and refuses to finish otherwise: every check passes on the reference (its references
live, and the recorded data in the student repository's layout), and every check that carries
points fails on the student version, as "not started".
"""

import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

from classroom import checks, expected, notebooks, plan, project, runner, sandbox
from classroom.project import ROOT, STUDENT_MARK
from lessonkit import parts


class BuildError(ValueError):
    """The student version is not what it must be; the message names the check."""


def write_student_repository(dest, root=ROOT):
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise BuildError(f"{dest} exists and is not empty; choose a new folder")
    for f in project.files(root):
        relative = f.relative_to(root).as_posix()
        if project.teachers_only(relative) or relative == ".ci/run":
            continue
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(project.student_text(relative, f.read_text()))
        # executable or not, as here, and open to read whatever this process's umask
        target.chmod(0o755 if f.stat().st_mode & stat.S_IXUSR else 0o644)
    # The student notebooks, ready to open (and committed there, unlike here).
    notebooks.write(dest / "notebooks", "student", root=root)
    ignore = dest / ".gitignore"
    ignore.write_text("".join(line for line in ignore.read_text().splitlines(keepends=True)
                              if line.strip() != "/notebooks/*.ipynb"))
    (dest / "README.md").write_text(student_readme())
    ci = dest / ".ci" / "run"
    ci.parent.mkdir(exist_ok=True)
    ci.write_text(filled("ci_run"))
    ci.chmod(ci.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    workflow = dest / ".github" / "workflows" / "classroom.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text(classroom_workflow())
    (dest / STUDENT_MARK).write_text("Written by `python -m classroom build`: this is a student "
                                     "repository, where the notebooks save your answers into "
                                     "the graded files. Keep it.\n")
    return dest


def record(dest, log=print):
    """Every check on the reference in this process, its references live: the public checks
    at the public seed recorded into dest's data file, every check at the hidden seed. Raises
    BuildError naming the checks that fail. The NumPy exercises' module is a copy of its own,
    so that the grader's stand-ins answer its models as in a grade (and count their passes)."""
    log("proving the reference: every check must pass (public and hidden seeds)")
    table, failing = {}, []
    numpy_only = {"numpy_speculative": project.load_apart("numpy_speculative.py")}
    for seed, hidden in ((plan.PUBLIC_SEED, False), (plan.hidden_seed(), True)):
        for c in plan.select(hidden=hidden):
            ctx = checks.LocalContext(seed, plan.fixtures(seed),
                                      expected.Live(None if hidden else table), modules=numpy_only)
            outcome = checks.run_check(c, ctx)
            if outcome["status"] not in ("pass", "skipped"):
                failing.append(f"{c.name} at seed {seed}: {outcome}")
    if failing:
        raise BuildError("the reference fails " + "; ".join(failing))
    return expected.write(table, dest / "classroom" / expected.FILE.name)


def prove(dest, root=ROOT, log=print):
    """The recorded data makes every public check pass on the reference's answers in the
    student repository's layout; every check with points fails there on the student version."""
    box = sandbox.probe(dest, grading=False)
    solved = {name: (root / name).read_bytes() for name in parts.STUDENT_FILES}
    log("proving the recorded checks: every public check passes on the reference's answers")
    with runner_in(dest, solved) as layout:
        results = runner.run_checks(box, {False: layout, True: layout}, plan.select(),
                                    [plan.PUBLIC_SEED], source=expected.Recorded(
                                        layout / "classroom" / expected.FILE.name))
    failing = [r for r in results if r.status not in ("pass", "skipped")]
    if failing:
        raise BuildError("the recorded checks fail on the reference: " + "; ".join(
            f"{r.check.name}: {' / '.join(r.lines())}" for r in failing))
    log("proving the student version: every check with points must fail, as not started")
    stripped = runner.run_checks(box, {False: dest, True: dest}, plan.select(),
                                 [plan.PUBLIC_SEED], source=expected.Recorded(
                                     dest / "classroom" / expected.FILE.name))
    passing = [r.check.name for r in stripped if r.status == "pass" and r.check.points]
    if passing:
        raise BuildError(f"these checks pass on the student version, so they would give points "
                         f"for nothing: {', '.join(passing)}")
    # Failing is not enough: a check that crashes fails whatever the student writes.
    broken = [f"{r.check.name} ({r.status}: {' / '.join(r.lines())})" for r in stripped
              if r.status != "not started" and r.check.points]
    if broken:
        raise BuildError("these checks fail on the student version for another reason than the "
                         "missing exercise: " + "; ".join(broken))
    return results, stripped


class runner_in:
    """A copy of the student repository `dest` with `files` ({student file: bytes}) laid in."""

    def __init__(self, dest, files):
        self.dest, self.files = Path(dest), files

    def __enter__(self):
        self.folder = Path(shutil.copytree(self.dest, self.dest.with_name(
            self.dest.name + ".proving")))
        for name, data in self.files.items():
            (self.folder / name).write_bytes(data)
        return self.folder

    def __exit__(self, *exc):
        shutil.rmtree(self.folder, ignore_errors=True)


def build(dest, root=ROOT, log=print):
    dest = write_student_repository(dest, root)
    try:
        record(dest, log)
        prove(dest, root, log)
    except BuildError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    if shutil.which("git"):
        for command in (["git", "init", "-q"], ["git", "add", "-A"],
                        ["git", "-c", "user.name=classroom", "-c", "user.email=classroom@localhost",
                         "commit", "-qm", "The assignments"]):
            subprocess.run(command, cwd=dest, check=True, capture_output=True)
    log(f"wrote the student repository to {dest}")
    return dest


def points_table():
    rows = ["| part | what you write | file | points | about |", "|---|---|---|---|---|"]
    for p in parts.PARTS:
        functions = ", ".join(f"`{f}`" for f in p.functions)
        rows.append(f"| {p.id} | {p.title}: {functions} | `{p.file}` | {p.points} | "
                    f"{p.minutes} min |")
    for exercise, (title, points) in parts.BY_HAND.items():
        rows.append(f"| {exercise} (by hand) | {title} | your report | {points} | |")
    return "\n".join(rows)


TEMPLATES = Path(__file__).parent / "templates"   # the files build writes, with <<slots>>


def filled(name, **values):
    """The template `name` with each <<key>> replaced by its value."""
    text = (TEMPLATES / name).read_text()
    for key, value in values.items():
        text = text.replace(f"<<{key}>>", str(value))
    return text


def student_readme():
    return filled("README.md", points_table=points_table())


def classroom_workflow():
    """GitHub Classroom's workflow: one graded step per part, then the reporter."""
    steps = "".join(filled("classroom_step.yml", id=p.id, title=p.title, points=p.points)
                    for p in parts.PARTS)
    results = "\n".join(f"        PART-{p.id.upper()}_RESULTS: \"${{{{steps.part-{p.id}"
                        f".outputs.result}}}}\"" for p in parts.PARTS)
    return filled("classroom.yml", steps=steps.rstrip("\n"), results=results,
                  runners=",".join(f"part-{p.id}" for p in parts.PARTS))


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH = "torch==2.13.*"  # the project's pin (pyproject.toml; a test keeps the two equal)


def gradescope_zip(out, root=ROOT):
    """Gradescope's autograder zip, in the layout Gradescope documents: setup.sh and
    run_autograder at the top, next to this repository's files; Gradescope unpacks it all into
    /autograder/source. AUTOGRADER_ROOT stands in for /autograder (the tests use it)."""
    seed = plan.hidden_seed()
    out = Path(out)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        def script(name, body):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16  # executable
            z.writestr(info, body)
        script("setup.sh", filled("setup.sh", torch_index=TORCH_CPU_INDEX, torch=TORCH,
                                  torch_gid=sandbox.TORCH_GID))
        script("run_autograder", filled("run_autograder"))
        z.writestr("classroom-seed", f"{seed}\n")
        for f in project.files(root):
            z.write(f, f.relative_to(root).as_posix())
    os.chmod(out, 0o644)
    return out
