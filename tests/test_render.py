"""The documents' measured figures are rendered from the results files of the runs that measured
them (docs/render.py, docs/results/): the documents are never out of date with those files, a
bad results file stops the rendering in one line before anything is written, and no measured
figure in the rendered documents is typed by hand."""

import json
import re
import runpy
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
render = runpy.run_path(str(ROOT / "docs" / "render.py"))   # a script, not a module of the project
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
    # of beyond/studies/trees.py, not a measurement)
    "docs/RESULTS.md": ["0.15", "0.08"],
}
# docs/RESULTS.md: the sections rendered so far (the rest of "The models" is transcribed by hand
# from older runs, each with its date, until its study writes a results file).
RENDERED_SECTIONS = ["## How long the commands take", "## The models",
                     "## Speculative decoding from the command line", "## The benchmark",
                     "## Every drafter compared", "## With Hugging Face transformers",
                     "## Batches", "## Sampling's price list", "## Token trees"]


def rendered_part(name, text):
    if name != "docs/RESULTS.md":
        return text
    sections = re.split(r"(?m)^(?=## )", text)
    part = [s for s in sections if s.startswith(tuple(RENDERED_SECTIONS))]
    models = part[1]   # The models: up to the note that the rest of it is transcribed
    part[1] = models.split("*The rest of this section is transcribed by hand")[0]
    assert part[1] != models, "The models: where does the transcribed part start?"
    return "".join(part)


def hand_typed(text):
    text = re.sub(r"```.*?```", "", text, flags=re.S)           # commands, quoted code
    text = render["BLOCK"].sub("", text)
    return render["FIGURE"].sub("", text)


@pytest.mark.parametrize("name", list(NOT_MEASURED))
def test_no_measured_figure_in_the_rendered_documents_is_typed_by_hand(name):
    text = hand_typed(rendered_part(name, (ROOT / name).read_text()))
    found = [m[0] for m in MEASURED.finditer(text) if m[0] not in NOT_MEASURED[name]]
    assert not found, f"{name}: figures typed by hand (mark them, rendered from a results " \
                      f"file): {found}"


def test_the_hand_typed_figure_check_finds_a_typed_figure():
    # Its negative control: a speed-up typed into the README is found.
    text = hand_typed("the distilled draft gives 1.61x here, <!-- fig bench.ngram -->2.27x<!-- /fig -->")
    assert [m[0] for m in MEASURED.finditer(text)] == ["1.61x"]

