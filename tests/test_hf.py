"""beyond/hf.py against Hugging Face transformers itself: our models exported and imported, and
transformers' models (tiny random GPT-2 and Llama built from configs, never downloaded) decoded
through HFModel: greedy token for token equal to their own generate(), sampling exactly their
distribution. Skipped when transformers is not installed."""

import importlib.util
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_speculative import (
    broken_verify,
    chi_square_p_value,
    exact_distribution,
    make_model,
    sample_counts,
)

import gpt
import speculative as sd
from beyond import hf
from lessonkit import cli, machine

# transformers is imported by the tests, not here: pytest-xdist collects this file in every
# worker, and only the one that runs it needs transformers (half a second to import).
if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

V = 16


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Steps this small are slower shared between threads (lessonkit/machine.py), transformers' too."""
    import transformers
    transformers.logging.set_verbosity_error()  # no advice about generation configs in the output
    with machine.threads(1):
        yield


def scaled(model, scale, seed):
    """Larger random weights: peaked, varied distributions instead of near-uniform ones."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, scale)
    return model.eval()


def gpt2(seed, vocab_size=V, n_layer=2, n_embd=32, n_positions=64, scale=0.3):
    import transformers
    config = transformers.GPT2Config(vocab_size=vocab_size, n_positions=n_positions,
                                     n_embd=n_embd, n_layer=n_layer, n_head=2,
                                     bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return scaled(transformers.GPT2LMHeadModel(config), scale, seed)


def llama(seed, vocab_size=V, n_layer=2, scale=0.3):
    import transformers
    config = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=32,
                                      intermediate_size=64, num_hidden_layers=n_layer,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64, bos_token_id=None,
                                      eos_token_id=None, pad_token_id=None)
    return scaled(transformers.LlamaForCausalLM(config), scale, seed)


def noisy_copy(model, noise, seed):
    """A draft that agrees with the target often but not always."""
    torch.manual_seed(seed)
    copy = type(model)(model.config).eval()
    copy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in copy.parameters():
            p.add_(noise * torch.randn_like(p))
    return copy


def their_greedy(model, idx, n):
    return model.generate(idx, do_sample=False, max_new_tokens=n)


@pytest.fixture(scope="module")
def models():
    return {"gpt2": gpt2(0), "llama": llama(1)}


def prompt(length, seed, vocab_size=V):
    return torch.randint(0, vocab_size, (1, length), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------------
# 1. Export and import


@pytest.mark.parametrize("shape", [dict(n_layer=2, n_head=2, n_embd=16),
                                   dict(n_layer=1, n_head=4, n_embd=32)])
def test_round_trip_keeps_logits_and_greedy_output(tmp_path, shape):
    import transformers
    ours = scaled(gpt.GPT(gpt.Config(vocab_size=V, block_size=32, **shape)), 0.3, 3)
    hf.export(ours, tmp_path / "m", characters="abcdefghijklmnop")
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "m").eval()
    assert (tmp_path / "m" / "model.safetensors").exists()
    idx = torch.randint(0, V, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        difference = (theirs(idx).logits - ours(idx)[0]).abs().max().item()
    assert difference < 1e-5
    start = prompt(5, 1)
    want = sd.generate(ours, start, 27)                      # 32 tokens: the whole window
    assert torch.equal(their_greedy(theirs, start, 27), want)
    back, meta = hf.load(tmp_path / "m")
    assert meta["characters"] == "abcdefghijklmnop" and back.c == ours.c
    for name, p in ours.state_dict().items():
        assert torch.equal(back.state_dict()[name], p), name
    assert torch.equal(sd.generate(back, start, 27), want)


def test_round_trip_check_catches_a_missing_transpose():
    # Negative control: c_proj's weight is square, so forgetting its transpose fits every
    # shape; the logits comparison above must catch it.
    ours = make_model(4, block_size=16, vocab_size=V, scale=0.3)
    theirs = hf.to_transformers(ours)
    with torch.no_grad():
        w = theirs.transformer.h[0].attn.c_proj.weight
        w.copy_(w.t().clone())
    idx = prompt(16, 2)
    with torch.no_grad():
        assert (theirs(idx).logits - ours(idx)[0]).abs().max().item() > 1e-3


def test_importing_another_kind_of_model_is_refused(models, tmp_path):
    models["llama"].save_pretrained(tmp_path / "llama")
    with pytest.raises(ValueError, match="not one beyond.hf exported"):
        hf.load(tmp_path / "llama")
    with pytest.raises(ValueError, match="only GPT-2 models"):
        hf.from_transformers(models["llama"])
    plain_gelu = gpt2(0)
    plain_gelu.config.activation_function = "gelu"
    with pytest.raises(ValueError, match="activation_function='gelu'"):
        hf.from_transformers(plain_gelu)


# ----------------------------------------------------------------------------------------------
# 2. HFModel: greedy decoding equals transformers' own generate()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_plain_decoding_equals_their_generate(models, name):
    model = models[name]
    for seed, (length, n) in enumerate([(1, 30), (7, 40), (20, 44)]):
        start = prompt(length, seed)
        assert torch.equal(sd.generate(hf.HFModel(model), start, n), their_greedy(model, start, n))
    batch = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(9))
    assert torch.equal(sd.generate(hf.HFModel(model), batch, 20), their_greedy(model, batch, 20))


@pytest.mark.parametrize("name", ["gpt2", pytest.param("llama", marks=pytest.mark.slow)])
def test_speculative_decoding_equals_their_generate(models, name):
    target = models[name]
    drafts = {"noisy copy": noisy_copy(target, 0.05, 1),
              "other kind": llama(5) if name == "gpt2" else gpt2(5, n_layer=1)}
    accepted = 0
    for k in (1, 3, 6):
        start = prompt(2 + k, k)
        want = their_greedy(target, start, 40)
        for draft in drafts.values():
            got, stats = sd.speculative_generate(hf.HFModel(target), hf.HFModel(draft), start,
                                                 40, k=k)
            assert torch.equal(got, want), k
            assert stats.new_tokens == 40
            accepted += stats.accepted
    assert accepted > 0  # the noisy copy does get tokens accepted: the cache keeps them


class Contrarian(sd.Scorer):
    """A draft that always proposes a token the target would not choose."""

    def __init__(self, target):
        self.target, self.vocab_size = target, target.vocab_size

    def reset(self):
        self.target.reset()

    def score(self, seqs, first):
        logits = self.target.score(seqs, first)              # (B, T, V)
        return np.eye(self.vocab_size)[(logits.argmax(-1) + 1) % self.vocab_size]


def test_rejected_tokens_are_cropped_from_the_cache(models, monkeypatch):
    target = models["gpt2"]
    start = prompt(4, 3)
    want = their_greedy(target, start, 30)
    draft = Contrarian(hf.HFModel(target))
    got, stats = sd.speculative_generate(hf.HFModel(target), draft, start, 30, k=3)
    assert torch.equal(got, want)
    assert stats.accepted == 0 and stats.proposed > 0
    # Negative control: a cache that forgets to crop keeps the rejected guesses (10 tokens:
    # they would soon overflow the 64 positions).
    monkeypatch.setattr(hf.DynamicKV, "rollback", lambda self, length: None)
    got, _ = sd.speculative_generate(hf.HFModel(target), draft, start, 10, k=3)
    assert not torch.equal(got, want[:, :14])


def test_contexts_longer_than_the_window_follow_the_window_rule():
    # Our GPT with a 16-token window, exported: transformers' GPT-2 cannot look further back
    # than n_positions, so HFModel must jump windows exactly where speculative.py does.
    ours = make_model(6, block_size=16, vocab_size=V, scale=0.3)
    theirs = hf.to_transformers(ours)
    draft = hf.to_transformers(make_model(7, block_size=16, vocab_size=V, n_layer=1, scale=0.3))
    start = prompt(5, 4)
    want = sd.generate(ours, start, 3 * 16)
    assert torch.equal(sd.generate(hf.HFModel(theirs), start, 3 * 16), want)
    for k in (2, 5):
        got, _ = sd.speculative_generate(hf.HFModel(theirs), hf.HFModel(draft), start, 3 * 16,
                                         k=k)
        assert torch.equal(got, want)


# ----------------------------------------------------------------------------------------------
# 2. HFModel: sampling keeps the target's exact distribution


SMALL_V = 4


class Logits:
    """exact_distribution's view of a transformers model: .c.vocab_size and (logits,)."""

    def __init__(self, model):
        self.model, self.c = model, SimpleNamespace(vocab_size=model.config.vocab_size)

    def __call__(self, idx):
        return (self.model(idx).logits,)


