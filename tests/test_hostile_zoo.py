"""The hostile zoo: submissions that try to take points they did not earn (issue 20's list), each
of which must score exactly what its honest parts earn. Most start from the blank student
version, so that every point they get would be a stolen one; each attack has a negative control
that shows it works where the grader's defence is switched off."""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from classroom import parts, regions, runner, sandbox
from classroom.submissions import ROOT, copy_project, workspace

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
    assert sandbox.isolation(Path("/tmp"), grading=False) == "namespaces", \
        sandbox._isolation.get("why")


ISOLATIONS = ["namespaces", "user", "plain"]
IDS = ["grader", "grader-as-a-user-of-its-own", "negative-control"]


def use_sandbox(isolation, monkeypatch):
    """The grader as it is (namespaces), as it is where namespaces are refused and it runs as
    root (its workers a user of their own, forced by CLASSROOM_SANDBOX=user), or the negative
    control: workers as plain processes, what the grader does where neither is possible.
    Returns whether the workers are isolated."""
    if isolation == "plain":
        monkeypatch.setattr(sandbox, "_isolation", {"how": None, "why": "a test's control"})
        return False
    monkeypatch.setattr(sandbox, "_isolation", {})
    if isolation == "user":
        monkeypatch.setenv("CLASSROOM_SANDBOX", "user")
    sandbox.isolation(Path("/tmp"), grading=False)
    if sandbox._isolation["how"] != isolation:
        pytest.skip(f"no {isolation} isolation here: {sandbox._isolation['why']}")
    return True


def test_without_namespaces_or_root_the_grader_says_so_in_one_line(monkeypatch, capsys):
    # Neither isolation possible: plain processes, and one warning line when grading.
    monkeypatch.setattr(sandbox, "_isolation", {})
    monkeypatch.setenv("CLASSROOM_SANDBOX", "user")           # as if namespaces were refused
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert sandbox.isolation(Path("/tmp"), grading=True) is None
    sandbox.isolation(Path("/tmp"), grading=True)              # said once, not per zygote
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: the students' code runs without "
                                                   "isolation") and "not root" in lines[0], lines


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
                                    for p in os.listdir("/proc") if p.isdigit()),
            "hidden checks": "HIDDEN_SEED" in open(
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
               "autograder": False, "hidden checks": False}
    if isolation == "user":         # it sees the machine's /tmp and processes, not the secrets
        assert {key: seen[key] for key in secrets} == secrets, seen
        return
    # /tmp is empty, but for the way to the virtual environment where that lies under /tmp (a
    # clone in /tmp: the sandbox mounts the interpreter's folder at its own path, and no more)
    venv = Path(sys.prefix).resolve()
    tmp = [venv.relative_to("/tmp").parts[0]] if venv.is_relative_to("/tmp") else []
    assert seen == {**secrets, "tmp": tmp, "grader's process": False}, seen


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
# Processes that outlive their check


ESCAPE = '''
import os as _os
if _os.fork() == 0:                      # a daemon: its own session, out of the check's group
    _os.setsid()
    if _os.fork() == 0:
        _os.execvp("sleep", ["sleep", "MARK"])
    _os._exit(0)
'''


def sleepers(mark):
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "cmdline").read_bytes().decode():
                found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("isolation", ISOLATIONS + ["user, no kill"],
                         ids=IDS + ["negative-control-as-a-user-of-its-own"])
def test_a_daemon_forked_at_import_ends_with_its_check(isolation, tmp_path, monkeypatch):
    # As a user of its own, a daemon outlives its check's process group: the grade's end kills
    # it (sandbox.kill_leftovers); the second control goes without that.
    sandboxed = use_sandbox(isolation.split(",")[0], monkeypatch)
    if isolation == "user, no kill":
        monkeypatch.setattr(sandbox, "kill_leftovers", lambda: None)
        sandboxed = False
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
