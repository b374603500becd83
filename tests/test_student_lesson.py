"""The student repository's first command, `make lesson` (python -m exercises), on stubs: it
trains every model the exercises and the notebooks use first, then runs the exercises whose
parts are written; each one that calls a part not written yet is one line naming the part, the
notebook cell and the file, and the job ends well (exit 0), with results/report.md saying what
is still to do. In quick mode (tiny models), the stubs put in place of the solutions as
`python -m classroom build` writes them (the same NotImplementedError messages). The README's
other commands there (make exercise N=.., make check, make notebooks, an exercise's own command
line) the same way, through the repository's own Makefile; a bad N is one line."""

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from harness import common, stages
from classroom import build
from exercises import __main__ as lesson
from lessonkit import parts

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
    assert stages.to_train(lesson.NOTEBOOK_MODELS, folder) == []
    said = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert said[0].startswith("[1/6] the models (training big, draft, names, distilled first")
    # one line per exercise, naming the part, its notebook cell and its file
    lines = [line for line in done.stdout.splitlines() if "is still to do" in line]
    assert [line.split()[1] for line in lines] == ["1", "2", "3", "4", "5"]
    first = lines[0]
    assert "part 1a (greedy_verdict)" in first and "numpy_speculative.py" in first
    assert 'the cell "Your turn: judge a round" of notebook 01_the_idea' in first
    assert "part 5a (timer)" in lines[4] and "exercises/ex5_gpu.py" in lines[4]
    assert "still to do: exercises 1, 2, 3, 4, 5" in done.stdout
    # and part two's parts, each where it is written (the reference has none: none is a stub)
    part_two = done.stdout.split("Part two (notebooks 07 to 09), still to do:\n")[1]
    assert [line.split()[1] for line in part_two.splitlines()[:6]] == \
        ["6a", "6b", "7a", "7b", "8a", "8b"]
    assert "notebook 07_drafts_without_a_second_model" in part_two.splitlines()[0]


def test_the_report_lists_what_is_still_to_do(stub_lesson):
    done, repo = stub_lesson
    report = (repo / "results" / "report.md").read_text()
    to_do = report.split("## Still to do\n\n")[1].split("\n\n")[0].splitlines()
    assert len(to_do) == 11 and all(line.startswith("- exercise ") for line in to_do[:5])
    assert all(line.startswith("- part two: part ") for line in to_do[5:])
    assert "## Exercise 3: build" in report and "Not run: exercise 3" in report
    assert "(no exercise has run yet)" in report     # the summary table takes no to-do section
    run = json.loads((repo / "results" / "lesson.json").read_text())
    assert run["to_do"] == [1, 2, 3, 4, 5] and len(run["part_two_to_do"]) == 6
    # each part two line names the check by its notebook's number, the number its student sees
    assert [line.split("make check N=")[1][:2] for line in run["part_two_to_do"]] == \
        ["07", "07", "08", "08", "09", "09"]


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


# The README's other commands in the student repository, on its stubs, through its own Makefile
# (the lesson's quick models: a stand-in .venv whose python is this one, with --quick for the
# exercises). Each unwritten part is one line naming it, its notebook cell and its file; exit 0,
# no traceback, no make error. A bad N is one line saying what N may be.

STAND_IN = """#!/bin/sh
if [ "$1 $2" = "-m exercises" ]; then exec {python} "$@" --quick; fi
exec {python} "$@"
"""


@pytest.fixture(scope="module")
def make(stub_lesson):
    """make TARGET ... in the student repository, its set-up done (a stand-in .venv): the
    finished process. The quick models are the ones the lesson trained there."""
    if shutil.which("make") is None:
        pytest.skip("no make here")
    repo = stub_lesson[1]
    python = repo / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN.format(python=sys.executable))
    python.chmod(0o755)
    for stamp in ("installed", "installed-notebooks", "installed-test"):
        (repo / ".venv" / f".{stamp}").touch()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}

    def run(*args):
        return subprocess.run(["make", *args], cwd=repo, text=True, capture_output=True,
                              timeout=300, env={**env, "NO_COLOR": "1"})
    return run


def clean(done):
    said = done.stdout + done.stderr
    assert "Traceback" not in said and "make: ***" not in said and "Error" not in said, said
    return said


def part_lines(said, part):
    """The lines that name this part, as make exercise and make check write them."""
    return [line for line in said.splitlines() if f"part {part.id} " in line or
            f"(part {part.id})" in line]


def says_where(line, part):
    return parts.place(part) in line and part.file in line