@pytest.fixture(scope="module")
def small_pair():
    return gpt2(10, vocab_size=SMALL_V, scale=0.5), llama(11, SMALL_V, n_layer=1, scale=0.5)


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_matches_the_target_distribution(small_pair, monkeypatch):
    target, draft = small_pair
    start = [1, 2, 0]
    with torch.no_grad():
        want = exact_distribution(Logits(target), start, 3, temperature=1.0)
    counts = sample_counts(hf.HFModel(target), hf.HFModel(draft), start, 3, 1500, seed=0,
                           temperature=1.0)
    assert chi_square_p_value(counts, want) > 1e-3
    # Negative control: resampling from the target instead of the residual is caught, with
    # fewer runs than the test above (p about 1e-11 at this seed; 1e-19 at 1500 runs).
    monkeypatch.setattr(sd, "verify", broken_verify)
    counts = sample_counts(hf.HFModel(target), hf.HFModel(draft), start, 3, 1000, seed=0,
                           temperature=1.0)
    assert chi_square_p_value(counts, want) < 1e-6


def test_plain_sampling_of_a_batch_matches_too(small_pair):
    target, _ = small_pair
    with torch.no_grad():
        want = exact_distribution(Logits(target), [3, 1], 2, temperature=0.8, top_k=3)
    g = torch.Generator().manual_seed(1)
    out = sd.generate(hf.HFModel(target), torch.tensor([[3, 1]] * 3000), 2, temperature=0.8,
                      top_k=3, generator=g)
    counts = {}
    for row in out[:, 2:].tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    assert chi_square_p_value(counts, want) > 1e-3


