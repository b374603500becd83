"""
beyond/tree_sampling.py: walking down a tree the big model has scored (beyond/tree.py's round):
greedy, following the big model's choices; and sampling without changing the target's
distribution, several guesses for one position checked one after another (SpecInfer's
multi-draft rule, siblings drawn without replacement). A tree is beyond/tree_grow.Tree. The
rule, why it is exact and where implementations go wrong: docs/DESIGN.md, "beyond/, module by
module".
Words, not letters: target = the big model's distribution (Leviathan's p), draft = the
drafter's (q).
"""

import numpy as np

from numpy_speculative import accept_probability, residual, sample


def draw_distinct(probs, width, rng):
    """Up to `width` different tokens from probs (V,), one after another, each from what is left
    (sampling without replacement). -> (tokens, the distribution each was drawn from (n, V))."""
    tokens, drawn_from = [], []
    left = np.array(probs, dtype=np.float64)                    # (V,)
    while len(tokens) < width and left.sum() > 0:
        drawn_from.append(left / left.sum())                    # (V,)
        tokens.append(sample(drawn_from[-1], rng))
        left[tokens[-1]] = 0.0                                  # never the same token twice
    return tokens, np.array(drawn_from).reshape(len(tokens), len(left))


def greedy_walk(tree, choices):
    """Greedy verification of a tree. tree.tokens[a], tree.parents[a]: node a's token and
    parent (node 0, the root, is the last written token); tree.children(a): a's children, a
    list of nodes in rank order. choices[a]: the big model's token after node a (its argmax
    there; a list of N + 1 ints). From the root down, keep the child whose token is the
    big model's choice after the current node, while there is one (siblings hold different
    tokens, so at most one does). -> (path, token): path, the kept nodes from the root's child
    down (a list of node numbers, [] when no child of the root is kept; the root itself is
    written already and is never in it); token, the big model's choice after the last kept node
    (after the root when none is kept), the token it adds, as in the lesson's round.

    A root r with children a (node 1) and b (node 2), c (node 3) after a: tree.tokens =
    [r, "a", "b", "c"], tree.parents = [-1, 0, 0, 1]. With choices = ["b", "x", "y", "z"]:
    b is kept, b has no child, so greedy_walk returns ([2], "y")."""
    # BEGIN SOLUTION
    node, path = 0, []
    while True:
        child = next((c for c in tree.children(node) if tree.tokens[c] == choices[node]), None)
        if child is None:
            return path, choices[node]
        path.append(child)
        node = child
    # END SOLUTION


def sample_walk(tree, target_probs, rng):
    """Sampled verification of a tree, with the multi-candidate rule of the module docstring.
    target_probs (N+1, V): the target's warped distribution after each node (row a: after node
    a; row 0: after the root). tree.draft_probs[c] (V,): the distribution child c's token was
    drawn from. rng: draw every random number from it, rng.random() to test a guess (one per
    guess tested) and numpy_speculative.sample(probs, rng) for the token the target writes.
    -> (path, token), as greedy_walk: the kept nodes, root's child first, and the token the
    target adds after the last of them.

    At a node, with target = target_probs[node]: try its children in rank order; keep child c
    with probability accept_probability(target[token], draft[token]) (token = tree.tokens[c],
    draft = tree.draft_probs[c]), and go on from c with c's own row of target_probs; rejected,
    the target becomes residual(target, draft), normalised, and the next sibling is tried
    against that. When every child is rejected (or the node has none), the target writes a
    token drawn from the last of those targets, and the walk ends. (accept_probability,
    residual and sample: numpy_speculative's, imported above.)"""
    # BEGIN SOLUTION
    node, path = 0, []
    while True:
        target = target_probs[node]                             # (V,)
        for child in tree.children(node):
            token, draft = tree.tokens[child], tree.draft_probs[child]   # draft: (V,)
            if rng.random() < accept_probability(target[token], draft[token]):   # 1. keep
                path.append(child)
                node = child
                break
            target = residual(target, draft)                    # 2. the next sibling's target
        else:
            return path, sample(target, rng)                    # 3. the target writes
    # END SOLUTION
