"""Shared fixtures. The whole suite runs offline on a small corpus this file writes itself:
SPECDEC_DATA points lessonkit/corpus.py at a temporary folder before anything reads data."""

import atexit
import fcntl
import gc
import os
import random
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

STARTED = time.time()   # about when this process started (results_file.py's STARTED, below)

# Compiled once, read by every later run: where PYTHONDONTWRITEBYTECODE is set (the Makefile's
# set-up unsets it for the same reason), each test process would compile the project's modules
# and pytest rewrite the assertions of the test files and of hypothesis again, every run: 3
# seconds of a worker's start. The caches are __pycache__ folders, which git and the student's
# copy of the repository leave out.
sys.dont_write_bytecode = False

# The interpreter's last garbage collection, at exit, walks every object that torch and
# transformers made, for nothing: a process that built transformers' GPT-2 takes 2 s to exit,
# 0.2 s with them frozen first (torch alone: 0.6 s, 0.15 s). At exit: pytest's own collections,
# at the end of the session, run before.
atexit.register(gc.freeze)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(tempfile.mkdtemp(prefix="specdec-test-data-"))   # this process's, removed at its exit
atexit.register(shutil.rmtree, DATA, True)
os.environ["SPECDEC_DATA"] = str(DATA)

SPEAKERS = ["ROMEO", "JULIET", "First Citizen", "MENENIUS", "KING RICHARD III", "NURSE"]
WORDS = ("the and of to my a i that in you is not with it for be his your this but he have "
         "as thou so will me what by all we shall her do thy no good are our now if more "
         "lord sir king love night sweet death heaven come go speak hear well fair noble "
         "quick jest zeal vex "
         "blood heart day man eyes time hand hath doth upon let such o then how").split()


def make_play(n_speeches=700, seed=0):
    """A deterministic pseudo-play in tiny-shakespeare layout, written from the lists above."""
    rng = random.Random(seed)
    speeches = []
    for _ in range(n_speeches):
        lines = []
        for _ in range(rng.randint(1, 4)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 9))]
            words[0] = words[0].capitalize()
            lines.append(" ".join(words) + rng.choice([",", ".", ";", "!", "?", ":", "'"]))
        speeches.append(f"{rng.choice(SPEAKERS)}:\n" + "\n".join(lines) + "\n")
    return "\n".join(speeches)


SYLLABLES = ["an", "bo", "ca", "de", "el", "fi", "ga", "ho", "is", "ja", "ki", "lu", "ma",
             "ne", "ol", "pa", "qui", "ro", "sa", "ty", "ul", "vi", "wen", "xa", "yu", "zo"]
NAMES = "\n".join(a + b for a in SYLLABLES for b in SYLLABLES[::3])  # 234 made-up names

(DATA / "src").mkdir(exist_ok=True)
(DATA / "src" / "play.txt").write_text(make_play())
(DATA / "src" / "names.txt").write_text(NAMES)
# The corpus is built from these in pytest_configure below, by each process that runs tests.


@pytest.fixture
def run_script(tmp_path):
    """Run a project script in a subprocess on the test corpus; returns CompletedProcess."""
    def run(*args, timeout=120, input=None):
        env = {**os.environ, "SPECDEC_DATA": str(DATA), "NO_COLOR": "1"}
        return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=timeout, input=input)
    return run


