"""Speculative decoding against its references: plain decoding (greedy), the target's exact
distribution (sampling), and the lesson's formulas."""

import math
from collections import Counter
from itertools import product

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import numpy_speculative
import speculative as sd
from beyond.fast_numpy import NumpyGPT
from gpt import GPT, Config
from lessonkit import scorer

V = 11


def make_model(seed, block_size=16, n_layer=2, n_embd=16, vocab_size=V, scale=None):
    torch.manual_seed(seed)
    model = GPT(Config(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=2,
                       n_embd=n_embd)).eval()
    if scale:  # larger weights: peaked, varied distributions instead of near-uniform ones
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    p.normal_(0, scale)
    return model


def noisy_copy(model, noise, seed):
    """A draft that agrees with the target often but not always."""
    torch.manual_seed(seed)
    draft = GPT(model.c).eval()
    draft.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn_like(p))
    return draft


@pytest.fixture(scope="module")
def target():
    return make_model(0, scale=0.3)


# ----------------------------------------------------------------------------------------------
# Greedy: exactly plain decoding


def prompts(n, seed=0, max_len=20):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, V, (1, int(torch.randint(1, max_len, (1,), generator=g))),
                          generator=g) for _ in range(n)]


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_equals_plain_decoding(target, k):
    drafts = [noisy_copy(target, 0.05, 1), make_model(2, block_size=8, n_layer=1)]
    accepted = 0
    for i, prompt in enumerate(prompts(6, seed=k)):
        length = [5, 17, 3 * target.c.block_size][i % 3]  # up to three times the window
        want = sd.generate(target, prompt, length)
        for draft in drafts:
            got, stats = sd.speculative_generate(target, draft, prompt, length, k=k)
            assert torch.equal(got, want), (k, i)
            assert stats.new_tokens == length
            accepted += stats.accepted
    assert accepted > 0  # the noisy copy does get tokens accepted


def test_greedy_check_catches_a_window_mismatch(target, monkeypatch):
    # Negative control: if verification used another window rule than plain decoding, the
    # equality above must fail once generations outgrow the window.
    prompt = prompts(1, seed=3)[0]
    want = sd.generate(target, prompt, 40)
    # Past the window it slides by one token instead of jumping (the windows all scorers walk).
    monkeypatch.setattr(scorer, "window_start", lambda n, block: max(0, n - block))
    got, _ = sd.speculative_generate(target, noisy_copy(target, 0.05, 1), prompt, 40, k=4)
    assert not torch.equal(got, want)


def test_draft_equal_to_target_accepts_everything():
    model = make_model(0, block_size=64)
    for k in (1, 4, 7):
        out, stats = sd.speculative_generate(model, model, torch.tensor([[1, 2, 3]]), 5 * (k + 1), k=k)
        assert stats.acceptance_rate == 1.0
        assert stats.tokens_per_pass == k + 1
        assert stats.accepted_per_position == [5] * k


class Contrarian(sd.Scorer):
    """A draft (not a GPT) that always proposes a token the target would not choose."""

    def __init__(self, target):
        self.vocab_size = target.c.vocab_size
        self.target = target

    def reset(self):
        self.scorer = scorer.WindowScorer(self.target)

    def score(self, seqs, first):
        logits = self.scorer.score(seqs, first)             # (B, T, V)
        wrong = (logits.argmax(-1) + 1) % self.vocab_size
        return np.eye(self.vocab_size)[wrong]


def test_draft_that_never_agrees_still_gives_the_exact_output(target):
    for prompt in prompts(4, seed=5):
        want = sd.generate(target, prompt, 40)
        got, stats = sd.speculative_generate(target, Contrarian(target), prompt, 40, k=3)
        assert torch.equal(got, want)
        assert stats.accepted == 0 and stats.new_tokens == 40


class Listening(sd.Drafter):
    """A drafter of its own: it guesses the token after
    the target's own greedy choice would be, and records what each round kept."""

    def __init__(self):
        self.heard, self.resets = [], 0

    def propose(self, seq, k, sampling):
        return [(seq[-1] + 1) % 5] * k, None

    def reset(self):
        self.resets += 1

    def kept(self, n):
        self.heard.append(n)


