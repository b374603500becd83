"""
classroom/submissions.py: a student's submission (a folder, a git repository or a zip) laid
over a fresh copy of the reference repository, so that only the student's files are theirs.

Only the student's files are ever taken from a submission, copied into a private folder before
anything is graded (private_copy), each MAX_FILE bytes at most. What a submission is, is decided
once, by choose(), for the three forms alike: regular files of one name only, reached through
folders only (a link, symbolic or hard, a device, a fifo, a socket or a git submodule is left
out with a note naming it, and a folder reached through a link is never where the student files
are looked for). From a zip nothing else is extracted, from a git repository nothing is checked
out (its blobs are read), and a zip of more than MAX_ENTRIES entries is not read at all. What a
submission lacks or holds in a strange form (a link, a file too large, nothing at all) becomes
a note.
"""

import functools
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from classroom import parts, regions

ROOT = Path(__file__).resolve().parents[1]
STUDENT_MARK = ".classroom-student"    # what `classroom build` writes into a student repository


def is_student_repository(root=ROOT):
    """Whether `root` is a student repository (classroom build made it), not the reference:
    decided by that mark alone, never by what a file holds."""
    return Path(root, STUDENT_MARK).is_file()
NEVER_COPIED = {".git", ".venv", "checkpoints", "__pycache__", ".pytest_cache",
                ".hypothesis", ".ipynb_checkpoints"}
MAX_ENTRIES = 50_000          # entries in a submitted zip (a repository with its .git fits)
MAX_FILE = 2 * 1024 ** 2      # bytes of one student file (the reference's are under 40 KB)
ROOT_DEPTH = 3                # levels below a submission where its student files may be
NAMED = 10                    # entries a note names, of those left out
GITLINK = 0o160000            # a git tree's mode of a submodule


# What the student repository leaves out (the student's README is build.student_readme()),
# the library's NumPy forward passes and their study among it: they would answer exercise 3a
# (beyond/backends.py then gives the torch model for the numpy backend; --draft eagle says
# it is not there: beyond/eagle.py, exercise 7's, stays, without its fast NumPy drafter).
TEACHERS_ONLY = ("tests/", "classroom/TEACHERS.md", ".github/", "docs/TESTING.md",
                 "README.md", "beyond/fast_numpy.py", "beyond/eagle_numpy.py",
                 "studies/forwards.py")


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


def kind(mode, links=1):
    """What one entry of a submission is, from its mode (a stat's st_mode, a zip entry's unix
    mode or a git tree entry's) and its number of names: "file" (a regular file of one name),
    "folder", or what it is instead. The grader takes files only, reached through folders only:
    a link, symbolic or hard, may name the grader's own files (the reference, say)."""
    if mode == GITLINK:
        return "a submodule"
    if stat.S_ISREG(mode):
        return "file" if links == 1 else "a hard link"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def ancestors(path):
    """'a', 'a/b' for 'a/b/c': the folders a path is reached through."""
    steps = path.split("/")
    return ["/".join(steps[:i]) for i in range(1, len(steps))]


def within(root, name):
    return f"{root}/{name}" if root else name


def roots(kinds):
    """The folders that may hold the student's files: the submission's own ('') and each folder
    up to ROOT_DEPTH levels down, reached through folders only (never through a link)."""
    return [""] + sorted((p for p, k in kinds.items() if k == "folder"
                          and p.count("/") < ROOT_DEPTH
                          and all(kinds.get(a) == "folder" for a in ancestors(p))),
                         key=lambda p: (p.count("/"), p))


def reached(kinds, root, name):
    """(the student file `name` below root is a file reached through folders only, the entry
    on its way that is something else (or '' for none), what that entry is)."""
    path = within(root, name)
    for step in [within(root, a) for a in ancestors(name)] + [path]:
        wanted = "file" if step == path else "folder"
        if step not in kinds:
            return False, "", None
        if kinds[step] != wanted:
            return False, step, kinds[step]
    return True, "", "file"


def root_of(kinds):
    """The folder holding the most student files (then the most entries by their names: a
    folder of links is still the one whose links the notes name); the shallowest on a tie."""
    return max(roots(kinds), key=lambda r: (
        sum(reached(kinds, r, name)[0] for name in parts.STUDENT_FILES),
        sum(within(r, name) in kinds for name in parts.STUDENT_FILES)))


