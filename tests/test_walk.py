"""The student's walk (classroom/walk.py), on tiny models: in the repository that `python -m
classroom build` makes, each notebook with its your-turn cells written from the solved copies
(nothing else) runs top to bottom without an error or a skipped cell, every check cell scores
every point, and `make check` afterwards gives every point. The walk covers the notebooks'
sources too: each runs once per suite, here. Its guard and negative controls:
tests/test_walk_blank.py (a file of its own, so that it runs beside the walk on two cores)."""

import shutil

import pytest

from classroom import walk

pytestmark = pytest.mark.slow  # the student repository and its notebooks: not in make test-fast


@pytest.fixture
def student(student_build, tmp_path):
    return shutil.copytree(student_build, tmp_path / "student", symlinks=True)


def test_the_students_walk_runs_clean_and_scores_every_point(student, quick_checkpoints):
    assert walk.walk(student, quick_checkpoints, quick=True) == []
