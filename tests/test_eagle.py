"""The EAGLE draft (beyond/eagle.py): one layer over the big model's features. Its inputs and
targets are shifted by exactly one position, eagle_roll is its torch module rolled forward by
hand, the NumPy drafter (beyond/eagle_numpy.py) proposes exactly eagle_roll's guesses, greedy
output stays the big model's with either drafter, sampling returns valid tokens, training lowers
the loss and resumes, and a draft of another big model is a one-line error."""

import numpy as np
import pytest
import torch
from conftest import tiny_config
from test_speculative import make_model, prompts

import gpt
import speculative as sd
from beyond import eagle as eagle_module
from beyond import presets
from harness import registry
from beyond.eagle import (
    Eagle,
    EagleBranches,
    EagleConfig,
    EagleRoll,
    Rolling,
    agreement,
    eagle_loss,
    eagle_path,
    eagle_roll,
    final_states,
    frozen_weights,
    rank_agreement,
    shifted,
    train,
)
from beyond.eagle_numpy import EagleDraft
from beyond.fast_numpy import NumpyGPT
from harness.registry import by_name
from beyond.tree import best_shape, chain_shape, tree_generate, tree_scorer
from beyond.tree_grow import grow

QUICK = dict(steps=60, batch_size=8, block=16, lr=1e-2, window=6, pool=16, save_every=60,
             threads=1)


@pytest.fixture(scope="module")
def target():
    """A tiny big model taught the test corpus for a second: its next token depends on the
    last one, as a trained model's does (a random one's hardly does)."""
    torch.manual_seed(0)
    big = gpt.GPT(tiny_config(block_size=16))
    optimizer = torch.optim.AdamW(big.parameters(), lr=1e-2)  # not fused: no start-up cost
    for _ in range(150):
        _, loss = big(*gpt.get_batch("train", gpt.train_data, batch_size=8, block_size=16))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return big.eval()


def trained(big, folder, **changes):
    """A draft trained for a second on the big model's features of the test corpus."""
    ec = EagleConfig(**{**QUICK, **changes})
    return train(big, ec, folder / "eagle.pt", log=lambda line: None)


@pytest.fixture(scope="module")
def eagle(target, tmp_path_factory):
    return trained(target, tmp_path_factory.mktemp("eagle"))


def rollout(big, eagle, seq, k):
    """The draft's k greedy guesses after seq (shorter than the window of the big model), by
    eagle_roll from the big model's features of seq[:-1], computed here from scratch."""
    wte, lm_head = frozen_weights(big)
    with torch.no_grad():
        _, features = final_states(big, torch.tensor([seq[:-1]]))          # (1, n-1, C)
        guesses, logits = eagle_roll(eagle, features[0], seq, wte, lm_head, k)
    assert logits.shape == (k, big.c.vocab_size)
    assert guesses == logits.argmax(-1).tolist()
    return guesses


@pytest.mark.slow  # seconds: make test
def test_eagle_roll_feeds_the_drafts_own_features_and_guesses():
    # By hand, one step at a time: the first guess from the pairs (f_t, x_{t+1}); the second
    # from those and (f'_n, g_1). Random weights; wte and lm_head differ, so that a swap shows.
    torch.manual_seed(0)
    C, V = 8, 11
    eagle = Eagle(tiny_config(n_embd=C, n_head=2), window=3).eval()
    wte, lm_head = torch.randn(V, C), torch.randn(V, C)
    features, seq = torch.randn(5, C), [3, 1, 4, 1, 5, 9]
    with torch.no_grad():
        guesses, logits = eagle_roll(eagle, features, seq, wte, lm_head, 2)
        f1 = eagle(features[None], torch.tensor([seq[1:]]), wte)[0, -1]   # f'_5
        g1 = int((lm_head @ f1).argmax())
        f2 = eagle(torch.cat([features, f1[None]])[None], torch.tensor([seq[1:] + [g1]]),
                   wte)[0, -1]
        want = torch.stack([lm_head @ f1, lm_head @ f2])
    torch.testing.assert_close(logits, want)
    assert guesses == [g1, int(want[1].argmax())]
    # The control: pairing f_t with x_t instead guesses from other logits.
    with torch.no_grad():
        unshifted = eagle(features[None], torch.tensor([seq[:-1]]), wte)[0, -1]
    assert not torch.allclose(lm_head @ unshifted, logits[0])