def choose(kinds, notes):
    """The one rule of what a submission gives the grader. kinds: {path inside the submission
    (/ separators): kind(...)} of what it holds, from a folder, a zip or a git tree alike.
    Returns {student file: its path in the submission}, regular files only; each link, device,
    fifo, socket or submodule met instead, among the student files or anywhere else the
    grader looked, is left out with a note naming it."""
    kinds = {p: k for p, k in kinds.items() if not NEVER_COPIED & set(p.split("/"))}
    root = root_of(kinds)
    taken, named = {}, set()
    for name in parts.STUDENT_FILES:
        ok, step, what = reached(kinds, root, name)
        if ok:
            taken[name] = within(root, name)
        elif step == within(root, name):
            notes.append(f"{step} is {what}, not a file: counted as missing")
        elif step:
            notes.append(f"{within(root, name)}: {step} is {what}, not a folder: counted as "
                         "missing")
        named.add(step)
    others = sorted(p for p, k in kinds.items() if k not in ("file", "folder") and p not in named)
    if others:
        listed = ", ".join(f"{p} ({kinds[p]})" for p in others[:NAMED])
        more = f" and {len(others) - NAMED} more" if len(others) > NAMED else ""
        notes.append(f"left out, neither files nor folders: {listed}{more}")
    return taken


def take(kinds, read, dest, notes):
    """The student files that choose() picks, each read(path) (bytes, MAX_FILE + 1 at most;
    None when it is no longer a file), written into dest."""
    for name, path in choose(kinds, notes).items():
        data = read(path)
        if data is None:
            notes.append(f"{path} changed while it was copied: counted as missing")
        elif len(data) > MAX_FILE:
            notes.append(f"{path} is larger than {MAX_FILE >> 20} MB: counted as missing")
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)


def folder_kinds(folder):
    """kind() of what the grader looks at in a folder, links never followed: every entry up to
    ROOT_DEPTH levels down (outside NEVER_COPIED) and each student file's way below each folder
    that may hold them."""
    folder, kinds = Path(folder), {}

    def look(relative):
        if relative not in kinds:
            try:
                info = os.lstat(folder / relative)
            except OSError:               # absent, or below something that is not a folder
                return
            kinds[relative] = kind(info.st_mode, info.st_nlink)

    def scan(relative):
        with os.scandir(folder / relative) as entries:
            for entry in entries:
                if len(kinds) > MAX_ENTRIES:
                    raise SubmissionError(f"{folder.name}: more than {MAX_ENTRIES:,} entries "
                                          "where the student files are looked for")
                if entry.name in NEVER_COPIED:
                    continue
                path = within(relative, entry.name)
                info = entry.stat(follow_symlinks=False)
                kinds[path] = kind(info.st_mode, info.st_nlink)
                if kinds[path] == "folder" and path.count("/") < ROOT_DEPTH - 1:
                    scan(path)
    scan("")
    for root in roots(kinds):
        for name in parts.STUDENT_FILES:
            for step in ancestors(name) + [name]:
                look(within(root, step))
                if kinds.get(within(root, step)) != "folder":
                    break                    # never a look through a link (lstat follows it)
    return kinds


