"""The hostile zoo: submissions that try to take points they did not earn (issues 20 and 32),
each of which must score exactly what its honest parts earn, leave nothing on the machine and
leak nothing into what a student sees. Most start from the blank student version, so that every
point they get would be a stolen one; each attack has a negative control that shows it works
where the grader's defence is switched off. The sandbox's modes: bubblewrap (the default here),
users of their own (CLASSROOM_SANDBOX=user), and the same where user namespaces and cgroups are
refused, as in a Docker container (tests/container.py), run as a separate grade."""

import json
import os
import signal
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from classroom import checks, parts, regions, runner, sandbox, submissions
from classroom.submissions import ROOT, copy_project, workspace

pytestmark = pytest.mark.slow  # attacks graded in every sandbox mode: not in make test-fast

HIDDEN = 271828


def blank_submission(folder):
    """The student version of every student file: nothing earns a point."""
    folder = Path(folder)
    for name in parts.STUDENT_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(regions.student_version((ROOT / name).read_text(),
                                                           parts.message))
    return folder


def edit(folder, file, old, new):
    path = Path(folder) / file
    text = path.read_text()
    assert text.count(old) >= 1, f"{file}: {old[:60]!r} not found"
    path.write_text(text.replace(old, new, 1))


def stub(function):
    """The line that stands for `function`'s solution in the student version."""
    return f"raise NotImplementedError({parts.message(function)!r})"


def run(tmp_path, submission, part, seeds=(0,)):
    """Grade the checks of `part` (a part, or a tuple of them), hidden ones included."""
    ws, missing = workspace(submission, tmp_path / "scratch")
    chosen = [c for p in ((part,) if isinstance(part, str) else part)
              for c in runner.select(part=p, hidden=True)]
    results = runner.run_checks(ws, chosen, list(seeds), missing=missing)
    return results, sum(r.score for r in results)


def test_the_sandbox_works_here():
    # The rest of this file is about the sandbox: a machine that refuses it fails here, once,
    # and skips the sandboxed cases below.
    assert sandbox.isolation(Path("/tmp"), grading=False) == "bwrap", \
        sandbox._isolation.get("why")


ISOLATIONS = ["bwrap", "user", "plain"]
IDS = ["grader", "grader-as-users-of-their-own", "negative-control"]


def use_sandbox(isolation, monkeypatch):
    """The grader as it is (bubblewrap), as it is where namespaces are refused and it runs as
    root (each check a user of its own, forced by CLASSROOM_SANDBOX=user), or the negative
    control: workers as plain processes, what the grader does where neither is possible and
    the teacher said --unsafe. Returns whether the workers are isolated."""
    if isolation == "plain":                    # (and no cgroups: plain processes only)
        monkeypatch.setattr(sandbox, "_isolation", {"how": None, "why": "a test's control",
                                                    "consent": True})
        monkeypatch.setattr(sandbox, "_cgroups", {"mounts": {}})
        return False
    monkeypatch.setattr(sandbox, "_isolation", {})
    if isolation == "user":
        monkeypatch.setenv("CLASSROOM_SANDBOX", "user")
    sandbox.isolation(Path("/tmp"), grading=False)
    if sandbox._isolation["how"] != isolation:
        pytest.skip(f"no {isolation} isolation here: {sandbox._isolation['why']}")
    return True


def test_without_namespaces_or_root_the_grader_refuses_in_one_line(monkeypatch, capsys,
                                                                   tmp_path):
    # Neither isolation possible: no grade, one line, unless the teacher says --unsafe; then
    # plain processes, and one warning line. The control: with a sandbox, the grade starts.
    from classroom.__main__ import main
    monkeypatch.setattr(sandbox, "_isolation", {})
    monkeypatch.setenv("CLASSROOM_SANDBOX", "user")           # as if namespaces were refused
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(sandbox.Refused, match="grade anyway with --unsafe") as refused:
        main(["grade", str(ROOT), "--out", str(tmp_path / "r.json"), "--part", "2a"])
    assert "\n" not in str(refused.value) and not (tmp_path / "r.json").exists()
    sandbox.allow_unsafe()                                     # --unsafe
    assert sandbox.isolation(Path("/tmp"), grading=True) is None
    sandbox.isolation(Path("/tmp"), grading=True)              # said once, not per zygote
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: the students' code runs without "
                                                   "isolation") and "not root" in lines[0], lines
    monkeypatch.setattr(sandbox, "_isolation", {})             # the control: a sandbox here
    monkeypatch.undo()
    assert sandbox.isolation(Path("/tmp"), grading=True) in ("bwrap", "user")


# ----------------------------------------------------------------------------------------------
# What the student's code can see


SNOOP = '''

def _what_i_see():
    import os, sys
    def readable(p):
        try:
            return bool(open(p).read(1))
        except OSError:
            return False
    here = os.path.abspath(sys.executable)
    ups = []
    while os.path.dirname(here) != here:
        here = os.path.dirname(here)
        ups.append(readable(os.path.join(here, "speculative.py")))
    return {"reference": readable(os.path.join(REFERENCE, "numpy_speculative.py")),
            "above the interpreter": any(ups), "seed": os.environ.get("CLASSROOM_SEED"),
            "tmp": sorted(os.listdir("/tmp"))[:2], "autograder": os.path.exists("/autograder"),
            "grader's process": any(b"pytest" in open(f"/proc/{p}/cmdline", "rb").read()
                                    for p in (os.listdir("/proc") if os.path.isdir("/proc")
                                              else []) if p.isdigit()),
            "checks": os.path.exists(os.path.join(os.getcwd(), "classroom", "checks.py")),
            "hidden checks": readable(os.path.join(os.getcwd(), "classroom", "checks.py")) and
                             "HIDDEN_SEED" in open(
                                 os.path.join(os.getcwd(), "classroom", "checks.py")).read()}
'''


