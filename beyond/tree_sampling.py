"""
beyond/tree_sampling.py: sampling with a token tree without changing the target's distribution:
several guesses for one position, checked one after another (beyond/tree.py walks the tree).

The rule (multi-draft speculative sampling) is the one SpecInfer introduced (Miao et al., 2024,
"SpecInfer: Accelerating Large Language Model Serving with Tree-based Speculative Inference and
Verification", ASPLOS; its "multi-step speculative sampling") and SpecTr studied as optimal
transport over several drafts (Sun et al., 2023, "SpecTr: Fast Speculative Decoding via Optimal
Transport", NeurIPS); drawing the siblings without replacement is what Jeon et al. (2024),
"Recursive Speculative Decoding", add. In words, at a node whose children are the guesses
x_1, x_2, ..., each drawn from a draft distribution draft_i (the draft's own one, less the
siblings drawn before it):

  1. try x_i against the current target: keep it with min(1, target(x_i) / draft_i(x_i));
  2. rejected: the target becomes the residual norm(max(0, target - draft_i)), what draft_i
     under-proposed, and the next sibling is tried against that;
  3. every child rejected: the target writes a token drawn from the last residual.

Why it is exact, by induction from the last sibling up: if trying x_{i+1}, ... against a target
r writes a token distributed as r, then trying x_i against t writes x with probability
min(t(x), draft_i(x)) (kept) plus P(rejected) r(x), where P(rejected) = sum_x max(0, t(x) -
draft_i(x)) and r = max(0, t - draft_i) / P(rejected): the sum is min(t, draft_i) + max(0, t -
draft_i) = t. It needs only that x_i is drawn from draft_i whatever happened before, so the tree
must be grown before it is checked, with a shape that does not depend on the tokens drawn.
A kept child is then checked the same way against the target after it, down the tree.

Where implementations go wrong (the negative control in tests/test_tree.py): trying every child
with min(1, target / draft) against the same, unchanged target. A token that two siblings both
offer gets two chances, and the output leans towards what the draft likes.
Deterministic guesses (an n-gram table's) come with one-hot draft rows: then x_i is kept with
probability target(x_i), and a rejection removes x_i from the target. Words, not letters:
target = the big model's distribution (Leviathan's p), draft = the drafter's (q).
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


def sample_walk(tree, target_probs, rng):
    """Walk down the tree with the rule above. target_probs (N+1, V): the target's warped
    distribution after each node (row 0: after the root). -> (the kept nodes, root to leaf; the
    token the target adds after the last of them)."""
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
