"""Token trees (beyond/tree.py) against their references: each node's logits against its own
chain's, greedy output against plain decoding (both backends, every length, across window
jumps), the sampling output distribution against the target's, exactly (enumerated) and by
sampling; each with a negative control that must fail. Then the formula and bad input."""

import json
from collections import Counter, defaultdict
from itertools import product

import numpy as np
import pytest
import torch

# The exactness harness of tests/test_speculative.py (small_pair is its fixture).
from test_heads import trained_heads
from test_speculative import (  # noqa: F401
    SMALL_V,
    chi_square_p_value,
    exact_distribution,
    make_model,
    noisy_copy,
    prompts,
    small_pair,
)

import speculative as sd
from harness import stages
from beyond import tree as tr
from beyond.fast_numpy import NumpyGPT
from beyond.heads import HeadsDraft, final_states
from beyond.ngram import NGramDraft
from beyond.tree_grow import (
    Tree,
    best_shape,
    chain_shape,
    fastest_shape,
    likeliest_or_drawn,
    node_value,
    tree_speedup,
    tree_tokens_per_pass,
)
from numpy_speculative import accept_probability, residual, sample
from studies import __main__ as studies
from studies.lenience import next_token_probs

WIDE = [(0,), (0, 0), (0, 0, 0), (0, 1), (1,), (1, 0), (2,)]   # 7 nodes, 3 at the root


@pytest.fixture(scope="module")
def target():
    return make_model(0, scale=0.3)                  # V = 11, block_size 16


def backends(model):
    return {"torch": model, "numpy": NumpyGPT(model)}


# ----------------------------------------------------------------------------------------------
# The mask and one pass


