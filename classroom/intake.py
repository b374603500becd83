"""
classroom/intake.py: what a submission gives the grader, read and compiled inside the sandbox.

    python -m classroom.intake read SUBMISSION   # a folder, zip or bare git repository: a JSON
                                                 # line (names, lengths, notes), then the bytes
    python -m classroom.intake compile FILE...   # a line before each file, one after: a file
                                                 # the parser never finishes costs itself alone
Why so, and why git is read with dulwich: classroom/TEACHERS.md, "How a grade runs".
"""

import json
import os
import stat
import sys
import zipfile
from pathlib import PurePosixPath

from lessonkit.parts import STUDENT_FILES

MAX_FILE = 2 * 1024 ** 2      # bytes of one student file (the reference's are under 40 KB)
MAX_ENTRIES = 50_000          # entries looked at in a submission
ROOT_DEPTH = 3                # levels below a submission where its student files may be
NAMED = 10                    # entries a note names, of those left out
GITLINK = 0o160000            # a git tree's mode of a submodule
NEVER = {".git", ".venv", "checkpoints", "__pycache__", ".pytest_cache", ".hypothesis",
         ".ipynb_checkpoints"}


class Unreadable(ValueError):
    """A submission that cannot be read at all; the message says why."""


def kind(mode, links=1):
    """What one entry is, from its mode and its number of names: "file" (a regular file of one
    name), "folder", or what it is instead."""
    if mode == GITLINK:
        return "a submodule"
    if stat.S_ISREG(mode):
        return "file" if links == 1 else "a hard link"
    if stat.S_ISDIR(mode):
        return "folder"
    return {stat.S_IFLNK: "a link", stat.S_IFIFO: "a fifo", stat.S_IFCHR: "a device",
            stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode),
                                                                      "not a regular file")


def ancestors(path):
    steps = path.split("/")
    return ["/".join(steps[:i]) for i in range(1, len(steps))]


def within(root, name):
    return f"{root}/{name}" if root else name


def reached(kinds, root, name):
    """(whether `name` below root is a file reached through folders only, the entry on its way
    that is something else, what that entry is)."""
    path = within(root, name)
    for step in [within(root, a) for a in ancestors(name)] + [path]:
        if step not in kinds:
            return False, "", None
        if kinds[step] != ("file" if step == path else "folder"):
            return False, step, kinds[step]
    return True, "", "file"


def choose(kinds, notes):
    """The one rule. kinds: {path inside the submission: kind(...)}. Returns {student file: its
    path}; each link, device, fifo, socket or submodule met instead is a note."""
    kinds = {p: k for p, k in kinds.items() if not NEVER & set(p.split("/"))}
    roots = [""] + sorted((p for p, k in kinds.items() if k == "folder" and p.count("/") <
                           ROOT_DEPTH and all(kinds.get(a) == "folder" for a in ancestors(p))),
                          key=lambda p: (p.count("/"), p))
    root = max(roots, key=lambda r: (sum(reached(kinds, r, n)[0] for n in STUDENT_FILES),
                                     sum(within(r, n) in kinds for n in STUDENT_FILES)))
    taken, named = {}, set()
    for name in STUDENT_FILES:
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


def take(kinds, read, notes):
    """{student file: its bytes} of what choose() picks; read(path) -> bytes (MAX_FILE + 1 at
    most) or None."""
    files = {}
    for name, path in choose(kinds, notes).items():
        data = read(path)
        if data is None:
            notes.append(f"{path} could not be read: counted as missing")
        elif len(data) > MAX_FILE:
            notes.append(f"{path} is larger than {MAX_FILE >> 20} MB: counted as missing")
        else:
            files[name] = data
    return files


def counted(kinds):
    if len(kinds) > MAX_ENTRIES:
        raise Unreadable(f"more than {MAX_ENTRIES:,} entries where the student files are "
                         "looked for")


# -- the three forms ----------------------------------------------------------------------------


def from_folder(folder):
    """Every entry up to ROOT_DEPTH levels down, links never followed; files read one step at a
    time without following a link (O_NOFOLLOW) and checked again once open."""
    kinds, notes = {}, []

    def scan(relative, depth):
        with os.scandir(os.path.join(folder, relative)) as entries:
            for entry in entries:
                if entry.name in NEVER:
                    continue
                path = within(relative, entry.name)
                info = entry.stat(follow_symlinks=False)
                kinds[path] = kind(info.st_mode, info.st_nlink)
                counted(kinds)
                if kinds[path] == "folder" and depth < ROOT_DEPTH + 2:
                    scan(path, depth + 1)
    scan("", 0)

    def read(relative):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK     # a fifo put there never blocks
        opened = []
        try:
            opened.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY))   # the grader's fd
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
    return take(kinds, read, notes), notes


