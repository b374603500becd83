"""The model: shapes, causality, and the KV cache against full recomputation."""

import random

import pytest
import torch
from conftest import tiny_config

import gpt
from beyond import presets
from gpt import GPT
from lessonkit import corpus


@pytest.fixture
def model():
    torch.manual_seed(0)
    return GPT(tiny_config(vocab_size=13)).eval()


def test_logits_at_every_position(model):
    idx = torch.randint(0, 13, (3, 20))
    logits, loss = model(idx)
    assert logits.shape == (3, 20, 13) and loss is None
    _, loss = model(idx, idx)
    assert loss.ndim == 0 and loss.item() > 0


def test_gpt2_parameter_names(model):
    names = set(model.state_dict())
    for name in ["transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                 "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight",
                 "transformer.h.0.ln_2.bias", "transformer.h.1.mlp.c_fc.weight",
                 "transformer.h.1.mlp.c_proj.bias", "transformer.ln_f.weight", "lm_head.weight"]:
        assert name in names, name


def causal_violation(model):
    """Largest change of earlier logits when later tokens change."""
    idx = torch.randint(0, 13, (2, 24))
    other = idx.clone()
    other[:, 12:] = torch.randint(0, 13, (2, 12))
    with torch.no_grad():
        return (model(idx)[0][:, :12] - model(other)[0][:, :12]).abs().max().item()


def test_causal(model, monkeypatch):
    assert causal_violation(model) == 0.0
    # Negative control: attention that may look ahead must be caught by the same check.
    real = gpt.F.scaled_dot_product_attention
    monkeypatch.setattr(gpt.F, "scaled_dot_product_attention",
                        lambda q, k, v, attn_mask=None, is_causal=False, dropout_p=0.0:
                        real(q, k, v, dropout_p=dropout_p))
    assert causal_violation(model) > 1e-4


def replay_with_cache(model, steps, seed, rollback_works=True):
    """Random extends (1-6 tokens) and rollbacks; return the largest difference between the
    cached logits and the full recomputation of the same sequence."""
    rng = random.Random(seed)
    cache = model.new_cache(2)
    seq = torch.zeros(2, 0, dtype=torch.long)
    worst = 0.0
    for _ in range(steps):
        if seq.shape[1] > 3 and rng.random() < 0.3:  # throw away some tokens, as after a rejection
            keep = rng.randint(1, seq.shape[1] - 1)
            seq = seq[:, :keep]
            if rollback_works:
                cache.rollback(keep)
        room = model.c.block_size - cache.length
        if room == 0:
            seq, cache = seq[:, :0], model.new_cache(2)
            room = model.c.block_size
        new = torch.randint(0, 13, (2, rng.randint(1, min(6, room))))
        seq = torch.cat([seq, new], 1)
        with torch.no_grad():
            got = model(new, cache=cache)[0]
            want = model(seq)[0][:, -new.shape[1]:]
        worst = max(worst, (got - want).abs().max().item())
    return worst


def test_kv_cache_equals_recomputation(model):
    assert replay_with_cache(model, steps=200, seed=1) < 1e-5


def test_kv_cache_check_catches_missing_rollback(model):
    # Negative control: forgetting to roll back after a rejection must show up.
    assert replay_with_cache(model, steps=200, seed=1, rollback_works=False) > 1e-3


def test_rollback_bounds(model):
    cache = model.new_cache()
    model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    with pytest.raises(AssertionError):
        cache.rollback(6)


def test_too_long_is_a_clear_error(model):
    with pytest.raises(ValueError, match="do not fit the model's window of 32"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_config_checks_heads():
    with pytest.raises(ValueError, match="multiple of n_head"):
        tiny_config(n_embd=30, n_head=4)


def test_default_config_is_the_lesson_big_model():
    c = gpt.Config()
    assert (c.n_layer, c.n_head, c.n_embd) == (4, 4, 128) and c.block_size >= 64
    assert GPT(c).c.vocab_size == c.vocab_size == len(gpt.vocab())  # filled in by the model
    assert presets.preset("draft").config == gpt.Config(n_embd=32, n_layer=1, n_head=2)
    with pytest.raises(ValueError, match="unknown preset"):
        presets.preset("huge")


def test_a_config_reads_nothing(monkeypatch):
    # Building a Config reads no file and prepares no corpus (which may download); the model
    # reads the vocabulary when it is built. Negative control: the model does read it.
    monkeypatch.setattr(corpus, "_loaded", {})
    reads = []
    monkeypatch.setattr(corpus, "prepare", lambda *a, **k: reads.append(1) or {"vocab": "ab"})
    c = gpt.Config(n_embd=32, n_layer=1, n_head=2)
    assert c.vocab_size == 0 and not reads
    assert GPT(c).c.vocab_size == 2 and reads
