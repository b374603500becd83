"""Every exercise end to end in quick mode (tiny models), and the main job's report; the
studies after it (python -m studies) and the report's links to them."""

import contextlib
import json
import sys

import pytest

from exercises import __main__ as lesson
from studies import __main__ as studies

pytestmark = pytest.mark.slow  # runs the main job and the exercises: not in make test-fast

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DOCS_READ = {}      # label -> the files under docs/ opened while watching_docs(label)
_watching = []


def _audit(event, args):
    if event == "open" and _watching and isinstance(args[0], str) and \
            args[0].startswith(str(lesson.common.ROOT / "docs")):
        DOCS_READ[_watching[-1]].append(args[0])


sys.addaudithook(_audit)   # (a hook stays for the process; it records only while watching)


@contextlib.contextmanager
def watching_docs(label):
    DOCS_READ[label] = []
    _watching.append(label)
    try:
        yield
    finally:
        _watching.pop()


@pytest.fixture(scope="module")
def results(tmp_path_factory, quick_checkpoints):
    """The lesson in quick mode on the run's quick models (test_student_lesson.py's lesson
    trains them from none), then the studies' comparison of every drafter into the same results
    (transformers and sampling have test files of their own: test_transformers_compare.py,
    test_sampling_costs.py). The third item: what the lesson alone left, before the study."""
    folder = tmp_path_factory.mktemp("lesson")
    paths = dict(checkpoints=str(quick_checkpoints), results=str(folder / "results"))
    with watching_docs("during the lesson"):
        sections = lesson.lesson(lesson.Args(quick=True, **paths))
    after_the_lesson = {"files": sorted(p.name for p in (folder / "results").rglob("*")),
                        "report": (folder / "results" / "report.md").read_text(),
                        "models": sorted(p.name for p in quick_checkpoints.rglob("*.pt"))}
    sections.update(studies.run(studies.Args(quick=True, only=["drafters"], **paths)))
    return folder / "results", sections, after_the_lesson


def numbers(results, name):
    return json.loads((results[0] / name).read_text())


