"""Early exit that shares the big model's KV cache (beyond/early_exit.py): the big model's own
output, its sampling distribution, and every token through every layer only once."""

import numpy as np
import pytest
import torch
from test_speculative import (
    SMALL_V,
    chi_square_p_value,
    exact_distribution,
    make_model,
    prompts,  # noqa: F401 (fixtures)
    sample_counts,
    small_pair,
)

import gpt
import speculative as sd
from beyond.early_exit import EarlyExit, Layers, NumpyLayers, TorchLayers, first_layers
from beyond.fast_numpy import NumpyGPT
from harness.registry import by_name, check_name
from lessonkit import scorer


@pytest.fixture(scope="module")
def deep():
    """A 4-layer target with a 16-token window, as the big model is 4 layers deep."""
    return make_model(0, n_layer=4, scale=0.3)


def backend(model, name):
    return NumpyGPT(model) if name == "numpy" else model


@pytest.mark.parametrize("name", ["numpy", pytest.param("torch", marks=pytest.mark.slow)])
def test_greedy_is_plain_decoding_for_every_exit_and_k(deep, name):
    target = backend(deep, name)
    for L in (1, 2, 3):
        for k, idx in zip((1, 3, 6), prompts(3, seed=L)):
            for length in (9, 3 * target.c.block_size):  # three windows: jumps mid-round too
                want = sd.generate(target, idx, length)
                got, stats = sd.speculative_generate(target, EarlyExit(target, L), idx, length,
                                                     k=k)
                assert torch.equal(got, want), (name, L, k, length)
                assert stats.new_tokens == length


def count_layer_tokens(monkeypatch):
    """Tokens run through each layer: {layer: count}, for Layers.layers of either backend."""
    counts = {}
    for cls in (NumpyLayers, TorchLayers):
        def counted(self, x, row, lo, hi, run=cls.layers):
            for layer in range(lo, hi):
                counts[layer] = counts.get(layer, 0) + len(x)
            return run(self, x, row, lo, hi)
        monkeypatch.setattr(cls, "layers", counted)
    return counts


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_the_check_never_recomputes_what_the_draft_computed(name, monkeypatch):
    # Within one window, every position goes through every layer once, as in plain decoding:
    # the draft runs the lower layers, the check the upper ones (and the lower ones for the
    # last guess only). Recomputing the drafted positions' lower layers would count them twice.
    target = backend(make_model(3, block_size=64, n_layer=4, scale=0.3), name)
    counts = count_layer_tokens(monkeypatch)
    idx = prompts(1, seed=8)[0]
    for L, k in ((1, 4), (3, 2)):
        counts.clear()
        out, stats = sd.speculative_generate(target, EarlyExit(target, L), idx, 40, k=k)
        assert torch.equal(out, sd.generate(target, idx, 40))
        assert 0 < stats.accepted < stats.proposed  # guesses kept and rejected: rollbacks
        once = idx.shape[1] - 1 + stats.proposed + stats.rounds  # each round: k + 1 positions
        assert counts == {layer: once for layer in range(4)}, (L, k)
        assert stats.target_passes == stats.rounds  # one check per round


def test_a_rejected_guess_is_rolled_back_in_both_layer_groups():
    # Scores through the shared cache equal a plain cache's after any mix of growing,
    # shrinking (rejections), drafting and window jumps.
    model = NumpyGPT(make_model(5, n_layer=3, scale=0.3))
    shared = EarlyExit(model, 2).scorer_for(model)
    plain = scorer.WindowScorer(model)
    rng = np.random.default_rng(0)
    seq = rng.integers(0, model.c.vocab_size, 5).tolist()
    for _ in range(200):
        seq = seq[:max(1, len(seq) - int(rng.integers(0, 4)))]               # reject some
        seq += rng.integers(0, model.c.vocab_size, int(rng.integers(1, 6))).tolist()
        shared.exit_logits(seq, len(seq))                                    # the draft runs ahead
        seq += rng.integers(0, model.c.vocab_size, int(rng.integers(0, 3))).tolist()
        first = int(rng.integers(max(1, len(seq) - 8), len(seq) + 1))
        np.testing.assert_allclose(shared.score([seq], first), plain.score([seq], first),
                                   atol=1e-5)
    assert len(seq) > 3 * model.c.block_size


def test_the_exit_is_the_first_layers_model(deep):
    # The exit's logits are first_layers' (the draft without sharing) in both backends.
    idx = prompts(1, seed=6, max_len=12)[0]
    with torch.no_grad():
        want = first_layers(deep, 2)(idx)[0][0].numpy()                       # (T, V)
    for model in (deep, NumpyGPT(deep)):
        got = EarlyExit(model, 2).score(idx.tolist(), 1)[0]
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_another_target_checks_with_a_cache_of_its_own(deep):
    # The draft is `deep`'s first layers; a different target cannot share its cache, but its
    # output stays its own. The same model in another backend does share (the draft follows).
    other = make_model(7, n_layer=4, scale=0.3)
    drafter = EarlyExit(NumpyGPT(deep), 2)
    assert isinstance(drafter.scorer_for(other), scorer.WindowScorer)
    idx = prompts(1, seed=9)[0]
    got, _ = sd.speculative_generate(other, drafter, idx, 30, k=3)
    assert torch.equal(got, sd.generate(other, idx, 30))
    assert isinstance(drafter.scorer_for(deep).run, TorchLayers)


class Pretending(EarlyExit):
    """Negative control: samples its guesses from the exit but claims they were uniform."""

    def propose(self, seq, k, sampling):
        tokens, probs = super().propose(seq, k, sampling)
        return tokens, None if probs is None else np.full(probs.shape, 1 / self.vocab_size)


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_keeps_the_target_distribution(small_pair):  # noqa: F811
    target = NumpyGPT(small_pair[0])  # 2 layers: the draft is the first
    prompt = [1, 2, 0]
    want = exact_distribution(small_pair[0], prompt, 3, temperature=1.0)
    assert chi_square_p_value(sample_counts(target, EarlyExit(target, 1), prompt, 3, 3000, 0,
                                            temperature=1.0),
                              want) > 1e-3
    # A drafter that misreports the distributions of its guesses breaks exactness: caught with
    # a quarter of the runs (p about 1e-38 at this seed).
    counts = sample_counts(target, Pretending(target, 1), prompt, 3, 750, 0, temperature=1.0)
    assert chi_square_p_value(counts, want) < 1e-6


def test_by_name_gives_the_sharing_drafter_and_bad_exits_are_one_line_errors(deep, tmp_path):
    big = gpt.GPT(gpt.Config(block_size=16, n_layer=3, n_head=2, n_embd=16)).eval()
    gpt.save_checkpoint(tmp_path / "big.pt", big, step=0, val_loss=0.0)
    drafter = by_name("exit2", tmp_path, "numpy")
    assert isinstance(drafter, EarlyExit) and isinstance(drafter.model, NumpyGPT)
    assert isinstance(drafter.scorer_for(big).run, Layers)  # shares with the torch big model
    for bad in ("exit0", "exit3"):
        with pytest.raises(ValueError, match="an exit layer is between 1 and 2 for a 3-layer"):
            by_name(bad, tmp_path)
    for bad in (0, 4, -1):
        with pytest.raises(ValueError, match="exit layer is between 1 and 3"):
            EarlyExit(deep, bad)
    with pytest.raises(ValueError, match="unknown draft 'exit'"):
        check_name("exit")