def read_in_folder(folder, relative):
    """The first MAX_FILE + 1 bytes of the file `relative` in folder, opened one step at a time
    without ever following a link (O_NOFOLLOW), and checked again once open; None if it is not a
    file of one name by then (its owner may change it while the grader copies)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK     # a fifo put there never blocks
    opened = []
    try:
        opened.append(os.open(folder, flags | os.O_DIRECTORY))
        for step in relative.split("/")[:-1]:
            opened.append(os.open(step, flags | os.O_DIRECTORY, dir_fd=opened[-1]))
        opened.append(os.open(relative.split("/")[-1], flags, dir_fd=opened[-1]))
        info = os.fstat(opened[-1])
        if kind(info.st_mode, info.st_nlink) != "file":
            return None
        with os.fdopen(opened.pop(), "rb") as f:
            return f.read(MAX_FILE + 1)
    except OSError:
        return None
    finally:
        for fd in opened:
            os.close(fd)


def from_folder(folder, dest, notes):
    """The student files of a folder (found up to 3 levels down), into dest."""
    take(folder_kinds(folder), functools.partial(read_in_folder, folder), dest, notes)


def find_root(folder):
    """The folder holding the student's files, however deep a zip put them (up to 3 levels),
    reached through folders only."""
    return Path(folder) / root_of(folder_kinds(folder))


def zip_kinds(members):
    """kind() of every entry of a zip, and of the folders its names imply."""
    kinds = {}
    for member in members:
        mode = member.external_attr >> 16
        if not stat.S_IFMT(mode):                      # made without unix modes (Windows)
            mode |= stat.S_IFDIR if member.is_dir() else stat.S_IFREG
        path = member.filename.rstrip("/")
        kinds[path] = kind(mode)
        for folder in ancestors(path):
            kinds.setdefault(folder, "folder")
    return kinds


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
        by_name = {m.filename.rstrip("/"): m for m in members}

        def read(name):
            with z.open(by_name[name]) as f:
                return f.read(MAX_FILE + 1)
        take(zip_kinds(members), read, dest, notes)


def git(repo, *args):
    """The command line of git reading the bare repository `repo`, and its environment: its
    objects only (no work tree, no hooks or filters on these commands, no other configuration
    than its own)."""
    return (["git", "-c", "safe.directory=*", "--git-dir", str(repo), *args],
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
             "HOME": "/nonexistent"})


def from_git(repo, dest, notes):
    """The student files of HEAD's tree in the bare repository `repo`, read from its objects
    (blobs only: a committed link or submodule is a note), never checked out."""
    for borrowed in ("commondir", "objects/info/alternates"):
        if (repo / borrowed).exists() or (repo / borrowed).is_symlink():
            raise SubmissionError(f"{repo.name}: a git repository that borrows another's "
                                  f"objects or refs ({borrowed}) is not read")
    argv, env = git(repo, "ls-tree", "-r", "-t", "-z", "HEAD")
    listed = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    if listed.returncode:
        said = listed.stderr.decode(errors="replace").strip().splitlines() or ["?"]
        notes.append(f"{repo.name}: no commit to grade (git ls-tree HEAD: {said[-1]})")
        return
    kinds, objects = {}, {}
    for record in listed.stdout.split(b"\0"):
        if record:
            meta, name = record.split(b"\t", 1)
            mode, _, sha = meta.decode().split()
            name = name.decode(errors="replace")
            kinds[name], objects[name] = kind(int(mode, 8)), sha
    if len(kinds) > MAX_ENTRIES:
        raise SubmissionError(f"{repo.name}: {len(kinds):,} entries in HEAD's tree (the limit "
                              f"is {MAX_ENTRIES:,})")

    def read(name):
        argv, env = git(repo, "cat-file", "blob", objects[name])
        with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) as blob:
            data = blob.stdout.read(MAX_FILE + 1)
            if len(data) > MAX_FILE:
                blob.kill()
                return data
        return data if blob.returncode == 0 else None
    take(kinds, read, dest, notes)


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
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        notes.append(f"{path.name} is a link, not a submission")
    elif stat.S_ISREG(info.st_mode) and zipfile.is_zipfile(path):
        from_zip(path, dest, notes)
    elif stat.S_ISREG(info.st_mode):
        raise SubmissionError(f"{path.name} is neither a folder, a zip nor a git repository")
    elif not stat.S_ISDIR(info.st_mode):
        notes.append(f"{path.name} is {kind(info.st_mode)}, not a submission")
    elif (path / "HEAD").is_file() and (path / "objects").is_dir():   # a bare git repository
        from_git(path, dest, notes)
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
    """The file `name` in student_root (a private copy, which take() wrote), or None: by the
    same rule as choose(), a file of one name reached through folders only (a link may point at
    the grader's own copy of the solution)."""
    kinds = {}
    for step in ancestors(name) + [name]:
        try:
            info = os.lstat(Path(student_root) / step)
        except OSError:
            break
        kinds[step] = kind(info.st_mode, info.st_nlink)
        if kinds[step] != "folder":
            break
    return Path(student_root) / name if reached(kinds, "", name)[0] else None


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