# ----------------------------------------------------------------------------------------------
# The one-position shift


def test_the_rolling_draft_computes_what_the_draft_does_at_every_position(target, eagle):
    """eagle_roll's calls through Rolling (each step: the pairs before and one more; or three
    more) give the Eagle's own outputs, at every position, longer than the window too (Folded's
    step and extend after a past of window - 1 pairs); a call that does not
    continue the last (a feature changed) computes afresh. Control: a Rolling that kept the
    outputs of a changed prefix would differ from the Eagle there."""
    torch.manual_seed(1)
    C, wte = target.c.n_embd, target.transformer.wte.weight.detach()
    states = torch.randn(1, eagle.window + 6, C)
    tokens = torch.randint(target.c.vocab_size, (1, eagle.window + 6))
    rolling = Rolling(eagle)
    with torch.no_grad():
        for T in range(3, states.shape[1] + 1):
            got, want = rolling(states[:, :T], tokens[:, :T], wte), eagle(states[:, :T],
                                                                         tokens[:, :T], wte)
            assert torch.allclose(got, want, atol=1e-5), T
        assert rolling.out.shape[1] == states.shape[1]
        jumping = Rolling(eagle)                 # several pairs a call, after a trimmed past
        for T in range(2, states.shape[1] + 1, 3):
            got = jumping(states[:, :T], tokens[:, :T], wte)
            assert torch.allclose(got, eagle(states[:, :T], tokens[:, :T], wte), atol=1e-5), T
        changed = states.clone()
        changed[0, 2] += 1.0
        stale = torch.cat([rolling.out, rolling.out[:, -1:]], 1)     # what a stale cache holds
        got = rolling(torch.cat([changed, changed[:, -1:]], 1), torch.cat([tokens, tokens[:, -1:]],
                                                                        1), wte)
        want = eagle(torch.cat([changed, changed[:, -1:]], 1), torch.cat([tokens, tokens[:, -1:]],
                                                                        1), wte)
        assert torch.allclose(got, want, atol=1e-5)
        assert not torch.allclose(stale, want, atol=1e-3)             # the control


def test_the_shift_pairs_each_feature_with_the_next_token_and_targets_the_next_feature():
    # Hand-made: feature t is the number t, token t is 100 + t.
    features = torch.arange(5.0).view(1, 5, 1)                             # (B, T, C)
    idx = 100 + torch.arange(5).view(1, 5)                                 # (B, T)
    states, tokens, targets = shifted(features, idx)
    assert states.flatten().tolist() == [0, 1, 2, 3]                       # f_t
    assert tokens.flatten().tolist() == [101, 102, 103, 104]               # x_{t+1}
    assert targets.flatten().tolist() == [1, 2, 3, 4]                      # f_{t+1}


def wrong_shift(features, idx):  # the pitfall: f_t paired with x_t, the token it did not predict
    return features[:, :-1], idx[:, :-1], features[:, 1:]


def test_the_wrong_shift_is_caught_and_costs_agreement(target, tmp_path, monkeypatch):
    # The hand-made check above fails with it,
    features, idx = torch.arange(5.0).view(1, 5, 1), 100 + torch.arange(5).view(1, 5)
    assert wrong_shift(features, idx)[1].flatten().tolist() != [101, 102, 103, 104]
    # and a draft trained with it agrees far less with the big model than one trained right.
    # (Both learn the text itself, which agreement reads.)
    right = trained(target, tmp_path / "right", text="real")
    with monkeypatch.context() as patch:
        patch.setattr(eagle_module, "shifted", wrong_shift)
        wrong = trained(target, tmp_path / "wrong", text="real")
    right_agrees, wrong_agrees = (agreement(target, e, gpt.val_data, windows=16)
                                  for e in (right, wrong))
    assert right_agrees > wrong_agrees + 0.15, (right_agrees, wrong_agrees)


