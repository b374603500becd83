"""
beyond/tree.py: token trees: several guesses per position, all checked in one pass of the big
model, exact for greedy decoding and for sampling. A round: grow a tree after the last written
token (tree_grow.grow), score the root and every node in one pass under the tree mask (each node
sees the context and its own ancestors, at its depth's position), walk down it (tree_sampling),
keep the accepted path in the KV cache; the big model adds its own token after it. tree_mask's
docstring draws a round's mask; why, and what differs from SpecInfer and Medusa:
docs/DESIGN.md, "beyond/, module by module".
Shapes: T new tokens, L cached, N guesses (nodes besides the root), V vocabulary.
"""

import numpy as np
import torch

import speculative as sd
from beyond.heads import cached_state, final_states
from beyond.tree_grow import (  # noqa: F401
    HeadsBranches,
    as_brancher,
    best_shape,
    chain_shape,
    check_shape,
    grow,
)
from beyond.tree_sampling import greedy_walk, sample_walk  # noqa: F401 (tree.greedy_walk)
from lessonkit import machine
from lessonkit.scorer import Model, WindowScorer, common_prefix, window_start

# ----------------------------------------------------------------------------------------------
# The mask and one pass


def tree_mask(parents, cached, chain):
    """visible[i, j]: may new token i attend to cache slot j? A bool array (T, L + T), with
    L = cached and T = chain + N + 1.

    The slots: 0..L-1 hold `cached` tokens already in the KV cache; then come the T new tokens
    of this pass, in order: `chain` tokens of written text not cached yet, then the tree's
    nodes, root first (node a is new token chain + a, in slot L + chain + a). parents: the
    nodes' parents, a list of N + 1 ints, parents[0] == -1 (the root), parents[a] < a.
    Every new token sees every cached slot; chain token i sees the chain's tokens 0..i
    (causally); node a sees the whole chain, itself and its ancestors (its parent, its parent's
    parent, ... up to the root), and no other node: never a sibling, never a sibling's branch.

    The round of the module docstring, parents = [-1, 0, 0, 1] (a root r; a and b after it;
    c after a), cached = 3, chain = 0 (1: True):

        tree_mask([-1, 0, 0, 1], 3, 0) = [[1, 1, 1,  1, 0, 0, 0],     r
                                          [1, 1, 1,  1, 1, 0, 0],     a
                                          [1, 1, 1,  1, 0, 1, 0],     b
                                          [1, 1, 1,  1, 1, 0, 1]]     c
    """
    # BEGIN SOLUTION
    T = chain + len(parents)
    visible = np.zeros((T, cached + T), dtype=bool)       # (T, L + T)
    visible[:, :cached] = True
    visible[:chain, cached:cached + chain] = np.tri(chain, dtype=bool)
    visible[chain:, cached:cached + chain] = True
    seen = visible[chain:, cached + chain:]               # (N+1, N+1): nodes over nodes
    for a, parent in enumerate(parents):
        seen[a, a] = True                                 # a node sees itself ...
        if parent >= 0:
            seen[a] |= seen[parent]                       # ... and all its parent sees
    return visible
    # END SOLUTION


def tree_positions(parents, cached, chain):
    """The position in the window of each of the T = chain + N + 1 new tokens of tree_mask's
    pass (a list of T ints): the chain's tokens follow the cached ones, at cached, cached + 1,
    ...; the root comes next, at cached + chain; node a sits at the root's position plus its
    depth (the number of steps from it up to the root), the position it would have at the end
    of its own chain, whatever its index in the list: siblings share a position.

        tree_positions([-1, 0, 0, 1], 3, 0) = [3, 4, 4, 5]          r, a, b, c
        tree_positions([-1, 0], 1, 2) = [1, 2, 3, 4]                two chain tokens, r, a
    """
    # BEGIN SOLUTION
    depths = [0] * len(parents)
    for a in range(1, len(parents)):
        depths[a] = depths[parents[a]] + 1                # parents come before their children
    root = cached + chain
    return list(range(cached, root)) + [root + depth for depth in depths]
    # END SOLUTION


