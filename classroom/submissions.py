"""
classroom/submissions.py: a student's submission (a folder, a git repository or a zip) laid
over a fresh copy of the reference repository, so that only the student's files are theirs.
"""

import json
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from classroom import parts, regions

ROOT = Path(__file__).resolve().parents[1]
NEVER_COPIED = {".git", ".venv", "checkpoints", "results", "__pycache__", ".pytest_cache",
                ".hypothesis", ".ipynb_checkpoints"}


# What the student repository leaves out (the student's README is build.student_readme()),
# the library's fast NumPy forward pass and its study among it: they would answer exercise 3a
# (beyond/backends.py then gives the torch model for the numpy backend).
TEACHERS_ONLY = ("tests/", "classroom/TEACHERS.md", ".github/", "docs/TESTING.md",
                 "README.md", "beyond/fast_numpy.py", "beyond/studies/forwards.py")


class SubmissionError(ValueError):
    """A submission that cannot be read at all; the message says why."""


def project_files(root=ROOT):
    """The repository's own files (what git tracks; without git, everything but caches)."""
    root = Path(root)
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=root, capture_output=True,
                                check=True).stdout.decode().split("\0")
        files = [root / f for f in listed if f]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in root.rglob("*") if p.is_file()]

    def kept(path):
        relative = path.relative_to(root)
        generated = relative.parts[0] == "data" and relative.name != "README.md"
        return path.is_file() and not NEVER_COPIED & set(relative.parts) and not generated
    return [f for f in files if kept(f)]


def teachers_only(relative):
    return relative.startswith(TEACHERS_ONLY)


def student_text(relative, text):
    """The student version of the project's file `relative` (a path with / separators)."""
    if relative in parts.STUDENT_FILES:
        return regions.student_version(text, parts.message)
    if relative == "classroom/checks.py":
        return regions.without_hidden(text)
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


def copy_project(dest, root=ROOT):
    dest = Path(dest)
    for f in project_files(root):
        target = dest / f.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    return dest


def find_root(folder):
    """The folder holding the student's files, however deep a zip put them (up to 3 levels)."""
    folder = Path(folder)
    candidates = [folder] + sorted(p for p in folder.glob("*") if p.is_dir()) + \
        sorted(p for p in folder.glob("*/*") if p.is_dir()) + \
        sorted(p for p in folder.glob("*/*/*") if p.is_dir())
    best = max(candidates, key=lambda d: sum((d / f).exists() for f in parts.STUDENT_FILES))
    return best


def unpack(submission, scratch):
    """The submission as a folder: a folder as it is, a zip extracted, a git repo cloned."""
    path = Path(submission)
    if not path.exists():
        raise SubmissionError(f"no submission at {submission}")
    if path.is_file() and zipfile.is_zipfile(path):
        target = Path(scratch) / "unzipped"
        with zipfile.ZipFile(path) as z:
            for member in z.namelist():  # never write outside the target folder
                if member.startswith("/") or ".." in Path(member).parts:
                    raise SubmissionError(f"{path.name}: unsafe path {member!r} in the zip")
            z.extractall(target)
        return find_root(target)
    if path.is_file():
        raise SubmissionError(f"{path.name} is neither a folder, a zip nor a git repository")
    if (path / "HEAD").exists() and (path / "objects").exists():  # a bare git repository
        target = Path(scratch) / "cloned"
        subprocess.run(["git", "clone", "-q", str(path), str(target)], check=True,
                       capture_output=True)
        return find_root(target)
    return find_root(path)


def workspace(submission, scratch, root=ROOT):
    """(a fresh copy of the reference with the submission's student files in it, the student
    files the submission lacks)."""
    student_root = unpack(submission, scratch)
    dest = copy_project(Path(scratch) / "workspace", root)
    missing = []
    for name in parts.STUDENT_FILES:
        source = student_file(student_root, name)
        if source:
            shutil.copyfile(source, dest / name, follow_symlinks=False)
        else:
            missing.append(name)
    return dest, missing


def student_file(student_root, name):
    """The submission's file `name`, or None. A link is not the student's file (it may point at
    the grader's own copy of the solution), nor is a file inside a linked folder."""
    path = Path(student_root) / name
    for step in [path, *path.parents]:
        if step == Path(student_root):
            break
        if step.is_symlink():
            return None
    return path if path.is_file() else None


def scratch_dir():
    return tempfile.TemporaryDirectory(prefix="classroom-grade-")


def broken_files(workspace_root):
    """The student files in a workspace that Python cannot even compile (a syntax error)."""
    broken = []
    for name in parts.STUDENT_FILES:
        path = Path(workspace_root) / name
        try:
            compile(path.read_text(errors="replace"), str(path), "exec")
        except (SyntaxError, ValueError, OSError):
            broken.append(name)
    return broken


def with_blank_files(workspace_root, names, dest, root=ROOT):
    """A copy of the workspace in which each of `names` is the blank student version of that
    file (the solutions replaced by NotImplementedError): the other files that import it still
    import, so a syntax error in one file costs the parts of that file only."""
    shutil.copytree(workspace_root, dest)
    for name in names:
        reference = (Path(root) / name).read_text()
        (Path(dest) / name).write_text(regions.student_version(reference, parts.message))
    return Path(dest)
