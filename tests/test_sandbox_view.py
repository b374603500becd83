"""What a job's sandbox holds and what its processes can reach: an allow-list built by
bubblewrap (exercise 3: NumPy, no torch, no gpt.py, no decoding files; the other parts: the
project's packages), nothing that names a host path, a PID namespace of its own per job; where
namespaces are refused, a user of its own that reads none of the course's files. Each attack
has a negative control: the same code in a plain process reaches what it must not."""

import json
import site
import sys

import pytest
from graders import (
    blank_submission,
    course,
    edit,
    grade,
    graded_in_a_container,
    reference_submission,
    said,
    scores,
    stub,
    user_mode_refused,
)

from classroom import checks, project, sandbox

pytestmark = pytest.mark.slow  # graded in sandboxes: not in make test-fast

LOOK = '''

def _what_i_see():
    import ctypes, os, sys
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
    userns = ctypes.CDLL(None, use_errno=True).unshare(0x10000000)     # CLONE_NEWUSER
    status = [line for line in text("/proc/self/status").splitlines()
              if line.startswith(("Cap", "NoNewPrivs"))]
    seen = "".join(text(f"/proc/{p}/cmdline") + text(f"/proc/{p}/environ")
                   for p in os.listdir("/proc") if p.isdigit())
    here = files("/project")
    if "gpt.py" in here:         # the whole student version: what it must not hold, and gpt.py
        here = [f for f in here if f == "gpt.py" or f.startswith(("tests/", "classroom/"))
                or "TEACHERS" in f]
    return {"site": sorted(os.listdir("/site")), "project": here,
            "root": sorted(os.listdir("/")), "writable root": os.access("/", os.W_OK),
            "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "host paths": [p for p in HOST if p in seen], "path": sys.path,
            "status": status, "user namespace": userns}
'''


@pytest.fixture(autouse=True)
def everything_shown(monkeypatch):
    """What a job reports here is longer than a student is shown of a message."""
    monkeypatch.setattr(checks, "SHOWN", 100_000)


def seen(results):
    message = next(m for m in (" ".join(r.lines()) for r in results) if "SEEN " in m)
    return json.loads(message.split("SEEN ", 1)[1].rsplit("}", 1)[0] + "}")


def host_paths():
    """Paths of this machine a student must not learn: the repository, the environment, Python."""
    return sorted({str(project.ROOT), sys.prefix, sys.base_prefix, *site.getsitepackages()})


def looking(submission, file, function):
    edit(submission, file, stub(function),
         "raise ValueError('SEEN ' + __import__('json').dumps(_what_i_see()))")
    path = submission / file
    path.write_text(path.read_text() + LOOK.replace("HOST", repr(host_paths())))


