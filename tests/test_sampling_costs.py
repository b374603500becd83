"""Sampling's price list (studies/sampling_costs.py): the lenient rule (exact only at 1;
studies/lenience.py), the cost arithmetic against hand computations
(studies/cost_arithmetic.py), Corollary 3.9 and the best k, and the quick run."""

import json
import math

import numpy as np
import pytest
import torch
from conftest import quick_run
from hypothesis import given, settings
from hypothesis import strategies as st

# The exactness harness of tests/test_speculative.py (small_pair is its fixture).
from test_speculative import (
    SMALL_V,
    chi_square_p_value,
    exact_distribution,
    make_model,
    noisy_copy,
    probability_vectors,
    sample_counts,
    small_pair,  # noqa: F401
)

import numpy_speculative
import speculative as sd
from harness import report
from gpt import GPT, Config
from studies import sampling_costs as sc
from studies.cost_arithmetic import (
    keys_at,
    macs_per_position,
    parameter_count,
    run_costs,
    weights_read,
)
from studies.lenience import (
    lenient_distribution,
    lenient_step,
    next_token_probs,
    total_variation,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PROMPT = [1, 2, 0]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sampling")
    _, section = quick_run(sc, "sampling", folder)
    return folder / "results", section


# ----------------------------------------------------------------------------------------------
# The quick run


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
@pytest.mark.slow  # a study quick run: make test
def test_quick_run_writes_figures_numbers_and_its_report_section(quick):
    results, section = quick
    for name in ("sampling_temperature.png", "sampling_lenience.png", "sampling_costs.png"):
        assert (results / name).read_bytes().startswith(PNG_MAGIC), name
    saved = json.loads((results / "sampling_costs.json").read_text())
    assert set(saved) >= {"temperature", "lenience", "best_k", "corollary", "machine"}
    text = (results / "report.md").read_text()
    assert "## Sampling's price list" in text and "sampling_lenience.png" in text
    assert section["numbers"]["seconds"] > 0  # timed (a time limit here would flake when busy)


@pytest.mark.slow  # a study quick run: make test
def test_quick_run_numbers_hang_together(quick):
    n = quick[1]["numbers"]
    for r in n["temperature"]:
        assert 1 <= r["tokens_per_pass"] <= r["k"] + 1
        assert 0 <= r["alpha"] <= 1 + 1e-9 and r["predicted_tokens_per_pass"] >= 1
        c = r["costs"]
        # Every round scores its guesses and one more; what was not kept was wasted.
        assert c["target_positions"] == c["new_tokens"] + c["wasted_positions"]
        assert c["wasted_positions"] >= 0 and c["spec_flops_per_token"] > c["plain_flops_per_token"]
        assert c["memory_bound_speedup"] > 1 > c["compute_bound_speedup"]
    small = n["lenience"]["small_pair"]
    assert small[0]["lenience"] == 1 and small[0]["exact_tv"] < 1e-12
    assert all(r["exact_tv"] > 0.01 for r in small[1:])
    assert n["lenience"]["trained"][0]["tv_per_token"] < 1e-12
    assert n["best_k"]["measured"] in [r["k"] for r in n["best_k"]["runs"]]


# ----------------------------------------------------------------------------------------------
# Lenience: exact at 1, wrong below


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
@pytest.mark.parametrize("lenience", [1.0, 0.8, 0.5])
def test_lenience_one_passes_the_exactness_test_and_below_one_fails_it(small_pair, lenience):
    # test_speculative.py's chi-square test of the first 3 tokens against the target's exact
    # distribution: passed at 1 (p > 1e-3 there), failed by a lenient rule.
    target, draft = small_pair
    want = exact_distribution(target, PROMPT, 3, temperature=1.0)
    # 0.5 is caught with fewer runs (p about 1e-33 at 750 runs at this seed); 0.8 needs them all
    # (p about 1e-6).
    counts = sample_counts(target, draft, PROMPT, 3, 750 if lenience == 0.5 else 2000, seed=0,
                           temperature=1.0, lenience=lenience)
    if lenience == 1:
        assert chi_square_p_value(counts, want) > 1e-3
    else:
        assert chi_square_p_value(counts, want) < 1e-4


@pytest.fixture(scope="module")
def small_probs():
    target = make_model(10, vocab_size=SMALL_V, scale=0.4)   # = small_pair
    draft = make_model(11, vocab_size=SMALL_V, n_layer=1, scale=0.4)
    return target, draft, next_token_probs(target, temperature=1.0), \
        next_token_probs(draft, temperature=1.0)


def test_enumerated_lenient_rule_is_the_target_at_one(small_probs):
    target, _, p_of, q_of = small_probs
    want = exact_distribution(target, PROMPT, 3, temperature=1.0)
    got = lenient_distribution(p_of, q_of, PROMPT, 3, k=2, lenience=1.0)
    assert total_variation(got, want) < 1e-6   # float32 logits, from other sequence lengths


@settings(max_examples=25, deadline=None)
@given(st.floats(0.01, 0.99), st.integers(1, 3))
def test_any_lenience_below_one_moves_the_output(small_probs, lenience, k):
    _, _, p_of, q_of = small_probs
    want = lenient_distribution(p_of, q_of, PROMPT, 3, k=k, lenience=1.0)
    got = lenient_distribution(p_of, q_of, PROMPT, 3, k=k, lenience=lenience)
    assert abs(sum(got.values()) - 1) < 1e-12
    assert total_variation(got, want) > 1e-4


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_enumeration_matches_what_the_decoder_samples(small_probs):
    # The enumeration models speculative_generate's branches: its samples agree with it.
    target, draft, p_of, q_of = small_probs
    want = lenient_distribution(p_of, q_of, PROMPT, 3, k=2, lenience=0.5)
    counts = sample_counts(target, draft, PROMPT, 3, 2000, seed=1, temperature=1.0,
                           lenience=0.5)
    assert chi_square_p_value(counts, want) > 1e-3


def rule_by_branches(p, q, lenience):
    """One position of the lenient rule, branch by branch, with numpy_speculative's pieces."""
    lq = lenience * q
    accept = np.array([numpy_speculative.accept_probability(t, d) for t, d in zip(p, lq)])
    kept = q * accept
    return kept + (1 - kept.sum()) * numpy_speculative.residual(p, lq), kept.sum()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_lenient_step_is_the_rule(data):
    size = data.draw(st.integers(2, 6))
    p, q = data.draw(probability_vectors(size)), data.draw(probability_vectors(size))
    lenience = data.draw(st.sampled_from([1.0, 0.9, 0.5, 0.1]))
    written, alpha = lenient_step(p, q, lenience)
    want, kept = rule_by_branches(p, q, lenience)
    np.testing.assert_allclose(written, want, atol=1e-12)
    assert alpha == pytest.approx(kept, abs=1e-12)
    if lenience == 1:
        np.testing.assert_allclose(written, p, atol=1e-12)
        assert alpha == pytest.approx(np.minimum(p, q).sum())


@pytest.mark.parametrize("lenience", [0, -0.5, 1.5, math.nan, "1"])
def test_bad_lenience(small_pair, lenience):
    target, draft = small_pair
    with pytest.raises(ValueError, match=r"lenience must be in \(0, 1\]"):
        sd.speculative_generate(target, draft, torch.tensor([PROMPT]), 3, temperature=1.0,
                                lenience=lenience)


def test_greedy_ignores_lenience():
    target = make_model(0, scale=0.3)
    prompt = torch.tensor([[1, 2, 3]])
    got, _ = sd.speculative_generate(target, noisy_copy(target, 0.05, 1), prompt, 20, k=3,
                                     lenience=0.3)
    assert torch.equal(got, sd.generate(target, prompt, 20))


@pytest.mark.parametrize("changes, message", [
    ({"temperatures": "0,-0.5"}, "--temperatures must be numbers >= 0"),
    ({"temperatures": "0,hot"}, "--temperatures takes numbers"),
    ({"top_p": 0.0}, r"--top_p must be in \(0, 1\]"),
    ({"top_p": 1.5}, r"--top_p must be in \(0, 1\]"),
    ({"leniences": "1,0"}, r"--leniences must each be in \(0, 1\]"),
    ({"leniences": "1.2"}, r"--leniences must each be in \(0, 1\]"),
    ({"top_k": -1}, "--top_k must be"),
    ({"ks": "1,0"}, "--k and --ks take whole numbers"),
    ({"drafts": "ngram"}, "this comparison measures"),
])
def test_bad_flags_are_one_line(changes, message):
    with pytest.raises(ValueError, match=message) as e:
        sc.check(sc.Args(**changes))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=message):   # --quick replaces flags, after checking
        sc.run(sc.Args(quick=True, **changes), log=lambda *a: None)


