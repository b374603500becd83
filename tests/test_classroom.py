"""The classroom: solution regions, the student version and grading.

The reference earns every point and the student version none: build proves both, and refuses
otherwise (the bug zoo and bad submissions are in test_grader_zoo.py).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from graders import reference_submission

from classroom import build, plan, regions, report
from classroom.project import ROOT
from lessonkit import parts

pytestmark = pytest.mark.slow  # builds and grades student repositories: not in make test-fast

# ----------------------------------------------------------------------------------------------
# Regions


def test_regions_become_not_implemented_at_their_indentation():
    source = ('def f(x):\n    """Doc."""\n    # BEGIN SOLUTION\n    return x + 1\n'
              '    # END SOLUTION\n\n\ndef g():\n    pass\n')
    student = regions.student_version(source, lambda name: f"write {name}")
    assert "return x + 1" not in student and "BEGIN SOLUTION" not in student
    assert "    raise NotImplementedError('write f')\n" in student
    assert student.endswith("def g():\n    pass\n")
    namespace = {}
    exec(student, namespace)
    with pytest.raises(NotImplementedError, match="write f"):
        namespace["f"](1)


def test_unpaired_markers_are_errors():
    for source in ("def f():\n    # BEGIN SOLUTION\n    pass\n",
                   "def f():\n    pass\n    # END SOLUTION\n",
                   "# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n"):
        with pytest.raises(regions.RegionError):
            regions.student_version(source, str)


def test_every_part_names_functions_that_hold_a_solution_region():
    for part in parts.PARTS:
        found = regions.functions_with_solutions((ROOT / part.file).read_text())
        for function in part.functions:
            assert function in found, f"{part.id}: {function} has no solution region"
    marked = {f for file in parts.STUDENT_FILES
              for f in regions.functions_with_solutions((ROOT / file).read_text())}
    assert marked == {f for p in parts.PARTS for f in p.functions}


def test_the_fixtures_window_rule_is_the_projects():
    from classroom import making
    from lessonkit.scorer import window_start
    for block in (1, 2, 7, 16, 64):
        for n in range(0, 5 * block + 3):
            assert making.window_start(n, block) == window_start(n, block)


# ----------------------------------------------------------------------------------------------
# The student repository: built, proven both ways (reference 100%, stripped 0%)


@pytest.fixture(scope="module")
def student_repo(student_build, tmp_path_factory):
    # build.build's repository (conftest.py builds it once per run), copied: checks run in it
    return shutil.copytree(student_build, tmp_path_factory.mktemp("class") / "speculative-class",
                           symlinks=True)


def test_build_writes_a_complete_student_repository(student_repo):
    for name in ["README.md", ".ci/run", ".github/workflows/classroom.yml",
                 "classroom/checks.py", "numpy_speculative.py", "docs/LESSON.md", "Makefile",
                 "docs/results/lesson.json"]:   # the forecast's reference runs
        assert (student_repo / name).exists(), name
    assert not (student_repo / "tests").exists()
    for teachers in ("TEACHERS.md", "references.py", "mutants.py"):
        assert not (student_repo / "classroom" / teachers).exists(), teachers
    checks_source = "".join(f.read_text() for f in (student_repo / "classroom").glob("*.py"))
    assert "HIDDEN_SEED = " not in checks_source and not re.search(r"@check\([^)]*hidden=True",
                                                                    checks_source)
    assert (student_repo / "classroom" / "expected.json.gz").exists()
    for file in parts.STUDENT_FILES:
        text = (student_repo / file).read_text()
        assert "BEGIN SOLUTION" not in text and "NotImplementedError(" in text
    assert "sample(residual(" not in (student_repo / "numpy_speculative.py").read_text()
    workflow = (student_repo / ".github" / "workflows" / "classroom.yml").read_text()
    assert workflow.count("autograding-command-grader") == len(parts.PARTS)
    assert "make check N=3" in (student_repo / "README.md").read_text()
    assert not (student_repo / "ABOUT.md").exists()       # the teacher's README stays here
    makefile = (student_repo / "Makefile").read_text()
    assert "-m classroom check" in makefile.split("\ntest:")[1].split("\n\n")[0]
    assert "pytest" not in makefile.split("\ntest:")[1].split("\n\n")[0]


def test_the_student_repository_checks_itself_and_reports(student_repo, run_script):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "classroom", "check", "3", "--report-only"],
                          cwd=student_repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "not started" in done.stdout and "total 0/18 points" in done.stdout
    strict = subprocess.run([sys.executable, "-m", "classroom", "check", "--part", "1a",
                             "--strict"], cwd=student_repo, capture_output=True, text=True,
                            timeout=120)
    assert strict.returncode == 1


# Which NumPy forward passes of the library work, and what the numpy backend gives
NUMPY_FORWARDS = """
import importlib.util, sys
# This repository's editable install finds its own modules for any copy (the student's own
# install points at the student's repository): without it, as there.
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in f.__module__]
from beyond import backends, batched
from gpt import GPT, Config
model = GPT(Config(vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=8)).eval()
numpy = backends.with_backend(model, "numpy")
print(importlib.util.find_spec("beyond.fast_numpy") is not None, type(numpy).__name__,
      batched.batchable(numpy), len(batched.generate(numpy, [[1, 2], [3]], 3)))
