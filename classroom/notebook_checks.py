"""
classroom/notebook_checks.py: the check cell that follows every "your turn" cell of a notebook.

    from classroom.notebook_checks import check
    check("1a", greedy_verdict=greedy_verdict)

runs the public classroom checks of that part (checks.py) against the functions written in the
notebook, in the notebook's own kernel, and prints the same table as `python -m classroom
check`: points, and for a failure what was expected, what happened and a hint. A part not
written yet says "not started"; nothing here raises, so a notebook always runs to its end.
"""

import tempfile

from classroom import checks, making, runner

_fixture_dirs = {}


def fixture_dir(seed=runner.PUBLIC_SEED):
    if seed not in _fixture_dirs:
        _fixture_dirs[seed] = making.make(tempfile.mkdtemp(prefix="classroom-nb-"), seed)
    return _fixture_dirs[seed]


def check(part, **functions):
    """Run the public checks of `part` with these functions and print the table (nothing is
    returned, so that a notebook shows the table alone)."""
    results = []
    for c in runner.select(part=part):
        result = runner.Result(c)
        context = checks.LocalContext(runner.PUBLIC_SEED, fixture_dir(), functions)
        result.outcomes[runner.PUBLIC_SEED] = checks.run_check(c, context)
        results.append(result)
    print(runner.table(results).strip())
