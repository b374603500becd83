"""The student's walk (classroom/walk.py), on tiny models: in the repository that `python -m
classroom build` makes, each notebook with its your-turn cells written from the solved copies
(nothing else) runs top to bottom without an error or a skipped cell, every check cell scores
every point, and `make check` afterwards gives every point. The walk covers the notebooks'
sources too: each runs once per suite. Two halves, so that two cores share it: part one here
(its check cells grade each part's file as make check does), part two in
tests/test_walk_part_two.py, from part one's files as the reference holds them, then make check
on the whole. Its guard and negative controls: tests/test_walk_blank.py."""

import shutil

import pytest

from classroom import walk
from lessonkit import parts

pytestmark = pytest.mark.slow  # the student repository and its notebooks: not in make test-fast

PART_TWO = parts.your_turn_places()["6a"][1]      # the first notebook of part two


@pytest.fixture
def student(student_build, tmp_path):
    return shutil.copytree(student_build, tmp_path / "student", symlinks=True)


def test_the_students_walk_through_part_one_runs_clean_and_scores_every_point(
        student, quick_checkpoints):
    last = [source.stem for source in parts.sources() if source.stem < PART_TWO][-1]
    assert walk.walk(student, quick_checkpoints, quick=True, only=last, grade=False) == []
