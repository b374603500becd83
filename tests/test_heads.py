"""Extra heads (beyond/heads.py): the drafter reads the state the big model's own pass computed,
greedy output stays the big model's, sampling keeps its distribution, training resumes."""

import importlib.util
import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config
from test_speculative import (
    V,
    chi_square_p_value,
    exact_distribution,
    make_model,
    prompts,
    sample_counts,  # noqa: F401 (fixtures)
    small_pair,
    target,
)

import gpt
import speculative as sd
from beyond import heads as heads_module
from beyond import presets
from harness import registry
from beyond.fast_numpy import NumpyGPT
from beyond.heads import (
    Heads,
    HeadsConfig,
    HeadsDraft,
    agreement,
    final_states,
    heads_path,
    train,
)
from harness.registry import by_name
from lessonkit import parts

QUICK = dict(steps=40, batch_size=8, save_every=40, threads=1)


def trained_heads(big, tmp_path, n_heads=3, **changes):
    """Heads trained for a few seconds on random tokens (they learn the big model's habits)."""
    source = torch.randint(0, big.c.vocab_size, (2000,), generator=torch.Generator().manual_seed(0))
    hc = HeadsConfig(**{**QUICK, "heads": n_heads, **changes})
    return train(big, hc, tmp_path / "heads.pt", source=source, log=lambda line: None)


@pytest.fixture(scope="module")
def heads(target, tmp_path_factory):  # noqa: F811
    return trained_heads(target, tmp_path_factory.mktemp("heads"))


class Checked(HeadsDraft):
    """Checks, at every round, that the state the heads read is the big model's own final
    hidden state at len(seq) - 2, computed afresh from the context the scorer's cache holds."""

    def __init__(self, heads, big):
        super().__init__(heads)
        self.big, self.checked = big, 0

    def propose(self, seq, k, sampling):
        tokens, probs = super().propose(seq, k, sampling)
        if len(seq) >= 2:
            pos, start = len(seq) - 2, self.scorer.starts[0]
            with torch.no_grad():
                want = final_states(self.big, torch.tensor([seq[start:pos + 1]]))[1][0, -1]
            np.testing.assert_allclose(self.scorer.state(seq, pos), want.numpy(), atol=1e-5)
            self.checked += 1
        return tokens, probs


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_greedy_with_heads_is_the_big_models_output(target, heads, backend, k):  # noqa: F811
    big = registry.with_backend(target, backend)
    draft = Checked(heads, target)
    accepted = 0
    for i, prompt in enumerate([torch.tensor([[3]])] + prompts(3, seed=k)):
        length = [7, 20, 5 * target.c.block_size][i % 3]  # up to five times the window
        want = sd.generate(big, prompt, length)
        got, stats = sd.speculative_generate(big, draft, prompt, length, k=k)
        assert torch.equal(got, want), (backend, k, i)
        accepted += stats.accepted
    assert accepted > 0 and draft.checked > 0


