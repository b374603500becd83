"""Batched decoding (beyond/batched.py): every row of a batch exactly as if decoded alone (greedy),
with exactly the target's distribution (sampling), whatever the rows' lengths and windows."""

from collections import Counter

import numpy as np
import pytest
import torch
from test_speculative import (
    Contrarian,
    V,
    broken_verify,
    chi_square_p_value,
    exact_distribution,
    make_model,
    noisy_copy,
    small_pair,
    target,  # noqa: F401 (fixtures)
)

import gpt
import speculative as sd
from beyond import batched
from harness import batch_curve
from beyond.adaptive import Heuristic
from beyond.early_exit import EarlyExit
from beyond.fast_numpy import NumpyGPT
from beyond.ngram import NGramDraft
from lessonkit import machine, scorer


def ragged(n, seed=0, max_len=20, vocab=V):
    """n prompts of 1..max_len-1 tokens (lists)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(torch.randint(1, max_len, (1,), generator=g)),),
                          generator=g).tolist() for _ in range(n)]


def alone(model, prompts, n):
    """Each prompt decoded on its own (speculative.generate's one-row path)."""
    return [sd.generate(model, torch.tensor([p]), n)[0].tolist() for p in prompts]


@pytest.fixture(autouse=True)
def one_thread():
    """Decoding runs on one torch thread (lessonkit/machine.py); so do this file's reference passes,
    which two threads on a busy 2-core machine slow down many times."""
    with machine.threads(1):
        yield


def backend(model, name):
    return NumpyGPT(model) if name == "numpy" else model


# ----------------------------------------------------------------------------------------------
# The per-row forward pass on the ragged cache


def forward(scorer, segments):
    return scorer.forward(scorer.model, scorer.cache, *batched.layout(segments, scorer.block_size))


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_ragged_forward_gives_each_rows_own_logits(target, name):
    model = backend(target, name)
    scorer = batched.BatchScorer(model, 4)
    for array in (scorer.cache.k, scorer.cache.v):  # stale entries everywhere: must not matter
        array[:] = 7.0 if name == "numpy" else torch.full_like(array, 7.0)
    seqs = ragged(4, seed=1, max_len=12)
    g = torch.Generator().manual_seed(2)
    more = [torch.randint(0, V, (1 + i % 3,), generator=g).tolist() for i in range(4)]
    first = forward(scorer, [(b, seq, 0) for b, seq in enumerate(seqs)])        # rows 0..3
    # Rows 2 and 0 only (not in order), each going on from its own length.
    second = forward(scorer, [(b, more[b], len(seqs[b])) for b in (2, 0)])
    with torch.no_grad():
        for b in range(4):
            want = target(torch.tensor([seqs[b] + more[b]]))[0][0].numpy()     # (T, V)
            np.testing.assert_allclose(first[b, :len(seqs[b])], want[:len(seqs[b])], atol=1e-4)
        for i, b in enumerate((2, 0)):
            want = target(torch.tensor([seqs[b] + more[b]]))[0][0, len(seqs[b]):].numpy()
            np.testing.assert_allclose(second[i, :len(more[b])], want, atol=1e-4)


def test_ragged_forward_check_catches_a_mask_that_ignores_lengths(target, monkeypatch):
    # Negative control: attending to every slot (the future, stale entries, the padding's)
    # must change the logits of the test above.
    monkeypatch.setattr(batched, "visible", lambda slots, E: np.ones(slots.shape + (E,), bool))
    with pytest.raises(AssertionError):
        test_ragged_forward_gives_each_rows_own_logits(target, "numpy")


# ----------------------------------------------------------------------------------------------
# Greedy: every row is plain decoding of that row alone


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_plain_batched_is_each_row_alone(target, name):
    model = backend(target, name)
    prompts = ragged(7, seed=3)
    for n in (1, 3 * target.c.block_size):             # up to three windows: jumps per row
        want = alone(model, prompts, n)
        for size in (1, 2, 7):
            assert batched.generate(model, prompts[:size], n) == want[:size], (n, size)


def drafters(target):
    """Model drafts in both backends (one with a smaller window: its jumps fall elsewhere), the
    n-gram table (proposes row by row) and a score()-only draft that never agrees."""
    data = np.array(sum(ragged(40, seed=9), []))
    return {"noisy": noisy_copy(target, 0.05, 1),
            "noisy numpy": NumpyGPT(noisy_copy(target, 0.05, 1)),
            "small window": make_model(2, block_size=8, n_layer=1),
            "ngram": NGramDraft.from_data(data, V, 3, prompt_lookup=True),
            "contrarian": Contrarian(target)}


@pytest.mark.parametrize("name", ["numpy", "torch"])
@pytest.mark.parametrize("k", [1, pytest.param(3, marks=pytest.mark.slow),
                               pytest.param(6, marks=pytest.mark.slow)])
def test_speculative_batched_is_plain_decoding(target, k, name):
    prompts = ragged(6, seed=10 + k)
    model, accepted = backend(target, name), 0
    for n in (5, 3 * target.c.block_size):
        want = alone(model, prompts, n)
        for draft_name, draft in drafters(target).items():
            got, stats = batched.speculative_generate(model, draft, prompts, n, k=k)
            assert got == want, (n, draft_name)
            assert [r.new_tokens for r in stats.rows] == [n] * len(prompts)
            accepted += stats.accepted
    assert accepted > 0


def test_speculative_is_exact_at_every_batch_size(target):
    prompts = ragged(9, seed=4)
    want = alone(target, prompts, 40)
    draft = NumpyGPT(noisy_copy(target, 0.05, 1))
    for size in (1, 2, 3, 9):
        got, _ = batched.speculative_generate(NumpyGPT(target), draft, prompts[:size], 40, k=4)
        assert got == want[:size], size


def test_the_one_row_paths_agree(target):
    # Shared-pass drafters (early exit) and an adaptive k decode the rows one after another.
    prompts = ragged(3, seed=6)
    want = alone(target, prompts, 30)
    got, stats = batched.speculative_generate(target, EarlyExit(target, 1), prompts, 30, k=3)
    assert got == want and len(stats.rows) == 3
    got, _ = batched.speculative_generate(target, noisy_copy(target, 0.05, 1), prompts, 30,
                                          k=Heuristic(2, 6))
    assert got == want


def test_the_lessons_decoder_takes_a_batch_row_by_row(target):
    # speculative.py decodes the rows of a batch one after another, with the same output as
    # here, where they share passes; its Stats are the rows' sums (tokens per pass per row).
    idx = torch.randint(0, V, (3, 5), generator=torch.Generator().manual_seed(0))
    draft = noisy_copy(target, 0.05, 1)
    out, stats = sd.speculative_generate(target, draft, idx, 20, k=3)
    assert torch.equal(out, torch.tensor(alone(target, idx.tolist(), 20)))
    assert torch.equal(sd.generate(target, idx, 20), out)
    together, batch_stats = batched.speculative_generate(target, draft, idx, 20, k=3)
    assert torch.equal(together, out)
    assert stats.new_tokens == 60 and stats.target_passes == sum(
        r.target_passes for r in batch_stats.rows)
    assert batch_stats.batch_passes < stats.target_passes       # the batch shares its passes


def test_batch_stats_read_per_row_with_the_batch_figures_under_their_own_names(target):
    # Ten copies of one prompt: every row writes the same text in the same rounds as the row
    # decoded alone, so each per-row figure equals the single row's; the batch's passes are
    # shared (about one per round), so its own figure is about ten times larger.
    prompt = torch.randint(0, V, (1, 5), generator=torch.Generator().manual_seed(3))
    draft = noisy_copy(target, 0.05, 1)
    _, one = sd.speculative_generate(target, draft, prompt, 30, k=4)
    _, ten = batched.speculative_generate(target, draft, prompt.repeat(10, 1), 30, k=4)
    assert 1 <= ten.tokens_per_pass <= 5                              # a row's: 1 to k + 1
    assert ten.tokens_per_pass == pytest.approx(one.tokens_per_pass)
    assert ten.acceptance_rate == pytest.approx(one.acceptance_rate)
    assert ten.kept_of_checked == pytest.approx(one.kept_of_checked)
    assert (ten.target_passes, ten.new_tokens, ten.rounds) == \
        (10 * one.target_passes, 10 * one.new_tokens, 10 * one.rounds)
    assert ten.batch_passes == one.target_passes and ten.batch_rounds == one.rounds
    assert ten.tokens_per_batch_pass == pytest.approx(10 * one.tokens_per_pass)
    plain = batched.BatchStats()
    batched.generate(target, prompt.repeat(10, 1), 30, stats=plain)
    assert plain.tokens_per_pass <= 1 and plain.tokens_per_batch_pass > 9   # plain: 1 a pass


# ----------------------------------------------------------------------------------------------
# Negative controls: the checks above catch a wrong window rule and a shared cache length


def test_greedy_check_catches_a_window_mismatch(target, monkeypatch):
    prompts = ragged(3, seed=5)
    want = alone(target, prompts, 40)
    monkeypatch.setattr(scorer, "window_start", lambda n, block: max(0, n - block))
    got, _ = batched.speculative_generate(target, noisy_copy(target, 0.05, 1), prompts, 40, k=4)
    assert got != want


def test_greedy_check_catches_one_length_for_the_whole_batch(target, monkeypatch):
    # As if the cache kept one length for all rows (gpt.KVCache's): every row's new tokens
    # at the longest row's slots. Rows of different lengths must then go wrong.
    prompts = ragged(3, seed=5)
    want = alone(target, prompts, 15)
    layout = batched.layout

    def one_length(segments, block_size):
        top = max(slot for _, _, slot in segments)
        return layout([(b, new, min(top, block_size - len(new))) for b, new, _ in segments],
                      block_size)
    monkeypatch.setattr(batched, "layout", one_length)
    got, _ = batched.speculative_generate(target, noisy_copy(target, 0.05, 1), prompts, 15, k=4)
    assert got != want


# ----------------------------------------------------------------------------------------------
# Stats: per row and in total


def test_stats_per_row_and_in_total(target):
    prompts = ragged(5, seed=7)
    out, stats = batched.speculative_generate(target, noisy_copy(target, 0.05, 1), prompts, 30,
                                              k=4)
    rows = stats.rows
    for name in ("proposed", "accepted", "rounds", "new_tokens", "target_positions",
                 "draft_positions"):
        assert getattr(stats, name) == sum(getattr(r, name) for r in rows), name
    assert stats.accepted_per_position == [sum(c) for c in zip(*(r.accepted_per_position
                                                                for r in rows))]
    assert stats.new_tokens == 5 * 30 and stats.tokens_per_pass == 150 / stats.target_passes
    assert stats.target_passes == sum(r.target_passes for r in rows)      # per row ...
    assert stats.batch_rounds <= stats.batch_passes < stats.target_passes  # ... the batch shares
    for prompt, row, seq in zip(prompts, rows, out):
        assert row.new_tokens == 30 == row.accepted + row.rounds
        assert row.target_positions == row.proposed + row.rounds == row.draft_positions + row.rounds
        replay = list(prompt)
        for proposed, kept, token in row.trace:
            replay += proposed[:kept] + [token]
        assert replay == seq


def test_draft_equal_to_target_counts_whole_batch_passes():
    model = make_model(0, block_size=64)
    prompts = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1, 1]]
    for k in (1, 4):
        _, stats = batched.speculative_generate(model, model, prompts, 5 * (k + 1), k=k)
        assert stats.acceptance_rate == 1.0
        assert stats.batch_passes == 5 and stats.tokens_per_batch_pass == 4 * (k + 1)
        assert stats.target_passes == 4 * 5 and stats.tokens_per_pass == k + 1
        assert stats.accepted_per_position == [4 * 5] * k