@pytest.mark.parametrize("isolation", ISOLATIONS, ids=IDS)
def test_the_students_code_sees_no_secret(isolation, tmp_path, monkeypatch):
    sandboxed = use_sandbox(isolation, monkeypatch)
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("expected_tokens_per_pass"),
         "raise ValueError('SEEN ' + __import__('json').dumps(_what_i_see()))")
    (submission / "speculative.py").write_text((submission / "speculative.py").read_text()
                                               + SNOOP.replace("REFERENCE", repr(str(ROOT))))
    monkeypatch.setenv("CLASSROOM_SEED", "4242")
    results, _ = run(tmp_path, submission, "2a")
    message = " ".join(results[0].lines())
    seen = json.loads(message.split("SEEN ", 1)[1].rsplit("}", 1)[0] + "}")
    if not sandboxed:                 # the control: a plain process sees the grader's files
        assert seen["reference"] and seen["grader's process"]
        return
    secrets = {"reference": False, "above the interpreter": False, "seed": None,
               "autograder": False, "checks": False, "hidden checks": False}
    if isolation == "user":     # chrooted: no /proc, a /tmp of its own: the way to the copy
        venv = Path(sys.prefix).resolve()     # (and to the virtual environment, in a clone in
        tmp = [venv.relative_to("/tmp").parts[0]] if venv.is_relative_to("/tmp") else []  # /tmp)
        assert all(name.startswith("classroom-copy-") or name in tmp
                   for name in seen.pop("tmp")), seen
        assert seen == {**secrets, "grader's process": False}, seen
        return
    assert seen == {**secrets, "tmp": [], "grader's process": False}, seen   # /python, /site


# ----------------------------------------------------------------------------------------------
# Forging the result


FORGE = '''
import json as _json, os as _os
_forged = _json.dumps({"score": 44, "tests": [], "forged": True})
for _path in (OUT, "/autograder/results/results.json", "results.json", PROOF):
    try:                                    # (no makedirs: the control runs as the tests' user)
        open(_path, "w").write(_forged)
    except OSError:
        pass
_json.dumps = lambda *a, **k: _forged        # and every JSON this process writes
'''


@pytest.mark.parametrize("isolation", ISOLATIONS, ids=IDS)
def test_a_forged_results_json_changes_nothing(isolation, tmp_path, monkeypatch):
    sandboxed = use_sandbox(isolation, monkeypatch)
    submission = blank_submission(tmp_path / "submission")
    out, proof = tmp_path / "results.json", tmp_path / "proof-the-attack-ran"
    edit(submission, "speculative.py", "\nimport math\n", "\nimport math\n" + FORGE.replace(
        "OUT", repr(str(out))).replace("PROOF", repr(str(proof))))
    select = runner.select
    monkeypatch.setattr(runner, "select", lambda **kw: select(part="2a", hidden=True))
    from classroom.__main__ import main
    assert main(["grade", str(submission), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["score"] == 0 and "forged" not in data and len(data["tests"]) == 2
    assert proof.exists() != sandboxed        # the control: unsandboxed, the attack wrote files


# ----------------------------------------------------------------------------------------------
# Copying the reference


STEAL = '''

def _reference():
    import importlib.util, os, sys
    places = []
    for start in (sys.executable, __file__, os.getcwd()):
        p = os.path.abspath(start)
        while os.path.dirname(p) != p:
            places.append(p)
            p = os.path.dirname(p)
    for place in places + ["/autograder/source", EXTRA]:
        path = os.path.join(place, "speculative.py")
        try:
            text = open(path).read()
        except OSError:
            continue
        if "BEGIN SOLUTION" in text and "def _reference" not in text:   # not this file
            spec = importlib.util.spec_from_file_location("_stolen", path)
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, place)
            spec.loader.exec_module(module)
            return module
    raise NotImplementedError("nothing to copy")
'''


def reference_above_the_interpreter():
    here = Path(os.path.abspath(os.sys.executable))
    return any("BEGIN SOLUTION" in (p / "speculative.py").read_text()
               for p in here.parents if (p / "speculative.py").is_file())


@pytest.mark.parametrize("where", ["sys.executable walk-up", "/autograder/source",
                                   "the grader's repository"])
@pytest.mark.parametrize("isolation", ISOLATIONS, ids=IDS)
def test_the_reference_cannot_be_copied(where, isolation, tmp_path, monkeypatch):
    if isolation == "plain" and where == "sys.executable walk-up" and \
            not reference_above_the_interpreter():
        pytest.skip("this interpreter's virtual environment is not inside a reference")
    sandboxed = use_sandbox(isolation, monkeypatch)
    extra = "/nowhere"
    if where == "/autograder/source":             # a copy where Gradescope keeps the grader
        extra = str(copy_project(tmp_path / "autograder" / "source"))
    elif where == "the grader's repository":
        extra = str(ROOT)
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("expected_tokens_per_pass"),
         "return _reference().expected_tokens_per_pass(alpha, k)")
    (submission / "speculative.py").write_text((submission / "speculative.py").read_text()
                                               + STEAL.replace("EXTRA", repr(extra)))
    results, score = run(tmp_path, submission, "2a")
    assert score == (0 if sandboxed else 3), [r.lines() for r in results]
    if sandboxed:                                       # it looked, and found nothing
        assert all(r.status == "not started" and "nothing to copy" in " ".join(r.lines())
                   for r in results), [r.lines() for r in results]


def test_honest_work_still_scores_as_the_workers_user(tmp_path, monkeypatch):
    # The other side of the fallback: the reference's own files, graded with the workers as a
    # user of their own, earn every point (callbacks, stand-ins, exercise 2's imports included)
    use_sandbox("user", monkeypatch)
    chosen = ("1b", "2b", "3b")
    results, score = run(tmp_path, reference_submission(tmp_path / "submission"), chosen,
                         seeds=(0, HIDDEN))
    assert score == sum(c.points for p in chosen for c in runner.select(part=p, hidden=True)), \
        [(r.check.name, r.lines()) for r in results]


READ_EXPECTED = '''import glob as _glob, os as _os
    for _path in _glob.glob("/tmp/classroom-*/seed*/logits.npz") + _glob.glob(
            _os.path.join(_os.path.dirname(_os.getcwd()), "seed*", "logits.npz")):
        with np.load(_path) as _f:
            if list(_f["tokens"]) == list(tokens):
                _name = "draft" if model.n_layer == 1 and model.config["n_embd"] == 8 else "target"
                logits = _f[_name]
                break
    else:
        raise NotImplementedError("no expected values to read")'''


@pytest.mark.parametrize("isolation", ISOLATIONS, ids=IDS)
def test_the_expected_values_cannot_be_read(isolation, tmp_path, monkeypatch):
    sandboxed = use_sandbox(isolation, monkeypatch)
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", stub("forward"), READ_EXPECTED)
    results, _ = run(tmp_path, submission, "3a", seeds=(0, HIDDEN))
    matches = next(r for r in results if r.check.name == "forward_matches_torch")
    assert (matches.status == "pass") != sandboxed, matches.lines()
    if sandboxed:                                       # it looked, and found nothing
        assert "no expected values to read" in " ".join(matches.lines())


ORACLE = """from classroom.checks import lookup_oracle   # the checks' own enumeration
    return lookup_oracle(seq, k, longest, shortest)"""


@pytest.mark.parametrize("defence", [True, False], ids=["grader", "negative-control"])
def test_the_checks_references_are_not_in_the_sandbox(defence, tmp_path, monkeypatch):
    # Part 6a answered by the independent reference its checks compare with: the checks stay
    # with the grader, so the import fails in the sandbox (the control: the same sandbox with
    # every file of the student version's classroom/ in it, where it earns every point).
    use_sandbox("bwrap", monkeypatch)
    if not defence:
        monkeypatch.setattr(sandbox, "in_sandbox", lambda relative: not (
            submissions.teachers_only(relative) or relative.endswith(".ipynb")))
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "beyond/ngram.py", stub("prompt_lookup"), ORACLE)
    results, score = run(tmp_path, submission, "6a", seeds=(0, HIDDEN))
    full = sum(c.points for c in runner.select(part="6a", hidden=True))
    assert score == (0 if defence else full), [(r.check.name, r.lines()) for r in results]
    if defence:
        assert all("classroom.checks" in " ".join(r.lines()) for r in results), \
            [r.lines() for r in results]


