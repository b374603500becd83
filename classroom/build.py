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

from classroom import checks, expected, notebooks, project, runner, sandbox
from classroom.project import ROOT, STUDENT_MARK
from lessonkit import parts


# What makes a repository the student's, decided once: this file, which build writes into the
# student repository only (yourturn.py reads it). Never a file's content: a student may paste a
# cell that still holds the solution markers, and a file saved from it is still theirs.
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
    ci.write_text(STUDENT_CI)
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
    BuildError naming the checks that fail."""
    log("proving the reference: every check must pass (public and hidden seeds)")
    table, failing = {}, []
    for seed, hidden in ((runner.PUBLIC_SEED, False), (runner.hidden_seed(), True)):
        for c in runner.select(hidden=hidden):
            ctx = checks.LocalContext(seed, runner.fixtures(seed),
                                      expected.Live(None if hidden else table))
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
        results = runner.run_checks(box, {False: layout, True: layout}, runner.select(),
                                    [runner.PUBLIC_SEED], source=expected.Recorded(
                                        layout / "classroom" / expected.FILE.name))
    failing = [r for r in results if r.status not in ("pass", "skipped")]
    if failing:
        raise BuildError("the recorded checks fail on the reference: " + "; ".join(
            f"{r.check.name}: {' / '.join(r.lines())}" for r in failing))
    log("proving the student version: every check with points must fail, as not started")
    stripped = runner.run_checks(box, {False: dest, True: dest}, runner.select(),
                                 [runner.PUBLIC_SEED], source=expected.Recorded(
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


def student_readme():
    return f"""# Speculative decoding: the assignments