# ----------------------------------------------------------------------------------------------
# The cost side against hand computations


TINY = Config(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)


def test_macs_and_weights_by_hand():
    # Per block 12 C^2 + 2 C keys, with C = 16: 3072 + 32 keys; two blocks; head C V = 176.
    assert macs_per_position(TINY, 5) == 2 * (3072 + 32 * 5) + 176 == 6640
    # Per block 12 C^2 + 13 C = 3280; final LayerNorm 32; head (tied) 176.
    assert weights_read(TINY) == 2 * 3280 + 32 + 176 == 6768
    model = GPT(TINY)
    assert parameter_count(TINY) == sum(p.numel() for p in model.parameters())
    # Under the window rule: position 17 of a 16-token window is scored from 9..16 (8 tokens).
    assert keys_at(5, 16) == 5 and keys_at(16, 16) == 16 and keys_at(17, 16) == 8


def test_run_costs_replay_a_trace_by_hand():
    stats = sd.Stats(k=2)
    # Round 1 at length 3: two guesses, one kept (+ correction); round 2 at 5: one guess, none.
    stats.trace = [([4, 5], 1, 6), ([7], 0, 8)]
    stats.target_positions, stats.draft_positions = 3 + 2, 2 + 1
    stats.target_passes, stats.draft_passes = 2, 3
    draft = GPT(Config(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=8))
    costs = run_costs(TINY, draft, [(3, stats)])
    base = 2 * 3072 + 176                                     # a position with no keys
    assert costs["new_tokens"] == 3 and costs["wasted_positions"] == 2
    # The target scored positions 3, 4, 5 then 5, 6; plain decoding 3, 4, 5.
    assert costs["target_macs"] == 5 * base + 2 * 32 * (3 + 4 + 5 + 5 + 6)
    assert costs["plain_macs"] == 3 * base + 2 * 32 * (3 + 4 + 5)
    # The draft (1 x 8, V 11: 768 + 16 keys + 88) guessed at positions 3, 4 then 5.
    assert costs["draft_macs"] == 3 * (768 + 88) + 16 * (3 + 4 + 5)
    draft_weights = 12 * 64 + 13 * 8 + 16 + 88
    assert costs["spec_bytes_per_token"] == 4 * (2 * 6768 + 3 * draft_weights) / 3
    assert costs["plain_bytes_per_token"] == 4 * 6768