def tree_logits(model, tokens, positions, visible, cache, states=False):
    """One pass of a gpt.GPT or a NumpyGPT over T new tokens (list) at `positions` (T,) in the
    window, under `visible` (T, L + T): their keys and values fill cache slots L..L+T-1 in that
    order. -> (logits (T, V), and with `states` the final hidden states normalised, ln_f without
    its gain and bias (T, C), else None), NumPy arrays."""
    L, T = cache.length, len(tokens)
    if isinstance(model, torch.nn.Module):
        logits, normalised = torch_tree_logits(model, tokens, positions, visible, cache, states)
    else:                           # NumpyGPT's layers, the tree's mask for the causal one
        mask = np.where(visible, np.float32(0), np.float32(-np.inf))     # (T, L + T)
        x = model.wte[tokens] + model.wpe[positions]      # (T, C)
        normalised = model.normalised(model.block_layers(x[None], L, cache, mask=mask)[0])
        logits = normalised @ model.head_w + model.head_b                # (T, V)
    cache.length = L + T
    return logits, normalised if states else None


@torch.inference_mode()
def torch_tree_logits(model, tokens, positions, visible, cache, states):
    """tree_logits for a gpt.GPT: its own forward pass, given the tokens' positions and the
    tree's mask in place of the causal one."""
    device = model.lm_head.weight.device
    idx = torch.tensor([tokens], device=device)                                  # (1, T)
    where = {"positions": torch.tensor(positions, device=device),
             "mask": torch.from_numpy(visible).to(device)}                       # (T,), (T, L+T)
    if not states:
        return model(idx, cache=cache, **where)[0][0].float().cpu().numpy(), None
    logits, normalised = final_states(model, idx, cache, True, **where)       # (1, T, V|C)
    return logits[0].float().cpu().numpy(), normalised[0].float().cpu().numpy()


# ----------------------------------------------------------------------------------------------
# The big model's scorer: score a tree, keep the accepted path


class TreeScorer(WindowScorer):
    """scorer.WindowScorer (one sequence) that also scores trees: self.fed[0] is what the
    cache holds, from window start self.starts[0] (the window rule decides where it starts).
    Nodes sit side by side in the cache's slots but at their depth's position, so a tree of
    `nodes` guesses can need that many slots past the window: the cache has them. With
    `states`, it keeps every cached token's final hidden state too (for the extra heads)."""

    def __init__(self, model, nodes, states=False):
        super().__init__(model)
        k = self.cache.k                                  # (n_layer, 1, nh, block, hs)
        shape = k.shape[:3] + (k.shape[3] + nodes,) + k.shape[4:]
        wider = k.new_zeros if torch.is_tensor(k) else (lambda s: np.zeros(s, k.dtype))
        self.cache.k, self.cache.v = wider(shape), wider(shape)
        self.states = np.zeros((shape[3], model.c.n_embd), np.float32) if states else None

    def state(self, seq, pos):              # the normalised final hidden state (C,), or None
        return cached_state(self, self.states, seq, pos)

    def room(self, seq):
        """How deep a tree after seq may be: its deepest node predicts a token from the same
        window as the root, or it would need another pass (the window rule)."""
        n = len(seq)
        return window_start(n, self.block_size) + self.block_size - n

    def score_tree(self, seq, tree):
        """Logits (N+1, V) after the root (seq[-1]) and every node, in one pass."""
        n, start = len(seq), window_start(len(seq), self.block_size)
        if start != self.starts[0]:                       # the window jumped: a fresh cache
            self.starts[0], self.fed[0] = start, []
        fed = self.fed[0]
        keep = common_prefix(fed, seq, start, min(len(fed), n - 1 - start))
        self.cache.rollback(keep)
        chain = seq[start + keep:n - 1]                   # written, not cached, before the root
        positions = tree_positions(tree.parents, keep, len(chain))                  # (T,)
        visible = tree_mask(tree.parents, keep, len(chain))                         # (T, L+T)
        logits, normalised = tree_logits(self.model, chain + tree.tokens, positions, visible,
                                         self.cache, self.states is not None)
        if normalised is not None:
            self.states[keep:keep + len(normalised)] = normalised           # (T, C)
        self.passes += 1
        fed[keep:] = chain + tree.tokens                  # slots as fed; keep_path compacts
        return logits[len(chain):]                        # (N+1, V)

    def keep_path(self, seq, tree, path):
        """Roll back: the kept nodes (root to leaf) move to the slots after the root, in order,
        and the cache forgets every other node. Node i sat at slot root + i; i >= its depth,
        so no kept node is overwritten before it is moved."""
        root = len(seq) - 1 - self.starts[0]
        kept = [root + node for node in path]             # (kept,) slots to keep
        moved = slice(root + 1, root + 1 + len(path))
        if path != list(range(1, len(path) + 1)):         # not already in place (first guesses)
            k, v = self.cache.k, self.cache.v             # (n_layer, 1, nh, slots, hs)
            k[:, :, :, moved] = k[:, :, :, kept]
            v[:, :, :, moved] = v[:, :, :, kept]
            if self.states is not None:
                self.states[moved] = self.states[kept]                      # (kept, C)
        self.cache.length = root + 1 + len(path)
        self.fed[0][root + 1:] = [tree.tokens[node] for node in path]


