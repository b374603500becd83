"""studies/transformers.py in quick mode (tiny models): every mode of the comparison with
Hugging Face transformers produces a row, a checked output, a time split, the figure and the
report's section; and the output check catches a decoder that writes something else.
Skipped when transformers is not installed."""

import importlib.util
from dataclasses import fields

import pytest
import torch
from conftest import quick_run

import gpt
import speculative as sd
from beyond import hf
from harness import common, registry, report
from lessonkit import cli
from studies import transformers as against

# Not imported here (beyond/hf.py imports it where it is used): pytest-xdist collects this
# file in every worker, and only the one that runs it needs transformers.
if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
QUICK_MODES = [  # --quick: drafts distilled and draft, k 2, prompt lookup 2, ngram and distilled
    "generate(do_sample=False)",
    "assisted, distilled, default schedule", "assisted, distilled, k = 2",
    "assisted, draft, default schedule", "assisted, draft, k = 2",
    "prompt lookup, 2 tokens",
    "adapter: generate", "adapter: speculative, distilled, k = 2",
    "adapter: speculative, draft, k = 2",
    "torch: generate", "NumPy: generate", "NumPy target, ngram, k = 4",
    "NumPy target, distilled, k = 2", "torch target, heads, k = 2"]  # heads: trained on first use


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    folder = tmp_path_factory.mktemp("against")
    args, section = quick_run(against, "transformers", folder)
    return args, section, folder / "results"


def rows(quick):
    return {r["mode"]: r for r in quick[1]["numbers"]["rows"]}


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
@pytest.mark.slow  # a study quick run: make test
def test_every_mode_has_a_row_with_a_checked_output(quick):
    table = rows(quick)
    assert list(table) == QUICK_MODES
    assert {r["family"] for r in table.values()} == set(against.FAMILIES)
    for name, r in table.items():
        assert r["identical"] and r["differs_on"] == [], name  # same weights: same characters
        assert r["chars_per_s"] > 0 and r["repeats"] >= 1, name
    assert table["generate(do_sample=False)"]["vs_generate"] == 1


@pytest.mark.slow  # a study quick run: make test
def test_the_time_split_adds_up_and_counts_passes(quick):
    table = rows(quick)
    for name, r in table.items():
        assert r["target_us"] > 0 and r["draft_us"] >= 0, name
        assert r["wall_us"] == pytest.approx(r["target_us"] + r["draft_us"] + r["rest_us"])
    for plain in ("generate(do_sample=False)", "adapter: generate", "torch: generate",
                  "NumPy: generate"):
        assert table[plain]["chars_per_target_pass"] == 1 and table[plain]["draft_us"] == 0
    # A fixed k in transformers is really fixed: the same rounds as ours with that draft and k.
    for draft in ("distilled", "draft"):
        theirs, ours = table[f"assisted, {draft}, k = 2"], \
            table[f"adapter: speculative, {draft}, k = 2"]
        assert theirs["target_passes"] == ours["target_passes"]
        assert theirs["draft_us"] > 0 and ours["draft_us"] > 0
        assert 1 < ours["chars_per_target_pass"] <= 3
        assert "stats_draft_us" in ours and "stats_draft_us" not in theirs
    passes = quick[1]["numbers"]["one_pass"]
    assert set(passes) == {"transformers GPT2LMHeadModel", "gpt.GPT (torch)", "NumpyGPT"}
    assert all(p["pass_us"] > 0 for p in passes.values())
    assert set(passes["NumpyGPT"]["verify"]) == set(against.CEILING_KS)
    assert quick[1]["numbers"]["bound"]["gain"] > 0


def test_ceiling_on_known_costs():
    """The bound on our fastest setup, on made-up pass costs: plain NumPy is 4x transformers'
    fastest, so the 10x goal needs 2.5x over it; checking k+1 tokens costs (k+1)/3 steps at
    k = 8 (gain 3 there) and k+1 steps elsewhere (gain 1)."""
    verify = {k: (k + 1) / 3 if k == 8 else k + 1 for k in against.CEILING_KS}
    rows = [{"mode": "NumPy: generate", "chars_per_s": 1000.0, "vs_fastest_transformers": 4.0}]
    bound = against.ceiling(rows, {"NumpyGPT": {"verify": verify}})
    assert bound["k"] == 8 and bound["gain"] == pytest.approx(3)
    assert bound["chars_per_s"] == pytest.approx(3000) and bound["vs_theirs"] == pytest.approx(12)
    # The agreement a free drafter needs: at k = 8 it gains exactly the 2.5x that 10x needs.
    assert sd.expected_speedup(bound["alpha"], 8, 0.0, verify[8]) == pytest.approx(2.5)
    # Where no k can reach the goal (every check costs k+1 steps), no agreement suffices.
    flat = against.ceiling(rows, {"NumpyGPT": {"verify": {k: k + 1 for k in verify}}})
    assert flat["gain"] == pytest.approx(1) and flat["alpha"] != flat["alpha"]   # nan