# ----------------------------------------------------------------------------------------------
# Not speculating at all, with a made-up count


PLAIN_GREEDY = '''seq = generate(target, prompt, max_new_tokens)
    same = target.config == draft.config
    return seq, (-(-max_new_tokens // (k + 1)) if same else max_new_tokens)'''


def test_plain_greedy_decoding_with_a_made_up_count_earns_nothing(tmp_path):
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", stub("speculative_greedy"), PLAIN_GREEDY)
    results, score = run(tmp_path, submission, "3b", seeds=(0, HIDDEN))
    assert score == 0, [(r.check.name, r.status) for r in results]
    # Its output is right (the control: it fails on what the grader counts, not on the text)
    assert all(r.status == "fail" for r in results)
    assert "counted by the grader" in " ".join(line for r in results for line in r.lines())


PLAIN_SAMPLING = '''return generate(target, prompt, max_new_tokens, temperature=temperature, top_k=top_k,
                    rng=rng)'''


def test_plain_sampling_earns_nothing(tmp_path):
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", stub("speculative_sample"), PLAIN_SAMPLING)
    results, score = run(tmp_path, submission, "3c")
    assert score == 0, [(r.check.name, r.status, r.lines()) for r in results]
    sampling = [r for r in results if r.check.name.startswith("sampling")]
    assert sampling and all(r.status == "fail" for r in sampling)
    assert "counted by the grader" in " ".join(line for r in sampling for line in r.lines())


# ----------------------------------------------------------------------------------------------
# Hard-coding what the public checks show


def test_a_forward_pass_that_hard_codes_two_heads_fails_the_hidden_seed(tmp_path):
    submission = blank_submission(tmp_path / "submission")
    (submission / "numpy_speculative.py").write_text((ROOT / "numpy_speculative.py").read_text())
    edit(submission, "numpy_speculative.py", "b, model.n_head,", "b, 2,")
    results, score = run(tmp_path, submission, "3a", seeds=(0, HIDDEN))
    assert score == 0
    assert all(r.outcomes[0]["status"] == "pass" for r in results)        # public: all pass


# ----------------------------------------------------------------------------------------------
# A simulation that simulates nothing (issue 42): the closed form plus noise of the right size
# drawn from the given rng, and the standard error from the formula, scored 3/3 on 2b. Honest
# simulations, whichever way they draw, keep every point.


FORMULA_PLUS_NOISE = '''mean = (1 - alpha ** (k + 1)) / (1 - alpha)                # no round simulated
    sd = np.sqrt(sum((2 * i + 1) * alpha ** i for i in range(k + 1)) - mean ** 2)
    return float(mean + rng.normal() * sd / np.sqrt(rounds)), float(sd / np.sqrt(rounds))'''
PER_GUESS = '''tokens = []
    for _ in range(rounds):
        n = 1                                       # the target's own token
        while n <= k and rng.random() < alpha:      # guess n kept, until the first rejection
            n += 1
        tokens.append(n)
    tokens = np.array(tokens)
    return float(tokens.mean()), float(tokens.std(ddof=1) / np.sqrt(rounds))'''