# ----------------------------------------------------------------------------------------------
# Sampling: every row has exactly the target's distribution


PROMPTS = ([1, 2, 0], [3, 1])  # alternating rows: a mix-up between rows shows


def batch_counts(target, draft, n_calls, seed, rows=200, **warp):
    g = torch.Generator().manual_seed(seed)
    counts = [Counter(), Counter()]
    prompts = [list(PROMPTS[i % 2]) for i in range(rows)]
    for _ in range(n_calls):
        out, _ = batched.speculative_generate(target, draft, prompts, 3, k=2, generator=g, **warp)
        for i, seq in enumerate(out):
            counts[i % 2][tuple(seq[-3:])] += 1
    return counts


def p_values(small_pair, counts, **warp):  # noqa: F811
    target, _ = small_pair
    return [chi_square_p_value(c, exact_distribution(target, list(p), 3, **warp))
            for c, p in zip(counts, PROMPTS)]


@pytest.mark.parametrize("warp, name", [({"temperature": 1.0}, "torch"),
                                        ({"temperature": 0.7, "top_p": 0.8}, "numpy")])
@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_matches_the_target_distribution_per_row(small_pair, warp, name):  # noqa: F811
    target, draft = small_pair
    counts = batch_counts(backend(target, name), backend(draft, name), 30, seed=0, **warp)
    assert min(p_values(small_pair, counts, **warp)) > 1e-3


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_test_catches_broken_batching(small_pair, monkeypatch):  # noqa: F811
    target, draft = small_pair
    # Broken 1: resampling from the target instead of the residual after a rejection.
    monkeypatch.setattr(sd, "verify", broken_verify)  # Sampling.verdict calls it
    assert max(p_values(small_pair, batch_counts(target, draft, 30, seed=0, temperature=1.0),
                        temperature=1.0)) < 1e-6
    monkeypatch.undo()
    # Broken 2: each row checked against the draft probabilities of its neighbour.
    pick = batched.next_tokens

    def mixed_up(scorer, seqs, rows, sampling):
        tokens, probs = pick(scorer, seqs, rows, sampling)
        return tokens, None if probs is None else np.roll(probs, 1, axis=0)
    monkeypatch.setattr(batched, "next_tokens", mixed_up)
    assert max(p_values(small_pair, batch_counts(target, draft, 30, seed=0, temperature=1.0),
                        temperature=1.0)) < 1e-6