Eight exercises on speculative decoding with tiny character-level GPTs: part one's five (the
idea, the numbers, a decoder in NumPy, a draft that breaks it, timing), then part two's three
(drafts without a second model, a draft that reads the big model's features, trees of guesses).
The library around them is complete; the functions you write raise
`NotImplementedError("Exercise N, part ...")` until you do. What the lesson is, and its figures:
`docs/LESSON.md`; how the library is built: `docs/DESIGN.md`; the functions you may call:
`docs/API.md`.

## Set up (once)

```
make setup                      # a virtual environment in .venv with everything installed
```

## Check your work

```
make check N=3                  # or: .venv/bin/python -m classroom check 3
make check N=07                 # the parts notebook 07 asks for (its two digits)
make check                      # every exercise
.venv/bin/python -m classroom check --part 3b
```

Each check prints a line with its points; a failing one says what was expected, what happened
and a hint. A part you have not started says "not started" and scores 0. The checks run on
small random models, in seconds, offline. Your teacher grades with the same checks on other
random models and seeds, so make the properties hold, not the printed numbers.

## What to write

{points_table()}

## The notebooks

The notebooks (`notebooks/*.ipynb`: part one, 1 to 6; part two, 7 on) tell the story with the
same functions as "your turn" cells, a check cell after each. `make notebooks` installs Jupyter
(the first time) and opens Jupyter Lab on fresh copies in `my-notebooks/` (never overwritten:
your work stays); `make lesson` first trains the models they use (minutes; a notebook would
otherwise train a missing one itself, saying how long first). Start with `01_the_idea.ipynb` and
go in order.

**Your answers live in the files above, and the notebooks write them there.** Running a your-turn
cell saves its function into its file (`numpy_speculative.py`, say) in place of the stub, with
a comment line above it; from then on the notebook, the later notebooks, the exercises and `make
check` all use it, and the check cell after it runs the same checks as `make check`. You can
also write a function in its file directly: a notebook whose cell is still blank uses the file's,
and a notebook never overwrites a function you changed in the file (its cell says so in one
line; `%%answer 3b --replace` as the cell's first line saves the cell's over it). A cell that
does not compile or raises saves nothing and says why in one line, and so does one whose function
uses a helper, an import or a value that its file does not define (the grader reads the file
alone: put it inside the function). A cell that needs a part you
have not written yet prints one line naming it and where to write it, and the notebook goes on.
After editing a file by hand, restart the notebook's kernel so that it reads the file again.

Without Jupyter Lab: VS Code opens the `.ipynb` files as they are (with the Python and Jupyter
extensions, and this repository's `.venv` as the kernel); `.venv/bin/jupyter nbconvert --to
notebook --execute --inplace my-notebooks/01_the_idea.ipynb` runs one from a terminal (after
`make notebooks` has installed Jupyter); or write the functions in their files with any editor
and check them with `make check`.

Exercise 3 is built with NumPy alone: `numpy_speculative.py` may not import torch or the
project's own decoding (the checks block both). The library's fast NumPy forward pass
(`beyond/fast_numpy.py`) would answer part 3a, so it is left out here: the tools' numpy backend
uses the torch model. Read
each function's docstring first; the functions around yours are complete and show the
conventions (shapes, names, the window rule).
`make lesson` trains every model the exercises and notebooks use (minutes, once), then runs the
lesson's experiments with your code: each exercise whose parts you have written runs, and each
one still to do prints one line naming the part and where to write it (results/report.md lists
them too); `make exercise N=2` runs one the same way.

## By hand

1. Explain, in your own words (half a page): what speculative decoding does in one round, the
   junior writer and senior editor picture, and the two places where the picture breaks.
5. If you have a GPU: run `python -m exercises.ex5_gpu` and explain its three figures. Without
   one, explain what would change on a GPU and why.

## Hand in

Commit and push (GitHub Classroom grades every push), or upload the repository as a zip where
your teacher says.
"""


STUDENT_CI = """#!/usr/bin/env bash
# CI of the assignments: set up, then run every check. Until the exercises are done the checks
# fail, and that is expected; this run makes sure the grader itself works and reports.
set -euo pipefail
cd "$(dirname "$0")/.."
make setup
.venv/bin/python -m classroom check --report-only
"""


def classroom_workflow():
    steps, runners_ = [], []
    for p in parts.PARTS:
        ident = f"part-{p.id}"
        runners_.append(ident)
        steps.append(f"""    - name: {p.id} {p.title}
      id: {ident}
      uses: classroom-resources/autograding-command-grader@v1
      with:
        test-name: "{p.id} {p.title}"
        command: .venv/bin/python -m classroom check --part {p.id} --strict
        timeout: 10
        max-score: {p.points}""")
    results = "\n".join(f"        {r.upper()}_RESULTS: \"${{{{steps.{r}.outputs.result}}}}\""
                        for r in runners_)
    return f"""# GitHub Classroom: one graded step per part; a step scores its points when every check
# of the part passes. Generated by `python -m classroom build`.
name: Autograding Tests
on: [push, workflow_dispatch, repository_dispatch]
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    if: github.actor != 'github-classroom[bot]'
    steps:
    - name: Checkout code
      uses: actions/checkout@v4
    - name: Set up
      run: make setup
{chr(10).join(steps)}
    - name: Autograding Reporter
      uses: classroom-resources/autograding-grading-reporter@v1
      env:
{results}
      with:
        runners: {",".join(runners_)}
"""


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH = "torch==2.13.*"  # the project's pin (pyproject.toml; a test keeps the two equal)


def gradescope_zip(out, root=ROOT):
    """Gradescope's autograder zip, in the layout Gradescope documents: setup.sh and
    run_autograder at the top, next to this repository's files; Gradescope unpacks it all into
    /autograder/source. AUTOGRADER_ROOT stands in for /autograder (the tests use it)."""
    seed = runner.hidden_seed()
    out = Path(out)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        def script(name, body):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16  # executable
            z.writestr(info, body)
        script("setup.sh", f"""#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image.
set -euo pipefail
apt-get update && apt-get install -y python3 python3-venv python3-pip make
VENV="${{CLASSROOM_VENV:-/opt/classroom-venv}}"     # outside the course's files, which
python3 -m venv "$VENV"                             # run_autograder closes to other users
# torch's CPU build (the grader needs no GPU; the default build pulls gigabytes of CUDA)
"$VENV/bin/pip" install --quiet --index-url "${{TORCH_INDEX:-{TORCH_CPU_INDEX}}}" "{TORCH}"
"$VENV/bin/pip" install --quiet -e "${{AUTOGRADER_ROOT:-/autograder}}/source"
# Only the grader's jobs that may use torch get this group: exercise 3's cannot read it.
chgrp -R {sandbox.TORCH_GID} "$VENV" && chmod -R g+rX,o-rwx "$VENV"
""")
        script("run_autograder", """#!/usr/bin/env bash
# Gradescope runs this for every submission.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
VENV="${CLASSROOM_VENV:-/opt/classroom-venv}"
chmod -R go-rwx "$ROOT/source"    # students' code may run as other users here: none reads it
cd "$ROOT/source"
CLASSROOM_SEED="$(cat classroom-seed)" "$VENV/bin/python" -m classroom grade \\
    "$ROOT/submission" --out "$ROOT/results/results.json" "$@"
""")
        z.writestr("classroom-seed", f"{seed}\n")
        for f in project.files(root):
            z.write(f, f.relative_to(root).as_posix())
    os.chmod(out, 0o644)
    return out
