"""The student's walk through part two (tests/test_walk.py: the walk and part one), from part
one's files as the reference holds them; then `make check` gives every point of the course.
The files written ahead: part one's functions written, part two's still stubs."""

import pytest
from test_walk import PART_TWO, student  # noqa: F401  (the fixture: a student repository's copy)

from classroom import walk
from lessonkit import parts

pytestmark = pytest.mark.slow  # the student repository and its notebooks: not in make test-fast


def test_the_students_walk_through_part_two_runs_clean_and_scores_every_point(
        student, quick_checkpoints):
    assert walk.walk(student, quick_checkpoints, quick=True, first=PART_TWO) == []


def test_written_ahead_part_one_holds_every_function_and_part_two_its_stubs(student):
    walk.written_ahead(student, PART_TWO)
    for part in parts.PARTS:
        in_part_two = parts.your_turn_places()[part.id][1] >= PART_TWO
        want = list(part.functions) if in_part_two else []
        assert parts.stubbed(part, root=student) == want, part.id
