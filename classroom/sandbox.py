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

Where user namespaces are refused (some containers refuse them), the worker runs as a plain
process in the copy, and the grader says so in one line: the comparison still happens in the
grader and the grader still writes results.json alone, but the code can read the grader's files.
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
_isolation = {}   # cached answer of isolated(): {"ok": bool, "why": str}


def project_copy(dest, student_root, root=ROOT):
    """The student version of `root` (no solutions, hidden checks, tests or teachers' notes)
    with the student's files from student_root laid over it (links are not followed)."""
    dest = Path(dest)
    for f in project_files(root):
        relative = f.relative_to(root).as_posix()
        if teachers_only(relative) or relative.endswith(".ipynb"):
            continue
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(student_text(relative, f.read_text(errors="replace")))
    for name in parts.STUDENT_FILES:
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


def isolated(scratch, warn=True):
    """Whether workers can be isolated here (tried once per process), and if not, why: one
    line the first time a grade (warn) runs without."""
    if not _isolation:
        if os.environ.get("CLASSROOM_NO_SANDBOX"):
            _isolation.update(ok=False, why="CLASSROOM_NO_SANDBOX is set")
        elif not (shutil.which("unshare") and shutil.which("chroot")):
            _isolation.update(ok=False, why="unshare or chroot is not installed")
        else:
            probe = Path(scratch) / "probe"
            (probe / "root").mkdir(parents=True, exist_ok=True)
            (probe / "project").mkdir(exist_ok=True)
            lines = script(probe / "root", probe / "project", 0).splitlines()[:-1]
            lines.append(f"exec chroot {shlex.quote(str(probe / 'root'))} "
                         f"{shlex.quote(sys.executable)} -c pass")
            try:
                done = subprocess.run(UNSHARE + ["sh", "-c", "\n".join(lines)],
                                      capture_output=True, text=True, timeout=60)
                why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
                _isolation.update(ok=done.returncode == 0, why=why)
            except (OSError, subprocess.TimeoutExpired) as e:
                _isolation.update(ok=False, why=str(e))
    if warn and not _isolation.get("checked_install"):
        _isolation["checked_install"] = True
        copied = [name for name in ("numpy_speculative", "speculative") if
                  importlib.machinery.PathFinder.find_spec(name, site.getsitepackages())]
        if copied:
            print(f"warning: {', '.join(copied)} is installed inside the virtual environment "
                  "(pip install without -e), where the students' code can read it: reinstall "
                  "with pip install -e .", file=sys.stderr)
    if warn and not _isolation["ok"] and not _isolation.get("warned"):
        _isolation["warned"] = True
        print(f"warning: the students' code runs without isolation (the sandbox needs user "
              f"namespaces: {_isolation['why']}); it can read this machine's files",
              file=sys.stderr)
    return _isolation["ok"]


def start(project, fd, scratch, log, mode="worker", warn=True):
    """The worker's process (or a zygote), in a session of its own, its output into `log`.
    warn: say so in one line if it cannot be isolated (when grading; a student's own check
    needs no isolation from their own machine)."""
    isolate = isolated(scratch, warn)
    mountpoint = Path(scratch) / "root"
    mountpoint.mkdir(exist_ok=True)
    return subprocess.Popen(command(project, fd, mountpoint, isolate, mode), cwd=project,
                            env=environment(project), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=log, pass_fds=(fd,), start_new_session=True)


class Zygote:
    """A sandboxed process that forks one worker per check (worker.zygote), so that Python,
    NumPy and torch start once per grade, not once per check. torch: preload it (for the checks
    that may use it; exercise 3's workers fork from a zygote without it)."""

    def __init__(self, project, scratch, torch, warn=True):
        ours, theirs = socket.socketpair()
        self.log = open(Path(scratch) / f"zygote-{'torch' if torch else 'numpy'}.log", "w")
        self.process = start(project, theirs.fileno(), scratch, self.log,
                             "zygote-torch" if torch else "zygote", warn)
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