def test_plain_batched_sampling_matches_per_row(small_pair):  # noqa: F811
    target, _ = small_pair
    g = torch.Generator().manual_seed(1)
    prompts = [list(PROMPTS[i % 2]) for i in range(6000)]
    counts = [Counter(), Counter()]
    for i, seq in enumerate(batched.generate(target, prompts, 3, temperature=1.0, generator=g)):
        counts[i % 2][tuple(seq[-3:])] += 1
    assert min(p_values(small_pair, counts, temperature=1.0)) > 1e-3


# ----------------------------------------------------------------------------------------------
# Bad input, one line each


def test_bad_prompts_are_one_line_errors(target):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        batched.generate(target, [[1, 2], []], 3)
    with pytest.raises(ValueError, match=r"prompt 0 holds 11, not a token id .*0\.\.10"):
        batched.speculative_generate(target, target, [[1, V], [2]], 3)
    with pytest.raises(ValueError, match="at least one prompt"):
        batched.generate(target, [], 3)
    with pytest.raises(ValueError, match="unknown characters"):
        gpt.encode("ROMEO\u00e9")  # characters outside the vocabulary: gpt.encode says which
    with pytest.raises(ValueError, match="vocabulary"):
        batched.speculative_generate(target, make_model(0, vocab_size=V + 1), [[1], [2]], 3)