"""


@pytest.mark.parametrize("version", ["student", "reference (control)"])
def test_the_student_repository_holds_no_numpy_forward_pass(version, student_repo):
    # Exercise 3a is the NumPy forward pass; the library's fast one (beyond/fast_numpy.py, which
    # every NumPy forward past the lesson calls) and the EAGLE draft's NumPy block
    # (beyond/eagle_numpy.py; beyond/eagle.py is exercise 7's) would answer it. The student
    # repository leaves those files out whole: its numpy backend is the torch model, batched decoding still runs,
    # no other file computes attention in NumPy, and no file past the lesson's holds a solution
    # region. The control: the same probe finds the fast forward working in this repository.
    repo = student_repo if version == "student" else ROOT
    done = subprocess.run([sys.executable, "-c", NUMPY_FORWARDS], cwd=repo, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr
    sources = [f for f in repo.rglob("*.py") if ".venv" not in f.parts and "tests" not in f.parts]
    softmax_of_attention = [f.name for f in sources if "np.exp(att" in f.read_text()]
    regions_past_the_lesson = [f.relative_to(repo).as_posix() for f in sources
                               if regions.BEGIN in f.read_text() and f.name != "regions.py" and
                               f.relative_to(repo).as_posix() not in parts.STUDENT_FILES]
    assert regions_past_the_lesson == []
    if version == "student":
        assert done.stdout.split() == ["False", "GPT", "True", "2"]
        assert softmax_of_attention == []
        assert not [f for f in sources if f.name != "regions.py" and regions.BEGIN in f.read_text()]
    else:
        assert done.stdout.split() == ["True", "NumpyGPT", "True", "2"]
        assert sorted(softmax_of_attention) == ["eagle_numpy.py", "fast_numpy.py"]


def test_unknown_exercise_and_part_are_one_line_errors(run_here):
    for args, words in ((["check", "99"], "no exercise '99'"), (["check", "--part", "9z"],
                                                             "no part '9z'")):
        done = run_here("-m", "classroom", *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_grade_writes_gradescope_results(tmp_path, student_repo, monkeypatch):
    # Exercise 3's checks only (hidden ones included), to keep the suite quick: grading all of
    # them is what build's proof above does on the reference.
    select = plan.select
    monkeypatch.setattr(plan, "select", lambda **kw: select(exercise=3, hidden=True))
    out = tmp_path / "results.json"
    from classroom.__main__ import main
    assert main(["grade", str(student_repo), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["score"] == 0 and all(t["score"] == 0 for t in data["tests"])
    assert {"name", "score", "max_score", "output", "visibility"} <= set(data["tests"][0])
    assert sum(t["max_score"] for t in data["tests"]) == sum(
        c.points for c in select(exercise=3, hidden=True)) == 18 + 3
    assert {t["visibility"] for t in data["tests"]} == {"visible", "after_published"}


def test_the_student_repository_holds_no_function_that_answers_a_part(student_repo):
    # What the student repository has of the checks calls the student's functions and compares
    # with recorded answers (expected.json.gz): no module there defines a reference or a
    # planted mistake (classroom/references.py's, by name), and the only mention of the
    # references is expected.py's import, which fails there. The control: this repository
    # defines every one of them.
    import ast

    from classroom import references
    answers = {name for name, value in vars(references).items() if callable(value) and
               getattr(value, "__module__", "") == references.__name__}
    graded = {f for p in parts.PARTS for f in p.functions}
    assert {"round_verdict", "_lookup", "_roll", "_eagle_loss", "_mask", "path_law"} <= answers

    def defined(repo):
        found = {}
        for f in (repo / "classroom").glob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    found.setdefault(node.name, f.name)
        return found
    student = {name: where for name, where in defined(student_repo).items()
               if name in answers - graded - {"warp"}}
    assert student == {}, student
    importers = [f.name for f in (student_repo / "classroom").glob("*.py") for node in
                 ast.walk(ast.parse(f.read_text())) if isinstance(node, ast.ImportFrom) and
                 "references" in [a.name for a in node.names] + [node.module or ""]]
    assert importers == ["expected.py"], importers
    assert answers - graded - {"warp"} <= set(defined(ROOT))


def test_what_a_hidden_seed_said_stays_out_of_visible_feedback():
    # A submission can raise an exception that carries its inputs: on the hidden seed those are
    # the hidden prompt and expected text. Visible tests say only that the hidden seed failed.
    public = next(c for c in plan.select() if not c.hidden)
    hidden = next(c for c in plan.select(hidden=True) if c.hidden)
    secret = {"status": "error", "message": "ValueError: prompt SECRET-abc expected SECRET-xyz"}
    results = [report.Result(c, {plan.PUBLIC_SEED: {"status": "pass"}, 271828: secret})
               for c in (public, hidden)]
    data = report.gradescope_json(results)
    visible = [t for t in data["tests"] if t["visibility"] == "visible"]
    assert visible and all("SECRET" not in t["output"] for t in visible)
    assert "hidden seed" in visible[0]["output"] and data["stdout_visibility"] != "visible"
    later = [t for t in data["tests"] if t["visibility"] == "after_published"]
    assert "SECRET-abc" in later[0]["output"]                   # the teacher still sees it


def gradescope_layout(autograder, zip_folder):
    """Gradescope's layout under `autograder` (standing in for /autograder): the zip unpacked
    into source/, an empty results/. setup.sh needs the network, so the project's own
    environment stands in for the one it installs."""
    with zipfile.ZipFile(build.gradescope_zip(zip_folder / "autograder.zip")) as z:
        z.extractall(autograder / "source")
    (autograder / "results").mkdir()
    return autograder / "source"


def run_autograder(autograder, *args, **env):
    return subprocess.run(["bash", str(autograder / "source" / "run_autograder"), *args],
                          env={**os.environ, "AUTOGRADER_ROOT": str(autograder),
                               "CLASSROOM_VENV": sys.prefix, **env},
                          capture_output=True, text=True, timeout=300)


def test_the_gradescope_zip_runs_in_gradescopes_layout(tmp_path):
    # Gradescope unpacks the zip into /autograder/source, runs setup.sh there once and
    # run_autograder per submission (AUTOGRADER_ROOT stands in for /autograder).
    autograder = tmp_path / "autograder"
    source = gradescope_layout(autograder, tmp_path)
    assert (source / "setup.sh").exists() and (source / "run_autograder").exists()
    assert (source / "pyproject.toml").exists() and (source / "classroom").is_dir()
    setup = (source / "setup.sh").read_text()
    assert build.TORCH_CPU_INDEX in setup and f'"{build.TORCH}"' in setup
    assert f'"{build.TORCH}"' in (ROOT / "pyproject.toml").read_text()  # one pin, kept equal
    reference_submission(autograder / "submission")
    done = run_autograder(autograder, "--part", "2a")
    assert done.returncode == 0, done.stderr
    data = json.loads((autograder / "results" / "results.json").read_text())
    assert data["score"] == sum(c.points for c in plan.select(part="2a", hidden=True)) > 0