def test_stats_count_positions():
    target = make_model(0, scale=0.3)
    prompt = torch.tensor([[1, 2, 3]])
    _, stats = sd.speculative_generate(target, noisy_copy(target, 0.05, 1), prompt, 30, k=3)
    assert stats.target_positions == sum(len(p) + 1 for p, _, _ in stats.trace)
    assert stats.draft_positions == stats.proposed
    assert stats.target_positions - stats.new_tokens == sum(
        len(p) - kept for p, kept, _ in stats.trace)           # the wasted positions
    plain = sd.Stats()
    sd.generate(target, prompt, 30, stats=plain)
    assert plain.target_positions == 30 == plain.target_passes


# ----------------------------------------------------------------------------------------------
# The formulas: Corollary 3.9 and the best k


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 0.999), st.floats(0, 1))
def test_corollary_3_9(alpha, c):
    """Leviathan et al., Corollary 3.9: if alpha > c some k speeds up, by at least
    (1 + alpha) / (1 + c) (k = 1); and if alpha <= c none does, because
    1 + alpha + ... + alpha^k <= 1 + k alpha <= 1 + k c."""
    best = max(sd.expected_speedup(alpha, k, c) for k in range(1, 33))
    if alpha > c + 1e-9:
        assert sd.expected_speedup(alpha, 1, c) == pytest.approx((1 + alpha) / (1 + c))
        assert sd.expected_speedup(alpha, 1, c) > 1
        assert best >= (1 + alpha) / (1 + c) - 1e-12
    else:
        assert best <= 1 + 1e-9


