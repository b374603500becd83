"""
classroom/worker.py: run one check in a process of its own and write its result as JSON.

    python -m classroom.worker CHECK SEED FIXTURES OUT

The runner starts one worker per check, in the student's repository (or the grader's copy of
it), with a time limit; so a student's infinite loop, crash, huge allocation or sys.exit costs
that check only. Exercise 3's checks run with torch and the project's own decoding blocked.
"""

import importlib.abc
import json
import sys
import time
import traceback
from pathlib import Path

from classroom import checks, parts

BLOCKED = {"torch": "exercise 3 runs with NumPy alone: do not import torch",
           "speculative": "exercise 3 is yours to build: do not use the project's decoding",
           "beyond": "exercise 3 is yours to build: do not use beyond/ (its fast NumPy forward)",
           "gpt": "exercise 3 reads weights from .npz files: do not import gpt.py"}
MEMORY = 3 * 1024 ** 3  # bytes a check's process may allocate


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in BLOCKED:
            raise ImportError(f"import {name}: {BLOCKED[top]}")
        return None


def student_frame(tb, root, files):
    """'(file, line N, in function)' of the last traceback frame in a student file (or in a
    notebook cell), or ''."""
    for frame in reversed(traceback.extract_tb(tb)):
        if "ipykernel" in frame.filename or frame.filename.startswith("<ipython-input"):
            return f" (your notebook cell, line {frame.lineno}, in {frame.name})"
        try:
            relative = Path(frame.filename).resolve().relative_to(root)
        except ValueError:
            continue
        if relative.as_posix() in files:
            return f" ({relative.as_posix()}, line {frame.lineno}, in {frame.name})"
    return ""


def limit_memory():
    """Every check's process may allocate MEMORY bytes at most (torch fits in it)."""
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    except (ImportError, ValueError, OSError):  # not on this platform: the time limit remains
        pass


def run(name, seed, fixture_dir, overrides=None, sandbox=True):
    """Run check `name`; sandbox: limit memory, and block torch for exercise 3 (a worker process
    does; a notebook's check cell, in the student's own kernel, does not)."""
    root = Path.cwd().resolve()
    check = checks.CHECKS[name]
    if sandbox:
        limit_memory()
    if check.torch_free and sandbox:
        for module in BLOCKED:
            sys.modules.pop(module, None)
        sys.meta_path.insert(0, Blocker())
    try:
        check.function(checks.Context(seed, fixture_dir, overrides))
        return {"status": "pass"}
    except checks.Skip as e:
        return {"status": "skipped", "message": str(e)}
    except checks.Fail as e:
        return {"status": "fail", "expected": e.expected, "got": e.got, "hint": e.hint}
    except NotImplementedError as e:
        return {"status": "not started", "message": str(e) or "not written yet"}
    except SyntaxError as e:
        return {"status": "error", "message": f"SyntaxError: {e.msg} ({Path(e.filename or '?').name}"
                                              f", line {e.lineno})"}
    except MemoryError:
        return {"status": "error", "message": "MemoryError: the code asked for more memory than "
                                              f"a check allows ({MEMORY // 1024 ** 3} GB)"}
    except BaseException as e:  # SystemExit and KeyboardInterrupt included: a check never exits
        where = student_frame(e.__traceback__, root, parts.STUDENT_FILES)
        return {"status": "error", "message": f"{type(e).__name__}: {e}{where}".strip()}


def main(argv=None):
    name, seed, fixture_dir, out = (argv or sys.argv[1:])[:4]
    started = time.perf_counter()
    result = run(name, int(seed), fixture_dir)
    result["seconds"] = time.perf_counter() - started
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