# ----------------------------------------------------------------------------------------------
# 2. HFModel: vocabularies and models it cannot use


def test_vocabularies_must_match_and_padding_can_be_cut(models):
    target, padded = models["gpt2"], gpt2(12, vocab_size=V + 3)
    with pytest.raises(ValueError, match="vocabulary"):
        sd.speculative_generate(hf.HFModel(target), hf.HFModel(padded), prompt(3, 0), 5)
    cut = hf.HFModel(padded, vocab_size=V)
    assert cut.vocab_size == V and cut.score([[1, 2, 3]], 1).shape == (1, 3, V)
    got, _ = sd.speculative_generate(hf.HFModel(target), cut, prompt(3, 0), 20, k=3)
    assert torch.equal(got, their_greedy(target, prompt(3, 0), 20))


class NoCache(torch.nn.Module):
    config = SimpleNamespace(vocab_size=V, is_encoder_decoder=False)

    def forward(self, input_ids):
        return None


def test_a_model_without_a_kv_cache_is_a_one_line_error():
    with pytest.raises(ValueError, match="not a causal LM with a KV cache"):
        hf.HFModel(NoCache())


# ----------------------------------------------------------------------------------------------
# The command line: one line for each mistake, nothing overwritten without --force


def run_cli(argv, capsys):
    """beyond/hf.py's main as `python -m beyond.hf ...` runs it: (exit code, stdout, stderr)."""
    try:
        cli.run(hf.main, argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(result, *words):
    code, _, err = result
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.fixture
def trained(tmp_path):
    """A checkpoint of the "draft" preset (random weights, the test corpus' characters)."""
    model = scaled(gpt.GPT(gpt.Config(block_size=16, n_layer=1, n_head=2, n_embd=16)), 0.3, 0)
    gpt.save_checkpoint(tmp_path / "ckpt" / "draft.pt", model, step=7, val_loss=2.5)
    return model, tmp_path


def test_export_then_import_from_the_command_line(trained, capsys):
    model, tmp = trained
    out = tmp / "draft-hf"
    code, said, _ = run_cli(["export", "--preset", "draft", "--checkpoints", str(tmp / "ckpt"),
                             "--out", str(out)], capsys)
    assert code == 0 and "wrote" in said
    meta = json.loads((out / "specdec.json").read_text())
    assert meta["characters"] == gpt.vocab() and meta["step"] == 7
    written = (out / "model.safetensors").read_bytes()
    one_line_error(run_cli(["export", "--preset", "draft", "--checkpoints", str(tmp / "ckpt"),
                            "--out", str(out)], capsys), "exists", "--force")
    assert (out / "model.safetensors").read_bytes() == written
    code, _, _ = run_cli(["export", "--preset", "draft", "--checkpoints", str(tmp / "ckpt"),
                          "--out", str(out), "--force"], capsys)
    assert code == 0
    code, _, _ = run_cli(["import", str(out), "--preset", "draft", "--checkpoints",
                          str(tmp / "back")], capsys)
    assert code == 0
    back, state = gpt.load_checkpoint(tmp / "back" / "draft.pt")
    assert state["step"] == 7 and state["val_loss"] == 2.5
    for name, p in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], p), name
    one_line_error(run_cli(["import", str(out), "--preset", "draft", "--checkpoints",
                            str(tmp / "back")], capsys), "exists", "--force")


def test_command_line_mistakes(trained, capsys, monkeypatch):
    _, tmp = trained
    (tmp / "empty").mkdir()
    one_line_error(run_cli(["import", str(tmp / "empty"), "--checkpoints", str(tmp / "x")],
                           capsys), "holds no transformers model")
    one_line_error(run_cli(["export", "--preset", "huge", "--out", str(tmp / "o")], capsys),
                   "unknown preset 'huge'")
    one_line_error(run_cli(["export", "--preset", "names", "--checkpoints", str(tmp / "ckpt"),
                            "--out", str(tmp / "o")], capsys), "no checkpoint", "train.py")
    one_line_error(run_cli(["frobnicate"], capsys), "invalid choice")
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    one_line_error(run_cli(["export", "--preset", "draft", "--checkpoints", str(tmp / "ckpt"),
                            "--out", str(tmp / "o")], capsys),
                   "not installed", "pip install -e '.[hf]'")


def test_help_explains_every_flag(capsys):
    for command, flags in [("export", ["--preset", "--out", "--force", "--checkpoints"]),
                           ("import", ["directory", "--preset", "--force", "--checkpoints"])]:
        code, said, _ = run_cli([command, "-h"], capsys)
        assert code == 0
        for flag in flags:
            assert flag in said, (command, flag)
