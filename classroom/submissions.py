"""
classroom/submissions.py: a student's submission (a folder, a git repository or a zip) laid
over a fresh copy of the reference repository, so that only the student's files are theirs.

Only the student's files are ever taken from a submission, copied into a private folder before
anything is graded (private_copy), each MAX_FILE bytes at most; from a zip, nothing else is
extracted, and a zip of more than MAX_ENTRIES entries is not read at all. What a submission
lacks or holds in a strange form (a link, a file too large, nothing at all) becomes a note.
"""

import json
import re
import shutil
import stat
import subprocess
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from classroom import parts, regions

ROOT = Path(__file__).resolve().parents[1]
NEVER_COPIED = {".git", ".venv", "checkpoints", "__pycache__", ".pytest_cache",
                ".hypothesis", ".ipynb_checkpoints"}
MAX_ENTRIES = 50_000          # entries in a submitted zip (a repository with its .git fits)
MAX_FILE = 2 * 1024 ** 2      # bytes of one student file (the reference's are under 40 KB)


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
        # data/ and results/ at the top are a run's (docs/results/ is the reference runs')
        generated = (relative.parts[0] == "data" and relative.name != "README.md") or \
            relative.parts[0] == "results"
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


def zip_root(names):
    """The folder inside a zip (a prefix of names, up to 3 levels deep) holding the most
    student files."""
    prefixes = {""}
    for name in names:
        for student in parts.STUDENT_FILES:
            if name.endswith("/" + student) and name.count("/") - student.count("/") <= 3:
                prefixes.add(name[:-len(student)])
    return max(sorted(prefixes, key=len),
               key=lambda p: sum(p + f in names for f in parts.STUDENT_FILES))


def from_zip(path, dest, notes):
    """The student files of the zip at `path`, and nothing else, into dest."""
    with zipfile.ZipFile(path) as z:
        members = z.infolist()
        if len(members) > MAX_ENTRIES:
            raise SubmissionError(f"{path.name}: {len(members):,} entries in the zip (the limit "
                                  f"is {MAX_ENTRIES:,}); zip the student files alone")
        for member in members:                       # never write outside the target folder
            if member.filename.startswith("/") or ".." in PurePosixPath(member.filename).parts:
                raise SubmissionError(f"{path.name}: unsafe path {member.filename!r} in the zip")
        by_name = {m.filename: m for m in members}
        root = zip_root(by_name)
        for name in parts.STUDENT_FILES:
            member = by_name.get(root + name)
            if member is None:
                continue
            if stat.S_ISLNK(member.external_attr >> 16):
                notes.append(f"{name} is a link in the zip, not a file: counted as missing")
                continue
            with z.open(member) as f:
                data = f.read(MAX_FILE + 1)
            if len(data) > MAX_FILE or member.file_size > MAX_FILE:
                notes.append(f"{name} is larger than {MAX_FILE >> 20} MB: counted as missing")
                continue
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)


def from_folder(folder, dest, notes):
    """The student files of a folder (found up to 3 levels down), links left out, into dest."""
    root = find_root(folder)
    for name in parts.STUDENT_FILES:
        source = student_file(root, name)
        if source is None:
            if any(p.is_symlink() for p in [root / name, *(root / name).parents]
                   if root in p.parents):
                notes.append(f"{name} is a link, not a file: counted as missing")
            continue
        if source.stat().st_size > MAX_FILE:
            notes.append(f"{name} is larger than {MAX_FILE >> 20} MB: counted as missing")
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest / name, follow_symlinks=False)


def private_copy(submission, dest, notes=None):
    """The student files of `submission` (a folder, a zip or a bare git repository), copied into
    dest, a new folder that only this user can read, before anything is graded: nothing the
    submission's owner (or another student's code) changes afterwards reaches the grade.
    notes: a list that gets a line for each strange file, and for a submission without any."""
    path, dest = Path(submission), Path(dest)
    notes = [] if notes is None else notes
    if not path.exists() and not path.is_symlink():
        raise SubmissionError(f"no submission at {submission}")
    dest.mkdir(parents=True)
    dest.chmod(0o700)
    if path.is_symlink():
        notes.append(f"{path.name} is a link, not a submission")
    elif path.is_file() and zipfile.is_zipfile(path):
        from_zip(path, dest, notes)
    elif path.is_file():
        raise SubmissionError(f"{path.name} is neither a folder, a zip nor a git repository")
    elif (path / "HEAD").exists() and (path / "objects").exists():   # a bare git repository
        with tempfile.TemporaryDirectory(prefix="classroom-clone-") as clone:
            subprocess.run(["git", "clone", "-q", str(path), clone + "/c"], check=True,
                           capture_output=True)
            from_folder(Path(clone) / "c", dest, notes)
    else:
        from_folder(path, dest, notes)
    empty = (f"no student file in the submission (an empty one?): expected "
             f"{', '.join(parts.STUDENT_FILES)}")
    if not any((dest / name).is_file() for name in parts.STUDENT_FILES) and \
            not any("counted as missing" in note for note in notes) and empty not in notes:
        notes.append(empty)
    return dest


def workspace(submission, scratch, root=ROOT, notes=None):
    """(a fresh copy of the reference with the submission's student files in it, the student
    files the submission lacks). notes: as in private_copy."""
    student_root = private_copy(submission, Path(scratch) / "submission", notes)
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