def test_corollary_3_9_on_a_grid_and_the_break_even_at_k_1():
    grid = np.linspace(0, 0.99, 34)
    for alpha in grid:
        for c in grid:
            helps = any(sd.expected_speedup(alpha, k, c) > 1 + 1e-12 for k in range(1, 33))
            assert helps == (alpha > c + 1e-12), (alpha, c)
    for c in (0.05, 0.2, 0.5, 0.9):
        assert sd.break_even_alpha(1, c) == pytest.approx(c, abs=1e-9)


@pytest.mark.parametrize("alpha", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("c", [0.02, 0.1, 0.25])
def test_best_k_matches_a_simulated_decoder_within_one(alpha, c):
    """Rounds simulated with guesses kept independently with probability alpha, a round
    costing k c + 1 target steps: the best k by simulation is best_k's, within one."""
    rng = np.random.default_rng(0)
    rounds = 40000
    runs = rng.geometric(1 - alpha, rounds) - 1       # guesses a round would keep if k were inf
    speedups = {k: (np.minimum(runs, k) + 1).sum() / (rounds * (k * c + 1)) for k in range(1, 25)}
    assert abs(max(speedups, key=speedups.get) - sd.best_k(alpha, c)) <= 1


def test_best_k_absorbs_a_linear_verify_cost():
    # A check costing v0 + s k steps is a draft dearer by s: best_k(alpha, c + s, v0).
    alpha, c, v0, s = 0.85, 0.2, 1.1, 0.1
    direct = max(range(1, 33), key=lambda k: sd.expected_tokens_per_pass(alpha, k)
                 / (k * c + v0 + s * k))
    assert sd.best_k(alpha, c + s, v0) == direct


@pytest.mark.parametrize("heads", [False, True])
def test_alpha_compares_each_guess_with_the_targets_prediction_for_the_same_token(heads):
    # Row r of the target predicts token r + 1 (here: its argmax is r + 1). A draft model's row
    # t guesses token t + 1; head i (1-based) of the heads, reading the state at t, token t+1+i.
    V, T = 7, 20
    scored = object.__new__(sc.Scored)
    scored.first, scored.shift = 0, int(heads)
    scored.target = np.eye(V)[(np.arange(T)[None] + 1) % V] * 5             # (1, T, V)
    ahead = range(1, 4) if heads else [0]
    scored.guesses = [np.eye(V)[(np.arange(T)[None] + 1 + i) % V] * 5 for i in ahead]
    alphas, agree = scored.agreement(3, 0.0)
    assert agree == [1.0] * 3 and alphas == pytest.approx([1.0] * 3)
    scored.shift = 1 - scored.shift                                         # misaligned
    assert max(scored.agreement(3, 0.0)[1]) == 0.0