PER_ROUND = '''tokens = np.minimum(rng.geometric(1 - alpha, rounds), k + 1)  # up to the first rejection
    return float(tokens.mean()), float(tokens.std(ddof=1) / np.sqrt(rounds))'''


@pytest.mark.parametrize("simulation, defence, points", [
    (FORMULA_PLUS_NOISE, True, 0),
    (FORMULA_PLUS_NOISE, False, 3),       # the control: the checks without simulates_rounds
    (PER_GUESS, True, 3), (PER_ROUND, True, 3),
    (None, True, 3),                      # the reference: vectorised (its s.e. of 1 round: nan)
], ids=["formula-plus-noise", "negative-control", "per-guess", "per-round-geometric",
        "reference"])
def test_a_simulation_that_is_the_formula_plus_noise_earns_nothing(simulation, defence, points,
                                                                   tmp_path, monkeypatch):
    if not defence:
        monkeypatch.setattr(checks, "simulates_rounds", lambda *args, **kwargs: None)
    if simulation is None:
        submission = reference_submission(tmp_path / "submission")
    else:
        submission = blank_submission(tmp_path / "submission")
        edit(submission, "exercises/ex2_derive.py", stub("simulate"), simulation)
    results, score = run(tmp_path, submission, "2b", seeds=(0, HIDDEN))
    lines = [(r.check.name, r.status, r.lines()) for r in results]
    assert score == points, lines
    if points == 0:
        assert all("a whole number of tokens" in " ".join(r.lines()) for r in results), lines


# ----------------------------------------------------------------------------------------------
# Processes that outlive their check


ESCAPE = '''
import os as _os, time as _time
if _os.fork() == 0:                      # a daemon: its own session, out of the check's group
    _os.setsid()
    if _os.fork() == 0:
        try:
            _os.execvp("sleep", ["sleep", "MARK"])
        except OSError:              # no programs where it runs (a chroot's view): Python sleeps
            __import__("ctypes").CDLL(None).prctl(15, b"MARK", 0, 0, 0)    # PR_SET_NAME
            _time.sleep(MARK)
    _os._exit(0)
_time.sleep(1)                           # (while the test sees it start)
'''


def sleepers(mark):
    """The live processes whose command line or name holds `mark` (a killed one may stay a
    zombie for a moment, until the machine's init reaps it: not counted)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in ((proc / "cmdline").read_bytes().decode()
                                                + (proc / "comm").read_text()) and \
                    (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("isolation", ISOLATIONS, ids=IDS)
def test_a_daemon_forked_at_import_ends_with_its_check(isolation, tmp_path, monkeypatch):
    # A daemon leaves its check's process group: its check's cgroups, its PID namespace (in
    # bubblewrap) or its user (as users of their own: sandbox.end_user) end it all the same.
    sandboxed = use_sandbox(isolation, monkeypatch)
    mark = f"{time.time() % 1000:.6f}"          # a sleep no other process runs
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", "\nimport math\n", "\nimport math\n" +
         ESCAPE.replace("MARK", str(30 + float(mark) / 1e4)))
    seen, grading = [], threading.Event()

    def watch():                                        # the daemon did start, meanwhile
        while not grading.is_set():
            seen.extend(sleepers(str(30 + float(mark) / 1e4)))
            time.sleep(0.05)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run(tmp_path, submission, "2a")
        grading.set()
        watcher.join()
        time.sleep(0.5)
        assert seen
        assert bool(sleepers(str(30 + float(mark) / 1e4))) != sandboxed
    finally:
        grading.set()
        for pid in sleepers(str(30 + float(mark) / 1e4)):   # the control's daemons: ours
            os.kill(pid, signal.SIGKILL)


# ----------------------------------------------------------------------------------------------
# Parts graded apart


def reference_submission(folder):
    return copy_project(folder)


@pytest.mark.parametrize("references", [True, False], ids=["grader", "negative-control"])
def test_a_bug_in_one_part_costs_that_part_only(references, tmp_path, monkeypatch):
    # greedy_verdict (1a) is wrong; replay (1b) calls it. The grader gives replay the reference.
    if not references:
        monkeypatch.setattr(runner, "references", lambda part: {})
    submission = reference_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", "    return kept, target_choices[kept]",
         "    return kept, target_choices[kept - 1]")
    results, _ = run(tmp_path, submission, ("1a", "1b", "3b"))
    by_part = {p.id: sum(r.score for r in results if r.check.part == p.id) for p in parts.PARTS}
    assert by_part["1a"] < parts.BY_ID["1a"].points
    assert (by_part["1b"] == parts.BY_ID["1b"].points) == references
    assert by_part["3b"] == parts.BY_ID["3b"].points + 2 or not references


def test_a_forward_pass_bug_costs_3a_only(tmp_path):
    submission = reference_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", "variance = x.var(-1, keepdims=True)",
         "variance = x.std(-1, keepdims=True)")
    results, _ = run(tmp_path, submission, ("3a", "3b", "3c"))
    by_part = {p.id: sum(r.score for r in results if r.check.part == p.id) for p in parts.PARTS}
    assert by_part["3a"] == 0
    assert by_part["3b"] == 6 + 2 and by_part["3c"] == 6 + 1


# ----------------------------------------------------------------------------------------------
# Making the grader work: calls back into the grader count against the check's time limit


def busy_for(seconds):
    """Python work in the grader: what a reference given a huge input would do."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(10))


