"""
classroom/project.py: this repository's files, and the student version of each.

The student version keeps every file but the teachers' (TEACHERS_ONLY), with every solution
region replaced by its NotImplementedError (regions.py). `classroom build` writes it as the
student repository; the grader lays a submission's files over a copy of it, where the
students' code runs.
"""

import json
import re
import subprocess
import types
from pathlib import Path

from classroom import regions
from lessonkit import parts

ROOT = Path(__file__).resolve().parents[1]
STUDENT_MARK = ".classroom-student"    # what `classroom build` writes into a student repository
NEVER_COPIED = {".git", ".venv", "checkpoints", "__pycache__", ".pytest_cache", ".hypothesis",
                ".ipynb_checkpoints"}
# Left out of the student repository (its README is build.student_readme()): the teachers'
# notes and tests, the references and hidden checks, and the library's NumPy forward passes
# with their study (they would answer exercise 3a; beyond/backends.py then gives the torch
# model for the numpy backend), and the mutation runner.
TEACHERS_ONLY = ("tests/", "classroom/TEACHERS.md", "classroom/references.py",
                 "classroom/mutants.py", ".github/", "docs/TESTING.md", "README.md",
                 "beyond/fast_numpy.py", "beyond/eagle_numpy.py", "studies/forwards.py")
# What the jobs of exercise 3 and 8b see of the project: the worker's files and the student's
# files with the window rule they import.
WORKER_FILES = ("classroom/__init__.py", "classroom/worker.py", "classroom/helpers.py",
                "classroom/wire.py", "classroom/intake.py")
TORCH_FREE_FILES = WORKER_FILES + parts.NUMPY_ONLY + (
    "beyond/__init__.py", "lessonkit/__init__.py", "lessonkit/parts.py", "lessonkit/scorer.py")
READER_FILES = ("classroom/__init__.py", "classroom/intake.py", "lessonkit/__init__.py",
                "lessonkit/parts.py")


def is_student_repository(root=ROOT):
    """Whether `root` is a student repository: decided by the mark `build` writes alone, never
    by what a file holds."""
    return Path(root, STUDENT_MARK).is_file()


def files(root=ROOT):
    """The repository's own files (what git tracks; without git, everything but caches)."""
    root = Path(root)
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=root, capture_output=True,
                                check=True).stdout.decode().split("\0")
        found = [root / f for f in listed if f]
    except (OSError, subprocess.CalledProcessError):
        found = [p for p in root.rglob("*") if p.is_file()]

    def kept(path):
        relative = path.relative_to(root)
        generated = (relative.parts[0] == "data" and relative.name != "README.md") or \
            relative.parts[0] == "results"          # a run's (docs/results/ are committed)
        return path.is_file() and not NEVER_COPIED & set(relative.parts) and not generated
    return [f for f in found if kept(f)]


def teachers_only(relative):
    return relative.startswith(TEACHERS_ONLY)


def student_text(relative, text):
    """The student version of the file `relative` (a path with / separators)."""
    if relative in parts.STUDENT_FILES:
        return regions.student_version(text, parts.message)
    if relative == "Makefile":  # a student's `make test` runs their checks (no tests/ there)
        return re.sub(r"^test: setup.*\n\t.*$",
                      "test: setup          ## your checks, every exercise (make check N=3: one)\n"
                      "\t$(PY) -m classroom check", text, flags=re.M)
    if relative.endswith(".ipynb"):
        notebook = json.loads(text)
        for cell in notebook["cells"]:
            if cell["cell_type"] == "code":
                cell["outputs"], cell["execution_count"] = [], None
        return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
    return text


def student_copy(dest, submitted=None, only=None, root=ROOT):
    """The student version of `root` in dest (notebooks and classroom/ but the worker's files
    left out: a job needs neither), each student file replaced by submitted[file] (bytes) where
    given. only: the files to keep (TORCH_FREE_FILES). Open to every user to read."""
    dest = Path(dest)
    for f in files(root):
        relative = f.relative_to(root).as_posix()
        if teachers_only(relative) or relative.endswith(".ipynb") or \
                (relative.startswith("classroom/") and relative not in WORKER_FILES) or \
                (only is not None and relative not in only):
            continue
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative in (submitted or {}):
            target.write_bytes(submitted[relative])
        else:
            target.write_text(student_text(relative, f.read_text(errors="replace")))
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def load_apart(relative, text=None, root=ROOT):
    """The module of the file `relative` (or of `text` in its place), loaded apart from the
    imported one: the grader's stand-ins may instrument it (helpers.instrument)."""
    module = types.ModuleType(relative[:-3].replace("/", "."))
    module.__file__ = str(Path(root) / relative)
    source = Path(module.__file__).read_text() if text is None else text
    exec(compile(source, module.__file__, "exec"), module.__dict__)   # noqa: S102 (our own code)
    return module
