"""
classroom/worker.py: the process in which a student's code runs, serving the grader's calls.

    python -m classroom.worker FD PROJECT
    python -m classroom.worker zygote[-torch] FD PROJECT     (forks one of those per check)
    python -m classroom.worker zygote[-torch] FD PROJECT GID BLANK VIEW
           (started as root in BLANK, the blank student version, then chrooted into VIEW;
           each worker becomes the uid the grader names, in group GID)

FD is one end of a socket pair (classroom/wire.py); PROJECT the copy of the student version of
the project with the submission's files in it. The worker is never given an output path, the
seed, the fixtures' expected values or the checks: the grader (runner.py) runs each check in its
own process and calls the student's functions here, one call at a time, and judges what comes
back. The worker only computes: what it runs beside the student's code (classroom/helpers.py)
collects what that code returns, and every figure a check judges (a time on the simulated GPU,
a count, a frequency) is measured in the grader. One worker serves one check at one seed, under
its limits (sandbox.py), in a process group of its own that is killed when the check ends;
workers are forked from a zygote (sandbox.Zygote) that has NumPy (and, for the checks that may
use it, torch) imported already. Exercise 3's checks run where torch, gpt.py and the project's
decoding are absent (sandbox.py); only a student's own check, which has no sandbox, blocks them
in-process, to say so early.
"""

import importlib
import importlib.abc
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from classroom import confine, helpers, parts, sandbox, wire

try:
    import resource  # here, not when a check starts: the workers' user may not read it
except ImportError:         # not on this platform: the time limit remains
    resource = None

BLOCKED = {"torch": "exercise 3 runs with NumPy alone: do not import torch",
           "speculative": "exercise 3 is yours to build: do not use the project's decoding",
           "beyond": "exercise 3 is yours to build: do not use beyond/ (its fast NumPy forward)",
           "gpt": "exercise 3 reads weights from .npz files: do not import gpt.py"}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in BLOCKED:
            raise ImportError(f"import {name}: {BLOCKED[top]}")
        return None


def block_torch():
    for module in [m for m in sys.modules if m.split(".")[0] in BLOCKED]:
        sys.modules.pop(module, None)
    sys.meta_path.insert(0, Blocker())


def limit():
    """A check's rlimits, beside its cgroups where the grader could make them (sandbox.py):
    sandbox.MEMORY bytes of address space (torch fits in it), sandbox.OUTPUT bytes per file
    written (a write past it fails instead of killing the process), no core files, and the
    number of processes the grader names (CLASSROOM_PROCESSES: counted per user)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = [("RLIMIT_AS", sandbox.MEMORY), ("RLIMIT_FSIZE", sandbox.OUTPUT), ("RLIMIT_CORE", 0)]
    if os.environ.get("CLASSROOM_PROCESSES"):
        limits.append(("RLIMIT_NPROC", int(os.environ["CLASSROOM_PROCESSES"])))
    for name, value in limits:
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (AttributeError, ValueError, OSError):  # not here: the cgroups and time remain
            pass


def describe(root):
    def one_line(error):
        if isinstance(error, NotImplementedError):         # "not started": its message alone
            return str(error) or "not written yet"
        if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] in BLOCKED:
            # absent from exercise 3's sandbox: say why, where the student sees it
            return f"import {error.name}: {BLOCKED[error.name.split('.')[0]]}"
        if isinstance(error, MemoryError):
            return ("MemoryError: the code asked for more memory than a check allows "
                    f"({sandbox.MEMORY // 1024 ** 3} GB)")
        return wire.describe(error, helpers.student_frame(error.__traceback__, root,
                                                          parts.STUDENT_FILES))
    return one_line


MODULES = {p.file: p.file[:-3].replace("/", ".") for p in parts.PARTS}  # file -> module name


class Worker:
    """What the grader may ask of the worker (object #1 on its side of the socket)."""

    def __init__(self):
        self.references = {}

    def use_references(self, references):
        """{(module, function): the grader's callable}: applied at every import from now on."""
        self.references = {tuple(key): value for key, value in references}
        self._apply()

    def _apply(self):
        loaded = {m: sys.modules[m] for m in MODULES.values() if m in sys.modules}
        helpers.use_references(loaded, self.references)

    def module(self, name):
        if name not in MODULES.values():
            raise ValueError(f"{name} is not a student module")
        module = importlib.import_module(name)
        self._apply()
        return module

    def model(self, params, config, vocab):
        return self.module("numpy_speculative").Model(params, config, vocab)

    def standin(self, config, vocab, logits_of, memo=False):
        return helpers.standin(self.module("numpy_speculative"), config, vocab, logits_of, memo)

    def helper(self, name, module, function, *args):
        return getattr(helpers, name)(getattr(self.module(module), function), *args)

    def use_gpu(self, gpu):
        """torch.cuda, for this check, is `gpu`: the grader's simulated GPU (helpers.FakeGPU),
        which keeps its clock and its queue in the grader's process."""
        helpers.use_gpu(gpu)


def serve(fd, project):
    """Serve the grader's calls on socket fd until the grader closes it. The first byte sent
    carries this process's credentials: the grader moves it into the check's cgroups before it
    asks for anything (sandbox.peer_pid)."""
    limit()
    sock = socket.socket(fileno=int(fd))
    sock.sendall(b"\0")
    peer = wire.Peer(sock, lends_anything=True)
    peer.describe = describe(Path(project).resolve())
    peer.lend(Worker())                                  # #1
    peer.serve_forever()


def become(project, blank, world, modules):
    """Started as root in `blank` (the blank student version): import what the student's
    `modules` import, forget every module of the blank copy but the grader's own (classroom,
    and this one, __main__), then move into `world` (sandbox.view: the part's allow-list at the
    host's paths) for good and to `project` there, where the student's files are. The zygote
    stays root, to make each worker the user of its check, and runs no student code."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 (a head start only: the worker imports it again)
            pass
    for name, module in list(sys.modules.items()):
        where = os.path.realpath(getattr(module, "__file__", None) or "/")
        own = name.split(".")[0] in ("classroom", "__main__")
        if where.startswith(blank + os.sep) and not own:
            del sys.modules[name]
    sys.path[:] = [project] + [p for p in sys.path if p and os.path.realpath(p) != blank]
    os.chroot(world)
    importlib.invalidate_caches()             # the folders on the path are the view's now
    os.chdir(project)


def wait_for_worker():
    """In the process between the zygote and a confined worker (confine.py): wait for the
    worker, the only child, and exit as it did. Killed (the zygote's kill: its process group),
    it takes the worker with it (PDEATHSIG), and the worker its whole PID namespace."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") < 1 << 16 else 4096)
    _, status = os.waitpid(-1, 0)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code                   # killed: 128 + the signal