# ----------------------------------------------------------------------------------------------
# The drafter


def test_the_numpy_rollout_is_the_torch_drafts(target, eagle):
    draft = EagleDraft(eagle, target)
    draft.scorer_for(target)
    for seq in ([3, 1, 4], [2, 7, 1, 8, 2, 8], gpt.val_data[:14].tolist()):
        for k in (1, 3, 5):
            guesses, probs = draft.propose(seq, k, sd.Sampling())
            assert guesses == rollout(target, eagle, seq, k) and probs is None


class Checked(EagleDraft):
    """Checks, at every round, that the first guess is the torch draft's from the big model's
    own features of the context its scorer holds, computed afresh."""

    def __init__(self, eagle, big):
        super().__init__(eagle, big)
        self.eagle, self.big, self.checked = eagle, big, 0

    def propose(self, seq, k, sampling):
        tokens, probs = super().propose(seq, k, sampling)
        if len(seq) >= 2:
            start = self.scorer.starts[0]
            assert tokens[0] == rollout(self.big, self.eagle, seq[start:], 1)[0]
            self.checked += 1
        return tokens, probs


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_greedy_with_eagle_is_the_big_models_output(target, eagle, backend, k):
    big = registry.with_backend(target, backend)
    draft = Checked(eagle, target)
    accepted = 0
    for i, prompt in enumerate([torch.tensor([[3]])] + prompts(3, seed=k)):
        length = [7, 20, 5 * target.c.block_size][i % 3]  # up to five times the window
        want = sd.generate(big, prompt, length)
        got, stats = sd.speculative_generate(big, draft, prompt, length, k=k)
        assert torch.equal(got, want), (backend, k, i)
        accepted += stats.accepted
    assert accepted > 0 and draft.checked > 0


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_the_torch_drafter_proposes_what_the_numpy_one_does(target, eagle, backend):
    # EagleRoll (eagle_roll at every round) and EagleDraft: the same output, the same rounds
    # and the same guesses accepted, across the window of the big model.
    big = registry.with_backend(target, backend)
    for k in (1, 3):
        for prompt in [torch.tensor([[3]])] + prompts(2, seed=k):
            want = sd.generate(big, prompt, 2 * target.c.block_size)
            runs = [sd.speculative_generate(big, drafter(eagle, target), prompt,
                                            2 * target.c.block_size, k=k)
                    for drafter in (EagleRoll, EagleDraft)]
            for got, _ in runs:
                assert torch.equal(got, want), (backend, k)
            (_, slow), (_, fast) = runs
            assert (slow.rounds, slow.accepted_per_position) == \
                (fast.rounds, fast.accepted_per_position) and fast.accepted > 0
    with pytest.raises(ValueError, match="greedily"):
        sd.speculative_generate(target, EagleRoll(eagle, target), torch.tensor([[1, 2]]), 3,
                                temperature=1.0)


class ParentsToken(EagleBranches):
    """Control: each node's step reads its parent's token again instead of its own."""

    def step(self, seq, root):
        return super().step(seq if len(seq) <= root + 1 else seq[:-1] + seq[-2:-1], root)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_a_tree_from_the_draft_rolls_it_along_each_path(target, eagle, backend):
    # The chain of first guesses of a tree grown by EagleBranches is eagle_roll's from the same
    # text (each node's step: its parent's feature with its own token); the second guesses are
    # the draft's second likeliest after the root; tree decoding stays the big model's output.
    # The control's chain may match by chance where the draft repeats one token (a space after a
    # space, as this quick draft does on some machines); it must differ after some prompt.
    big = registry.with_backend(target, backend)
    control_differs = []
    for prompt in [torch.tensor([[3, 1]])] + prompts(2, seed=5):
        seq = prompt[0].tolist()
        brancher, control = EagleBranches(eagle, target), ParentsToken(eagle, target)
        for b in (brancher, control):
            tree_scorer(big, b, 6)
        chain = grow(brancher, seq, chain_shape(4) + [(1,)], 8, sd.Sampling())
        assert chain.tokens[1:5] == rollout(target, eagle, seq, 4)
        assert chain.tokens[5] != chain.tokens[1] and chain.parents[5] == 0
        control_differs.append(
            grow(control, seq, chain_shape(4), 8, sd.Sampling()).tokens[1:] != chain.tokens[1:5])
        for shape in (chain_shape(3), best_shape([0.8, 0.15], 8)):
            want = sd.generate(big, prompt, 2 * target.c.block_size)
            got, stats = tree_generate(big, EagleBranches(eagle, target), prompt,
                                       2 * target.c.block_size, shape=shape)
            assert torch.equal(got, want) and stats.accepted > 0, (backend, shape)
    assert any(control_differs)


