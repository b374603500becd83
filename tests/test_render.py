"""The documents' measured figures are rendered from the results files of the runs that measured
them (studies/render.py, docs/results/): the documents are never out of date with those files, a
bad results file stops the rendering in one line before anything is written, and no measured
figure in the rendered documents is typed by hand."""

import json
import re
import shutil
from pathlib import Path

import pytest

from studies import figures as figures_module
from studies import render as render_module

ROOT = Path(__file__).resolve().parents[1]
render = vars(render_module)
RUNS = ROOT / "docs" / "results"


def copy_runs(tmp_path):
    folder = tmp_path / "runs"
    shutil.copytree(RUNS, folder)
    return folder


def test_the_documents_are_what_their_results_files_say():
    stale = {path.relative_to(ROOT).as_posix(): render["changed_figures"](old, new)
             for path, (old, new) in render["render_all"]().items() if old != new}
    assert not stale, f"run make docs: {stale}"


def test_a_changed_measurement_changes_its_figures_and_nothing_else(tmp_path):
    # The negative control of the test above: a re-measured benchmark (one speed-up changed)
    # makes the documents stale, and only the figures that come from that row move.
    runs = copy_runs(tmp_path)
    bench = json.loads((runs / "benchmark.json").read_text())
    row = next(r for r in bench["runs"] if (r["setup"], r["draft"]) == ("torch/numpy", "ngram"))
    best = max(r["speedup"] for r in bench["runs"] if r["setup"] == "torch/numpy")
    row["speedup"] = best + 1.0
    (runs / "benchmark.json").write_text(json.dumps(bench))
    rendered = render["render_all"](runs_folder=runs)
    changed = {path.name: [name for name, _, _ in render["changed_figures"](old, new)]
               for path, (old, new) in rendered.items() if old != new}
    assert changed["README.md"] == ["bench.readme", "bench.ngram"] or \
        set(changed["README.md"]) == {"bench.ngram"}, changed
    assert "bench.table" in changed["RESULTS.md"] and "bench.ngram" in changed["RESULTS.md"]
    for path, (old, new) in rendered.items():   # outside the markers, not a character moved
        strip = lambda text: render["FIGURE"].sub("", render["BLOCK"].sub("", text))
        assert strip(old) == strip(new), path.name


