"""
classroom/walk.py: the course as a student takes it, as a check: the student repository built,
each notebook's your-turn cells written from the solved notebook as a student would, the
notebooks run in order in a kernel on the student repository (no cell raises or is skipped,
every check cell scores every point), then `make check` there gives every point.

    python -m classroom notebooks --walk                      # the trained models
    python -m classroom notebooks --walk --checkpoints DIR    # models trained elsewhere
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from classroom import build, notebooks, regions, yourturn
from classroom.project import ROOT
from lessonkit import parts

TOTAL = re.compile(r"total (\d+)/(\d+) points")


def as_a_student_writes(cell_source):
    """A solved your-turn cell without the solution markers, which a student never writes."""
    return regions.without_markers(cell_source)


def filled(student, solved, writes=as_a_student_writes):
    """The student notebook with each your-turn cell (a cell starting with %%answer) written as
    the solved notebook has it (through `writes`); every other cell as it is."""
    answers = [c.source for c in solved.cells if c.source.startswith("%%answer")]
    turns = [c for c in student.cells if c.source.startswith("%%answer")]
    assert len(answers) == len(turns), "the two versions have different your-turn cells"
    for cell, source in zip(turns, answers):
        cell.source = writes(source)
    return student


def outputs(notebook):
    return "\n".join(o.get("text", "") for cell in notebook.cells
                     for o in cell.get("outputs", []))


def verdict(notebook, filled_in=True):
    """Why a notebook that ran did not pass, or None. Filled in: no cell skipped and every check
    cell scored every point; blank: every check cell scored nothing."""
    text = outputs(notebook)
    skipped = [line for line in text.splitlines() if line.startswith("skipped:")]
    if skipped and filled_in:
        return skipped[0]
    totals = TOTAL.findall(text)
    wrong = [f"{got}/{full}" for got, full in totals if (got != full if filled_in else got != "0")]
    if wrong or not totals:
        return f"a check cell scored {wrong[0]} points" if wrong else "no check cell ran"
    return None


def written_ahead(student, first, root=ROOT):
    """The parts of the notebooks before `first` written into the student repository's files as
    the reference holds them (what walking those notebooks saves): a walk may start at `first`."""
    places = parts.your_turn_places()                # {part: (cell, notebook)}
    for part in parts.PARTS:
        if places[part.id][1] < first:
            lines = regions.without_markers((Path(root) / part.file).read_text()).splitlines(
                keepends=True)
            saved = yourturn.save(part, {name: yourturn.FileFunction(lines, name).text
                                         for name in part.functions}, root=student)
            if not set(saved.values()) <= {"saved", "unchanged"}:
                raise RuntimeError(f"part {part.id} could not be written ahead: {saved}")


def student_repository(dest, root=ROOT):
    """The student repository, built (and proved) by build.py into a new folder under dest."""
    return build.build(Path(dest) / "student", root, log=lambda line: None)


def environment(student, checkpoints=None, quick=False, root=ROOT):
    """What a notebook's kernel runs with: the student repository first on its path."""
    folder = Path(checkpoints or (root / "checkpoints")).resolve()
    return {"PYTHONPATH": str(student), "SPECDEC_QUICK": "1" if quick else "",
            "SPECDEC_CHECKPOINTS": str(folder), "NO_COLOR": "1"}


def run(notebook, student, env, filled_in=True, timeout=900):
    """Run one notebook in the student repository's notebooks folder: why it did not pass, or
    None (verdict)."""
    CellExecutionError = notebooks.jupyter("nbclient.exceptions").CellExecutionError
    try:
        notebooks.execute(notebook, cwd=Path(student) / "notebooks", env=env, timeout=timeout)
        return verdict(notebook, filled_in)
    except CellExecutionError as e:
        lines = [line for line in str(e).splitlines() if line.strip()]
        return "an error: " + (lines[-1] if lines else "?")


def walk(student, checkpoints=None, quick=False, fill=True, extra_cells=None, only=None,
         first=None, grade=True, writes=as_a_student_writes, root=ROOT, log=print, timeout=900):
    """Run the student repository's notebooks in order, each your-turn cell written from the
    solved notebook (fill=False: as they come, blank), then grade the repository as `make check`
    does (grade=True). Returns the failures, [(notebook or "make check", why)].
    The tests' negative controls: extra_cells {notebook name: code} adds a last cell to a
    notebook; writes turns a solved your-turn cell into what is written. only: stop after this
    notebook, and `make check` grades its parts alone; first: start at this notebook, the parts
    of those before it written as the reference holds them (written_ahead)."""
    nbformat = notebooks.jupyter("nbformat")
    student = Path(student)
    env = environment(student, checkpoints, quick, root)
    failures = []
    if first:
        written_ahead(student, first, root)
    for source in parts.sources(root / "notebooks"):
        if first and source.stem < first:
            continue
        notebook = nbformat.read(student / "notebooks" / f"{source.stem}.ipynb", as_version=4)
        if fill:
            notebook = filled(notebook, notebooks.read(source, "solved", root=root), writes)
        if source.stem in (extra_cells or {}):
            notebook.cells.append(nbformat.v4.new_code_cell(extra_cells[source.stem]))
        started = time.perf_counter()
        why = run(notebook, student, env, fill, timeout)
        log(f"{source.stem:32} {time.perf_counter() - started:4.0f} s  {why or 'passed'}")
        if why:
            failures.append((source.stem, why))
        if only and source.stem >= only:
            break
    if grade:
        graded = subprocess.run([sys.executable, "-m", "classroom", "check",
                                 *([only[:2]] if only else [])], cwd=student,
                                env=dict(os.environ, **env), capture_output=True, text=True)
        got, full = (TOTAL.findall(graded.stdout) or [("?", "?")])[-1]
        log(f"make check in the student repository: {got}/{full} points")
        if got != full if fill else got != "0":
            failures.append(("make check", f"{got}/{full} points"))
    return failures