def test_a_drafters_own_optional_methods_are_called_and_the_rest_do_nothing(target):
    prompt = prompts(1, seed=2)[0]
    want = sd.generate(target, prompt, 30)
    own = Listening()
    got, stats = sd.speculative_generate(target, own, prompt, 30, k=3)
    assert torch.equal(got, want)
    assert own.resets == 1 and own.heard == [kept for _, kept, _ in stats.trace]
    # one with propose() alone decodes alike (Drafter's do-nothing methods stand in)
    bare = type("Bare", (sd.Drafter,), {"propose": Listening.propose})()
    assert torch.equal(sd.speculative_generate(target, bare, prompt, 30, k=3)[0], want)


def test_an_object_with_propose_that_is_not_a_drafter_is_a_one_line_error(target):
    # The control: the same object as a Drafter subclass decodes (the test above).
    loose = type("Loose", (), {"propose": Listening.propose})()
    with pytest.raises(TypeError, match=r"^Loose has propose\(\) but is not a drafter: subclass "
                                        r"speculative.Drafter$"):
        sd.speculative_generate(target, loose, prompts(1, seed=2)[0], 5, k=3)


def test_stats_add_up_and_trace_replays_the_output(target):
    prompt = prompts(1, seed=7)[0]
    out, stats = sd.speculative_generate(target, noisy_copy(target, 0.05, 1), prompt, 50, k=4)
    assert stats.accepted == sum(stats.accepted_per_position)
    assert stats.proposed == stats.draft_passes
    assert stats.new_tokens == 50 == stats.accepted + stats.rounds
    assert stats.tokens_per_pass == 50 / stats.target_passes
    assert all(a >= b for a, b in zip(stats.accepted_per_position, stats.accepted_per_position[1:]))
    replay = prompt[0].tolist()
    for proposed, n_accepted, token in stats.trace:
        replay += proposed[:n_accepted] + [token]
    assert replay == out[0].tolist()


def test_batches_decode_row_by_row(target):
    prompt = torch.randint(0, V, (3, 5), generator=torch.Generator().manual_seed(0))
    out, stats = sd.speculative_generate(target, noisy_copy(target, 0.05, 1), prompt, 20, k=3)
    assert torch.equal(out, sd.generate(target, prompt, 20))
    assert stats.new_tokens == 60


def test_numpy_model_matches_torch(target):
    fast = NumpyGPT(target)
    idx = torch.randint(0, V, (2, 16))
    assert (fast(idx)[0] - target(idx)[0]).abs().max() < 1e-5
    cache, steps = fast.new_cache(1), []   # the one-token path, token by token
    for t in range(16):
        steps.append(fast(idx[:1, t:t + 1], cache=cache)[0])
    assert (torch.cat(steps, 1) - target(idx[:1])[0]).abs().max() < 1e-5
    prompt = prompts(1, seed=9)[0]
    want = sd.generate(target, prompt, 40)
    assert torch.equal(sd.generate(fast, prompt, 40), want)
    got, _ = sd.speculative_generate(fast, NumpyGPT(noisy_copy(target, 0.05, 1)), prompt, 40, k=4)
    assert torch.equal(got, want)