def test_a_batch_too_big_for_memory_is_refused_before_allocating(target, monkeypatch):
    monkeypatch.setattr(batched, "available_memory", lambda model: 2**20)  # 1 MiB free
    assert batched.cache_bytes(target, 1000) == 1000 * 2 * 17 * 16 * 2 * 4  # (block + 1 slots)
    batched.generate(target, [[1]] * 10, 1)                     # 22 kB of cache: fine
    with pytest.raises(ValueError, match=r"a batch of 1000 rows needs .* GiB .*smaller batches"):
        batched.generate(target, [[1]] * 1000, 1)
    with pytest.raises(ValueError, match="smaller batches"):
        batched.speculative_generate(target, target, torch.ones(1000, 1, dtype=torch.long), 1)


# ----------------------------------------------------------------------------------------------
# The measurement exercise 5 can call


class Ticks:
    """A clock that moves one second per reading: a pass timed with it lasts exactly 1 s."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


def test_encode_time_counts_the_passes_that_start_a_window(target, monkeypatch):  # noqa: F811
    """BatchStats.encode_time holds the passes where some row encodes from the start of its
    window: the prompts, and each window jump (block 16: the window jumps to predict positions
    17 and 26), never the decoding steps. With a clock that ticks once per reading, each such
    pass adds exactly 1 s."""
    monkeypatch.setattr(batched, "time", Ticks())
    rows = [[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]]
    short, long_ = batched.BatchStats(), batched.BatchStats()
    batched.generate(target, rows, 6, stats=short)      # up to position 11: the prompt alone
    batched.generate(target, rows, 22, stats=long_)     # up to 26: the prompt and two jumps
    assert short.encode_time == 1 and short.batch_passes == 6
    assert long_.encode_time == 3
    draft = make_model(1)
    _, stats = batched.speculative_generate(target, draft, rows, 6, k=2)
    assert stats.encode_time == 2                        # each model's prompt pass


def test_encoding_splits_a_run_into_encoding_and_the_rest():
    plain = batched.BatchStats(target_time=10.0, encode_time=3.0)
    speculative = batched.BatchStats(draft_time=1.0, target_time=5.0, encode_time=3.0)
    split = batch_curve.encoding(plain, speculative)
    assert split["encode_share_plain"] == pytest.approx(0.3)
    assert split["encode_share_spec"] == pytest.approx(0.5)
    assert split["steps_speedup"] == pytest.approx(7 / 3)
    assert "the rest 2.33x" in batch_curve.split_text(split)
    assert batch_curve.encoding(plain, None)["steps_speedup"] is None     # batch 1


def test_batch_curve_and_rows_vs_batch_run(target):
    prompts = ragged(4, seed=8)
    rows = batch_curve.batch_curve(target, noisy_copy(target, 0.05, 1), prompts, (1, 4), (1, 2),
                               new_tokens=6, repeats=1, pass_repeats=3, log=lambda *a: None)
    assert [(r["batch"], r["k"]) for r in rows] == [(1, 1), (1, 2), (4, 1), (4, 2)]
    assert all(r["speedup"] > 0 and r["predicted"] > 0 for r in rows)
    # A row writes 1..k+1 tokens a round; the batch runs as many rounds as its slowest row.
    assert all(1 <= r["tokens_per_row_round"] <= r["k"] + 1 for r in rows)
    assert all(r["rounds_over_row_mean"] >= 1 for r in rows)
    assert all(r["rounds_over_row_mean"] == 1 for r in rows if r["batch"] == 1)
    assert set(batch_curve.best_by_size(rows)) == {1, 4}
    rows_s, batch_s, ratio, _ = batch_curve.rows_vs_batch(target, prompts, 6, repeats=1)
    assert rows_s > 0 and batch_s > 0 and ratio > 0
    bound = batch_curve.ceiling([r for r in rows if r["batch"] == 4], 1.5)
    assert set(bound["free"]) == set(bound["alpha"]) == {1, 2}
    assert "the bound: a free, always-right drafter" in batch_curve.ceiling_text(bound, 1.5)


def test_ceiling_on_known_costs():
    """The bound at one batch size, on made-up checks: at k = 3 a check of 4 tokens costs 2
    steps (a free, always-right drafter gains 2x); at k = 1 it costs 2 (gains 1x: no alpha
    gives 1.5x). The alpha it names gives exactly 1.5x with the drafter's c."""
    rows = [{"k": 1, "verify_cost": 2.0, "c": 0.05, "alpha": 0.8},
            {"k": 3, "verify_cost": 2.0, "c": 0.05, "alpha": 0.8}]
    bound = batch_curve.ceiling(rows, 1.5)
    assert bound["free"] == {1: pytest.approx(1.0), 3: pytest.approx(2.0)}
    assert bound["alpha"][1] != bound["alpha"][1]                      # nan: out of reach
    assert sd.expected_speedup(bound["alpha"][3], 3, 0.05, 2.0) == pytest.approx(1.5)
    text = batch_curve.ceiling_text(bound, 1.5)
    assert "at most 2.00x (k = 3)" in text and f"alpha of {bound['alpha'][3]:.2f} (k = 3)" in text
