"""
classroom/plan.py: what a grade runs, decided before any student code starts: which checks
(the check modules register them), at which seeds, on which fixtures, and which other parts'
references each part's worker is lent.
"""

import ast
import atexit
import functools
import importlib
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

from classroom import checks, expected, making, project, regions
from classroom import checks_exercise_3, checks_part_one  # noqa: F401 (they register the checks)
from classroom import checks_part_two, checks_trees  # noqa: F401
from lessonkit import parts

PUBLIC_SEED = checks.PUBLIC_SEED
LARGEST = 1000      # the largest whole number a lent reference takes (bounded)
LONGEST = 100_000   # the longest list or array it takes


def hidden_seed():
    """The teacher's seed for hidden checks: CLASSROOM_SEED, else references.HIDDEN_SEED."""
    value = os.environ.get("CLASSROOM_SEED") or getattr(expected.references, "HIDDEN_SEED", None)
    if value is None:
        raise SystemExit("error: hidden checks need CLASSROOM_SEED (this is a student copy)")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"CLASSROOM_SEED must be a whole number, not {value!r}") from None


def select(exercise=None, part=None, hidden=False):
    order = {p.id: i for i, p in enumerate(parts.PARTS)}
    chosen = sorted((c for c in checks.CHECKS.values() if hidden or not c.hidden),
                    key=lambda c: order[c.part])
    if part is not None:
        if part not in parts.BY_ID:
            raise ValueError(f"no part {part!r}; the parts are {', '.join(parts.BY_ID)}")
        chosen = [c for c in chosen if c.part == part]
    if exercise is not None:
        if exercise not in parts.EXERCISES:
            raise ValueError(f"no exercise {exercise}; the exercises are {parts.NUMBERS}")
        chosen = [c for c in chosen if parts.BY_ID[c.part].exercise == exercise]
    return chosen


def fixtures(seed, _made={}):  # noqa: B006 (made once per process)
    """The fixtures of `seed` (making.make), in a private folder that lasts as long as this
    process."""
    if "folder" not in _made:
        _made["folder"] = Path(tempfile.mkdtemp(prefix="classroom-fixtures-"))
        atexit.register(shutil.rmtree, _made["folder"], True)
    if seed not in _made:
        _made[seed] = making.make(_made["folder"] / f"seed{seed}", seed)
    return _made[seed]


_references = {}


def references(part):
    """{(module, function): the reference, bounded()} of each other part's function that this
    part's solution calls (1b's and 3b's greedy_verdict, 2c's expected_tokens_per_pass, 4b's
    expected_speedup), where this repository holds the solutions (a teacher's): each part is
    graded on its own. 3a's stand no more: stand-ins give exercise 3 the big model's logits."""
    if part not in _references:
        found = {}
        for other in parts.PARTS if not project.is_student_repository() else ():
            path = project.ROOT / other.file
            called = set(other.functions) & calls(parts.BY_ID[part])
            if other.id in (part, "3a") or not called or not set(other.functions) <= set(
                    regions.functions_with_solutions(path.read_text())):
                continue
            module = importlib.import_module(other.file[:-3].replace("/", "."))
            if Path(module.__file__).resolve() == path.resolve():
                for function in called:
                    found[(module.__name__, function)] = bounded(getattr(module, function))
        _references[part] = found
    return _references[part]


def too_costly(value):
    if isinstance(value, (list, tuple)):
        return len(value) > LONGEST or any(too_costly(v) for v in value)
    if isinstance(value, dict):
        return too_costly(list(value.values()))
    if hasattr(value, "size") and hasattr(value, "dtype"):
        return value.size > LONGEST
    return isinstance(value, int) and abs(value) > LARGEST


def bounded(reference):
    """`reference` as a worker may call it back, in the grader: with whole numbers up to LARGEST
    and sequences of LONGEST items at most (the exercises use far less), so that no single step
    of C holds the grader long; the check's time limit cuts the rest (wire.within)."""
    @functools.wraps(reference)
    def call(*args, **kwargs):
        if too_costly([*args, *kwargs.values()]):
            raise ValueError(f"{reference.__name__} (the grader's) takes whole numbers up to "
                             f"{LARGEST:,} and {LONGEST:,} items at most here")
        return reference(*args, **kwargs)
    return call


def calls(part):
    """The names the solution regions of `part`'s functions call."""
    text = (project.ROOT / part.file).read_text()
    lines = text.splitlines()
    named = set()
    for first, last, _, function in regions.regions(text):
        if function in part.functions:
            region = textwrap.dedent("\n".join(lines[first + 1:last]))
            named |= {node.func.id for node in ast.walk(ast.parse(region))
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    return named