def test_mask_of_the_docstring_round():
    # root r, guesses a, b after it, c after a; 3 cached tokens, no chain (beyond/tree.py)
    visible = tr.tree_mask([-1, 0, 0, 1], cached=3, chain=0).astype(int)
    assert visible.tolist() == [[1, 1, 1, 1, 0, 0, 0],
                                [1, 1, 1, 1, 1, 0, 0],
                                [1, 1, 1, 1, 0, 1, 0],
                                [1, 1, 1, 1, 1, 0, 1]]
    with_chain = tr.tree_mask([-1, 0], cached=1, chain=2).astype(int)  # 2 uncached, then r, a
    assert with_chain.tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0],
                                   [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_every_node_gets_its_own_chains_logits(target, backend, monkeypatch):
    seq = [3, 1, 4, 1, 5]
    tree = Tree([seq[-1]])
    for token, parent in [(2, 0), (7, 0), (1, 1), (8, 2), (9, 3), (0, 0)]:
        tree.add(token, parent)
    model = backends(target)[backend]

    def tree_pass():
        scorer = tr.TreeScorer(model, len(tree.tokens))
        scorer.score([seq[:3]], 3)                      # 3 tokens cached, 1 chain token to feed
        return scorer.score_tree(seq, tree)             # (N+1, V)
    logits = tree_pass()
    with torch.no_grad():
        for node in range(len(tree.tokens)):
            chain = seq + [tree.tokens[i] for i in tree.path_to(node)]
            want = target(torch.tensor([chain]))[0][0, -1].numpy()
            assert np.allclose(logits[node], want, atol=1e-4), node
    # Negative control: a causal mask lets each node see the nodes added before it.
    monkeypatch.setattr(tr, "tree_mask", lambda parents, cached, chain: np.tri(
        chain + len(parents), cached + chain + len(parents), cached, dtype=bool))
    assert not np.allclose(tree_pass(), logits, atol=1e-3)


# ----------------------------------------------------------------------------------------------
# Greedy: exactly plain decoding


SHAPES = {"chain": chain_shape(3), "wide": WIDE, "best": best_shape([0.6, 0.25, 0.1], 12)}


@pytest.mark.parametrize("backend", [pytest.param("torch", marks=pytest.mark.slow), "numpy"])
@pytest.mark.parametrize("shape", [name if name == "chain" else pytest.param(
    name, marks=pytest.mark.slow) for name in SHAPES])   # make test-fast: a chain in NumPy
def test_greedy_equals_plain_decoding_at_every_length(target, backend, shape):
    model = backends(target)[backend]
    drafts = [noisy_copy(target, 0.05, 1), make_model(2, block_size=8, n_layer=1),
              NGramDraft.from_data(sd.generate(target, torch.tensor([[1]]), 200)[0].numpy(),
                                   target.c.vocab_size, order=3)]
    kept = 0
    for i, prompt in enumerate(prompts(3, seed=1)):
        want = sd.generate(model, prompt, 3 * target.c.block_size)   # jumps the window
        for length in range(0, 3 * target.c.block_size + 1, 1 if i == 0 else 7):
            for draft in drafts:
                got, stats = tr.tree_generate(model, draft, prompt, length, shape=SHAPES[shape])
                assert torch.equal(got, want[:, :prompt.shape[1] + length]), (length, draft)
                assert stats.new_tokens == length == stats.accepted + stats.rounds
                kept += stats.accepted
    assert kept > 0


def test_greedy_test_catches_a_rollback_that_does_not_move_the_kept_path(target, monkeypatch):
    # Negative control: a rollback that only shortens the cache, as a chain's does, leaves the
    # keys of whatever nodes sat after the root where the kept path should be.
    prompt, draft = prompts(1, seed=2)[0], noisy_copy(target, 0.3, 1)
    want = sd.generate(target, prompt, 40)

    def rollback_without_moving(self, seq, tree, path):
        root = len(seq) - 1 - self.starts[0]
        self.cache.length = root + 1 + len(path)
        self.fed[0][root + 1:] = [tree.tokens[node] for node in path]
    monkeypatch.setattr(tr.TreeScorer, "keep_path", rollback_without_moving)
    got, _ = tr.tree_generate(target, draft, prompt, 40, shape=WIDE)
    assert not torch.equal(got, want)


def test_a_tree_beats_its_chain_when_the_second_guess_is_often_right(target):
    draft = noisy_copy(target, 0.3, 1)
    chain, wide = (tr.tree_generate(target, draft, prompts(1)[0], 60, shape=s)[1]
                   for s in (chain_shape(len(WIDE)), WIDE))
    assert wide.target_passes < chain.target_passes


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_heads_grow_trees_from_the_big_models_own_state(target, backend, tmp_path, monkeypatch):
    heads = HeadsDraft(trained_heads(target, tmp_path))
    model, checked = backends(target)[backend], []
    branch = tr.HeadsBranches.branch

    def checked_branch(self, seq, depth, width, sampling):   # the state is the big model's own
        guesses = branch(self, seq, depth, width, sampling)
        root, start = len(seq) - depth, self.scorer.starts[0]
        if not guesses[0]:                                   # no head this deep, or no state
            return guesses
        with torch.no_grad():
            want = final_states(target, torch.tensor([seq[start:root]]))[1][0, -1].numpy()
        got = self.scorer.state(seq, root - 1) * heads.ln_f_weight + heads.ln_f_bias
        np.testing.assert_allclose(got, want, atol=1e-4)
        own = likeliest_or_drawn(heads.logits(want, depth)[depth - 1], width, sampling)
        assert guesses[0] == own[0]                          # head `depth`'s, on this round's
        checked.append(depth)
        return guesses
    monkeypatch.setattr(tr.HeadsBranches, "branch", checked_branch)
    for i, prompt in enumerate(prompts(3, seed=4)):
        length = [7, 20, 3 * target.c.block_size][i]
        got, stats = tr.tree_generate(model, heads, prompt, length, shape=WIDE)
        assert torch.equal(got, sd.generate(model, prompt, length))
    assert max(checked) == 3 and stats.accepted > 0      # WIDE is 3 deep; 3 heads


# ----------------------------------------------------------------------------------------------
# Sampling: exactly the target's distribution


def trees(seq, shape, q_of):
    """Every tree tree_grow.grow can draw after seq, with its probability: {rank path: (token,
    the distribution it was drawn from)}, each parent's children drawn without replacement."""
    ranks_of = {ranks[:-1]: max(r[-1] for r in shape if r[:-1] == ranks[:-1]) + 1
                for ranks in shape}
    parents = sorted(ranks_of)                            # parents before their children

    def draws(q, width):                                  # (tokens, probability, distributions)
        if width == 0 or q.sum() <= 0:
            yield (), 1.0, ()
            return
        dist = q / q.sum()
        for x in np.flatnonzero(dist):
            rest = q.copy()
            rest[x] = 0.0
            for tokens, prob, dists in draws(rest, width - 1):
                yield (int(x),) + tokens, dist[x] * prob, (dist,) + dists

    def expand(i, tree, prob):
        if i == len(parents):
            yield tree, prob
            return
        parent = parents[i]
        if parent and parent not in tree:                 # left out with everything under it
            yield from expand(i + 1, tree, prob)
            return
        context = seq + tuple(tree[parent[:d]][0] for d in range(1, len(parent) + 1))
        for tokens, p, dists in draws(q_of(context).copy(), ranks_of[parent]):
            more = {parent + (r,): (x, d) for r, (x, d) in enumerate(zip(tokens, dists))
                    if parent + (r,) in shape}
            yield from expand(i + 1, {**tree, **more}, prob * p)
    yield from expand(0, {}, 1.0)


def walks(tree, seq, p_of, naive):
    """(tokens written, probability) of every way a walk down `tree` can go: the recursive rule,
    or with naive=True the rule public implementations get wrong (each child against the same
    target; after the last rejection, the residual of the last child)."""
    def at(ranks, written, prob):
        target = original = p_of(seq + written)
        for child in sorted(r for r in tree if r[:-1] == ranks):
            token, draft = tree[child]
            judge = original if naive else target
            keep = accept_probability(judge[token], draft[token])
            yield from at(child, written + (token,), prob * keep)
            prob *= 1.0 - keep
            target = residual(judge, draft)
        for x in np.flatnonzero(target):
            yield written + (int(x),), prob * target[x]
    yield from at((), (), 1.0)


def tree_distribution(p_of, q_of, prompt, n_tokens, shape, naive=False):
    """{first n_tokens: probability} that tree decoding writes, by enumerating every tree and
    every walk, round after round, trees cut to the goal as tree_decode cuts them."""
    out, goal = defaultdict(float), len(prompt) + n_tokens

    def new_round(seq, prob):
        if len(seq) == goal:
            out[seq[len(prompt):]] += prob
            return
        cut = [r for r in shape if len(r) <= goal - len(seq) - 1]
        for tree, tree_prob in trees(seq, cut, q_of):
            for written, walk_prob in walks(tree, seq, p_of, naive):
                if tree_prob * walk_prob > 0:
                    new_round(seq + written, prob * tree_prob * walk_prob)
    new_round(tuple(prompt), 1.0)
    return dict(out)


SMALL_SHAPE = [(0,), (0, 0), (1,), (2,)]


@pytest.mark.parametrize("warp", [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 3}])
def test_enumerated_distribution_is_the_targets(small_pair, warp):
    target, draft = small_pair
    prompt = (1, 2, 0)
    p_of, q_of = next_token_probs(target, **warp), next_token_probs(draft, **warp)
    want = {x: np.prod([p_of(prompt + x[:i])[t] for i, t in enumerate(x)])   # the target's
            for x in product(range(SMALL_V), repeat=3)}
    got = tree_distribution(p_of, q_of, prompt, 3, SMALL_SHAPE)
    assert max(abs(got.get(x, 0.0) - p) for x, p in want.items()) < 1e-12
    assert abs(sum(got.values()) - 1) < 1e-12
    # Negative control: the naive rule is off by far more than rounding.
    naive = tree_distribution(p_of, q_of, prompt, 3, SMALL_SHAPE, naive=True)
    assert max(abs(naive.get(x, 0.0) - p) for x, p in want.items()) > 1e-3


