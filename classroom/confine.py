"""
classroom/confine.py: inside bubblewrap, each check's worker in namespaces of its own.

The zygote (worker.zygote) runs in bubblewrap as uid 0 of the sandbox's user namespace with
three capabilities there and nowhere else (sandbox.ZYGOTE_CAPS): CAP_SYS_ADMIN to make
namespaces, CAP_SETPCAP to drop the bounding set, CAP_SYS_RESOURCE to forbid further user
namespaces. It runs no student code. For each check it forks a process that unshares a PID and
a mount namespace and forks the worker, which is PID 1 there:

- it sees only itself and what it starts (a fresh /proc of its own PID namespace), so no pid it
  can name is the zygote's, bubblewrap's or another check's: ptrace, process_vm_readv,
  pidfd_open and pidfd_getfd, kill and /proc/PID have nothing of theirs to reach;
- when it ends (or is killed), the kernel kills every process left in its namespace, daemons
  included;
- before it serves anything it drops every capability, the bounding set, the ambient set and
  root's special treatment on execve (securebits, locked), so that nothing it runs gets one back;
  no_new_privs is bubblewrap's, and no user namespace can be made (the zygote set the sandbox's
  limit to 0), so no capability can be had in a new one either.

Linux only, through libc (ctypes): Python 3.11 has no os.unshare.
"""

import ctypes
import os
import signal

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT = 1, 24, 28, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECURE_BITS = 0xef      # NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE, KEEP_CAPS off; all locked
CAPABILITY_V3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _call(name, *args):
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def no_more_user_namespaces():
    """Forbid new user namespaces inside this one, for good (the zygote, once at its start):
    the limit is per user namespace and counts its descendants."""
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")


def new_namespaces():
    """Put this process's next child in a new PID namespace (as its PID 1) and this process
    in a new mount namespace."""
    _call("unshare", CLONE_NEWPID | CLONE_NEWNS)


def become_init():
    """In the new namespaces' PID 1 (the check's worker), before anything of the student's runs:
    die with its parent, a /proc of its own PID namespace, no capability from now on."""
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1 or os.getpid() != 1:
        os._exit(70)           # the parent died before the line above, or no new namespace
    _call("mount", b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    _call("mount", b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    drop_capabilities()


def drop_capabilities():
    """No capability now or after any execve: the bounding and ambient sets emptied, root's
    special rules turned off and locked, then the capability sets themselves cleared."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for capability in range(last + 1):
        _call("prctl", PR_CAPBSET_DROP, capability, 0, 0, 0)
    _call("prctl", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _call("prctl", PR_SET_SECUREBITS, SECURE_BITS, 0, 0, 0)
    _call("capset", ctypes.byref(_CapHeader(CAPABILITY_V3, 0)), (_CapData * 2)())
