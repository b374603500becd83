"""What a check's sandbox holds and what its processes can reach (issue 42): an allow-list built
by bubblewrap (exercise 3: NumPy, no torch, no gpt.py, no decoding files; the other parts: the
project's packages), nothing that names a host path, and a PID namespace per check, so that the
student's code reaches no process it did not start. Each attack has a negative control: the
same code where the defence is off (plain processes, or bubblewrap without confine.py's
namespaces) reaches what it must not."""

import json
import site
import sys

import pytest
from test_hostile_zoo import (
    blank_submission,
    edit,
    reference_submission,
    run,
    stub,
    use_sandbox,
)

from classroom import checks, sandbox
from classroom.submissions import ROOT

pytestmark = pytest.mark.slow  # graded in sandboxes: not in make test-fast

LOOK = '''

def _what_i_see():
    import os, sys
    def files(top):
        found = []
        for folder, _, names in os.walk(top):
            found += [os.path.relpath(os.path.join(folder, n), top) for n in names
                      if "__pycache__" not in folder]
        return sorted(found)
    def text(path):
        try:
            return open(path, "rb").read().replace(b"\\0", b" ").decode(errors="replace")
        except OSError:
            return ""
    import ctypes
    userns = ctypes.CDLL(None, use_errno=True).unshare(0x10000000)     # CLONE_NEWUSER
    status = [line for line in text("/proc/self/status").splitlines()
              if line.startswith(("Cap", "NoNewPrivs"))]
    mine = text("/proc/self/cmdline") + text("/proc/self/environ") + text("/proc/1/cmdline")
    project = files("/project")
    if "gpt.py" in project:      # the whole student version: what it must not hold, and gpt.py
        project = [f for f in project if f == "gpt.py" or f.startswith("tests/")
                   or "TEACHERS" in f]
    return {"site": sorted(os.listdir("/site")), "project": project,
            "root": sorted(os.listdir("/")), "writable root": os.access("/", os.W_OK), "pids": sorted(int(p) for p in os.listdir("/proc")
                                                            if p.isdigit()),
            "host paths": [p for p in HOST if p in mine], "path": sys.path,
            "status": status, "user namespace": userns}
'''


@pytest.fixture(autouse=True)
def everything_shown(monkeypatch):
    """What a check's worker reports here is longer than a student is shown of a message."""
    monkeypatch.setattr(checks, "SHOWN", 100_000)


def seen(results):
    message = " ".join(results[0].lines())
    return json.loads(message.split("SEEN ", 1)[1].rsplit("}", 1)[0] + "}")


def host_paths():
    """Paths of this machine a student must not learn: the repository, the environment, Python."""
    return sorted({str(ROOT), sys.prefix, sys.base_prefix, *site.getsitepackages()})


def looking(submission, file, function):
    edit(submission, file, stub(function),
         "raise ValueError('SEEN ' + __import__('json').dumps(_what_i_see()))")
    path = submission / file
    path.write_text(path.read_text() + LOOK.replace("HOST", repr(host_paths())))