@pytest.mark.parametrize("damage, says", [
    (lambda p: p.unlink(), "missing"),
    (lambda p: p.write_text("{not json"), "not JSON"),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "format": 0})),
     "results format 0"),
    (lambda p: p.write_text(json.dumps({k: v for k, v in json.loads(p.read_text()).items()
                                        if k != "run"})), 'no "run"'),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "runs": []})),
     "lacks what it needs"),
])
def test_a_bad_results_file_is_one_line_naming_it_and_nothing_is_written(tmp_path, damage, says):
    runs = copy_runs(tmp_path)
    damage(runs / "benchmark.json")
    root = tmp_path / "repo"
    for name in render["DOCUMENTS"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text((ROOT / name).read_text())
    before = {name: (root / name).read_text() for name in render["DOCUMENTS"]}
    with pytest.raises(render["RenderError"]) as error:
        render["render_all"](root=root, runs_folder=runs)
    message = str(error.value)
    assert says in message and "\n" not in message, message
    assert "benchmark" in message
    assert {name: (root / name).read_text() for name in render["DOCUMENTS"]} == before


def test_a_marker_nobody_renders_is_an_error():
    with pytest.raises(render["RenderError"], match="no figure named 'bench.nonsense'"):
        render["render"]("<!-- fig bench.nonsense -->1<!-- /fig -->", render["Runs"]())


# A measured figure: a speed-up (1.60x), a percentage, a time (1 min 20 s, 45 s, 12 minutes),
# a loss or rate with two or three decimals, a count of tokens per second.
MEASURED = re.compile(r"\b\d+(?:\.\d+)?x\b|\b\d+(?:\.\d+)?%|\b\d+ min(?: \d+ s)?\b|\b\d+ s\b|"
                      r"\b\d+ minutes\b|\b\d\.\d{2,4}\b|\b\d{1,3},\d{3}\b")
# The figures the rendered parts may still hold outside markers, each with its reason: the
# lesson's own figures (what it says, quoted as it says them), the formulas' worked examples
# (tests/test_docs.py checks them against speculative.py), settings rather than measurements.
NOT_MEASURED = {
    # the notebooks' reading times; the Python version
    "README.md": ["25 min", "30 min", "35 min", "3.10"],
    # the lesson's own figures; the formulas' worked examples (alpha 0.8, k 4: 0.64, 0.512,
    # 0.4096, 3.3616; break-even at c 0.2 and 0.05, on the lesson's 0.01 grid: 0.46, 0.17;
    # 37% would give 1.58 tokens per pass)
    "docs/LESSON.md": ["1.0x", "37%", "3%", "3.36", "3.3616", "0.4553", "0.1668", "1.58",
                       "0.64", "0.512", "0.4096", "0.05", "0.01", "0.46", "0.17"],
    # the token trees' mask example: the acceptance by rank its shape is drawn for (a setting
    # of studies/trees.py, not a measurement)
    "docs/RESULTS.md": ["0.15", "0.08"],
}
def hand_typed(text):
    text = re.sub(r"```.*?```", "", text, flags=re.S)           # commands, quoted code
    text = render["BLOCK"].sub("", text)
    return render["FIGURE"].sub("", text)


@pytest.mark.parametrize("name", list(NOT_MEASURED))
def test_no_measured_figure_in_the_rendered_documents_is_typed_by_hand(name):
    text = hand_typed((ROOT / name).read_text())
    found = [m[0] for m in MEASURED.finditer(text) if m[0] not in NOT_MEASURED[name]]
    assert not found, f"{name}: figures typed by hand (mark them, rendered from a results " \
                      f"file): {found}"


def test_the_hand_typed_figure_check_finds_a_typed_figure():
    # Its negative control: a speed-up typed into the README is found.
    text = hand_typed("the distilled draft gives 1.61x here, <!-- fig bench.ngram -->2.27x<!-- /fig -->")
    assert [m[0] for m in MEASURED.finditer(text)] == ["1.61x"]


def rendered_with(tmp_path, name, change):
    """Every document rendered from docs/results with one results file changed by change(data)."""
    runs = copy_runs(tmp_path)
    data = json.loads((runs / f"{name}.json").read_text())
    change(data)
    (runs / f"{name}.json").write_text(json.dumps(data))
    return render["render_all"](runs_folder=runs)


def rows_of(data, backend, draft):
    return [r for r in data["runs"] if (r["backend"], r["draft"]) == (backend, draft)]


def test_a_claim_the_data_contradicts_stops_the_rendering(tmp_path):
    # The claim checks' negative control: re-measured files in which the training text's table
    # agrees more than the big model's own, batching gains more with the batch size, or 2 threads
    # pay beside a busy program leave no false sentence standing: one line names the claim, and
    # nothing is written.
    def own_text_agrees_less(data):
        for backend in ("numpy", "torch"):
            for row in rows_of(data, backend, "ngram-big"):
                row["alpha"] = 0.5
    with pytest.raises(render["RenderError"], match="the data contradicts the claim 'a drafter "
                                                    "needs to know what the big model writes"):
        rendered_with(tmp_path, "drafters", own_text_agrees_less)

    def rises_with_batch(data):
        largest = max(row["batch"] for row in data["curve"]["rows"])
        for row in data["curve"]["rows"]:
            if row["batch"] == largest:
                row["speedup"] = 10.0
    with pytest.raises(render["RenderError"], match="The speed-up falls with the batch size"):
        rendered_with(tmp_path / "again", "batch_curve", rises_with_batch)

    def two_threads_pay_beside_a_spinner(data):
        data["one core busy / plain decoding, 200 characters / 2 threads"] = 1.0
    with pytest.raises(render["RenderError"], match="every larger pass is slower on 2 threads"):
        rendered_with(tmp_path / "threads", "threads", two_threads_pay_beside_a_spinner)


def tried(data, rung):
    return next(r for r in data["tried"] if r["rung"].startswith(rung))


def cheaper(lever, times):
    """A change of a prices file: `lever`'s step `times` times as cheap."""
    return lambda data: data["levers"][lever].update(ms=data["levers"][lever]["ms"] / times)


def within_a_minute(data):
    """A change of train-avx2: the big preset reaches the goal held to AVX2."""
    data["run"]["seconds"] = 50
    next(r for r in data["models"] if r["preset"] == "big")["val_loss"] = 1.6


# What "The models" says, each as (the results file a re-measure changes, how, the error that
# stops the rendering): fewer Newton-Schulz iterations train worse, the preset reaches the
# target; for the kind without AVX-512, that the big preset held to AVX2 falls short of the goal,
# that no lever reaches the target in a minute at the prices held to AVX2, that fewer steps fit
# in the minute than the preset needs, that no lever's step uses the share of the product speed
# a minute needs, that the recipe given a minute's steps (or more: batch 10's 600 cheaper ones
# too) ends above the target; that torch.compile's first step spends more than its cheaper
# steps save.
LADDER_CLAIMS = [
    ("training", lambda d: tried(d, "3 Newton").update(final=1.0),
     "3 Newton-Schulz iterations instead of 5 trains worse"),
    ("training", lambda d: d["preset"].update(final=d["target"] + 0.01),
     "the big preset reaches the target"),
    ("train-avx2", within_a_minute, "the goal of the target in a minute on such a machine"),
    ("training", lambda d: tried(d, "batch 10").update(reached_at=100),
     "no lever above reaches the target"),
    ("training-prices-avx2", cheaper("preset", 5), "fewer steps than the preset needs"),
    ("training-prices-avx2", lambda d: d["levers"]["adamw"].update(of_peak=0.9),
     "no lever's step uses the share"),
    ("training", lambda d: tried(d, "the same recipe fitted").update(final=1.65),
     "above the goal after a minute's steps"),
    ("training-prices-avx2", cheaper("batch 10", 2), "batch 10 instead: at least a minute's"),
    ("training-prices", cheaper("compile", 2), "torch.compile does not pay within one"),
]


@pytest.mark.parametrize("name, change, error", LADDER_CLAIMS,
                         ids=[error for _, _, error in LADDER_CLAIMS])
def test_the_training_ladders_claims_are_checked(name, change, error, tmp_path):
    with pytest.raises(render["RenderError"], match=error):
        rendered_with(tmp_path, name, change)


def faster_drafters(data):
    for row in data["runs"]:
        row["tokens_per_s"] *= 3


def a_better_ceiling(data):
    for backend in data["backends"].values():
        backend["ceiling"] = {k: 3 * v for k, v in backend["ceiling"].items()}


# What the study sections conclude in words the renderer once chose from the data, now
# RESULTS.md's words: the fastest drafter setup falls short of 3x, and no drafter could get
# there; a free drafter could reach transformers' goal; best_k picks the measured best k.
STUDY_CLAIMS = [
    ("drafters", faster_drafters, "Not the 3x we aimed for"),
    ("drafters", a_better_ceiling, "no drafter can get there on this CPU"),
    ("transformers", lambda d: d["bound"].update(alpha=float("nan")),
     "even a free drafter would have to be right"),
    ("sampling_costs", lambda d: d["best_k"].update(measured=d["best_k"]["best_k_rounds"] + 1),
     "picks the measured best"),
]


@pytest.mark.parametrize("name, change, error", STUDY_CLAIMS,
                         ids=[error for _, _, error in STUDY_CLAIMS])
def test_the_study_sections_claims_are_checked(name, change, error, tmp_path):
    with pytest.raises(render["RenderError"], match=error):
        rendered_with(tmp_path, name, change)


def test_a_conclusion_written_from_the_data_follows_it(tmp_path):
    # Where the words are the renderer's (a goal met or not, the fastest setup), a re-measure
    # that turns them changes the words: batch 16 at best under the 1.5x goal reads "short of".
    before = (ROOT / "docs" / "RESULTS.md").read_text()
    assert "beyond the 1.5x we aimed for" in before

    def slower(data):
        for key, value in data.items():
            if key.startswith("batch16_"):
                for row in value["rows"]:
                    row["speedup"] *= 0.6
    rendered = rendered_with(tmp_path, "batch_curve", slower)
    after = next(new for path, (_, new) in rendered.items() if path.name == "RESULTS.md")
    assert "short of the 1.5x we aimed for" in after and "beyond the 1.5x" not in after


def test_a_study_says_busy_when_its_repeated_timings_spread_wide():
    # The studies leave run.busy empty and keep their spreads (machine.spread) and Busy notes in
    # their figures: the provenance line reads them. A quiet file stays quiet.
    figures = vars(figures_module)
    run = {"run": {"busy": ""}}
    assert figures["busy_words"]({**run, "rows": [{"spread": 0.1}]}) == "quiet"
    assert figures["busy_words"]({**run, "rows": [{"spread": 0.1}, {"x": [{"spread": 0.4}]}]}) \
        == "busy (repeated timings differed by up to 40%)"
    note = "torch, draft: note: the machine was busy (repeated timings differed by up to 58%): ..."
    assert figures["busy_words"]({**run, "notes": [note]}) == \
        "busy (repeated timings differed by up to 58%)"
    assert figures["busy_words"]({"run": {"busy": "note: the machine was busy (other programs "
                                                  "used 1.0 of 2 cores): ..."}}) == \
        "busy (other programs used 1.0 of 2 cores)"