@pytest.fixture
def run_here(monkeypatch, capsys):
    """run_script's command line run in this process instead, through the script's own main
    guard (runpy, as `python` does), without an interpreter and torch to start: for one that
    ends before it computes anything (a bad flag, -h), or a script's further runs once a test ran
    it end to end. Returns a CompletedProcess; an exception that would print a traceback fails
    the test."""
    def run(*args):
        args = [str(a) for a in args]
        module = args[1] if args[0] == "-m" else None
        argv = args[2:] if module else args[1:]
        monkeypatch.setenv("NO_COLOR", "1")
        monkeypatch.chdir(ROOT)
        monkeypatch.setattr(sys, "argv", [module or args[0], *argv])
        capsys.readouterr()
        try:
            with warnings.catch_warnings():    # runpy's note on a module imported here already
                warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
                if module:
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(str(ROOT / args[0]), run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code
            if isinstance(code, str):                     # Python prints it, exit status 1
                print(code, file=sys.stderr)
                code = 1
        said = capsys.readouterr()
        return subprocess.CompletedProcess(args, code or 0, said.out, said.err)
    return run


def made_once(tmp_path_factory, name, make):
    """The folder `name`, made by make(folder) once per test run: by the first worker of
    pytest-xdist that asks for it, while the others wait (a lock file beside it); every test of
    the run reads the same one. Copy it before changing it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent                                  # the run's folder, above the workers'
    folder, done = base / name, base / f"{name}.done"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def student_build(tmp_path_factory):
    """The student repository as `python -m classroom build` writes it, proven both ways (build.py),
    once per run: test_classroom.py and the student's walk copy it."""
    from classroom import walk
    return made_once(tmp_path_factory, "student-build", walk.student_repository) / "student"


@pytest.fixture(scope="session")
def quick_models(tmp_path_factory):
    """The presets' quick size, trained once per run into <folder>/quick, where the notebooks look
    (SPECDEC_QUICK=1, SPECDEC_CHECKPOINTS=folder)."""
    from beyond import presets

    def train(folder):
        for name in presets.PRESETS:
            presets.ensure_trained(presets.preset(name, "quick"), folder=folder / "quick",
                                   progress=False, log=lambda *a: None)
    return made_once(tmp_path_factory, "quick-models", train)


@pytest.fixture(scope="module")
def quick_checkpoints(quick_models, tmp_path_factory):
    """A test file's own copy of the quick models (its runs may save tables beside them)."""
    return shutil.copytree(quick_models, tmp_path_factory.mktemp("checkpoints") / "copy")


def tiny_config(**changes):
    """A model small enough to train in seconds."""
    from gpt import Config
    return Config(**{"block_size": 32, "n_layer": 2, "n_head": 2, "n_embd": 32, **changes})


def quick_run(exercise, section, folder):
    """An exercise module's quick run (tiny models) into folder, recorded as `section` of its
    report, silently: (args, the section run() returned)."""
    from harness import report
    args = exercise.Args(quick=True, checkpoints=str(folder / "checkpoints"),
                         results=str(folder / "results"))
    result = exercise.run(args, log=lambda *a: None)
    report.record(args, section, result, log=None)
    return args, result


# The order the files start in, under pytest-xdist (--dist loadfile: a file runs whole on one
# worker; xdist's own order, by number of tests, is turned off in pyproject.toml). The longest
# first, so that the workers finish together: on two cores the walk's first half (which builds
# the student repository) starts beside the hostile zoo (which does not need it), and the
# second half comes after, when the repository is built. The files not named follow in their
# own order; `make test-fast` leaves out the files that are slow as a whole, the rest start in
# this same order (the longest of them early: left alphabetical, a file of seconds would start
# among the last, and one worker could run it alone).
LONGEST_FIRST = ["test_walk.py", "test_hostile_zoo.py", "test_walk_blank.py",
                 "test_walk_part_two.py", "test_student_lesson.py", "test_speculative.py",
                 "test_sampling_costs.py", "test_tree.py", "test_grader_zoo.py", "test_drafts.py",
                 "test_hf.py", "test_classroom.py", "test_sandbox_view.py", "test_exercises.py",
                 "test_cli.py", "test_training.py", "test_eagle.py", "test_batched.py",
                 "test_heads.py", "test_transformers_compare.py", "test_notebooks.py",
                 "test_early_exit.py", "test_yourturn.py", "test_layers.py"]


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: files stay whole


def runs_tests(config):
    """False in pytest-xdist's controller, which hands the tests to its workers and runs none:
    it needs neither the corpus nor torch (seconds, before a worker starts)."""
    return hasattr(config, "workerinput") or config.getvalue("collectonly") \
        or config.getoption("dist", "no") == "no" or not config.getoption("tx", None)


def pytest_configure(config):
    """The test corpus, then one torch thread per test process: pytest-xdist already puts a
    worker on every core, and two threads each would fight over them (lessonkit/machine.py).
    Tests that need more set and restore their own count. (Here, not on import: each process
    that imports this file learns only now whether it runs tests.)"""
    if not runs_tests(config):
        return
    from lessonkit import corpus
    corpus.prepare(DATA, from_file=DATA / "src" / "play.txt",
                   names_file=DATA / "src" / "names.txt", quiet=True)
    import torch
    torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------------
# How long the suite took, as a results file (docs/RESULTS.md quotes it): results/tests.json for
# the whole suite (`make test`), results/tests-fast.json for `make test-fast`; nothing for a
# part of the suite (named files, -k, another -m) or on a worker of pytest-xdist.

SUITES = {"": "tests.json", "not slow": "tests-fast.json"}


def writes_results(config):
    """Whether this process writes the results file: the whole suite or the fast one, in the
    process that reports it (not a worker of pytest-xdist)."""
    whole = [str(a) for a in config.args] in (["tests"], [str(ROOT / "tests")]) \
        and not config.option.keyword and config.option.markexpr in SUITES
    return whole and not hasattr(config, "workerinput")


def pytest_sessionstart(session):
    session.config._specdec_started = time.time()
    session.config._specdec_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


RESULTS_IMPORT = []   # the thread importing lessonkit.results_file, once started


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller, as its first worker finishes: it imports what the results file
    needs (torch: seconds) on the core that worker left, not after the last worker is done."""
    if writes_results(node.config) and not RESULTS_IMPORT:
        import importlib
        import threading
        RESULTS_IMPORT.append(threading.Thread(
            target=importlib.import_module, args=("lessonkit.results_file",), daemon=True))
        RESULTS_IMPORT[0].start()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not writes_results(config) or not hasattr(config, "_specdec_started"):
        return
    seconds = time.time() - config._specdec_started
    for thread in RESULTS_IMPORT:
        thread.join()
    from lessonkit import machine, results_file
    results_file.STARTED = STARTED   # its run's seconds: from this process's start, not its import
    stats = config.pluginmanager.get_plugin("terminalreporter").stats
    counts = {kind: len(stats.get(kind, [])) for kind in ("passed", "failed", "skipped", "error")}
    counts["passed"] = len([r for r in stats.get("passed", []) if r.when == "call"])
    load = config._specdec_load   # other programs' work before the suite began (1-minute load)
    busy = f"note: the load average was {load:.1f} when the suite started" \
        if load > machine.BUSY_CORES else ""
    results_file.write_results(ROOT / "results" / SUITES[config.option.markexpr],
                          {"seconds": seconds, "exit_status": int(exitstatus),
                           "cores": machine.cpu_cores(), **counts},
                          busy=busy, command="make test" + (
                              "-fast" if config.option.markexpr else ""))