def from_zip(path):
    notes = []
    with zipfile.ZipFile(path) as z:
        members = z.infolist()
        if len(members) > MAX_ENTRIES:
            raise Unreadable(f"{len(members):,} entries in the zip (the limit is "
                             f"{MAX_ENTRIES:,}); zip the student files alone")
        kinds, by_name = {}, {}
        for member in members:
            name = member.filename.rstrip("/")
            if member.filename.startswith("/") or ".." in PurePosixPath(name).parts:
                raise Unreadable(f"unsafe path {member.filename!r} in the zip")
            mode = member.external_attr >> 16
            if not stat.S_IFMT(mode):                  # made without unix modes (Windows)
                mode |= stat.S_IFDIR if member.is_dir() else stat.S_IFREG
            kinds[name], by_name[name] = kind(mode), member
            for folder in ancestors(name):
                kinds.setdefault(folder, "folder")

        def read(name):
            with z.open(by_name[name]) as f:
                return f.read(MAX_FILE + 1)
        return take(kinds, read, notes), notes


def from_git(path):
    """HEAD's tree of a bare repository, from its objects and refs alone: its configuration is
    never read, so nothing it names (a command, a remote) is ever used."""
    from dulwich.object_store import DiskObjectStore  # noqa: PLC0415 (only where git is read)
    from dulwich.refs import DiskRefsContainer
    for borrowed in ("commondir", "objects/info/alternates"):
        if os.path.lexists(os.path.join(path, borrowed)):
            raise Unreadable(f"a git repository that borrows another's objects or refs "
                             f"({borrowed}) is not read")
    try:
        store = DiskObjectStore(os.path.join(path, "objects"), alternates=())
        tree = store[store[DiskRefsContainer(path)[b"HEAD"]].tree]
    except Exception as e:  # noqa: BLE001 (dulwich's many ways of saying "no commit here")
        return {}, [f"no commit to grade in the git repository ({type(e).__name__})"]
    notes, kinds, shas = [], {}, {}

    def walk(tree, prefix, depth):
        for item in tree.iteritems():
            name = within(prefix, item.path.decode(errors="replace"))
            kinds[name], shas[name] = kind(item.mode), item.sha
            counted(kinds)
            if kinds[name] == "folder" and depth < ROOT_DEPTH + 2:
                walk(store[item.sha], name, depth + 1)
    walk(tree, "", 0)

    def read(name):
        try:
            return store[shas[name]].as_raw_string()[:MAX_FILE + 1]
        except Exception:  # noqa: BLE001 (a partial clone's missing object: never fetched)
            return None
    return take(kinds, read, notes), notes


def read(submission):
    info = os.stat(submission)        # /proc/self/fd/N: what the grader opened, never a link
    if stat.S_ISREG(info.st_mode) and zipfile.is_zipfile(submission):
        return from_zip(submission)
    if not stat.S_ISDIR(info.st_mode):
        raise Unreadable("neither a folder, a zip nor a git repository")
    entries = set(os.listdir(submission))
    if ".git" not in entries and {"HEAD", "objects", "refs"} <= entries:
        return from_git(submission)
    return from_folder(submission)


def main(argv):
    out = sys.stdout.buffer
    if argv[0] == "read":
        try:
            files, notes = read(argv[1])
        except Exception as e:  # noqa: BLE001 (an encrypted, corrupt or strange submission)
            files, notes = {}, [f"not graded: {e if isinstance(e, Unreadable) else type(e).__name__}"
                                f"{'' if isinstance(e, Unreadable) else ': ' + str(e)[:200]}"]
        names = [name for name in STUDENT_FILES if name in files]
        out.write(json.dumps({"files": [[n, len(files[n])] for n in names],
                              "notes": notes}).encode() + b"\n")
        for name in names:
            out.write(files[name])
    else:
        for name in argv[1:]:
            out.write(json.dumps({"compiling": name}).encode() + b"\n")
            out.flush()
            try:
                with open(name, "rb") as f:
                    compile(f.read(), name, "exec", dont_inherit=True)
                said = None
            except SyntaxError as e:
                said = f"SyntaxError: {e.msg} (line {e.lineno})"
            except (ValueError, MemoryError, RecursionError, OSError) as e:
                said = f"{type(e).__name__}: {str(e)[:200]}"
            out.write(json.dumps({"file": name, "error": said}).encode() + b"\n")
            out.flush()
    out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