def zygote(control, project, preload, gid=None):
    """Fork one worker per check from here, with `preload` imported once (torch costs seconds
    to import; a check's process forked from here has it at once). The grader sends "spawn"
    with the check's socket and log file (and, gid given, the uid the worker becomes), or
    "kill" with a worker's pid: its process group is killed (with a uid: every process of that
    user, and the files it left: sandbox.end_user) and its exit status returned. In bubblewrap
    this is in the PID namespace: when it ends, so does every process a submission left."""
    for module in preload:
        importlib.import_module(module)
    if "torch" in preload:
        import torch
        torch.set_num_threads(1)                 # a worker starts no thread pool of its own
    users = set()
    confined = os.environ.get("CLASSROOM_ISOLATION") == "bwrap"
    if confined:
        confine.no_more_user_namespaces()
    control.sendall(b"{}\n")                            # ready: from now on it answers at once
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1024, 2)
        except OSError:
            break
        if not message:
            break
        request = json.loads(message)
        if request["op"] == "spawn":
            check_socket, output = fds
            pid = os.fork()
            if pid == 0:                                 # the check's worker
                control.close()
                os.setsid()                              # a process group of its own
                os.dup2(output, 1)
                os.dup2(output, 2)
                os.close(output)
                try:
                    if "torch" not in preload and not confined and request.get("uid") is None:
                        block_torch()   # no sandbox (a student's own check): said early here
                    if confined:                         # in namespaces of its own, as PID 1
                        confine.new_namespaces()
                        if os.fork() != 0:
                            os._exit(wait_for_worker())
                        confine.become_init()
                    if request.get("uid") is not None:
                        sandbox.drop_privileges(request["uid"], gid)
                    serve(check_socket, project)
                finally:
                    os._exit(0)                          # threads a submission left: ignored
            for fd in fds:
                os.close(fd)
            users.add(request.get("uid"))
            reply = {"pid": pid}
        else:
            for _ in range(50 if request.get("ended") else 0):   # its own exit, for a moment
                if os.waitid(os.P_PID, request["pid"], os.WEXITED | os.WNOHANG | os.WNOWAIT):
                    break
                time.sleep(0.01)
            try:
                os.killpg(request["pid"], signal.SIGKILL)  # in bubblewrap: the worker dies too
            except (ProcessLookupError, PermissionError):
                pass
            try:
                _, status = os.waitpid(request["pid"], 0)
                reply = {"exit": os.waitstatus_to_exitcode(status)}
            except ChildProcessError:
                reply = {"exit": None}
            if request.get("uid") is not None:
                sandbox.end_user(request["uid"])
        control.sendall(json.dumps(reply).encode() + b"\n")
    for uid in users - {None}:                           # the grade's end: nothing stays
        sandbox.end_user(uid)
    os._exit(0)


def main(argv=None):
    """python -m classroom.worker FD PROJECT (one worker), or zygote[-torch] FD PROJECT [GID
    BLANK]."""
    args = (argv or sys.argv[1:])
    if args[0].startswith("zygote"):
        mode, fd, project, *user = args
    else:
        mode, (fd, project), user = "worker", args[:2], []
    preload = ["numpy"] + (["torch"] if mode == "zygote-torch" else [])
    gid = None
    if user:
        gid, blank, world = int(user[0]), user[1], user[2]
        mine = MODULES.values() if mode == "zygote-torch" else ["numpy_speculative"]
        become(project, os.path.realpath(blank), world, preload + list(mine))
    else:
        os.chdir(project)
        sys.path.insert(0, project)
    if mode == "worker":
        serve(fd, project)
        os._exit(0)
    zygote(socket.socket(fileno=int(fd)), project, preload, gid)


if __name__ == "__main__":
    main()