# ----------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 0}, "k .draft tokens per round. must be a whole number >= 1"),
    ({"k": 2.5}, "k .draft tokens per round."),
    ({"temperature": -1}, "temperature must be a number >= 0"),
    ({"temperature": math.inf}, "temperature must be"),
    ({"top_k": 0}, "top_k must be"),
    ({"top_p": 0.0}, "top_p must be in"),
    ({"top_p": 1.5}, "top_p must be in"),
])
def test_bad_arguments(target, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sd.speculative_generate(target, target, torch.tensor([[1]]), 3, **kwargs)


def test_vocabulary_mismatch(target):
    with pytest.raises(ValueError, match="vocabulary"):
        sd.speculative_generate(target, make_model(0, vocab_size=V + 1), torch.tensor([[1]]), 3)


def test_bad_prompt(target):
    with pytest.raises(ValueError, match="LongTensor"):
        sd.generate(target, torch.tensor([1, 2]), 3)
    with pytest.raises(ValueError, match="empty"):
        sd.generate(target, torch.zeros(1, 0, dtype=torch.long), 3)


# ----------------------------------------------------------------------------------------------
# The acceptance rule: exact distributions


def output_distribution(target_probs, draft_probs):
    """The exact distribution of the token one round (k = 1) emits at the draft's position,
    from the two branches of the rule: accepted draft token, or correction from the residual."""
    accept = np.array([numpy_speculative.accept_probability(t, d) for t, d in zip(target_probs, draft_probs)])
    p_reject = float(np.sum(draft_probs * (1 - accept)))
    return draft_probs * accept + p_reject * numpy_speculative.residual(target_probs, draft_probs)


def probability_vectors(size):
    """Random distributions with the edge cases: zeros, one-hots, duplicates."""
    weights = st.lists(st.sampled_from([0.0, 0.0, 1e-9, 0.1, 0.5, 1.0, 3.0, 7.0]),
                       min_size=size, max_size=size).filter(lambda w: sum(w) > 0)
    return weights.map(lambda w: np.array(w) / np.sum(w))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_rule_reproduces_the_target_exactly(data):
    size = data.draw(st.integers(2, 8))
    target_probs = data.draw(probability_vectors(size))
    draft_probs = data.draw(st.one_of(probability_vectors(size), st.just(target_probs)))
    np.testing.assert_allclose(output_distribution(target_probs, draft_probs), target_probs,
                               atol=1e-12, rtol=0)


def test_rule_edge_cases():
    one_hot = np.array([0.0, 1.0, 0.0])
    uniform = np.full(3, 1 / 3)
    for target_probs, draft_probs in [(one_hot, one_hot), (uniform, uniform), (one_hot, uniform),
                                      (uniform, one_hot), (one_hot, np.array([1.0, 0, 0]))]:
        np.testing.assert_allclose(output_distribution(target_probs, draft_probs), target_probs,
                                   atol=1e-12)
    assert numpy_speculative.accept_probability(0.3, 0.0) == 1.0  # the draft gave it nothing: infinite ratio
    assert numpy_speculative.accept_probability(0.0, 0.0) == 0.0


def chi_square_p_value(counts, probs, min_expected=5):
    """Pearson's chi-square test of counts against probs; cells expected < 5 are pooled."""
    n = sum(counts.values())
    observed, expected, pool_o, pool_e = [], [], 0, 0.0
    for cell, p in probs.items():
        if n * p >= min_expected:
            observed.append(counts.get(cell, 0))
            expected.append(n * p)
        else:
            pool_o, pool_e = pool_o + counts.get(cell, 0), pool_e + n * p
    pool_o += sum(c for cell, c in counts.items() if cell not in probs)
    if pool_e > 0 or pool_o:
        observed.append(pool_o)
        expected.append(max(pool_e, 1e-12))
    stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    dof = len(observed) - 1
    return torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                   torch.tensor(stat / 2.0, dtype=torch.float64)).item()


def verify_samples(target_probs, draft_probs, n, seed, rule=sd.verify):
    """Run one round n times: counts of the first emitted token."""
    rng = np.random.default_rng(seed)
    counts = Counter()
    for _ in range(n):
        token = numpy_speculative.sample(draft_probs[0], rng)
        n_accepted, next_token = rule(target_probs, draft_probs, [token], rng)
        counts[token if n_accepted else next_token] += 1
    return counts


def broken_verify(target_probs, draft_probs, draft_tokens, rng):
    """A classic mistake: after a rejection, resample from the target, not the residual."""
    for i, token in enumerate(draft_tokens):
        if rng.random() >= numpy_speculative.accept_probability(target_probs[i, token], draft_probs[i, token]):
            return i, numpy_speculative.sample(target_probs[i], rng)
    return len(draft_tokens), numpy_speculative.sample(target_probs[len(draft_tokens)], rng)


