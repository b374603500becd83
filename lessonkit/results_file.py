"""
lessonkit/results_file.py: a results file: a run's figures with where they come from (the command
line, the date, the machine and whether it was busy), written whole.
"""

import json
import os
import sys
import time
from pathlib import Path

from lessonkit.machine import describe

# A results file: {"format": RESULTS_FORMAT, "run": where its figures come from, ...the figures}.
# The sections of docs/RESULTS.md each name the file their figures come from; a new format
# number tells a reader that an old file no longer holds what it expects.
RESULTS_FORMAT = 1
STARTED = time.time()   # about when this process started: a run's seconds in its results file


def command_line():
    """This process's command line as typed: `python -m harness.benchmark --k 4`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = ["-m", spec.name.removesuffix(".__main__")] if spec else \
        [os.path.relpath(sys.argv[0])] if sys.argv[0] else []
    return " ".join(["python", *program, *sys.argv[1:]])


def write_results(path, figures, busy="", command=None):
    """figures (a dict) as a results file at `path`, with where they come from: the command
    line (this process's, unless `command` names the one a user runs, as the suite's `make
    test`), the date (UTC), the seconds since the process started, the machine and a Busy note
    ("" when quiet). Written whole (a reader never sees half of it); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    run = {"command": command or command_line(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "seconds": round(time.time() - STARTED, 1), "machine": describe(), "busy": busy}
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"format": RESULTS_FORMAT, "run": run, **figures}, indent=2,
                                    default=float) + "\n")
    os.replace(temporary, path)
    return path