def test_rank_agreement_counts_each_rank_once(target, eagle):
    texts = torch.stack([gpt.train_data[s:s + 16] for s in range(0, 320, 40)])   # (8, 16)
    ranks = rank_agreement(target, eagle, texts, 3)
    assert len(ranks) == 3 and 0 < sum(ranks) <= 1 and ranks[0] > ranks[1]
    assert agreement(target, eagle, gpt.train_data, 8) == pytest.approx(
        rank_agreement(target, eagle, torch.stack([gpt.train_data[s:s + 16] for s in
                       torch.linspace(0, len(gpt.train_data) - 17, 8).long()]), 1)[0])


def test_sampling_with_eagle_returns_valid_tokens_and_distributions(target, eagle):
    draft = EagleDraft(eagle, target)
    draft.scorer_for(target)
    sampling = sd.Sampling(temperature=1.0, top_k=5, rng=np.random.default_rng(0))
    guesses, probs = draft.propose([1, 2, 3, 4], 3, sampling)
    V = target.c.vocab_size
    assert len(guesses) == 3 and probs.shape == (3, V)
    np.testing.assert_allclose(probs.sum(-1), 1, atol=1e-5)
    assert all(probs[i, g] > 0 for i, g in enumerate(guesses)), "drawn from what it reports"
    prompt = torch.tensor([[1, 2, 3]])
    out, stats = sd.speculative_generate(target, draft, prompt, 40, k=3, temperature=0.8,
                                         top_p=0.9, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 43) and torch.equal(out[:, :3], prompt)
    assert 0 <= out.min() and out.max() < V and stats.new_tokens == 40


def test_bad_input_is_one_clear_line(target, eagle):
    V = target.c.vocab_size
    with pytest.raises(ValueError, match="vocabulary"):
        sd.speculative_generate(make_model(0, vocab_size=V + 1), EagleDraft(eagle, target),
                                torch.tensor([[1, 2]]), 3)
    with pytest.raises(ValueError, match="trained for another model"):
        sd.speculative_generate(make_model(0, n_embd=16, vocab_size=V), EagleDraft(eagle, target),
                                torch.tensor([[1, 2]]), 3)
    with pytest.raises(ValueError, match="speculative_generate"):
        EagleDraft(eagle, target).propose([1, 2], 1, sd.Sampling())
    for bad, message in [({"steps": 0}, "at least 1"), ({"window": 0}, "at least 1"),
                         ({"block": 2}, "at least 3"), ({"threads": -1}, "--threads"),
                         ({"text": "poetry"}, "greedy or real")]:
        with pytest.raises(ValueError, match=message):
            EagleConfig(**bad)


# ----------------------------------------------------------------------------------------------
# Training and loading


def test_training_lowers_the_loss(target, eagle):
    x = gpt.val_data[:16 * 8].view(8, 16)                                  # held out: (B, T)
    with torch.no_grad():
        _, features = final_states(target, x)
        wte, lm_head = frozen_weights(target)
        torch.manual_seed(0)
        before = eagle_loss(Eagle.for_model(target, 6), features, x, wte, lm_head).item()
        after = eagle_loss(eagle, features, x, wte, lm_head).item()
    assert after < 0.7 * before, (before, after)