def test_verify_samples_the_target_distribution():
    target_probs = np.array([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]])
    draft_probs = np.array([[0.1, 0.2, 0.3, 0.4]])
    want = dict(enumerate(target_probs[0]))
    # 1e-4: a correct rule fails this at a given seed with probability 1e-4
    assert chi_square_p_value(verify_samples(target_probs, draft_probs, 20000, 0), want) > 1e-4
    # Negative control: the broken rule is caught by the same test, already at a tenth of the
    # draws (p about 1e-45 at this seed).
    broken = verify_samples(target_probs, draft_probs, 2000, 0, rule=broken_verify)
    assert chi_square_p_value(broken, want) < 1e-6


# ----------------------------------------------------------------------------------------------
# The whole decoder, sampling: the first three tokens against the target's exact distribution


def exact_distribution(model, prompt, n_tokens, **warp):
    """P(first n_tokens) under the target's warped distribution, by enumeration."""
    vocab = model.c.vocab_size
    probs = {}
    for tokens in product(range(vocab), repeat=n_tokens):
        seq = torch.tensor([prompt + list(tokens)])
        with torch.no_grad():
            step_probs = sd.warp(model(seq)[0][0, len(prompt) - 1:-1].numpy(), **warp)  # (n, V)
        probs[tokens] = math.prod(step_probs[i, t] for i, t in enumerate(tokens))
    return probs


def sample_counts(target, draft, prompt, n_tokens, n, seed, k=2, **warp):
    """How often each continuation came out of n sampled runs; k may be a function giving a
    fresh schedule (beyond/adaptive.py) for each run."""
    g = torch.Generator().manual_seed(seed)
    counts = Counter()
    for _ in range(n):
        out, _ = sd.speculative_generate(target, draft, torch.tensor([prompt]), n_tokens,
                                         k=k() if callable(k) else k, generator=g, **warp)
        counts[tuple(out[0, len(prompt):].tolist())] += 1
    return counts


SMALL_V = 4


@pytest.fixture(scope="module")
def small_pair():
    target = make_model(10, vocab_size=SMALL_V, scale=0.4)
    draft = make_model(11, vocab_size=SMALL_V, n_layer=1, scale=0.4)
    return target, draft


@pytest.mark.parametrize("warp", [{"temperature": 1.0}, {"temperature": 1.0, "top_k": 2},
                                  {"temperature": 0.7, "top_p": 0.8}])
@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_matches_the_target_distribution(small_pair, warp):
    target, draft = small_pair
    prompt = [1, 2, 0]
    want = exact_distribution(target, prompt, 3, **warp)
    counts = sample_counts(target, draft, prompt, 3, 3000, seed=0, **warp)
    assert chi_square_p_value(counts, want) > 1e-3


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_test_catches_broken_rules(small_pair, monkeypatch):
    target, draft = small_pair
    prompt = [1, 2, 0]
    want = exact_distribution(target, prompt, 3, temperature=1.0)
    # Each caught with fewer runs than the test above makes (3000), so caught there too: the
    # p-value at this seed is about 1e-39 and 1e-40 (1e-173 and 0 at 3000 runs).
    # Broken 1: resampling from the target instead of the residual after a rejection.
    monkeypatch.setattr(sd, "verify", broken_verify)
    counts = sample_counts(target, draft, prompt, 3, 1000, seed=0, temperature=1.0)
    assert chi_square_p_value(counts, want) < 1e-6
    # Broken 2: the draft proposes its argmax but the ratio test still uses its probabilities.
    monkeypatch.undo()
    monkeypatch.setattr(sd.Sampling, "draw", lambda self, probs: int(probs.argmax()))
    counts = sample_counts(target, draft, prompt, 3, 300, seed=0, temperature=1.0)
    assert chi_square_p_value(counts, want) < 1e-6


def test_plain_sampling_matches_too(small_pair):
    target, _ = small_pair
    prompt = [3, 1]
    want = exact_distribution(target, prompt, 2, temperature=1.0)
    g = torch.Generator().manual_seed(1)
    out = sd.generate(target, torch.tensor([prompt] * 4000), 2, temperature=1.0, generator=g)
    counts = Counter(tuple(row) for row in out[:, 2:].tolist())
    assert chi_square_p_value(counts, want) > 1e-3