@pytest.mark.parametrize("guarded", [True, False], ids=["grader", "negative-control"])
def test_a_call_back_into_the_grader_stops_at_the_checks_deadline(guarded, monkeypatch):
    # The worker's side calls back a function of the grader that would work for 6 s; the
    # check's deadline is 1 s away: the grader stops there. The control, without the guard
    # (wire.within), works to the end.
    import contextlib
    import socket

    from classroom import wire
    if not guarded:
        monkeypatch.setattr(wire, "within", lambda deadline: contextlib.nullcontext())
    ours, theirs = socket.socketpair()

    class Student:
        def call(self, function):
            return function()

    def serve():
        worker = wire.Peer(theirs, lends_anything=True)
        worker.lend(Student())
        try:
            worker.serve_forever()
        except (wire.Gone, OSError):                # the grader hung up in the middle of a call
            pass
    thread = threading.Thread(target=serve)
    thread.start()
    try:
        start = time.monotonic()
        grader = wire.Peer(ours, lends_anything=False, deadline=start + 1)
        with pytest.raises(wire.Timeout):
            wire.Remote(grader, 1).call(wire.Exposed(lambda: busy_for(6)))
        elapsed = time.monotonic() - start
    finally:
        ours.close()
        thread.join(10)
        theirs.close()
    assert (elapsed < 3) if guarded else (elapsed >= 6), elapsed


HUGE_POWERS = '''while True:  # the grader's expected_tokens_per_pass: one long step of C each
        try:
            expected_tokens_per_pass(3, 25_000_000)
        except Exception:
            pass'''


def test_endless_expensive_calls_to_a_reference_are_cut_at_the_time_limit(tmp_path, monkeypatch):
    # 2c's expected_speedup calls (the grader's) 2a in a loop, each call a power that takes
    # seconds in the grader and that no profile hook can stop: the grader refuses whole numbers
    # beyond what the exercises use (runner.bounded), so the check ends at its limit. The
    # control, without the bound, waits for a whole power past the limit.
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("expected_speedup"), HUGE_POWERS)
    ws, _ = workspace(submission, tmp_path / "scratch")
    timings = {}
    for bound in (True, False):
        if not bound:
            monkeypatch.setattr(runner, "bounded", lambda reference: reference)
        start = time.monotonic()
        results = runner.run_checks(ws, runner.select(part="2c"), [0], timeout=1)
        timings[bound] = time.monotonic() - start
        assert all(r.status == "timeout" for r in results), [r.lines() for r in results]
    assert timings[False] - timings[True] > 3, timings


# ----------------------------------------------------------------------------------------------
# Issue 32's attacks, all in one submission, graded in every mode the machine offers. Each
# function holds one attack; the parts it does not touch are blank. In the defended modes every
# attacked part scores what its honest code earns (0 but 5a's CPU timing, 2 points), nothing is
# left on the machine and nothing secret shows; the negative control, plain processes with the
# grader's other defences switched off too, shows each attack working.

SEED = 4321         # a small hidden seed, so that the control's search finds it in no time