@pytest.mark.slow  # a study quick run: make test
def test_goals_pairs_and_notes(quick):
    numbers = quick[1]["numbers"]
    assert set(numbers["goals"]) == {"fastest", "adapter plain", "adapter speculative"}
    for g in numbers["goals"].values():
        assert g["met"] == all(p["ratio"] >= g["goal"] for p in g["pairs"])
        assert all(p["ratio"] > 0 for p in g["pairs"])
    assert len(numbers["goals"]["adapter speculative"]["pairs"]) == 2   # one per draft
    fastest = numbers["goals"]["fastest"]["pairs"][0]
    assert fastest["first"] in QUICK_MODES[:6] and fastest["second"] in QUICK_MODES[6:]
    assert not any(n.startswith("heads skipped") for n in numbers["notes"])  # trained first


@pytest.mark.slow  # a study quick run: make test
def test_figure_and_section(quick):
    import matplotlib.image
    results = quick[2]
    path = results / "transformers.png"
    assert path.read_bytes().startswith(PNG_MAGIC)
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100
    markdown = quick[1]["markdown"]
    assert "| family | mode | characters/s | vs generate() |" in markdown
    for name in QUICK_MODES:
        assert f"| {name} |" in markdown
    assert "Where the time goes" in markdown and "Why." in markdown
    assert "![transformers against ours](transformers.png)" in markdown
    text = (results / "report.md").read_text()
    assert f"## {report.heading('transformers')}" in text and markdown in text
    assert (results / "transformers.json").exists()


def test_every_flag_has_help():
    comments = cli.field_comments(against.Args)
    assert all(comments.get(f.name) for f in fields(against.Args))


@pytest.mark.slow  # a study quick run: make test
def test_bad_settings_are_one_line_errors(quick):
    args = against.Args(quick=True, checkpoints=quick[0].checkpoints,
                        results=quick[0].results, prompt_chars=60)    # 60 + 16 + 1 > 64
    with pytest.raises(ValueError, match="positions"):
        against.run(args, log=lambda *a: None)
    for bad in ("ngram/gpu/4", "ngram/numpy", "ngram/numpy/0", "nonsense/numpy/2"):
        with pytest.raises(ValueError):
            against.parse_native(bad)
    with pytest.raises(ValueError, match="--ks"):
        common.whole_numbers("2,x", "ks")


# ----------------------------------------------------------------------------------------------
# Negative control: an output that differs is caught, ours stopping the run, theirs reported


def test_a_decoder_that_writes_something_else_is_caught():
    torch.manual_seed(0)
    ours = gpt.GPT(gpt.Config(vocab_size=16, block_size=32, n_layer=1, n_head=2,
                              n_embd=16)).eval()
    with torch.no_grad():
        for p in ours.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)                   # peaked distributions, no near-ties
    good, bad = hf.to_transformers(ours), hf.to_transformers(ours)
    with torch.no_grad():                           # bad: one weight transposed by mistake
        w = bad.transformer.h[0].attn.c_proj.weight
        w.copy_(w.t().clone())
    prompts = [torch.randint(0, 16, (1, 5), generator=torch.Generator().manual_seed(s))
               for s in range(3)]
    want = {"prompts": prompts, "outputs": [sd.generate(ours, p, 20) for p in prompts]}
    right = against.check(against.Mode("theirs", "transformers",
                                       against.their_generate(good, 20)), want)
    assert right.exact
    wrong = against.check(against.Mode("theirs, broken", "transformers",
                                       against.their_generate(bad, 20)), want)
    assert wrong.differs and not wrong.exact       # reported, not raised
    broken = hf.HFModel(bad)
    with pytest.raises(against.Mismatch, match="a bug"):
        against.check(against.Mode("ours, broken", "ours via the adapter",
                                   lambda p: (sd.generate(broken, p, 20), None)), want)
    # A mode that differs is never the fastest exact one, however fast.
    right.times, wrong.times = [1.0], [0.1]
    assert against.fastest([right, wrong], lambda m: not m.ours) is right
    row = against.rows_of([against.Mode("generate(do_sample=False)", "transformers", None,
                                        times=[1.0]), wrong], 20)[1]
    assert row["identical"] is False and row["differs_on"] == wrong.differs


def test_the_forward_clock_counts_the_model_and_its_copies_only():
    import copy

    import numpy as np
    torch.manual_seed(0)
    config = dict(vocab_size=16, block_size=32, n_layer=1, n_head=2, n_embd=16)
    big = registry.with_backend(gpt.GPT(gpt.Config(**config)).eval(), "numpy")
    other = registry.with_backend(gpt.GPT(gpt.Config(**config)).eval(), "numpy")
    twin = copy.copy(big)                 # as the heads' scorer copies the big model
    idx = np.array([[1, 2, 3]])
    want, original = big.logits(idx, big.new_cache(1)), type(big).logits
    with against.ForwardClock(big) as clock:
        got = twin.logits(idx, twin.new_cache(1))
        other.logits(idx, other.new_cache(1))
    assert np.array_equal(got, want)
    assert clock.calls == 1 and clock.tokens == 3 and clock.seconds > 0
    assert "logits" not in vars(big) and type(big).logits is original   # undone
    with against.ForwardClock(big) as clock:
        pass
    assert clock.calls == 0