def test_warp():
    logits = np.array([2.0, 1.0, 0.5, -1.0])
    assert sd.warp(logits, 0).tolist() == [1, 0, 0, 0]
    probs = sd.warp(logits, 1.0, top_k=2)
    assert probs[2:].sum() == 0 and abs(probs.sum() - 1) < 1e-12
    full = np.exp(logits) / np.exp(logits).sum()
    nucleus = sd.warp(logits, 1.0, top_p=full[0] + 1e-9)  # needs the top two
    assert (nucleus > 0).tolist() == [True, True, False, False]
    np.testing.assert_allclose(sd.warp(logits, 0.5), np.exp(2 * logits) / np.exp(2 * logits).sum())
    batch = np.stack([logits, logits[::-1]])
    np.testing.assert_allclose(sd.warp(batch, 1.0, top_p=0.7)[1], sd.warp(logits[::-1], 1.0, top_p=0.7))


# ----------------------------------------------------------------------------------------------
# alpha measured on text


def test_alpha_of_a_model_with_itself_is_one(target):
    data = torch.randint(0, V, (500,), generator=torch.Generator().manual_seed(0))
    agreement = sd.measure_agreement(target, target, data, windows=8)
    assert abs(agreement.alpha - 1) < 1e-9 and agreement.greedy_agreement == 1.0


def test_alpha_matches_a_direct_computation(target):
    draft = make_model(3)
    data = torch.randint(0, V, (200,), generator=torch.Generator().manual_seed(1))
    agreement = sd.measure_agreement(target, draft, data, windows=4)
    starts = torch.linspace(0, len(data) - 16 - 1, 4).long()
    total, agree, count = 0.0, 0, 0
    for s in starts:
        x = data[s:s + 16][None]
        p = torch.softmax(target(x)[0][0].double(), -1)
        q = torch.softmax(draft(x)[0][0].double(), -1)
        total += torch.minimum(p, q).sum().item()
        agree += (p.argmax(-1) == q.argmax(-1)).sum().item()
        count += 16
    assert abs(agreement.alpha - total / count) < 1e-9
    assert agreement.greedy_agreement == agree / count
    assert sd.alpha(target, draft, data, windows=4) == agreement.alpha


# ----------------------------------------------------------------------------------------------
# The lesson's formulas


def test_formulas_golden_values():
    assert round(sd.expected_tokens_per_pass(0.8, 4), 4) == 3.3616
    assert sd.expected_tokens_per_pass(0.8, 4) == pytest.approx(1 + 0.8 + 0.8**2 + 0.8**3 + 0.8**4)
    for (a, k), want in {(0.6, 2): 1.96, (0.7, 3): 2.53, (0.8, 2): 2.44, (0.8, 5): 3.69,
                         (0.9, 2): 2.71, (0.9, 10): 6.86}.items():  # Leviathan et al., Table 1
        assert round(sd.expected_speedup(a, k, 0.0), 2) == want
    assert round(sd.break_even_alpha(4, 0.2), 4) == 0.4553
    assert round(sd.break_even_alpha(4, 0.05), 4) == 0.1668
    assert math.isnan(sd.break_even_alpha(4, 1.0))
    assert sd.expected_tokens_per_pass(1.0, 4) == 5


@given(st.floats(0, 0.999), st.integers(1, 12), st.floats(0, 0.9))
def test_formula_properties(alpha, k, c):
    tokens = sd.expected_tokens_per_pass(alpha, k)
    assert 1 <= tokens <= k + 1 + 1e-9
    assert tokens == pytest.approx(sum(alpha ** i for i in range(k + 1)))
    assert sd.expected_tokens_per_pass(min(alpha + 0.001, 1), k) >= tokens
    best = sd.best_k(alpha, c)
    assert all(sd.expected_speedup(alpha, best, c) >= sd.expected_speedup(alpha, j, c)
               for j in range(1, 33))
    if c > 0:
        even = sd.break_even_alpha(k, c)
        assert sd.expected_speedup(even, k, c) == pytest.approx(1.0, abs=1e-9)