def naive_walk(tree, target_probs, rng):
    """The naive rule in tree_sampling.sample_walk's place: each child against the same target."""
    node, path = 0, []
    while True:
        children = tree.children(node)
        for child in children:
            token, draft = tree.tokens[child], tree.draft_probs[child]
            if rng.random() < accept_probability(target_probs[node][token], draft[token]):
                path.append(child)
                node = child
                break
        else:
            last = tree.draft_probs[children[-1]] if children else 0 * target_probs[node]
            return path, sample(residual(target_probs[node], last), rng)


def tree_counts(target, draft, prompt, n_tokens, n, seed, shape, **warp):
    g = torch.Generator().manual_seed(seed)
    counts = Counter()
    for _ in range(n):
        out, _ = tr.tree_generate(target, draft, torch.tensor([prompt]), n_tokens, shape=shape,
                                  generator=g, **warp)
        counts[tuple(out[0, len(prompt):].tolist())] += 1
    return counts


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampled_decoder_matches_the_target_and_the_naive_rule_does_not(small_pair, monkeypatch):
    target, draft = small_pair
    prompt = [1, 2, 0]
    want = exact_distribution(target, prompt, 3, temperature=1.0)
    for backend, model in backends(target).items():
        counts = tree_counts(model, draft, prompt, 3, 1000, 0, SMALL_SHAPE, temperature=1.0)
        assert chi_square_p_value(counts, want) > 1e-3, backend
    monkeypatch.setattr(tr, "sample_walk", naive_walk)   # negative control: p about 1e-24
    counts = tree_counts(target, draft, prompt, 3, 300, 0, SMALL_SHAPE, temperature=1.0)
    assert chi_square_p_value(counts, want) < 1e-6


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_heads_sample_exactly(small_pair, tmp_path):
    target, _ = small_pair
    heads = HeadsDraft(trained_heads(target, tmp_path))
    prompt = [1, 2, 0]
    want = exact_distribution(target, prompt, 3, temperature=1.0)
    # On the NumPy model (the same distribution to 1e-5, sampled faster): the torch backend's
    # trees are sampled in test_sampled_decoder_matches_the_target_and_the_naive_rule_does_not.
    counts = tree_counts(NumpyGPT(target), heads, prompt, 3, 1000, 2, SMALL_SHAPE,
                         temperature=1.0)
    assert chi_square_p_value(counts, want) > 1e-3