def test_the_numpy_heads_are_the_torch_heads(target, heads):  # noqa: F811
    state = torch.randn(target.c.n_embd, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = heads(state[None, None])[0, 0]                              # (h, V)
    got = HeadsDraft(heads).logits(state.numpy(), len(heads.h))
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_the_state_misread_by_one_position_is_caught(target, heads):  # noqa: F811
    # Negative control for Checked: a scorer that hands out its neighbour's state fails it.
    class OffByOne(Checked):
        def scorer_for(self, big):
            scorer = super().scorer_for(big)
            state = scorer.state
            scorer.state = lambda seq, pos: state(seq, pos - 1) if pos else state(seq, pos)
            return scorer
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        sd.speculative_generate(target, OffByOne(heads, target), prompts(1)[0], 20, k=2)


@pytest.fixture(scope="module")
def small_heads(small_pair, tmp_path_factory):  # noqa: F811
    big, _ = small_pair
    heads = Heads.for_model(big, 2)
    with torch.no_grad():  # varied, peaked guesses, right some of the time
        for head in heads.h:
            head.c_fc.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    return heads


class Overconfident(HeadsDraft):
    """Negative control: proposes each head's top token but reports its whole distribution."""

    def propose(self, seq, k, sampling):
        tokens, probs = super().propose(seq, k, sampling)
        return (tokens if probs is None else probs.argmax(-1).tolist()), probs


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_with_heads_keeps_the_target_distribution(small_pair, small_heads):  # noqa: F811
    big, _ = small_pair
    prompt = [1, 2, 0]
    want = exact_distribution(big, prompt, 3, temperature=1.0)
    fast = NumpyGPT(big)  # the same distribution (to 1e-5), sampled three times faster
    counts = sample_counts(fast, HeadsDraft(small_heads), prompt, 3, 3000, seed=0, temperature=1.0)
    assert chi_square_p_value(counts, want) > 1e-3
    # A drafter whose guesses were not drawn from the distributions it reports breaks exactness
    # (p about 1e-17 at this seed: fewer runs do).
    counts = sample_counts(fast, Overconfident(small_heads), prompt, 3, 1000, seed=0,
                           temperature=1.0)
    assert chi_square_p_value(counts, want) < 1e-6


def test_bad_input_is_one_clear_line_and_k_beyond_the_heads_guesses_h(target, heads):  # noqa: F811
    idx = torch.tensor([[1, 2]])
    _, stats = sd.speculative_generate(target, HeadsDraft(heads), idx, 10, k=4)
    assert max(len(proposed) for proposed, _, _ in stats.trace) == 3, "one guess per head"
    with pytest.raises(ValueError, match="vocabulary"):
        sd.speculative_generate(make_model(0, vocab_size=V + 1), HeadsDraft(heads), idx, 3)
    with pytest.raises(ValueError, match="trained for another model"):
        sd.speculative_generate(make_model(0, n_embd=32), HeadsDraft(heads), idx, 3)
    with pytest.raises(ValueError, match="speculative_generate"):
        HeadsDraft(heads).propose([1, 2], 1, sd.Sampling())
    for bad, message in [({"heads": 0}, "at least 1"), ({"targets": "soft-ish"}, "soft or hard"),
                         ({"text": "poetry"}, "greedy or real")]:
        with pytest.raises(ValueError, match=message):
            HeadsConfig(**bad)


def test_an_interrupted_training_resumes_to_the_same_heads(target, tmp_path):  # noqa: F811
    whole = trained_heads(target, tmp_path / "whole", steps=6, save_every=2)

    def stop_at_the_first_save(line):
        if line.startswith("step"):
            raise KeyboardInterrupt
    source = torch.randint(0, V, (2000,), generator=torch.Generator().manual_seed(0))
    hc = HeadsConfig(**{**QUICK, "heads": 3, "steps": 6, "save_every": 2})
    with pytest.raises(KeyboardInterrupt):
        train(target, hc, tmp_path / "heads.pt", source=source, log=stop_at_the_first_save)
    assert torch.load(tmp_path / "heads.pt", weights_only=True)["step"] == 2
    said = []
    resumed = train(target, hc, tmp_path / "heads.pt", source=source, log=said.append)
    assert said[0].endswith("resuming at step 2 of 6")
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
    assert list(tmp_path.glob("*.tmp")) == [], "saved atomically, no leftovers"


def test_heads_by_name_load_for_their_own_big_model_only(tmp_path, monkeypatch, capsys):
    torch.manual_seed(0)
    big = gpt.GPT(tiny_config()).eval()
    gpt.save_checkpoint(tmp_path / "big.pt", big, step=0, val_loss=0.0)
    # The first use trains them (--draft heads, a study), once, saying so; the next one loads.
    monkeypatch.setitem(heads_module.FIRST_USE, "lesson", HeadsConfig(
        steps=3, batch_size=2, heads=2, text="real", threads=1))
    draft = by_name("heads", tmp_path)
    said = capsys.readouterr()
    assert "not trained yet: training first, once" in said.out and "heads" in said.err
    assert torch.load(heads_path(tmp_path), weights_only=True)["step"] == 3
    draft = by_name("heads", tmp_path)
    assert "training" not in capsys.readouterr().out    # the control: trained, only loaded
    assert isinstance(draft, HeadsDraft) and draft.n_heads == 2
    idx = torch.tensor([gpt.encode("ROMEO:\n")])
    got, _ = sd.speculative_generate(NumpyGPT(big), draft, idx, 40, k=2)
    assert torch.equal(got, sd.generate(big, idx, 40))
    other = gpt.GPT(tiny_config()).eval()  # a new random big model: the heads are not its
    gpt.save_checkpoint(tmp_path / "big.pt", other, step=0, val_loss=0.0)
    with pytest.raises(ValueError, match="trained for another big model"):
        by_name("heads", tmp_path)


def test_heads_are_not_trained_for_a_part_not_done(tmp_path, monkeypatch, capsys):
    """A heads_loss that stands aside (its check failed in the notebook) or is still the stub:
    loading the heads raises the part's error at once, before any line about training, any text
    written or any file (the notebook then skips the cell in one line). Control: the real loss
    trains them."""
    torch.manual_seed(0)
    big = gpt.GPT(tiny_config()).eval()
    monkeypatch.setitem(heads_module.FIRST_USE, "quick", HeadsConfig(
        steps=2, batch_size=2, heads=2, text="real", threads=1))
    monkeypatch.setitem(heads_module.FIRST_USE, "lesson", heads_module.FIRST_USE["quick"])
    right, part, folder = heads_module.heads_loss, parts.BY_ID["6b"], tmp_path / "models"
    stub_file = tmp_path / "student_heads.py"               # the student repository's stub
    stub_file.write_text(f"def heads_loss(guesses, logits, targets):\n"
                         f"    raise NotImplementedError({parts.message('heads_loss')!r})\n")
    spec = importlib.util.spec_from_file_location("student_heads", stub_file)
    stub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stub)
    for stand_in, error in [(parts.StandIn(part, "heads_loss", False), parts.Stalled),
                            (stub.heads_loss, NotImplementedError)]:
        monkeypatch.setattr(heads_module, "heads_loss", stand_in)
        with pytest.raises(error) as raised:
            heads_module.load(big, folder)
        assert parts.waiting_for(raised.value) is part
        assert capsys.readouterr().out == "" and not folder.exists()
    monkeypatch.setattr(heads_module, "heads_loss", right)
    heads_module.load(big, folder)
    assert "not trained yet" in capsys.readouterr().out and list(folder.iterdir())


