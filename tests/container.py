"""python tests/container.py VENV -- COMMAND...: run COMMAND as root where user namespaces and
cgroups are refused, as in a Docker container with its default profile (Gradescope's case).

COMMAND runs as uid 0 of a user namespace of its own that maps every uid the grader may use (as
a container's root may become any of them), with nested user namespaces refused (bubblewrap
cannot start) and no cgroups, in a mount namespace of its own where, as on Gradescope, the
interpreter is open to every user, the virtual environment lies outside the course (this
checkout's .venv at VENV under /mnt) and this checkout itself is gone (a tmpfs over it: the
course is the copy COMMAND grades from). Nothing of the machine's is changed. Needs root and
user namespaces outside.
"""

import ctypes
import os
import sys
from pathlib import Path

CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
MS_BIND, MS_REC = 4096, 16384
IDS = 4_000_000_000      # uids and gids mapped, from 0 (the grader's users lie below 2^32 - 1)
CHECKOUT = Path(__file__).resolve().parents[1]
libc = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype=None, flags=0, options=None):
    if libc.mount(str(source).encode(), str(target).encode(),
                  fstype.encode() if fstype else None, flags,
                  options.encode() if options else None) != 0:
        raise OSError(ctypes.get_errno(), f"mount {source} on {target}")


def open_to_everyone(path):
    """Make `path` reachable by every user: each folder above it closed to others (/root) is
    covered by a tmpfs open to all, holding only the way down to it (bound back in)."""
    path = Path(os.path.realpath(path))
    for above in list(reversed(path.parents))[1:]:
        if above.stat().st_mode & 0o001:
            continue
        below = path.relative_to(above).parts[0]
        stage = Path("/mnt/stage-" + below.strip("."))
        stage.mkdir()
        mount(above / below, stage, flags=MS_BIND | MS_REC)
        mount("none", above, "tmpfs", 0, "mode=0755")
        (above / below).mkdir()
        mount(stage, above / below, flags=MS_BIND | MS_REC)


def inside(venv, command):
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")
    mount("none", "/sys/fs/cgroup", "tmpfs")
    mount("none", "/mnt", "tmpfs", 0, "mode=0755")
    open_to_everyone(sys.base_prefix)
    (Path("/mnt") / venv).mkdir()
    mount(CHECKOUT / ".venv", Path("/mnt") / venv, flags=MS_BIND | MS_REC)
    mount("none", CHECKOUT, "tmpfs", 0, "mode=0755")
    os.execvp(command[0], command)


def main(argv):
    venv, command = argv[0], argv[argv.index("--") + 1:]
    ready, go = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
            os._exit(90)
        os.write(ready[1], b"x")
        os.read(go[0], 1)                           # mapped: root here, uid 0 outside
        try:
            mount("none", "/", None, MS_REC | (1 << 18))        # MS_PRIVATE: nothing leaks out
            inside(venv, command)
        except OSError as e:
            print(f"container.py: {e}", file=sys.stderr)
            os._exit(91)
    os.read(ready[0], 1)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(f"0 0 {IDS}")
    os.write(go[1], b"x")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