@pytest.mark.parametrize("torch_free", [True, False], ids=["exercise-3", "exercise-2"])
def test_a_job_sees_its_allow_list_and_nothing_else(torch_free, tmp_path):
    submission = blank_submission(tmp_path / "submission")
    file, function, part = (("numpy_speculative.py", "forward", "3a") if torch_free else
                            ("speculative.py", "expected_tokens_per_pass", "2a"))
    looking(submission, file, function)
    view = seen(grade(submission, [part])[0])
    assert view["site"] == sorted(sandbox.package_entries("numpy" if torch_free else "torch"))
    assert any(name.startswith("torch") for name in view["site"]) != torch_free
    assert not any("editable" in name for name in view["site"])
    if torch_free:      # the worker and the student's file with the window rule, nothing else
        assert view["project"] == sorted(project.TORCH_FREE_FILES), view["project"]
    else:               # the student version: the worker's files of classroom/ alone
        assert view["project"] == sorted(["gpt.py", *project.WORKER_FILES]), view["project"]
    assert not view["writable root"]                # nothing a job writes but in /tmp
    assert view["pids"] == [1, 2] or len(view["pids"]) <= 3, view["pids"]   # bwrap's and its
    assert view["host paths"] == []                 # no command line or variable names one
    assert view["user namespace"] == -1             # no new one: no capability to be had there
    assert sorted(view["status"]) == ["CapAmb:\t0000000000000000", "CapBnd:\t0000000000000000",
                                      "CapEff:\t0000000000000000", "CapInh:\t0000000000000000",
                                      "CapPrm:\t0000000000000000", "NoNewPrivs:\t1"], view["status"]
    minor = sys.version_info.minor
    assert set(view["path"]) <= {"/project", "/site", f"/python/lib/python3{minor}.zip",
                                 f"/python/lib/python3.{minor}",
                                 f"/python/lib/python3.{minor}/lib-dynload"}, view["path"]
    assert set(view["root"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc",
                                 "dev", "proc", "tmp", "python", "site", "project"}, view["root"]


def test_the_control_sees_the_machine(tmp_path):
    # The control: the same look from a plain process names the grader's own paths.
    submission = blank_submission(tmp_path / "submission")
    looking(submission, "speculative.py", "expected_tokens_per_pass")
    (submission / "speculative.py").write_text((submission / "speculative.py").read_text()
                                               .replace('os.listdir("/site")', '[]')
                                               .replace('files("/project")', '[]'))
    view = seen(grade(submission, ["2a"], how="plain")[0])
    assert view["host paths"] and len(view["pids"]) > 10


# ----------------------------------------------------------------------------------------------
# Exercise 3: torch by any route


ROUTES = {
    # the finder that blocks torch in a student's own check, removed
    "import": "import sys\n    sys.meta_path[:] = [f for f in sys.meta_path if "
              "type(f).__name__ != 'Blocker']\n    import torch",
    # the environment's own folder named by path
    "by path": "import sys\n    sys.meta_path[:] = [f for f in sys.meta_path if "
               "type(f).__name__ != 'Blocker']\n    sys.path += SITE\n    import torch",
}


def taking_torch(tmp_path, route):
    submission = reference_submission(tmp_path / "submission")
    take = ROUTES[route].replace("SITE", repr(site.getsitepackages()))
    edit(submission, "numpy_speculative.py", '    """Logits (T, V) for the new tokens',
         '    ' + take + '\n    """Logits (T, V) for the new tokens')
    return submission


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("how", ["bwrap", "plain"], ids=["grader", "negative-control"])
def test_exercise_3_cannot_reach_torch(route, how, tmp_path):
    # The forward pass is the reference's, but it first takes torch: it scores only where torch
    # can be had (the control: plain processes, where a finder in-process was all that stood).
    results, _ = grade(taking_torch(tmp_path, route), ["3a"], how=how)
    forward = [r for r in results if r.check.name.startswith("forward")]
    if how == "plain":
        assert all(r.status == "pass" for r in forward), said(forward)
        return
    assert all(r.status == "error" for r in forward), said(forward)
    assert all("NumPy alone" in " ".join(r.lines()) or "No module named 'torch'" in
               " ".join(r.lines()) for r in forward), said(forward)


def test_as_users_of_their_own_jobs_read_no_course_file_and_exercise_3_has_no_torch(tmp_path):
    # Gradescope's container: the jobs run as users of their own, exercise 3's with the base
    # interpreter and a copy of NumPy alone on its path: torch by name fails there. The course
    # (the grader's copy of this repository, with the references, the hidden seed and the
    # solutions) reads as nothing, and the jobs write nowhere outside /tmp.
    if user_mode_refused():
        pytest.skip(user_mode_refused())
    tmp_path.chmod(0o755)
    submission = taking_torch(tmp_path, "import")
    grader = course(tmp_path / "course")
    secrets = [str(grader / "classroom" / "references.py"), str(grader / "numpy_speculative.py")]
    edit(submission, "speculative.py", '    """1 + alpha + ... + alpha^k', '    import os\n    def readable(p):\n        try:'
         '\n            return bool(open(p).read(1))\n        except OSError:\n'
         '            return False\n    raise ValueError("SEEN " + str([readable(p) for p in '
         f'{secrets!r}] + [os.access({str(tmp_path)!r}, os.W_OK), os.getuid() == 0]))\n'
         '    """1 + alpha + ... + alpha^k')
    # The two parts that look (2a: the course's files; 3a: torch), each graded alone: the whole
    # grade ran every other part's checks too, a minute and a half for nothing more.
    outputs = {}
    for part in ("2a", "3a"):
        out = tmp_path / f"results-{part}.json"
        done, data = graded_in_a_container(grader, submission, out, "--part", part)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.update({t["name"].split(" ", 1)[1]: t["output"] for t in data["tests"]})
    assert "SEEN [False, False, False, False]" in outputs["tokens_per_pass_is_the_sum"], outputs
    forward = [outputs[name] for name in outputs if name.startswith("forward")]
    assert forward and all("torch" in said for said in forward), forward


# ----------------------------------------------------------------------------------------------
# Reaching other processes: the grader, another part's job


REACH = '''

def _reachable():
    import os
    found = []
    for pid in sorted({*range(1, 4000), os.getppid()} - {0, os.getpid()}):
        try:
            os.kill(pid, 0)                  # a signal it may send (0: none is sent)
            found.append(pid)
        except OSError:
            pass
    return found
'''


@pytest.mark.parametrize("how", ["bwrap", "plain"], ids=["grader", "negative-control"])
def test_a_job_reaches_no_process_but_its_own(how, tmp_path):
    # Two parts side by side: another job runs at the same time. In bubblewrap a job sees its
    # own PID namespace: bubblewrap's init (which it cannot trace) and itself. The control: a
    # plain process signals the machine's.
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("expected_tokens_per_pass"),
         "raise ValueError('SEEN ' + __import__('json').dumps({'pids': _reachable()}))")
    path = submission / "speculative.py"
    path.write_text(path.read_text() + REACH)
    results, _ = grade(submission, ["2a", "2c"], how=how)
    reached = seen([r for r in results if r.check.part == "2a"])["pids"]
    if how == "bwrap":
        assert reached == [1] or reached == [], reached       # bubblewrap's init at most
    else:
        assert len(reached) > 5, reached


# ----------------------------------------------------------------------------------------------
# Output: a pipe the grader drains, not a file it keeps


def test_a_worker_that_floods_its_output_is_drained(tmp_path):
    # 40 MB printed at the job's first call (over the 16 MB a job may write into a file): read
    # and dropped, and the function goes on. (Once per job, not at each of the checks' 400
    # calls: 16 GB through the pipe took 20 s and proved nothing more.)
    submission = reference_submission(tmp_path / "submission")
    edit(submission, "speculative.py", '    """1 + alpha + ... + alpha^k',
         '    import sys\n    if not hasattr(sys, "_flooded"):\n        sys._flooded = True\n'
         '        for _ in range(400):\n            sys.stdout.write("x" * 100_000)\n'
         '    """1 + alpha + ... + alpha^k')
    results, _ = grade(submission, ["2a"])
    assert scores(results) == {"2a": 3}, said(results)     # 40 MB printed: read and dropped


def test_a_worker_that_dies_says_its_last_line(tmp_path):
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("expected_tokens_per_pass"),
         "import os; print('my last words', flush=True); os._exit(3)")
    results, _ = grade(submission, ["2a"])
    assert all(r.status == "crashed" for r in results)
    assert all("my last words" in r.lines()[0] for r in results), [r.lines() for r in results]
