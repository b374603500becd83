"""The student's walk (classroom/walk.py), on tiny models: in the repository that `python -m
classroom build` makes, each notebook with its your-turn cells written from the solved copies
(nothing else) runs top to bottom without an error or a skipped cell, every check cell scores
every point, and `make check` afterwards gives every point; with nothing written, every
notebook still runs to its end and scores nothing. Negative controls: a notebook that calls a
part of a later notebook, and answers that stay in the notebook (the cells without %%answer),
each fail the walk."""

import shutil

import pytest

from classroom import walk

pytestmark = pytest.mark.slow  # the student repository and its notebooks: not in make test-fast


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return walk.student_repository(tmp_path_factory.mktemp("built"))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return tmp_path_factory.mktemp("walk-checkpoints")  # quick models, trained once


@pytest.fixture
def student(built, tmp_path):
    return shutil.copytree(built, tmp_path / "student", symlinks=True)


def test_the_students_walk_runs_clean_and_scores_every_point(student, checkpoints):
    assert walk.walk(student, checkpoints, quick=True) == []


def test_blank_notebooks_run_to_their_end_and_score_nothing(student, checkpoints):
    assert walk.walk(student, checkpoints, quick=True, fill=False) == []


def test_a_notebook_that_calls_a_later_part_fails_the_walk(student, checkpoints):
    failures = walk.walk(student, checkpoints, quick=True, only="01_the_idea", grade=False,
                         extra_cells={"01_the_idea": "sd.expected_tokens_per_pass(0.8, 4)"})
    assert failures and failures[0][0] == "01_the_idea"
    assert "needs part 2a" in failures[0][1], failures


def test_answers_that_stay_in_the_notebook_fail_the_walk(student, checkpoints):
    failures = walk.walk(student, checkpoints, quick=True, only="01_the_idea",
                         writes=lambda source: walk.as_a_student_writes(source).split("\n", 1)[1])
    # The file still holds the stub: the notebook's later cells wait for 1a, and make check
    # scores nothing.
    assert failures[0][0] == "01_the_idea" and "part 1a" in failures[0][1], failures
    assert failures[-1][0] == "make check" and failures[-1][1].startswith("0/"), failures
