"""
classroom/sandbox.py: where a student's code runs: a copy of the student version of the project
with the submission's files in it, and, where the machine allows, nothing else.

The worker (worker.py) starts through `unshare` in new user, mount and PID namespaces, chrooted
into a fresh tmpfs that holds only the system's directories (read-only), Python and its
packages, /dev, a /proc of its own, an empty /tmp and the copy at /project. So the reference
repository, the hidden seed and checks, the autograder's files (/autograder/source and
/autograder/results on Gradescope) and the grader's scratch folder are not there to read or
write; walking up from sys.executable finds the virtual environment and no project. The
environment holds no CLASSROOM_SEED. The namespace's first process is a zygote (Zygote below,
worker.zygote) that forks one worker per check and kills its process group when the check ends;
when the grade ends the zygote ends, and with it every process a submission left.

Where user namespaces are refused (Docker's default profile refuses them) and the grader runs
as root (as on Gradescope), the zygote starts as root from a blank student version of the
project (no submission in it), imports what the student's files will need, and then becomes a
user of its own (uid UNPRIVILEGED + the grader's pid, no groups) before it serves any check: the
student's code runs as that user, in the copy. The grader first takes group and others' access
away from its own repository and from any copy of the project around the virtual environment
(chmod go-rwx, leaving only the way to Python: hide()); its scratch folders are private already.
When the grade ends, every process of that user is killed (kill_leftovers()). What that user
still sees: the machine's processes (not their environment), /tmp, and files that are open to
every user.

Where neither is possible, the worker runs as a plain process in the copy, and the grader says so
in one line: the comparison still happens in the grader and the grader still writes results.json
alone, but the code can read the grader's files.

CLASSROOM_SANDBOX=user skips the namespaces (the tests prove the fallback with it);
CLASSROOM_NO_SANDBOX=1 runs plain processes.
"""

import importlib.machinery
import json
import os
import shlex
import shutil
import signal
import site
import socket
import subprocess
import sys
import threading
from pathlib import Path

from classroom import parts, wire
from classroom.submissions import ROOT, project_files, student_file, student_text, teachers_only

SYSTEM = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
UNPRIVILEGED = 1 << 30   # + the grader's pid: the workers' user where namespaces are refused
_isolation = {}   # cached answer of isolation(): {"how": "namespaces" | "user" | None, "why"}
_hidden = set()   # the folders hide() has closed, in this process


def project_copy(dest, student_root=None, root=ROOT):
    """The student version of `root` (no solutions, hidden checks, tests or teachers' notes)
    with the student's files from student_root laid over it (links are not followed); with
    student_root None, the blank student version."""
    dest = Path(dest)
    for f in project_files(root):
        relative = f.relative_to(root).as_posix()
        if teachers_only(relative) or relative.endswith(".ipynb"):
            continue
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(student_text(relative, f.read_text(errors="replace")))
    for name in parts.STUDENT_FILES if student_root is not None else ():
        source = student_file(student_root, name)
        if source is not None:
            shutil.copyfile(source, dest / name, follow_symlinks=False)
    return dest


def environment(project):
    return {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/tmp", "LANG": "C.UTF-8",
            "PYTHONPATH": str(project), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"}


def python_dirs():
    """The folders Python needs: the virtual environment and the interpreter it points at."""
    dirs = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent}
    return sorted({d for d in dirs if not str(d).startswith(("/usr/", "/bin", "/lib"))}, key=str)


def script(mountpoint, project, fd, mode="worker"):
    """The shell lines run inside the new namespaces: build the root, then exec the worker."""
    r = shlex.quote(str(mountpoint))
    lines = ["set -e", f"mount -t tmpfs -o size=512m tmpfs {r}"]
    for name in SYSTEM:
        path = Path("/") / name
        if path.is_symlink():
            lines.append(f"ln -s {shlex.quote(os.readlink(path))} {r}/{name}")
        elif path.is_dir():
            lines += [f"mkdir -p {r}/{name}", f"mount --rbind /{name} {r}/{name}",
                      f"mount -o remount,bind,ro {r}/{name} 2>/dev/null || true"]
    for d in python_dirs():
        q = shlex.quote(str(d))
        lines += [f"mkdir -p {r}{q}", f"mount --rbind {q} {r}{q}",
                  f"mount -o remount,bind,ro {r}{q} 2>/dev/null || true"]
    lines += [f"mkdir -p {r}/dev {r}/proc {r}/tmp {r}/project", f"mount --rbind /dev {r}/dev",
              f"mount -t proc proc {r}/proc", f"mount --bind {shlex.quote(str(project))} "
              f"{r}/project"]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in environment("/project").items())
    lines.append(f"exec chroot {r} /usr/bin/env -i {env} {shlex.quote(sys.executable)} "
                 f"-m classroom.worker {mode} {fd} /project")
    return "\n".join(lines)


