"""The notebooks: each runs top to bottom in both versions (quick models, started from another
working directory); the solved one's check cells score every point, the student one's say "not
started" and the run still reaches the end."""

import ast
import re
import subprocess

import pytest

from classroom import notebooks
from classroom.submissions import ROOT

SOURCES = notebooks.sources()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return tmp_path_factory.mktemp("notebook-checkpoints")  # quick models, trained once


def run(source, student, checkpoints, cwd):
    notebook = notebooks.read(source, student=student)
    notebooks.execute(notebook, cwd=cwd, timeout=300,
                      env={"SPECDEC_QUICK": "1", "SPECDEC_CHECKPOINTS": str(checkpoints),
                           "NO_COLOR": "1"})
    return notebook, "\n".join(o.get("text", "") for cell in notebook.cells
                               for o in cell.get("outputs", []))


def check_cells(notebook):
    return sum(bool(re.search(r"^check\(", cell.source, re.M)) for cell in notebook.cells
               if cell.cell_type == "code")


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_the_solved_notebook_runs_and_scores_every_point(source, checkpoints, tmp_path):
    notebook, text = run(source, False, checkpoints, tmp_path)  # cwd: not the project
    totals = re.findall(r"total (\d+)/(\d+) points", text)
    assert len(totals) == check_cells(notebook) >= 1
    assert all(got == full for got, full in totals), totals


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_the_student_notebook_runs_to_the_end_with_its_stubs(source, checkpoints, tmp_path):
    student = notebooks.read(source, student=True)
    assert not any("BEGIN SOLUTION" in cell.source for cell in student.cells)
    notebook, text = run(source, True, checkpoints, tmp_path)
    totals = re.findall(r"total (\d+)/(\d+) points", text)
    assert len(totals) == check_cells(notebook) >= 1
    assert all(got == "0" for got, _ in totals) and "not started" in text


def test_every_your_turn_cell_is_followed_by_its_check_cell():
    for source in SOURCES:
        cells = notebooks.cells(source.read_text())
        for i, (kind, header, _) in enumerate(cells):
            if notebooks.YOUR_TURN.match(header):
                following = [body for k, _, body in cells[i + 1:] if k == "code"][:1]
                assert following and re.search(r"^check\(", following[0], re.M), \
                    f"{source.name}: {header} has no check cell after it"


def test_sources_are_python_and_no_notebook_output_is_committed():
    for source in SOURCES:
        ast.parse(source.read_text())
    tracked = subprocess.run(["git", "ls-files", "notebooks"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert not [f for f in tracked if f.endswith(".ipynb")], "commit the .py sources only"
    assert len(SOURCES) == 6, [s.name for s in SOURCES]


def test_writing_the_notebooks_never_overwrites_one_that_exists(tmp_path):
    written = notebooks.write(tmp_path)
    assert len(written) == len(SOURCES)
    mine = written[0]
    mine.write_text(mine.read_text().replace("Your turn", "My work", 1))
    assert notebooks.write(tmp_path) == []  # a student's edits are kept ...
    assert "My work" in mine.read_text()
    notebooks.write(tmp_path, overwrite=True)  # ... unless asked
    assert "My work" not in mine.read_text()