def test_every_figure_is_a_valid_png(results):
    import matplotlib.image
    names = ["ex1_rounds.png", "ex2_derive.png", "ex3_build.png", "ex4_break.png",
             "ex5_forward.png", "ex5_k.png", "ex5_batch.png", "drafters.png"]
    for name in names:
        data = (results[0] / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        image = matplotlib.image.imread(results[0] / name)
        assert image.shape[0] > 100 and image.shape[1] > 100, name


def test_report_has_every_section_and_the_machine(results):
    report = (results[0] / "report.md").read_text()
    for heading in ["## Models", "## The lesson's numbers and ours"] + [
            f"## Exercise {n}" for n in range(1, 6)] + ["## Every drafter compared"]:
        assert heading in report
    assert "Machine:" in report and "torch" in report


def test_ex1_replays_the_run(results):
    n = numbers(results, "ex1_watch.json")
    assert n["text"].startswith("ROMEO:\n") and len(n["text"]) == len("ROMEO:\n") + n["new_tokens"]
    assert 1 <= n["tokens_per_pass"] <= n["k"] + 1 and n["identical_to_plain"]
    html = (results[0] / "ex1_watch.html").read_text()
    assert html.count("<tr>") == n["rounds"] + 1


def test_ex2_numbers_are_exact(results):
    n = numbers(results, "ex2_derive.json")
    assert n["exact"] == "2101/625" and n["by_sum"] == 3.3616
    assert round(n["closed_form"], 12) == 3.3616
    assert abs(n["simulated"] - 3.3616) < 5 * n["simulated_se"]
    rows = {row[0]: row[1:] for row in n["table"]["rows"]}
    assert rows[0.8][n["table"]["ks"].index(4)] == 3.362


def test_ex3_is_identical_and_timed(results):
    n = numbers(results, "ex3_build.json")
    assert n["identical"] is True
    assert 1 <= n["tokens_per_pass"] <= n["k"] + 1
    assert all(s > 0 for s in n["seconds"].values()) and len(n["seconds"]) == 5
    assert 0 < n["c_cached_numpy"] < 10 and n["verify_cost"] > 0


def test_ex4_break_even(results):
    n = numbers(results, "ex4_break.json")
    assert round(n["break_even"]["0.2"]["bisection"], 4) == 0.4553
    assert round(n["break_even"]["0.05"]["bisection"], 4) == 0.1668
    assert n["break_even"]["0.2"]["grid_0.01"] == 0.46
    assert n["break_even"]["0.05"]["grid_0.01"] == 0.17
    for d in n["drafts"].values():
        assert 0 <= d["greedy_agreement"] <= 1 and 0 <= d["alpha"] <= 1 and d["speedup"] > 0


def test_ex5_timings(results):
    n = numbers(results, "ex5_gpu.json")
    assert n["device"] in ("cpu", "cuda")
    assert set(n["forward_seconds"]) == {"1", "2", "4", "8", "16"}
    assert all(v["speedup"] > 0 for v in n["by_k"].values()) and len(n["by_k"]) == 8
    curve = n["by_batch"]  # measured with batched decoding (quick: batch 1 and 4, k 1 and 2)
    assert {(r["batch"], r["k"]) for r in curve} == {(1, 1), (1, 2), (4, 1), (4, 2)}
    assert all(r["verify_cost"] > 0 and r["speedup"] > 0 and r["predicted"] > 0 for r in curve)


def test_every_drafter_is_compared_at_every_k_and_schedule(results):
    from studies.drafters import ADAPTIVE
    runs = numbers(results, "drafters.json")["runs"]
    for backend in ("numpy", "torch"):
        for draft in ("ngram", "draft"):  # the quick comparison's drafters
            ks = {r["k"] for r in runs if r["backend"] == backend and r["draft"] == draft}
            assert ks == {1, 2, *ADAPTIVE}, (backend, draft)
    oracle = [r for r in runs if r["k"] == "oracle"]
    assert all(r["tokens_per_pass"] > 1 for r in oracle)
    ladder = numbers(results, "drafters.json")["ladder"]
    assert ladder[-1]["draft"] == "big itself" and ladder[-1]["greedy_agreement"] == 1.0
    assert any(r["draft"] == "6-gram of the big model's text" for r in ladder)
    assert "Fastest exact setup" in results[1]["drafters"]["markdown"]


def test_the_own_text_note_says_what_was_measured():
    from studies.drafters import OWN_TEXT, own_text_note
    ladder = [{"draft": OWN_TEXT, "greedy_agreement": 0.67},
              {"draft": "4-gram", "greedy_agreement": 0.77}]
    runs = [{"draft": "ngram", "alpha": 0.87}, {"draft": "ngram-big", "alpha": 0.91}]
    note = own_text_note(runs, ladder)
    assert "agrees less than the 4-gram" in note and "keeps more of its guesses (0.91" in note
    ladder[0]["greedy_agreement"], runs[1]["alpha"] = 0.8, 0.8     # the other way round
    note = own_text_note(runs, ladder)
    assert "agrees more than the 4-gram" in note and "keeps no more of its guesses" in note
    assert "keeps" not in own_text_note(runs[:1], ladder)         # ngram-big not compared


def test_exercise_bad_input_is_one_line(run_here):
    result = run_here("-m", "exercises.ex2_derive", "--alpha", "1.5")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "error: --alpha must be in [0, 1), not 1.5"


@pytest.mark.parametrize("command, words", [
    (["-m", "studies.drafters", "--ks", "0"], "--ks takes whole numbers >= 1"),
    (["-m", "studies.drafters", "--backends", "jax"], "a backend is torch or numpy"),
    (["-m", "studies.drafters", "--repeats", "0"], "--repeats must be at least 1"),
    (["-m", "harness.batch_curve", "--sizes", "0,4"], "--sizes takes whole numbers >= 1")])
def test_comparison_flags_out_of_range_are_one_line(run_here, command, words):
    result = run_here(*command)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_exercise_help(run_here):
    for n in ["ex1_watch", "ex2_derive", "ex3_build", "ex4_break", "ex5_gpu"]:
        result = run_here("-m", f"exercises.{n}", "-h")
        assert result.returncode == 0 and "--seed" in result.stdout and "--quick" in result.stdout


def test_running_one_exercise_keeps_the_other_sections(tmp_path):
    """`make exercise N=2` and `python -m exercises.ex2_derive` update exercise 2's section of
    report.md and keep every other section as it was (the bug: rewriting the report with the
    exercise that just ran, or leaving the report stale)."""
    from harness import report
    from exercises import ex2_derive
    results = tmp_path / "results"
    args = ex2_derive.Args(quick=True, results=str(results), checkpoints=str(tmp_path / "c"))
    report.record(args, 5, {"numbers": {}, "markdown": "exercise five's own text"}, log=None)
    ex2_derive.main(["--quick", "--results", str(results), "--checkpoints", str(tmp_path / "c")])
    text = (results / "report.md").read_text()
    assert "exercise five's own text" in text and "## Exercise 5: GPU timing" in text
    assert "## Exercise 2: derive" in text and "3.3616" in text
    first_date = report.load_sections(args)[2]["run"]["date"]
    ex2_derive.main(["--quick", "--alpha", "0.5", "--results", str(results),
                     "--checkpoints", str(tmp_path / "c")])
    text = (results / "report.md").read_text()
    assert "exercise five's own text" in text, "running exercise 2 dropped exercise 5"
    assert "alpha = 0.5" in text and "alpha = 0.8" not in text, "exercise 2's section is stale"
    assert report.load_sections(args)[2]["run"]["date"] >= first_date
    assert text.count("## Exercise 2") == 1


def test_one_exercise_means_that_exercise_alone(monkeypatch):
    # `make exercise N=1` runs exercise 1 alone; the whole main job (the control) all five.
    seen = []
    monkeypatch.setattr(lesson, "lesson", seen.append)
    lesson.main(["--only", "1"])
    lesson.main([])
    assert seen[0].only == [1] and seen[1].only == [1, 2, 3, 4, 5]


def test_the_lesson_runs_no_study_and_the_report_links_the_studies_once_run(results):
    # The lesson alone wrote the exercises' sections and trained the models they and the
    # notebooks use (the distilled draft: the notebooks'); no study ran (the bug: the lesson
    # running the studies, or training the extra heads they use).
    alone = results[2]
    assert "sections" in alone["files"] and "ex5.json" in alone["files"]
    for key in studies.STUDIES:
        assert f"{key}.json" not in alone["files"], f"the lesson ran the study {key}"
    assert alone["models"] == ["big.pt", "distilled.pt", "draft.pt", "names.pt"]
    assert "every drafter compared (not run yet)" in alone["report"]
    assert "## Every drafter compared" not in alone["report"]
    # The control: `python -m studies --only drafters` ran after it, into the same report,
    # which now has the section and links it by its heading's anchor.
    report = (results[0] / "report.md").read_text()
    assert "## Every drafter compared" in report
    assert "[every drafter compared](#every-drafter-compared)" in report
    assert "sampling's price list (not run yet)" in report


def test_a_section_saved_by_an_earlier_version_still_makes_the_report(tmp_path):
    # Sections saved before results files had a "run" (their date at the top level) stay in
    # results/sections/ of a student's checkout; the report once crashed on them (KeyError).
    import json

    from harness import common, report
    args = common.ExerciseArgs(results=str(tmp_path), checkpoints=str(tmp_path / "none"))
    report.record(args, 1, {"numbers": {}, "markdown": "new section"}, log=None)
    old = {"exercise": 5, "title": report.TITLES[5], "quick": False,
           "date": "2026-12-01 10:00 UTC", "numbers": {}, "markdown": "old section"}
    report.section_path(args, 5).write_text(json.dumps(old))
    text = report.write(args).read_text()
    assert "*Run 2026-12-01 10:00 UTC.*" in text and "old section" in text
    assert "new section" in text


def test_the_report_anchor_is_the_headings():
    from harness import report
    assert report.anchor("Sampling's price list") == "#samplings-price-list"
    assert report.anchor("Against Hugging Face transformers") == \
        "#against-hugging-face-transformers"


def test_each_exercise_trains_only_the_models_it_uses(tmp_path):
    # From nothing, the lesson trains every model first (the big model and its draft, the names
    # draft, the distilled draft the notebooks use), then runs the exercises, and never trains
    # the heads; the studies train those first. Controls: one exercise alone trains only what
    # it uses; with every model trained the models' stage goes.
    from harness import stages
    args = {n: lesson.EXERCISES[n][1].Args() for n in lesson.EXERCISES}
    plan = dict(lesson.lesson_stages(args, tmp_path))
    keys = [key for stage in plan.values() for key in stage]
    assert keys == ["big", "draft", "names", "distilled", "notebooks", 1, 2, 3, 4, 5]
    assert "training big, draft, names, distilled first" in next(iter(plan))
    assert [k for s in lesson.lesson_stages({3: args[3]}, tmp_path, notebooks=False)
            for k in s[1]] == ["big", "draft", "notebooks", 3]
    for name in lesson.NOTEBOOK_MODELS:
        (tmp_path / f"{name}.pt").touch()
    assert [k for s in lesson.lesson_stages(args, tmp_path) for k in s[1]] == [1, 2, 3, 4, 5]
    for name in lesson.NOTEBOOK_MODELS:
        (tmp_path / f"{name}.pt").unlink()
    first = studies.study_stages(studies.Args(), list(studies.STUDIES), tmp_path)[0][1]
    assert first[:1] == ["big"] and {"distilled", "heads"} <= set(first)
    assert stages.to_train(["distilled"], tmp_path) == ["big", "distilled"]   # teacher first
    assert stages.to_train(["heads"], tmp_path) == ["big", "heads"]
    (tmp_path / "big.pt").touch()
    (tmp_path / "heads.pt").touch()       # trained: nothing left to train
    assert stages.to_train(["heads"], tmp_path) == []


def test_exercise_4_names_its_drafts_or_says_which_it_knows(run_here):
    result = run_here("-m", "exercises.ex4_break", "--drafts", "draft,big")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--drafts takes draft, names, distilled" in result.stderr


def test_the_studies_command_forecasts_each_study(run_script):
    # make studies runs `python -m studies`; --forecast says how long each study would
    # take here and runs none.
    makefile = (lesson.common.ROOT / "Makefile").read_text()
    assert "\nstudies: " in makefile and "-m studies\n" in makefile.split("\nstudies: ")[1]
    result = run_script("-m", "studies", "--forecast")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert any(line.startswith("every drafter compared") and ": about " in line for line in lines)
    assert lines[-1].startswith("all of them: about")
    bad = run_script("-m", "studies", "--only", "nope")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_the_forwards_study_times_every_forward_pass(capsys):
    # python -m studies.forwards on the tests' tiny shape: every path runs and is timed.
    from studies import forwards
    rows = forwards.main(["--size", "quick", "--tokens", "1,3", "--repeats", "3"])
    assert set(rows) == {1, 3} and all(len(row) == 6 and min(row.values()) > 0
                                       for row in rows.values())
    assert "the rule: 1.5x" in capsys.readouterr().out


def test_every_stage_has_an_estimate_near_the_runs_it_comes_from():
    # Every model, exercise and study the job or the studies plan has an estimate (a new one
    # without is caught here), each within a factor of two of the committed runs of
    # docs/RESULTS.md it was rounded from. Tests read docs/; the job does not (the next test).
    from beyond import presets
    from harness import common, stages
    keys = [*presets.PRESETS, "heads", *lesson.EXERCISES, *studies.STUDIES]
    assert not [k for k in keys if k not in stages.ABOUT_S]
    measured = {}
    for name in ("lesson", "lesson-again", "studies"):
        run = json.loads((common.ROOT / "docs" / "results" / f"{name}.json").read_text())
        measured.update(run["stage_seconds"])
    for key, seconds in stages.ABOUT_S.items():
        if str(key) in measured:
            assert 0.5 <= seconds / max(measured[str(key)], 2) <= 2, key


def test_the_job_reads_no_document(results):
    # The main job's estimates are the code's: it opened no file under docs/ (an audit hook
    # watched it, in the fixture). Control: the hook sees a document read while it watches.
    assert DOCS_READ["during the lesson"] == []
    with watching_docs("control"):
        (lesson.common.ROOT / "docs" / "RESULTS.md").read_text()
    assert DOCS_READ["control"] == [str(lesson.common.ROOT / "docs" / "RESULTS.md")]


def test_quick_runs_promise_no_lesson_size_times(capsys):
    # --quick's tiny models take seconds: an estimate for the lesson's sizes would say minutes.
    from harness import stages
    progress = stages.Progress([("exercise 1", ["big", 1])], estimate=False)
    progress.start()
    assert "left" not in capsys.readouterr().out


def test_each_stage_says_how_long_the_stages_left_take(capsys):
    from harness import stages
    from lessonkit import waiting
    progress = stages.Progress([("the models", ["big", "draft"]), ("exercise 3", [3])])
    progress.start()
    progress.start()
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert f"about {waiting.duration(stages.about(['big', 'draft', 3]))} left" in lines[0]
    assert f"about {waiting.duration(stages.ABOUT_S[3])} left" in lines[1]


def test_exercise_3_refuses_a_version_that_changed_the_big_models_output():
    # Exercise 3 checks the outputs of its first timed round (no separate checking run).
    import torch

    from exercises import ex3_build
    same = torch.tensor([[1, 2, 3]])
    outputs = {"lesson: plain, recompute everything": [same],
               "lesson: speculative, recompute everything": [(same.clone(), 4)],
               "speculative, KV caches (draft in torch)": [(same.clone(), None)]}
    ex3_build.check_outputs(outputs)
    outputs["speculative, KV caches (draft in NumPy)"] = [(torch.tensor([[1, 2, 4]]), None)]
    with pytest.raises(AssertionError, match="draft in NumPy"):
        ex3_build.check_outputs(outputs)


def test_the_notebooks_take_the_models_there_however_they_were_trained(tmp_path, monkeypatch):
    # A draft trained with another seed is what the notebooks use (their claims must hold for
    # it), not retrained. Control: the exercises' own loading retrains it to the preset's
    # settings, keeping the other as draft.prev.pt.
    import torch

    from beyond import presets
    from harness import common
    monkeypatch.setenv("SPECDEC_QUICK", "1")
    monkeypatch.setenv("SPECDEC_CHECKPOINTS", str(tmp_path))
    folder = common.checkpoint_folder(common.notebook_args())
    presets.ensure_trained(presets.preset("draft", "quick", training={"seed": 7}), folder=folder,
                           progress=False, log=lambda *a: None)
    own = presets.load_trained("draft", folder).state_dict()
    got = common.notebook_models(["draft"])["draft"].state_dict()
    assert all(torch.equal(own[k], got[k]) for k in own)
    assert not (folder / "draft.prev.pt").exists()
    common.load_models(common.notebook_args(), ["draft"], log=lambda *a: None)
    assert (folder / "draft.prev.pt").exists()