def test_deterministic_guesses_sample_exactly(small_pair):
    target, _ = small_pair                              # an n-gram table: one-hot draft rows
    table = NGramDraft.from_data(np.array([0, 1, 2, 3, 0, 2, 1, 3, 3, 0, 1, 1, 2]), 4, order=3)
    prompt = [1, 2, 0]
    want = exact_distribution(target, prompt, 3, temperature=1.0)
    counts = tree_counts(NumpyGPT(target), table, prompt, 3, 1000, 1, SMALL_SHAPE,
                         temperature=1.0)                 # (NumPy: as the test above)
    assert chi_square_p_value(counts, want) > 1e-3


# ----------------------------------------------------------------------------------------------
# The formula, and bad input


@pytest.mark.parametrize("alpha,k", [(0.3, 1), (0.8, 4), (0.95, 9)])
def test_a_chain_is_the_lessons_formula(alpha, k):
    assert tree_tokens_per_pass(chain_shape(k), [alpha]) == pytest.approx(
        sd.expected_tokens_per_pass(alpha, k), abs=1e-12)


def test_best_shape_is_the_best_tree_of_its_size():
    accept = [0.6, 0.25, 0.1]
    nodes = [r for d in range(1, 4) for r in product(range(3), repeat=d)]
    for budget in range(1, 5):
        best = max(tree_tokens_per_pass(s, accept) for s in subsets_that_are_trees(nodes, budget))
        assert tree_tokens_per_pass(best_shape(accept, budget), accept) == pytest.approx(best)
    assert best_shape(accept, 4) != chain_shape(4)                        # it branches
    assert node_value((0, 1), accept) == pytest.approx(0.15)


def subsets_that_are_trees(nodes, size):
    def grow(shape, i):
        if len(shape) == size:
            yield shape
            return
        for j in range(i, len(nodes)):
            if len(nodes[j]) == 1 or nodes[j][:-1] in shape:
                yield from grow(shape + [nodes[j]], j + 1)
    yield from grow([], 0)


@pytest.mark.parametrize("kwargs,message", [
    ({"budget": 0}, "budget (guesses checked per round) must be a whole number >= 1"),
    ({"shape": chain_shape(16)}, "tree 16 deep does not fit the target's window of 16"),
    ({"shape": [(0, 0)]}, "each after its parent"),
])
def test_bad_trees_are_one_line_errors(target, kwargs, message):
    with pytest.raises(ValueError, match=r"^[^\n]*$") as e:
        tr.tree_generate(target, target, torch.tensor([[1]]), 5, **kwargs)
    assert message in str(e.value)


def test_a_drafter_that_cannot_branch_is_a_one_line_error(target):
    class ChainOnly(sd.Drafter):                        # speculative.py's drafter, nothing more
        vocab_size = target.c.vocab_size

        def propose(self, seq, k, sampling):
            return [0] * k, None
    with pytest.raises(ValueError, match=r"^ChainOnly cannot branch[^\n]*speculative_generate$"):
        tr.tree_generate(target, ChainOnly(), torch.tensor([[1]]), 5)


