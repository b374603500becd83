"""The student repository's first command, `make lesson` (python -m exercises), on stubs: it
trains every model the exercises and the notebooks use first, then runs the exercises whose
parts are written; each one that calls a part not written yet is one line naming the part, the
notebook cell and the file, and the job ends well (exit 0), with results/report.md saying what
is still to do. In quick mode (tiny models), the stubs put in place of the solutions as
`python -m classroom build` writes them (the same NotImplementedError messages)."""

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from classroom import build, parts
from exercises import __main__ as lesson
from exercises import common

pytestmark = pytest.mark.slow  # trains the quick models and runs exercises


def stub(monkeypatch, *ids):
    """Replace the functions of these parts with the student repository's stubs."""
    for part in map(parts.BY_ID.get, ids):
        module = importlib.import_module(part.file.removesuffix(".py").replace("/", "."))
        for name in part.functions:
            def raises(*args, _message=parts.message(name), **kwargs):
                raise NotImplementedError(_message)
            monkeypatch.setattr(module, name, raises)


def quick_args(folder, **changes):
    return lesson.Args(quick=True, checkpoints=str(folder / "checkpoints"),
                       results=str(folder / "results"), **changes)


@pytest.fixture(scope="module")
def stub_lesson(tmp_path_factory):
    """`python -m exercises --quick` in a student repository as `classroom build` writes it (its
    files: the stubs are the real ones; not proven, which the build's own tests do), from no
    model at all: (the finished process, the repository's folder)."""
    repo = build.write_student_repository(tmp_path_factory.mktemp("student") / "repo")
    done = subprocess.run([sys.executable, "-m", "exercises", "--quick"], cwd=repo, text=True,
                          capture_output=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
    return done, repo


def test_the_lesson_on_stubs_trains_every_model_then_says_what_is_to_do(stub_lesson):
    done, repo = stub_lesson
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr and "error:" not in done.stderr
    # every model the notebooks use, trained before the first exercise
    folder = repo / "checkpoints" / "quick"
    assert sorted(p.stem for p in folder.glob("*.pt")) == sorted(lesson.NOTEBOOK_MODELS)
    assert common.to_train(lesson.NOTEBOOK_MODELS, folder) == []
    stages = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert stages[0].startswith("[1/6] the models (training big, draft, names, distilled first")
    # one line per exercise, naming the part, its notebook cell and its file
    lines = [line for line in done.stdout.splitlines() if "is still to do" in line]
    assert [line.split()[1] for line in lines] == ["1", "2", "3", "4", "5"]
    first = lines[0]
    assert "part 1a (greedy_verdict)" in first and "numpy_speculative.py" in first
    assert 'the cell "Your turn: judge a round" of notebook 01_the_idea' in first
    assert "part 5a (timer)" in lines[4] and "exercises/ex5_gpu.py" in lines[4]
    assert "still to do: exercises 1, 2, 3, 4, 5" in done.stdout


def test_the_report_lists_what_is_still_to_do(stub_lesson):
    done, repo = stub_lesson
    report = (repo / "results" / "report.md").read_text()
    to_do = report.split("## Still to do\n\n")[1].split("\n\n")[0].splitlines()
    assert len(to_do) == 5 and all(line.startswith("- exercise ") for line in to_do)
    assert "## Exercise 3: build" in report and "Not run: exercise 3" in report
    assert "(no exercise has run yet)" in report     # the summary table takes no to-do section
    run = json.loads((repo / "results" / "lesson.json").read_text())
    assert run["to_do"] == [1, 2, 3, 4, 5]


def test_a_written_part_runs_and_leaves_the_to_do_list(tmp_path, monkeypatch, capsys):
    # Exercise 2 with part 2b a stub: one line naming 2b, its cell and file, and a to-do
    # section; once 2b is written (the reference here) the same command runs it and the report
    # loses its "Still to do".
    stub(monkeypatch, "2b")
    sections = lesson.lesson(quick_args(tmp_path, only=[2]))
    said = capsys.readouterr().out
    assert "it needs part 2b (simulate)" in said and "exercises/ex2_derive.py" in said
    assert "02_the_numbers" in said and sections[2]["to_do"]
    assert "## Still to do" in (tmp_path / "results" / "report.md").read_text()
    monkeypatch.undo()
    sections = lesson.lesson(quick_args(tmp_path, only=[2]))
    assert "to_do" not in sections[2] and sections[2]["numbers"]["k"] == 4
    report = (tmp_path / "results" / "report.md").read_text()
    assert "## Still to do" not in report and "tokens per pass, alpha 0.8, k 4" in report


def test_only_a_stubs_error_is_a_to_do_line(tmp_path, monkeypatch):
    # Controls: with the stub's reading turned off the stub stops the job as it did before
    # (make's error status); a NotImplementedError that is not a part's stub goes up as well.
    stub(monkeypatch, "2b")
    monkeypatch.setattr(lesson, "to_do", lambda n, error: None)
    with pytest.raises(NotImplementedError, match="part 2b: write simulate"):
        lesson.lesson(quick_args(tmp_path, only=[2]))
    monkeypatch.undo()

    def other(*args, **kwargs):
        raise NotImplementedError("a backend this machine lacks")
    monkeypatch.setattr(importlib.import_module("exercises.ex2_derive"), "simulate", other)
    with pytest.raises(NotImplementedError, match="a backend"):
        lesson.lesson(quick_args(tmp_path, only=[2]))


def test_notebook_2s_first_cell_then_trains_nothing(stub_lesson, tmp_path, monkeypatch,
                                                   capsys):
    # Its first cell, on the models the lesson left: loaded as they are (no file rewritten, not
    # a word printed). Control: without the distilled draft the same cell trains it again.
    folder = shutil.copytree(stub_lesson[1] / "checkpoints", tmp_path / "checkpoints")
    monkeypatch.setenv("SPECDEC_QUICK", "1")
    monkeypatch.setenv("SPECDEC_CHECKPOINTS", str(folder))
    cell = (common.ROOT / "notebooks" / "02_the_numbers.py").read_text()
    assert 'common.notebook_models(["big", "draft", "distilled"])' in cell

    def written():
        return {p.name: p.stat().st_mtime_ns for p in (folder / "quick").glob("*.pt")}
    before = written()
    models = common.notebook_models(["big", "draft", "distilled"])
    assert set(models) == {"big", "draft", "distilled"} and capsys.readouterr().out == ""
    assert written() == before
    (folder / "quick" / "distilled.pt").unlink()
    common.notebook_models(["big", "draft", "distilled"])
    assert set(written()) == set(before) and written()["big.pt"] == before["big.pt"]
    assert written()["distilled.pt"] != before["distilled.pt"]
