"""The walk's guard and its negative controls (the walk itself: tests/test_walk.py). A notebook
made for it, with nothing written, runs to its end and scores nothing: the cell that calls the
blank part and the cell that uses what it made are each skipped in one line. A notebook that calls
a part of a later notebook, and answers that stay in the notebook (the cells without %%answer),
each fail the walk. (The course's own notebooks run blank in `make notebooks-check`.)"""

import pytest
from test_walk import student  # noqa: F401  (the fixture: a copy of the student repository)

from classroom import notebooks, walk
from lessonkit import parts

pytestmark = pytest.mark.slow  # the student repository and its notebooks: not in make test-fast


def made_notebook(student):
    """Setup, the first your-turn cell as the student gets it (blank), its check, a cell that
    calls it, one that uses what that cell made, and a last one."""
    nbformat = notebooks.jupyter("nbformat")
    first = nbformat.read(student / "notebooks" / "01_the_idea.ipynb", as_version=4)
    answer = next(c.source for c in first.cells if c.source.startswith("%%answer 1a"))
    code = ["%load_ext classroom.yourturn\nfrom classroom.yourturn import check\n"
            "import numpy as np", answer, 'check("1a")',
            "kept, added = greedy_verdict(np.array([1, 2]), np.array([1, 3, 4]))",
            "print(kept + 1)", 'print("the end")']
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in code])


def test_a_blank_notebook_runs_to_its_end_and_scores_nothing(student):
    notebook = made_notebook(student)
    env = walk.environment(student, student / "no-models", quick=True)
    assert walk.run(notebook, student, env, filled_in=False) is None
    text = walk.outputs(notebook)
    assert "total 0/" in text and text.rstrip().endswith("the end"), text
    skipped = [line for line in text.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 2 and "part 1a" in skipped[0] and "kept" in skipped[1], skipped
    # Control: the same notebook with its part written as the solved notebook has it runs
    # every cell and scores every point.
    solved = made_notebook(student)
    answer = next(c.source for c in notebooks.read(parts.sources()[0], "solved").cells
                  if c.source.startswith("%%answer 1a"))
    solved.cells[1].source = walk.as_a_student_writes(answer)
    assert walk.run(solved, student, env, filled_in=True) is None
    text = walk.outputs(solved)
    assert "skipped:" not in text and text.rstrip().endswith("2\n\nthe end"), text


def test_a_notebook_that_calls_a_later_part_fails_the_walk(student, tmp_path):
    # From an empty folder, as on a student's first run: the first notebook trains the models it
    # uses, runs clean and scores every point; only the cell added fails.
    failures = walk.walk(student, tmp_path / "empty", quick=True, only="01_the_idea",
                         grade=False,
                         extra_cells={"01_the_idea": "sd.expected_tokens_per_pass(0.8, 4)"})
    assert len(failures) == 1 and failures[0][0] == "01_the_idea", failures
    assert "needs part 2a" in failures[0][1], failures


def test_answers_that_stay_in_the_notebook_fail_the_walk(student, quick_checkpoints):
    failures = walk.walk(student, quick_checkpoints, quick=True, only="01_the_idea",
                         writes=lambda source: walk.as_a_student_writes(source).split("\n", 1)[1])
    # The file still holds the stub: the notebook's later cells wait for 1a, and make check
    # scores nothing.
    assert failures[0][0] == "01_the_idea" and "part 1a" in failures[0][1], failures
    assert failures[-1][0] == "make check" and failures[-1][1].startswith("0/"), failures