@pytest.mark.parametrize("torch_free", [True, False], ids=["exercise-3", "exercise-2"])
def test_a_check_sees_its_allow_list_and_nothing_else(torch_free, tmp_path, monkeypatch):
    use_sandbox("bwrap", monkeypatch)
    submission = blank_submission(tmp_path / "submission")
    if torch_free:
        looking(submission, "numpy_speculative.py", "forward")
        part = "3a"
    else:
        looking(submission, "speculative.py", "expected_tokens_per_pass")
        part = "2a"
    view = seen(run(tmp_path, submission, part)[0])
    assert view["site"] == sorted(sandbox.package_entries(torch_free)), view["site"]
    assert any(name.startswith("torch") for name in view["site"]) != torch_free
    assert not any("editable" in name for name in view["site"])
    if torch_free:      # the worker and the student's file with the window rule, nothing else
        assert view["project"] == sorted(sandbox.TORCH_FREE_FILES), view["project"]
    else:               # the student version: no tests, no teachers' notes, no hidden checks
        assert view["project"] == ["gpt.py"], view["project"]
    assert not view["writable root"]                # nothing a check writes but in /tmp
    assert view["pids"] == [1]                      # itself alone: a PID namespace of its own
    assert view["host paths"] == []                 # no command line or variable names one
    assert view["user namespace"] == -1             # no new one: no capability to be had there
    assert sorted(view["status"]) == ["CapAmb:\t0000000000000000", "CapBnd:\t0000000000000000",
                                      "CapEff:\t0000000000000000", "CapInh:\t0000000000000000",
                                      "CapPrm:\t0000000000000000", "NoNewPrivs:\t1"], view["status"]
    assert set(view["path"]) <= {"/project", "/site", "/python/lib/python311.zip",
                                 f"/python/lib/python3.{sys.version_info.minor}",
                                 f"/python/lib/python3.{sys.version_info.minor}/lib-dynload"} \
        | {f"/python/lib/python3{sys.version_info.minor}.zip"}, view["path"]
    assert set(view["root"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc",
                                 "dev", "proc", "tmp", "python", "site", "project"}, view["root"]


LOOK_CHROOTED = '''

def _what_i_see():
    import os, sys
    project, sites, stdlib = os.getcwd(), SITES, os.path.dirname(os.__file__)
    files, writable = [], []
    for folder, _, names in os.walk("/"):
        if os.access(folder, os.W_OK) and not folder.startswith("/tmp"):
            writable.append(folder)
        files += [os.path.join(folder, n) for n in names if "__pycache__" not in folder]
    inside = lambda f, top: f.startswith(top.rstrip("/") + "/")
    return {"site": sorted({n for d in sites if os.path.isdir(d) for n in os.listdir(d)}),
            "project": sorted(os.path.relpath(f, project) for f in files if inside(f, project)
                              and (f.endswith("/gpt.py") or "/tests/" in f or "TEACHERS" in f
                                   or SMALL)),
            "elsewhere": [f for f in files if not (inside(f, project) or inside(f, stdlib)
                                                   or any(inside(f, d) for d in sites))],
            "writable": writable, "proc": os.path.exists("/proc"), "uid": os.getuid(),
            "open folders": [fd for fd in range(1024) if _is_folder(fd)]}   # a way out of chroot


def _is_folder(fd):
    import os, stat
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return False
'''


@pytest.mark.parametrize("torch_free", [True, False], ids=["exercise-3", "exercise-2"])
def test_as_users_of_their_own_a_check_sees_its_allow_list_and_nothing_else(torch_free, tmp_path,
                                                                          monkeypatch):
    # Where namespaces are refused (the grader as root: Gradescope), each check's user is
    # chrooted into a view that holds what bubblewrap's sandbox holds: the same allow-list.
    use_sandbox("user", monkeypatch)
    submission = blank_submission(tmp_path / "submission")
    file, function, part = (("numpy_speculative.py", "forward", "3a") if torch_free else
                            ("speculative.py", "expected_tokens_per_pass", "2a"))
    edit(submission, file, stub(function),
         "raise ValueError('SEEN ' + __import__('json').dumps(_what_i_see()))")
    (submission / file).write_text((submission / file).read_text() + LOOK_CHROOTED.replace(
        "SITES", repr(sandbox.package_dirs(torch_free))).replace("SMALL", repr(torch_free)))
    view = seen(run(tmp_path, submission, part)[0])
    assert view["site"] == sorted(sandbox.package_entries(torch_free)), view["site"]
    assert any(name.startswith("torch") for name in view["site"]) != torch_free
    if torch_free:
        assert view["project"] == sorted(sandbox.TORCH_FREE_FILES), view["project"]
    else:
        assert view["project"] == ["gpt.py"], view["project"]
    assert view["elsewhere"] == [] and view["writable"] == [], view
    assert not view["proc"] and view["uid"] != 0 and view["open folders"] == []


# ----------------------------------------------------------------------------------------------
# Exercise 3 without NumPy: torch by any route


ROUTES = {
    # the finder that blocked torch in the student's own process, removed
    "import": "import sys\n    sys.meta_path[:] = [f for f in sys.meta_path if "
              "type(f).__name__ != 'Blocker']\n    import torch, gpt",
    # the environment's own folder named by path
    "by path": "import sys\n    sys.meta_path[:] = [f for f in sys.meta_path if "
               "type(f).__name__ != 'Blocker']\n    sys.path += SITE\n    import torch",
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("isolation", ["bwrap", "user", "plain"],
                         ids=["grader", "grader-as-users-of-their-own", "negative-control"])
def test_exercise_3_cannot_reach_torch(route, isolation, tmp_path, monkeypatch):
    # The forward pass is the reference's, but it first takes torch: it scores only where torch
    # can be had (the control: plain processes, where a finder in-process was all that stood).
    sandboxed = use_sandbox(isolation, monkeypatch)
    submission = reference_submission(tmp_path / "submission")
    take = ROUTES[route].replace("SITE", repr(site.getsitepackages()))
    edit(submission, "numpy_speculative.py", '    """Logits (T, V) for the new tokens',
         '    ' + take + '\n    """Logits (T, V) for the new tokens')
    results, score = run(tmp_path, submission, "3a")
    full = sum(c.points for c in results_checks(results))
    assert score == (0 if sandboxed else full), [(r.check.name, r.lines()) for r in results]
    if sandboxed:
        assert all("NumPy alone" in " ".join(r.lines()) for r in results
                   if r.check.name.startswith("forward")), [r.lines() for r in results]


def results_checks(results):
    return [r.check for r in results]


# ----------------------------------------------------------------------------------------------
# Reaching the grader's processes: the zygote, bubblewrap, another check's worker


REACH = '''

def _reachable():
    import ctypes, os, signal
    libc = ctypes.CDLL(None, use_errno=True)
    found = []
    for pid in sorted({*range(1, 400), os.getppid()} - {0}):    # the parent: the zygote
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)                  # a signal it may send (0: none is sent)
        except OSError:
            continue
        attached = libc.ptrace(16, pid, 0, 0) == 0          # PTRACE_ATTACH
        if attached:
            libc.ptrace(17, pid, 0, 0)                       # PTRACE_DETACH
        found.append([pid, attached])
    return found
'''


@pytest.mark.parametrize("mode", ["bwrap", "user", "control"],
                         ids=["grader", "grader-as-users-of-their-own", "negative-control"])
def test_a_check_reaches_no_process_but_its_own(mode, tmp_path, monkeypatch):
    # The control: bubblewrap as before issue 42 (the checks in the zygote's PID namespace),
    # where the zygote can be signalled, and so stopped, by a student's code. As users of their
    # own, the zygote is root and each other check another user: none can be signalled.
    use_sandbox("user" if mode == "user" else "bwrap", monkeypatch)
    confined = mode != "control"
    if not confined:
        command = sandbox.bwrap_command
        monkeypatch.setattr(sandbox, "bwrap_command",
                            lambda *args: without_confinement(command(*args)))
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("expected_tokens_per_pass"),
         "raise ValueError('SEEN ' + __import__('json').dumps({'pids': _reachable()}))")
    path = submission / "speculative.py"
    path.write_text(path.read_text() + REACH)
    # two parts side by side: another check's worker runs at the same time
    results, _ = run(tmp_path, submission, ("2a", "2c"))
    reached = seen([r for r in results if r.check.part == "2a"])["pids"]
    if confined:
        assert reached == [], reached
    else:
        assert reached, reached


def without_confinement(argv):
    """bubblewrap's command line with the zygote told it is not confined (CLASSROOM_ISOLATION
    left out): its workers are forked into its own PID namespace, as before issue 42."""
    at = argv.index("CLASSROOM_ISOLATION")
    return argv[:at - 1] + argv[at + 2:]


# ----------------------------------------------------------------------------------------------
# Output: a pipe the grader drains, not a file it keeps


def test_a_worker_that_floods_its_output_is_drained_and_capped(tmp_path, monkeypatch):
    use_sandbox("bwrap", monkeypatch)
    submission = reference_submission(tmp_path / "submission")
    edit(submission, "speculative.py", '    """1 + alpha + ... + alpha^k',
         '    import os, sys\n    assert os.readlink("/proc/self/fd/1").startswith("pipe:")\n'
         '    for _ in range(200):\n        sys.stdout.write("x" * 100_000)\n'
         '    """1 + alpha + ... + alpha^k')
    results, score = run(tmp_path, submission, "2a")
    assert score == sum(r.check.points for r in results), [r.lines() for r in results]


def test_a_worker_that_dies_says_its_last_line(tmp_path, monkeypatch):
    use_sandbox("bwrap", monkeypatch)
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("expected_tokens_per_pass"),
         "import os; print('my last words', flush=True); os._exit(3)")
    results, _ = run(tmp_path, submission, "2a")
    assert all(r.status == "crashed" for r in results)
    assert all("(exit 3)" in r.lines()[0] and "my last words" in r.lines()[0] for r in results), \
        [r.lines() for r in results]