def test_an_interrupted_training_resumes_to_the_same_draft(target, tmp_path):
    whole = trained(target, tmp_path / "whole", steps=6, save_every=2)

    def stop_at_the_first_save(line):
        if line.startswith("step"):
            raise KeyboardInterrupt
    ec = EagleConfig(**{**QUICK, "steps": 6, "save_every": 2})
    with pytest.raises(KeyboardInterrupt):
        train(target, ec, tmp_path / "eagle.pt", log=stop_at_the_first_save)
    assert torch.load(tmp_path / "eagle.pt", weights_only=True)["step"] == 2
    said = []
    resumed = train(target, ec, tmp_path / "eagle.pt", log=said.append)
    assert said[0].endswith("resuming at step 2 of 6")
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
    assert list(tmp_path.glob("*.tmp")) == [], "saved atomically, no leftovers"


def test_eagle_by_name_loads_for_its_own_big_model_only(tmp_path, monkeypatch, capsys):
    torch.manual_seed(0)
    big = gpt.GPT(tiny_config()).eval()
    gpt.save_checkpoint(tmp_path / "big.pt", big, step=0, val_loss=0.0)
    # The first use trains it (--draft eagle), once, saying so; the next one loads.
    monkeypatch.setitem(eagle_module.FIRST_USE, "lesson", EagleConfig(
        steps=3, batch_size=2, block=16, threads=1))
    by_name("eagle", tmp_path)
    said = capsys.readouterr()
    assert "not trained yet: training first, once" in said.out and "eagle" in said.err
    assert torch.load(eagle_path(tmp_path), weights_only=True)["step"] == 3
    draft = by_name("eagle", tmp_path)
    assert "training" not in capsys.readouterr().out    # the control: trained, only loaded
    assert isinstance(draft, EagleDraft)
    idx = torch.tensor([gpt.encode("ROMEO:\n")])
    got, _ = sd.speculative_generate(NumpyGPT(big), draft, idx, 40, k=3)
    assert torch.equal(got, sd.generate(big, idx, 40))
    other = gpt.GPT(tiny_config()).eval()  # a new random big model: the draft is not its
    gpt.save_checkpoint(tmp_path / "big.pt", other, step=0, val_loss=0.0)
    with pytest.raises(ValueError, match="trained for another big model"):
        by_name("eagle", tmp_path)
    eagle_path(tmp_path).write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable eagle checkpoint.*--fresh"):
        by_name("eagle", tmp_path)


def test_the_first_use_trains_a_draft_sized_to_the_big_model():
    quick = gpt.GPT(presets.preset("big", "quick").config)
    assert eagle_module.first_use_config(quick) == eagle_module.FIRST_USE["quick"]
    lesson = gpt.GPT(presets.preset("big").config)    # the control
    assert eagle_module.first_use_config(lesson) == EagleConfig()


def test_against_the_heads_compares_each_at_its_fastest_k():
    def row(tokens_per_pass, speedup):  # a run of 10 rounds with that many characters a pass
        stats = sd.Stats(k=8)
        stats.target_passes, stats.new_tokens = 10, round(10 * tokens_per_pass)
        return stats, speedup
    table = {("EAGLE-style draft", 1): row(1.8, 1.1), ("EAGLE-style draft", 8): row(5.0, 2.4),
             ("EAGLE-style draft", 10): row(5.5, 2.3),        # more per pass, but slower
             ("Medusa heads", 1): row(1.8, 1.2), ("Medusa heads", 5): row(4.0, 2.0)}
    said = eagle_module.against_heads(table)
    assert "(k = 8) 5.00 characters per pass, 2.40x" in said and "(k = 5) 4.00, 2.00x" in said
    assert "1.25x the characters per pass (1.33x the accepted guesses), 1.20x the speed-up" in said
    assert "At equal k (1): 1.00x the" in said   # only k = 1 ran for both
    table["EAGLE-style draft", 5] = row(4.4, 2.2)
    assert "At equal k (1, 5): 1.00x to 1.10x the" in eagle_module.against_heads(table)