# ----------------------------------------------------------------------------------------------
# The loop


def tree_decode(grow_tree, score_tree, scorer, seq, max_new_tokens, sampling, after_round):
    """Extend seq (a list of ids) by max_new_tokens, a tree per round. grow_tree(seq, max_depth,
    sampling) -> Tree; score_tree: scorer.score_tree (timed); scorer: a TreeScorer;
    after_round(tree, path, token) hears what each round did."""
    goal = len(seq) + max_new_tokens
    while len(seq) < goal:
        n = len(seq)
        # 1. Grow a tree after seq[-1]: never past the goal, never past the window's room.
        tree = grow_tree(seq, min(goal - n - 1, scorer.room(seq)), sampling)
        # 2. The big model scores the root and every node in one pass.
        logits = score_tree(seq, tree)                                     # (N+1, V)
        # 3. Walk down the tree: greedy, or the multi-candidate rule.
        if sampling.greedy:
            path, token = greedy_walk(tree, logits.argmax(-1).tolist())
        else:
            path, token = sample_walk(tree, sampling.warp(logits), sampling.rng)
        # 4. Roll back: only the kept path stays in the cache; then write it and the token.
        scorer.keep_path(seq, tree, path)
        seq += [tree.tokens[node] for node in path] + [token]
        after_round(tree, path, token)
    return seq


DEFAULT_ACCEPT = [0.5, 0.2, 0.1, 0.05]    # a shape for a budget when no accept is given


@torch.no_grad()
def tree_generate(target, draft, idx, max_new_tokens, *, shape=None, budget=None, accept=None,
                  temperature=0.0, top_k=None, top_p=None, generator=None,
                  threads=machine.DECODE_THREADS):
    """Speculative decoding with a token tree. Returns (idx (B, T+new), speculative.Stats).

    The tree: `shape` (rank paths, tree_grow.py), or the best shape of `budget` nodes for the
    per-rank acceptance `accept` (a list; default: the draft keeps half its first guesses,
    a fifth its second, ...). Greedy output equals speculative.generate(target, ...) exactly;
    sampling has exactly its distribution. In Stats, a round's "guesses" are all its nodes
    (proposed, target_positions) and accepted_per_position[d] counts kept nodes of depth d+1."""
    sd.check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p)
    sd.check_vocabularies(target, draft)
    if not isinstance(target, Model):
        raise ValueError("the target of a tree must be a gpt.GPT or a beyond.fast_numpy.NumpyGPT")
    if shape is not None and budget is not None:
        raise ValueError("give a tree a shape or a budget, not both")
    if shape is None:
        shape = best_shape(accept or DEFAULT_ACCEPT, 8 if budget is None else budget)
    check_shape(shape, target.c.block_size)
    brancher = as_brancher(draft)
    sampling = sd.Sampling(temperature, top_k, top_p, sd.TorchUniform(generator))
    stats = sd.Stats(k=max(map(len, shape)))
    with machine.threads(threads):
        rows = [decode_row(target, brancher, shape, row, max_new_tokens, sampling, stats)
                for row in idx.tolist()]
    return torch.tensor(rows, dtype=torch.long, device=idx.device), stats


def tree_scorer(target, brancher, nodes):
    """The big model's TreeScorer for trees of up to `nodes` guesses from `brancher`; one that
    reads the big model's states (the extra heads) is attached to it (its passes count as
    drafting)."""
    scorer = TreeScorer(target, nodes, states=hasattr(brancher, "attach"))
    if hasattr(brancher, "attach"):
        brancher.attach(scorer, scorer.score_tree)
    return scorer


def decode_row(target, brancher, shape, seq, max_new_tokens, sampling, stats):
    """tree_decode for one sequence, its growing and checking timed from outside; each round's
    check counted as one pass of the big model (as plain decoding counts a token's: a re-feed
    when the window slides, or one the extra heads ask for to read a state, is not counted)."""
    scorer = tree_scorer(target, brancher, len(shape))
    checking = machine.Timed(scorer.score_tree, machine.on_gpu(target))
    growing = machine.Timed(lambda s, depth, smp: grow(brancher, s, shape, depth, smp))

    def after_round(tree, path, token):
        stats.count_round(tree.tokens[1:], len(path), token)
        stats.target_passes += 1

    tree_decode(growing, checking, scorer, seq, max_new_tokens, sampling, after_round)
    stats.draft_time += growing.take()
    stats.target_time += checking.take()
    return seq