def test_a_shape_with_a_budget_too_is_a_one_line_error(target):
    with pytest.raises(ValueError, match="a shape or a budget, not both"):
        tr.tree_generate(target, target, torch.tensor([[1]]), 5, shape=WIDE, budget=4)


def test_each_step_of_a_round_reads_in_one_screen():
    # The promise: mask, score, walk, roll back, each under 60 lines (a step that
    # grows past it, or is renamed without this list, fails here).
    import inspect

    from beyond import tree_sampling
    steps = [tr.tree_mask, tr.tree_logits, tr.torch_tree_logits, tr.TreeScorer.score_tree,
             tr.greedy_walk, tree_sampling.sample_walk, tr.TreeScorer.keep_path, tr.tree_decode]
    for step in steps:
        assert len(inspect.getsource(step).splitlines()) < 60, step.__qualname__


def test_fastest_shape_trades_depth_for_drafter_calls():
    accept = [0.6, 0.15, 0.1, 0.08]
    deep = best_shape(accept, 16)
    # A costly drafter: fewer calls (a shallower, bushier tree) beat more characters per pass.
    fast = fastest_shape(accept, 16, c=0.5, verify_cost=1.5)
    assert max(map(len, fast)) < max(map(len, deep))
    assert tree_speedup(fast, accept, 0.5, 1.5) > tree_speedup(deep, accept, 0.5, 1.5)
    assert tree_tokens_per_pass(fast, accept) < tree_tokens_per_pass(deep, accept)
    assert fastest_shape(accept, 16, c=0.0, verify_cost=1.5) == deep    # free calls: most per pass


def test_ngram_branches_start_with_the_chains_guess():
    table = NGramDraft.from_data(np.array([0, 1, 2, 3, 0, 2, 1, 3, 3, 0, 1, 1, 2]), 4, order=3,
                                 prompt_lookup=True)
    seq = [1, 2, 3, 0, 1, 2]
    guesses, _ = tr.as_brancher(table).branch(seq, 1, 4, sd.Sampling())
    assert guesses[0] == table.propose(seq, 1, sd.Sampling())[0][0] == 3   # looked up
    assert len(set(guesses)) == len(guesses) > 1


# ----------------------------------------------------------------------------------------------
# The study


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_study_runs_with_the_others_and_the_report_links_to_it(tmp_path):
    # Through `python -m studies --only trees`: fails unless the study is registered
    # there (STUDIES, with its estimate) and in the report, which links to its section.
    studies.main(["--only", "trees", "--quick", "--checkpoints", str(tmp_path / "checkpoints"),
                  "--results", str(tmp_path / "results")])
    results = tmp_path / "results"
    assert "trees" in stages.ABOUT_S
    report_text = (results / "report.md").read_text()
    assert "[token trees against chains](#token-trees-against-chains)" in report_text
    assert "\n## Token trees against chains\n" in report_text
    assert (results / "trees.png").read_bytes().startswith(b"\x89PNG")
    text = (results / "trees.md").read_text()
    assert "| big model | drafter | N |" in text and "x . ." in text      # the table, a mask
    numbers = json.loads((results / "trees.json").read_text())
    for r in numbers["rows"]:
        assert 1 <= r["tokens_per_pass"] <= r["budget"] + 1
        assert 1 <= r["predicted_tokens_per_pass"] <= r["budget"] + 1
    assert {r["kind"] for r in numbers["rows"]} >= {"chain", "tree"}
    assert {r["backend"] for r in numbers["rows"]} == {"torch", "numpy"}


@pytest.mark.parametrize("flags,message", [
    (["--budgets", "0"], "--budgets takes whole numbers >= 1"),
    (["--drafts", "exit1"], "EarlyExit cannot branch"),
    (["--budgets", "4,63"], "--budgets 63: timing a pass over 63 guesses, the root and a "
                            "cached token needs 65 of the big model's 64 positions"),
])
@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_study_bad_flags_are_one_line_errors(run_here, tmp_path, flags, message):
    result = run_here("-m", "studies.trees", "--quick", "--checkpoints",
                        tmp_path, "--results", tmp_path, *flags)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "big model in torch" not in result.stdout     # said before any timing starts