ATTACKS = {
    # The double-chroot escape (root in a namespace, confined by chroot alone): then read the
    # reference, and write on the host.
    ("speculative.py", "expected_tokens_per_pass"): '''import os
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
    try:
        stolen = open(REFERENCE + "/speculative.py").read()
        open(PROOF + "-escaped", "w").write("written on the host")
    except OSError as e:
        raise NotImplementedError(f"nothing to copy: {e}")
    assert "BEGIN SOLUTION" in stolen
    return sum(alpha ** i for i in range(k + 1))''',
    # The hidden seed searched back from the generator the check hands over, and the inputs a
    # run was given, carried into visible feedback through /tmp (a later check's run reads them).
    ("exercises/ex2_derive.py", "simulate"): '''import os, time
    state, found = rng.bit_generator.state["state"], ""
    for seed in range(11, 5000):                 # (the checks' own 7 to 10 are public)
        if np.random.default_rng(seed).bit_generator.state["state"] == state:
            found = f"hidden seed {seed}; "
            open("/tmp/MARK-seed", "w").write(found)
    known = "".join(open(f).read() for f in ("/tmp/MARK-seed", "/tmp/MARK-inputs")
                    if os.path.exists(f))
    open("/tmp/MARK-inputs", "a").write(f"alpha {alpha!r}; ")
    if known or found:
        raise ValueError("LEAK " + found + known)
    for _ in range(20):
        if os.path.exists("/tmp/MARK-seed"):
            raise ValueError("LEAK " + open("/tmp/MARK-seed").read())
        time.sleep(0.1)
    raise NotImplementedError("no seed found")''',
    # Files left where they outlive the grade: /dev/shm and /tmp.
    ("speculative.py", "expected_speedup"): '''with open("/dev/shm/MARK-shm", "wb") as f:
        f.write(bytes(10 << 20))
    open("/tmp/MARK-tmp", "w").write("left for the next student")
    raise NotImplementedError("files left")''',
    # 3c: a verify that never keeps a guess and samples every token from the target: the
    # right distribution, no speed-up.
    ("numpy_speculative.py", "verify"): '''return 0, sample(target_probs[0], rng)''',
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
            if "BEGIN SOLUTION" in stolen and "MARK" not in stolen:
                if (k + 1) / (k * c + verify_cost) <= 1:
                    return float("nan")
                low, high = 0.0, 1.0
                for _ in range(200):
                    mid = (low + high) / 2
                    tokens = sum(mid ** i for i in range(k + 1))
                    low, high = (mid, high) if tokens / (k * c + verify_cost) < 1 else (low, mid)
                return high
    raise NotImplementedError("no other submission seen")''',
    # 60 MB of output, for results.json and stdout.
    ("numpy_speculative.py", "replay"): '''return "x" * 60_000_000''',
}
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


def with_timer(folder):
    """folder's exercises/ex5_gpu.py with TIMER for its timer."""
    path = Path(folder) / "exercises" / "ex5_gpu.py"
    text = path.read_text()
    start = text.index("def timer(device):")
    end = text.index("\ndef ", start + 1)
    path.write_text(text[:start] + TIMER.lstrip() + text[end:])
    return folder


def hostile_submission(folder, mark, proof):
    folder = blank_submission(folder)
    for (file, function), body in ATTACKS.items():
        edit(folder, file, stub(function), body.replace("MARK", mark).replace(
            "REFERENCE", repr(str(ROOT))).replace("PROOF", repr(str(proof))))
    return with_timer(folder)


def decoy(tmp_path):
    """Another grade's submission, as the grader holds it (a private copy), on the command line
    of a running process (what /proc shows)."""
    from classroom.submissions import private_copy
    folder = private_copy(copy_project(tmp_path / "classmate"), tmp_path / "classmate-copy")
    import subprocess
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(folder)])


def leftovers(mark):
    found = [str(p) for top in ("/tmp", "/dev/shm", "/var/tmp") for p in Path(top).glob(f"{mark}*")]
    return found + [f"process {pid}" for pid in sleepers(mark)]


def clean(mark):
    import shutil
    for path in leftovers(mark):
        if not path.startswith("process"):
            shutil.rmtree(path, ignore_errors=True) if Path(path).is_dir() else os.unlink(path)


def graded(tmp_path, submission, mode, monkeypatch):
    """{check name: {"score", "output"}} and the whole results.json text, for a grade of
    `submission` in `mode`: in this process ("bwrap", "user", "control") or as root in a
    Docker-like place ("container")."""
    import subprocess
    out = tmp_path / f"results-{mode}.json"
    monkeypatch.setenv("CLASSROOM_SEED", str(SEED))
    if mode == "container":
        done = subprocess.run([sys.executable, str(ROOT / "tests" / "container.py"),
                               sys.executable, "-m", "classroom", "grade", str(submission),
                               "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                              timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr[-2000:]
        assert "each check runs as a user of its own" in done.stderr, done.stderr[-2000:]
    else:
        from classroom.__main__ import main
        use_sandbox({"control": "plain"}.get(mode, mode), monkeypatch)
        assert main(["grade", str(submission), "--out", str(out)] +
                    (["--unsafe"] if mode == "control" else [])) == 0
    text = out.read_text()
    data = json.loads(text)
    return {t["name"].split(" ", 1)[1]: t for t in data["tests"]}, text, data


def score_by_part(tests):
    by_part = {}
    for name, test in tests.items():
        part = runner.checks.CHECKS[name].part
        by_part[part] = by_part.get(part, 0) + test["score"]
    return by_part


def switch_defences_off(monkeypatch):
    """The control: besides plain processes without cgroups, hidden seeds' runs among the public
    ones, generators seeded from the hidden seed and no acceptance-rate rule (5a's helper and the output's size are shown apart:
    test_the_timing_helper_rewritten_at_import_changes_nothing, test_huge_output_...)."""
    import numpy as np

    from classroom import checks
    monkeypatch.setattr(runner, "phases", lambda tasks: [tasks])
    monkeypatch.setattr(checks.Context, "worker_rng",
                        lambda self, salt: np.random.default_rng(self.seed))
    monkeypatch.setattr(checks, "kept_as_often", lambda *args: None)


@pytest.mark.parametrize("mode", ["bwrap", "user", "container", "control"],
                         ids=["grader", "grader-as-users-of-their-own",
                              "grader-where-namespaces-and-cgroups-are-refused",
                              "negative-control"])
def test_issue_32s_attacks_earn_nothing_leave_nothing_and_show_nothing(mode, tmp_path,
                                                                        monkeypatch):
    if mode == "container" and sandbox.user_refused():
        pytest.skip("the Docker-like grade needs root")
    if mode == "control":
        switch_defences_off(monkeypatch)
    mark = f"classroom-attack-{os.getpid()}-{time.monotonic_ns()}"
    proof = tmp_path / "proof"
    submission = hostile_submission(tmp_path / "submission", mark, proof)
    classmate = decoy(tmp_path)
    try:
        tests, text, data = graded(tmp_path, submission, mode, monkeypatch)
        found = leftovers(mark)
    finally:
        classmate.kill()
        clean(mark)
    import numpy as np  # the first alpha 2b's checks draw, hidden seed
    hidden_alpha = f"alpha {float(np.random.default_rng(SEED).uniform(0.1, 0.95))!r}"
    by_part = score_by_part(tests)
    said = {name: t["output"] for name, t in tests.items()}
    visible = "\n".join(t["output"] for t in tests.values() if t["visibility"] == "visible")
    if mode == "control":                       # every attack works against a plain process
        assert by_part["2a"] == 3 and Path(f"{proof}-escaped").exists()
        assert f"LEAK hidden seed {SEED}" in text and hidden_alpha in visible
        assert found                                              # /dev/shm, /tmp
        assert by_part["3c"] == 4                                 # verify's checks pass
        assert by_part["4b"] == 3                                 # the classmate's answer
        return
    assert {p: s for p, s in by_part.items() if s} == HONEST, by_part
    assert not Path(f"{proof}-escaped").exists()
    assert found == [], found
    assert f"seed {SEED}" not in text and hidden_alpha not in visible
    assert "kept as often as the exact rule" in said["verify_keeps_the_target_distribution_exactly"]
    assert "the limit is 16 MB" in said["replay_writes_the_text"]
    assert len(text) < 100_000 and "BEGIN SOLUTION" not in text
    assert all(len(line) < 1000 for line in visible.splitlines())


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
    # A child holds its 450 MB if it wrote that it had them and still runs: one killed for
    # memory after it wrote (the cgroup's OOM killer picks the largest) holds nothing, and
    # counting it made "HELD 3" under a busy suite.
    alive = sum(os.waitpid(child, os.WNOHANG)[0] == 0 for child in children)
    raise ValueError(f"HELD {1 + min(written, alive)} x 450 MB")"""


@pytest.mark.parametrize("isolation", ["bwrap", "user", "user, no cgroups", "plain"],
                         ids=["grader", "grader-as-users-of-their-own",
                              "grader-as-users-of-their-own-without-cgroups", "negative-control"])
def test_a_process_tree_shares_one_memory_limit(isolation, tmp_path, monkeypatch):
    # Three processes of 450 MB each under a limit of 1 GB for the check (lowered from 3 GB, so
    # that the test is quick): the check's cgroup, or where there is none (a Docker container)
    # the grader's watch of its user's processes, stops the third. The control: plain
    # processes without cgroups hold all three (a limit per process only).
    sandboxed = use_sandbox(isolation.split(",")[0], monkeypatch)
    if isolation == "user, no cgroups" or not sandboxed:
        monkeypatch.setattr(sandbox, "_cgroups", {"mounts": {}})
    elif not sandbox.cgroups():
        pytest.skip("this process cannot make cgroups")
    monkeypatch.setattr(sandbox, "MEMORY", 1024 ** 3)
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "speculative.py", stub("agreement_of"), TREE)
    results, _ = run(tmp_path, submission, "4a")
    said = " ".join(line for r in results for line in r.lines())
    if not sandboxed:
        assert "HELD 3" in said, said
        return
    assert "HELD 3" not in said and ("HELD" in said or "more than 1 GB together" in said), said


@pytest.mark.parametrize("where", ["grader", "negative-control"])
def test_the_timing_helper_rewritten_at_import_changes_nothing(where, tmp_path, monkeypatch):
    # A timer that never synchronises, in a module that rewrites the simulated GPU's helper at
    # import (its work done at once): the GPU, its clock and its queue live in the grader, so
    # 5a earns the CPU check's 2 points only. The control: the same code in the grader's own
    # process (a notebook's check cell), where the rewrite reaches the GPU the check reads.
    import importlib.util

    from classroom import checks, helpers
    submission = with_timer(blank_submission(tmp_path / "submission"))
    if where == "grader":
        results, score = run(tmp_path, submission, "5a")
        assert score == 2, [r.lines() for r in results]
        assert "still queued" in " ".join(line for r in results for line in r.lines())
        return
    monkeypatch.setattr(helpers.FakeGPU, "launch", helpers.FakeGPU.launch)   # put back after
    spec = importlib.util.spec_from_file_location("attack", submission / "exercises" / "ex5_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ctx = checks.LocalContext(0, runner.fixtures_of(0), {"timer": module.timer})
    passed = [c for c in runner.select(part="5a") if checks.run_check(c, ctx)["status"] == "pass"]
    assert sum(c.points for c in passed) == 4


@pytest.mark.parametrize("shown", ["grader", "negative-control"])
def test_a_huge_return_value_is_one_short_line(shown, tmp_path, monkeypatch):
    # 10 MB returned (under the wire's 16 MB): what a student sees of it is SHOWN characters;
    # the control shows it whole. (60 MB, past the wire's limit, is one line: the test above.)
    from classroom import checks
    if shown != "grader":
        monkeypatch.setattr(checks, "SHOWN", 10 ** 9)
    submission = blank_submission(tmp_path / "submission")
    edit(submission, "numpy_speculative.py", stub("replay"), "return 'x' * 10_000_000")
    results, score = run(tmp_path, submission, "1b")
    said = "\n".join(line for r in results for line in r.lines())
    assert score == 0
    assert (len(said) < 2000) == (shown == "grader"), len(said)


@pytest.mark.parametrize("limit", ["grader", "negative-control"])
def test_a_reply_past_the_wires_limit_is_an_error_line(limit, monkeypatch):
    # The worker's side refuses to send a reply past wire.MAX_MESSAGE and says so in one line;
    # the control, with a limit of 128 MB, carries 20 MB across.
    import socket

    from classroom import wire
    if limit != "grader":
        monkeypatch.setattr(wire, "MAX_MESSAGE", 128 * 1024 ** 2)
    ours, theirs = socket.socketpair()

    class Student:
        def big(self):
            return "x" * 20_000_000

    def serve():
        worker = wire.Peer(theirs, lends_anything=True)
        worker.lend(Student())
        worker.serve_forever()
    thread = threading.Thread(target=serve)
    thread.start()
    try:
        grader = wire.Peer(ours, lends_anything=False, deadline=time.monotonic() + 60)
        if limit == "grader":
            with pytest.raises(wire.StudentError, match="the limit is 16 MB"):
                wire.Remote(grader, 1).big()
        else:
            assert len(wire.Remote(grader, 1).big()) == 20_000_000
    finally:
        ours.close()
        thread.join(10)
        theirs.close()


def test_a_zip_bomb_is_never_extracted(tmp_path, monkeypatch):
    # A zip of the student files, 400 MB of zeros beside them and a 100 MB numpy_speculative.py
    # in another copy: only the student files are read, each 2 MB at most; a zip of too many
    # entries is not read at all. The control: the zip declares over 500 MB.
    from classroom import submissions
    bomb = tmp_path / "bomb.zip"
    zeros = bytes(1 << 20)
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        for name in parts.STUDENT_FILES:
            z.write(ROOT / name, f"alice/{name}")
        with z.open("alice/data/zeros.bin", "w", force_zip64=True) as f:
            for _ in range(400):
                f.write(zeros)
        with z.open("bob/numpy_speculative.py", "w", force_zip64=True) as f:
            for _ in range(100):
                f.write(zeros)
    with zipfile.ZipFile(bomb) as z:
        assert sum(i.file_size for i in z.infolist()) > 500e6 > 100 * bomb.stat().st_size
    notes = []
    copy = submissions.private_copy(bomb, tmp_path / "copy", notes)
    taken = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file())
    assert taken == parts.STUDENT_FILES and notes == []
    assert sum(p.stat().st_size for p in copy.rglob("*") if p.is_file()) < 1e6
    lone = tmp_path / "lone.zip"                          # only the too large student file
    with zipfile.ZipFile(bomb) as z, zipfile.ZipFile(lone, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("numpy_speculative.py", z.read("bob/numpy_speculative.py"))
    notes = []
    submissions.private_copy(lone, tmp_path / "lone", notes)
    assert notes == ["numpy_speculative.py is larger than 2 MB: counted as missing"], notes
    monkeypatch.setattr(submissions, "MAX_ENTRIES", 4)
    with pytest.raises(submissions.SubmissionError, match="entries in the zip"):
        submissions.private_copy(bomb, tmp_path / "many")


def test_grade_all_notes_empty_and_link_only_submissions(tmp_path, monkeypatch):
    # An empty folder and a folder of links to the grader's files: 0 with a note that says why;
    # the control, honest files beside them, gets its points and no note.
    folder = tmp_path / "submissions"
    (folder / "empty").mkdir(parents=True)
    for name in parts.STUDENT_FILES:
        (folder / "links" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "links" / name).symlink_to(ROOT / name)
    copy_project(folder / "bob")
    select = runner.select
    monkeypatch.setattr(runner, "select", lambda **kw: select(part="2a"))
    from classroom.__main__ import main
    grades = tmp_path / "grades.csv"
    assert main(["grade-all", str(folder), "--csv", str(grades)]) == 0
    import csv
    rows = {r["student"]: r for r in csv.DictReader(grades.open())}
    assert rows["empty"]["total"] == "0" and "no student file" in rows["empty"]["note"]
    assert rows["links"]["total"] == "0" and "speculative.py is a link" in rows["links"]["note"]
    assert rows["bob"]["total"] == "3" and rows["bob"]["note"] == ""


@pytest.mark.parametrize("order", ["grader", "negative-control"])
def test_a_submission_that_sleeps_everywhere_waits_one_limit_per_part_and_job(order, tmp_path,
                                                                            monkeypatch):
    # Every function sleeps. The grader waits out one time limit per part (the part's other
    # checks are not run) and runs different parts side by side: about ceil(11 / 2) limits.
    # The control runs the checks in their order (a part's two seeds side by side): 11 limits.
    # The limit is the test's own, a second: the count of limits waited is what it checks.
    if order != "grader":
        monkeypatch.setattr(runner, "interleaved", lambda tasks, key: tasks)
    submission = blank_submission(tmp_path / "submission")
    for part in parts.PARTS:
        for function in part.functions:
            edit(submission, part.file, stub(function), "import time\n    time.sleep(10 ** 6)")
    ws, _ = workspace(submission, tmp_path / "scratch")
    limit, start = 1, time.monotonic()
    results = runner.run_checks(ws, runner.select(hidden=True), [0, HIDDEN], timeout=limit)
    elapsed = time.monotonic() - start
    assert all(r.status in ("timeout", "skipped") for r in results), \
        [(r.check.name, r.status) for r in results]
    waited = -(-len(parts.PARTS) // 2) * limit
    if order == "grader":
        assert elapsed < waited + 20, elapsed
        assert "a sleep?" in " ".join(line for r in results for line in r.lines())
    else:
        # 11 limits, less a few hundredths of a second that each timer may fire early (21.94 s
        # for 22 once, with a limit of 2 s)
        assert elapsed >= 0.95 * len(parts.PARTS) * limit, elapsed


def test_grade_all_ends_past_a_submission_whose_sandbox_stops(tmp_path, monkeypatch):
    # However a submission might stop its grade's sandbox process (a zygote that answers no
    # more: no route is left to a student, see test_sandbox_view.py), the grader kills it at
    # its first unanswered request, the rest of that grade's checks end at once, and the other
    # students' rows are right. The zygote is stopped here by the test itself (SIGSTOP).
    use_sandbox("plain", monkeypatch)
    monkeypatch.setattr(sandbox, "ZYGOTE_ANSWER", 2)
    # bob's zygote is stopped before it says it is ready, so the grader waits out the start
    # budget (300 s by default: a quarter of the suite); a minute still starts alice's and carol's
    monkeypatch.setattr(sandbox, "ZYGOTE_START", 60)
    folder = tmp_path / "submissions"
    copy_project(folder / "alice")
    copy_project(folder / "bob")
    copy_project(folder / "carol")
    (folder / "bob" / "speculative.py").write_text((folder / "bob" / "speculative.py")
                                                   .read_text() + "\n# STOP MY SANDBOX\n")
    start, waits = sandbox.Zygote.__init__, []

    def stopped_for_bob(self, project, *args, **kwargs):
        start(self, project, *args, **kwargs)
        mine = Path(project) / "speculative.py"
        if mine.is_file() and "STOP MY SANDBOX" in mine.read_text():
            os.kill(self.process.pid, signal.SIGSTOP)
            read = self.reader.readline
            self.reader = type("Counted", (), {"close": self.reader.close,
                                               "readline": staticmethod(
                                                   lambda: waits.append(1) or read())})()
    monkeypatch.setattr(sandbox.Zygote, "__init__", stopped_for_bob)
    select = runner.select
    monkeypatch.setattr(runner, "select", lambda **kw: select(exercise=2, hidden=True))
    from classroom.__main__ import main
    grades = tmp_path / "grades.csv"
    assert main(["grade-all", str(folder), "--csv", str(grades)]) == 0
    import csv
    rows = {r["student"]: r for r in csv.DictReader(grades.open())}
    full = sum(c.points for c in select(exercise=2, hidden=True))
    assert rows["alice"]["total"] == rows["carol"]["total"] == str(full), rows
    assert rows["bob"]["total"] == "0", rows
    assert len(waits) == 1          # one wait for the stopped zygote, not one per check and seed