UNSHARE = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc",
           "--kill-child"]


def command(project, fd, mountpoint, isolate, mode="worker"):
    if isolate:
        return UNSHARE + ["sh", "-c", script(mountpoint, project, fd, mode)]
    return [sys.executable, "-m", "classroom.worker", mode, str(fd), str(project)]


def worker_uid():
    return UNPRIVILEGED + os.getpid()


def drop_privileges(uid):
    """Become `uid` (and its gid, no other groups) for good: root cannot come back."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def namespaces_refused(scratch):
    """Why workers cannot start in new namespaces here, or None if they can (tried once)."""
    if not (shutil.which("unshare") and shutil.which("chroot")):
        return "unshare or chroot is not installed"
    probe = Path(scratch) / "probe"
    (probe / "root").mkdir(parents=True, exist_ok=True)
    (probe / "project").mkdir(exist_ok=True)
    lines = script(probe / "root", probe / "project", 0).splitlines()[:-1]
    lines.append(f"exec chroot {shlex.quote(str(probe / 'root'))} "
                 f"{shlex.quote(sys.executable)} -c pass")
    try:
        done = subprocess.run(UNSHARE + ["sh", "-c", "\n".join(lines)],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def as_workers_user(code):
    """Run Python `code` in a process that first becomes the workers' user: (exit, last line)."""
    try:
        done = subprocess.run([sys.executable, "-c", "import sys\nfrom classroom.sandbox import "
                               f"drop_privileges\ndrop_privileges(int(sys.argv[1]))\n{code}",
                               str(worker_uid())], cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return 1, "no answer within 60 s"
    return done.returncode, (done.stderr.strip().splitlines() or [""])[-1]


def user_refused():
    """Why workers cannot become a user of their own here, or None if they can."""
    if os.geteuid() != 0:
        return "and the grader is not root, so it cannot run them as another user"
    code, line = as_workers_user("pass")
    return f"and uid {worker_uid()} is refused: {line}" if code else None


def probe(scratch):
    """{"how": the best isolation here, "why": why not better}."""
    forced = os.environ.get("CLASSROOM_SANDBOX")
    if os.environ.get("CLASSROOM_NO_SANDBOX") or forced == "none":
        return {"how": None, "why": "CLASSROOM_NO_SANDBOX is set"}
    why = "CLASSROOM_SANDBOX=user is set" if forced == "user" else namespaces_refused(scratch)
    if why is None:
        return {"how": "namespaces", "why": ""}
    refused = user_refused()
    return {"how": None if refused else "user", "why": f"{why} {refused}" if refused else why}


def isolation(scratch, grading=True):
    """How workers are isolated here (tried once per process): "namespaces", "user" (a user of
    their own, where the grader is root; grading only) or None, each said in one line the first
    time a grade runs so. A student's own check needs no isolation from their own machine."""
    if not _isolation:
        _isolation.update(probe(scratch))
    how = _isolation["how"]
    if how == "user" and not grading:
        return None
    if grading and not _isolation.get("checked_install"):
        _isolation["checked_install"] = True
        copied = [name for name in ("numpy_speculative", "speculative") if
                  importlib.machinery.PathFinder.find_spec(name, site.getsitepackages())]
        if copied:
            print(f"warning: {', '.join(copied)} is installed inside the virtual environment "
                  "(pip install without -e), where the students' code can read it: reinstall "
                  "with pip install -e .", file=sys.stderr)
    if grading and how != "namespaces" and not _isolation.get("warned"):
        _isolation["warned"] = True
        if how == "user":
            print(f"note: no user namespaces here ({_isolation['why']}): the students' code "
                  f"runs as uid {worker_uid()}, and {', '.join(map(str, hidden_folders()))} "
                  "are closed to other users (chmod go-rwx)", file=sys.stderr)
        else:
            print(f"warning: the students' code runs without isolation (the sandbox needs user "
                  f"namespaces: {_isolation['why']}); it can read this machine's files",
                  file=sys.stderr)
    return how


def hidden_folders():
    """What the workers' user must not read: this repository, and any copy of the project that
    holds the virtual environment (the reference that walking up from sys.executable finds)."""
    folders = {ROOT}
    for d in python_dirs():
        folders |= {p for p in Path(d).resolve().parents if (p / "numpy_speculative.py").is_file()}
    return sorted(folders)


def hide(folder, keep):
    """Take group and others' access to `folder` away, all but the way to the folders in
    `keep` (Python's), which stay as they are. Links are left alone (chmod would follow them)."""
    inside = [k for k in keep if folder in k.parents]
    mode = folder.lstat().st_mode & 0o7777
    if folder in keep or folder.is_symlink():
        return
    if not inside:
        folder.chmod(mode & ~0o077)
        return
    folder.chmod(mode & ~0o077 | 0o011)          # others may pass through, not list
    for child in folder.iterdir():
        hide(child, keep)


def open_to_workers(folder):
    """The copy the workers' user reads: the grader's still, in that user's group (folders 0750,
    files 0640: not another grade's user), and the way there passable (its temporary folder)."""
    folder, gid = Path(folder), worker_uid()
    for path, mode in [(folder.parent, 0o710), (folder, 0o750),
                       *((p, 0o750 if p.is_dir() else 0o640) for p in folder.rglob("*"))]:
        os.chown(path, -1, gid)
        path.chmod(mode)


def prepare_user(project):
    """Before a worker starts as the workers' user: hide the grader's files, open the copy."""
    keep = {p for d in python_dirs() for p in (Path(d), Path(d).resolve())}
    for folder in hidden_folders():
        if folder not in _hidden:
            hide(folder, keep)
            _hidden.add(folder)
    open_to_workers(project)
    _isolation["started"] = True                         # kill_leftovers() has work to do


def kill_leftovers():
    """Where workers ran as a user of their own: kill every process of that user (a daemon
    that left its check's process group, too), from a process that became that user (kill -1
    reaches exactly that user's processes, in one step that a fork cannot race)."""
    if _isolation.get("started"):
        as_workers_user("import os\ntry:\n    os.kill(-1, 9)\nexcept ProcessLookupError:\n"
                        "    pass")


def start(project, fd, scratch, log, mode="worker", grading=True):
    """The worker's process (or a zygote), in a session of its own, its output into `log`.
    grading: isolate it as well as the machine allows, and say how in one line (a student's
    own check needs no isolation from their own machine)."""
    how = isolation(scratch, grading)
    mountpoint = Path(scratch) / "root"
    mountpoint.mkdir(exist_ok=True)
    argv, home = command(project, fd, mountpoint, how == "namespaces", mode), project
    if how == "user":                   # the zygote starts as root in a blank copy (docstring)
        prepare_user(project)
        home = Path(scratch) / "blank"
        if not home.exists():
            project_copy(home)
        argv += [str(worker_uid()), str(home)]
    return subprocess.Popen(argv, cwd=home, env=environment(home), stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log, pass_fds=(fd,), start_new_session=True)


class Zygote:
    """A sandboxed process that forks one worker per check (worker.zygote), so that Python,
    NumPy and torch start once per grade, not once per check. torch: preload it (for the checks
    that may use it; exercise 3's workers fork from a zygote without it)."""

    def __init__(self, project, scratch, torch, grading=True):
        ours, theirs = socket.socketpair()
        self.log = open(Path(scratch) / f"zygote-{'torch' if torch else 'numpy'}.log", "w")
        self.process = start(project, theirs.fileno(), scratch, self.log,
                             "zygote-torch" if torch else "zygote", grading)
        theirs.close()
        ours.settimeout(60)
        self.control, self.reader = ours, ours.makefile("rb")
        self.lock = threading.Lock()

    def _ask(self, message, fds=()):
        with self.lock:
            try:
                socket.send_fds(self.control, [json.dumps(message).encode()], list(fds))
                line = self.reader.readline()
            except OSError:
                line = b""
        if not line:
            tail = (Path(self.log.name).read_text(errors="replace").strip().splitlines()
                    or ["no output"])[-1]
            raise wire.Gone(f"the sandbox's process ended: {tail[:200]}")
        return json.loads(line)

    def spawn(self, fd, log):
        """A worker serving socket fd, its output into the open file log: its pid."""
        return self._ask({"op": "spawn"}, (fd, log.fileno()))["pid"]

    def kill(self, pid):
        """Kill a worker's process group: its exit status (None if unknown)."""
        return self._ask({"op": "kill", "pid": pid})["exit"]

    def close(self):
        self.reader.close()
        self.control.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)      # and, sandboxed, its namespace
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self.log.close()