def test_heads_trained_with_another_loss_are_trained_again(tmp_path, monkeypatch, capsys):
    """A cached draft follows the answer that made it: a wrong heads_loss fixed in a notebook
    (the your-turn cell replaces the module's function) trains the heads again, once; the same
    loss defined anew elsewhere (other line numbers) is the same answer."""
    torch.manual_seed(0)
    big = gpt.GPT(tiny_config()).eval()
    monkeypatch.setitem(heads_module.FIRST_USE, "quick", HeadsConfig(
        steps=2, batch_size=2, heads=2, text="real", threads=1))
    monkeypatch.setitem(heads_module.FIRST_USE, "lesson", heads_module.FIRST_USE["quick"])
    right = heads_module.heads_loss

    def pooled(guesses, logits, targets):   # one mean over every head's positions at once
        return F.cross_entropy(guesses[:, :-1, 0].flatten(0, 1),
                               logits[:, 1:].argmax(-1).flatten())
    monkeypatch.setattr(heads_module, "heads_loss", pooled)
    heads_module.load(big, tmp_path)
    assert "not trained yet" in capsys.readouterr().out
    monkeypatch.setattr(heads_module, "heads_loss", right)
    heads_module.load(big, tmp_path)
    said = capsys.readouterr().out
    assert "trained with another heads_loss; training anew" in said
    assert said.count("trained with another") == 1                # said once, not twice
    heads_module.load(big, tmp_path)
    assert "training" not in capsys.readouterr().out          # the control: loaded as it is
    moved, elsewhere = {}, tmp_path / "elsewhere.py"
    elsewhere.write_text("\n" * 40 + inspect.getsource(right).replace("):", "):  # mine", 1))
    exec(compile(elsewhere.read_text(), str(elsewhere), "exec"),  # noqa: S102
         vars(heads_module), moved)
    monkeypatch.setattr(heads_module, "heads_loss", moved["heads_loss"])
    heads_module.load(big, tmp_path)
    assert "training" not in capsys.readouterr().out


def test_an_interrupted_first_training_is_finished_not_loaded(tmp_path, capsys):
    torch.manual_seed(0)
    big = gpt.GPT(tiny_config()).eval()
    hc = HeadsConfig(steps=4, batch_size=2, heads=2, text="real", threads=1, save_every=2)

    def stop_at_the_first_save(line):
        if line.startswith("step"):
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train(big, hc, heads_path(tmp_path), log=stop_at_the_first_save)
    heads_module.load(big, tmp_path)                   # half-trained: it finishes the run
    assert "training first" in capsys.readouterr().out
    assert torch.load(heads_path(tmp_path), weights_only=True)["step"] == 4


def test_the_first_use_trains_heads_sized_to_the_big_model():
    quick = gpt.GPT(presets.preset("big", "quick").config)
    assert heads_module.first_use_config(quick) == heads_module.FIRST_USE["quick"]
    lesson = gpt.GPT(presets.preset("big").config)    # the control
    assert heads_module.first_use_config(lesson) == HeadsConfig()


def test_agreement_is_a_fraction_per_head(target, heads):  # noqa: F811
    data = torch.randint(0, V, (300,), generator=torch.Generator().manual_seed(2))
    values = agreement(target, heads, data, windows=4)
    assert len(values) == 3 and all(0 <= a <= 1 for a in values)


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_the_command_line_rejects_bad_flags_in_one_line(run_here):
    from test_cli import one_line_error
    one_line_error(run_here("-m", "beyond.heads", "--heads", "0"), "--heads must be at least 1")