FIRST_PART = {1: "1a", 2: "2a", 3: "1a", 4: "4a", 5: "5a"}   # the part each exercise calls first


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_make_exercise_on_stubs_is_one_line(make, n):
    done = make("exercise", f"N={n}")
    assert done.returncode == 0, done.stderr[-2000:]
    said = clean(done)
    part = parts.BY_ID[FIRST_PART[n]]
    lines = [line for line in said.splitlines() if "is still to do: it needs" in line]
    assert len(lines) == 1 and lines[0].startswith(f"exercise {n} ") and \
        f"part {part.id} ({', '.join(part.functions)})" in lines[0] and says_where(lines[0], part)
    assert f"still to do: exercise {n} " in said


def test_each_exercises_own_command_line_on_stubs_is_one_line(stub_lesson):
    # python -m exercises.ex5_gpu (the README's, by hand) and its four siblings: before, a stub
    # ended them with "error: ..." and exit status 2 (make gpu-check: a make error).
    repo = stub_lesson[1]
    for n, module in enumerate(["ex1_watch", "ex2_derive", "ex3_build", "ex4_break", "ex5_gpu"],
                               start=1):
        done = subprocess.run([sys.executable, "-m", f"exercises.{module}", "--quick"],
                              cwd=repo, text=True, capture_output=True, timeout=300,
                              env={**os.environ, "NO_COLOR": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        said = clean(done)
        part = parts.BY_ID[FIRST_PART[n]]
        assert done.stderr == "" and len(part_lines(said, part)) == 1, said
        assert said.rstrip().splitlines()[-1].startswith(f"exercise {n} (") and \
            says_where(said, part)


@pytest.mark.parametrize("n", [None, 3, "07"])
def test_make_check_on_stubs_is_one_line_per_part(make, n):
    done = make("check", *([f"N={n}"] if n else []))
    assert done.returncode == 0, done.stderr[-2000:]
    said = clean(done)
    in_notebook = {p: nb for p, (_, nb) in parts.your_turn_places().items()}
    chosen = [p for p in parts.PARTS if n in (None, p.exercise) or
              isinstance(n, str) and in_notebook[p.id].startswith(f"{n}_")]
    assert n != "07" or [p.id for p in chosen] == ["6a", "6b"]      # notebook 07: exercise 6
    for part in chosen:
        lines = part_lines(said, part)
        assert len(lines) == 1 and lines[0].strip().startswith("not started: write ") and \
            says_where(lines[0], part), (part.id, lines)
    # not a row and the stub's message for each check of a part
    assert "see its docstring" not in said and said.count("not started") == len(chosen)
    assert n == "07" or "layer_norm, attention, mlp, forward (part 3a)" in said
    assert f"total 0/{sum(p.points for p in chosen)} points" in said


def test_make_notebooks_first_step_on_stubs_is_one_line(make, stub_lesson):
    # make notebooks: `python -m classroom notebooks`, then Jupyter Lab (not opened here)
    repo = stub_lesson[1]
    plan = make("-n", "notebooks")
    assert plan.returncode == 0 and plan.stdout.splitlines()[0] == \
        ".venv/bin/python -m classroom notebooks"
    for word in ("written to", "exist already: kept"):      # the first time, then again
        done = subprocess.run([sys.executable, "-m", "classroom", "notebooks"], cwd=repo,
                              text=True, capture_output=True, timeout=120)
        assert done.returncode == 0 and clean(done).strip().count("\n") == 0, done.stderr
        assert word in done.stdout
    assert len(list((repo / "my-notebooks").glob("*.ipynb"))) == len(parts.sources())


@pytest.mark.parametrize("target", ["exercise", "check"])
def test_a_bad_n_is_one_line_saying_what_n_may_be(make, target):
    # Before: the command's own error, then make's "make: *** [Makefile:..] Error 2".
    for n in ("9", "x"):
        done = make(target, f"N={n}")
        assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        last = {"exercise": 5, "check": max(parts.EXERCISES)}[target]   # scripts: part one's
        assert f"no exercise N={n}: N is one of 1 to {last}, e.g. make {target} N=3" in done.stderr
        assert "make: ***" not in done.stderr and "Error" not in done.stderr


def test_a_part_outside_its_exercise_is_one_line(stub_lesson):
    done = subprocess.run([sys.executable, "-m", "classroom", "check", "3", "--part", "1a"],
                          cwd=stub_lesson[1], text=True, capture_output=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("error: part 1a is not in exercise 3; choose one of its "
                                   "parts or leave the exercise out")
