"""
beyond/tree_grow.py: growing a tree of guesses (beyond/tree.py checks it in one pass). A tree is
a list of nodes, each a token and its parent (node 0, the root, is the last token written); its
shape is written as rank paths, as Medusa writes them: (0,) the first guess, (1,) the second,
(0, 0) the first guess after the first. best_shape keeps, for a budget, the nodes the formula
scores highest; brancher.branch(seq, depth, width, sampling) proposes a node's children. The
formula and the protocol: docs/DESIGN.md, "beyond/, module by module".
"""

import heapq
from dataclasses import dataclass, field

import numpy as np

import speculative as sd
from beyond.heads import HeadsDraft
from beyond.ngram import LOOKUP, NGramDraft, prompt_lookup
from beyond.tree_sampling import draw_distinct


@dataclass
class Tree:
    """tokens[i], parents[i] (< i; -1 for the root, node 0); draft_probs[i]: the distribution
    guess i was drawn from (sampling), or None."""
    tokens: list
    parents: list = field(default_factory=lambda: [-1])
    draft_probs: list = field(default_factory=lambda: [None])
    depths: list = field(default_factory=lambda: [0])

    def add(self, token, parent, draft_probs=None):
        self.tokens.append(token)
        self.parents.append(parent)
        self.draft_probs.append(draft_probs)
        self.depths.append(self.depths[parent] + 1)
        return len(self.tokens) - 1

    def children(self, node):
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path_to(self, node):
        """The nodes from the root's child down to `node`."""
        path = []
        while node > 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


# ----------------------------------------------------------------------------------------------
# Shapes, and the formula


def chain_shape(k):
    """k guesses one after another: the lesson's chain, as a tree."""
    return [(0,) * d for d in range(1, k + 1)]


def at_depth(accept, depth):
    """accept for the guesses at `depth` (1: the root's children): `accept` is one list for
    every depth (a drafter that sees the same context whatever the depth), or one per depth
    (the extra heads: head d guesses depth d; no list, no guesses)."""
    if accept and isinstance(accept[0], (list, tuple)):
        return accept[depth - 1] if depth <= len(accept) else []
    return accept


def node_value(ranks, accept):
    """The chance that the node at rank path `ranks` is kept, under the formula."""
    value = 1.0
    for depth, r in enumerate(ranks, 1):
        here = at_depth(accept, depth)
        value *= here[r] if r < len(here) else 0.0
    return value


def tree_tokens_per_pass(shape, accept):
    """Expected tokens a round writes per target pass: 1 + the sum of node_value over the shape."""
    return 1.0 + sum(node_value(ranks, accept) for ranks in shape)


def best_shape(accept, budget, max_depth=None):
    """The `budget` rank paths with the largest node_value (see the module docstring), no deeper
    than max_depth; ties go to the shallower, then lower-ranked node. Sorted parents first."""
    check_budget(budget)
    frontier = [(-a, (r,)) for r, a in enumerate(at_depth(accept, 1))]  # (minus value, path)
    heapq.heapify(frontier)
    shape = []
    while frontier and len(shape) < budget:
        minus_value, ranks = heapq.heappop(frontier)
        shape.append(ranks)
        if max_depth is None or len(ranks) < max_depth:
            for r, a in enumerate(at_depth(accept, len(ranks) + 1)):
                heapq.heappush(frontier, (minus_value * a, ranks + (r,)))
    return sorted(shape)


def drafter_calls(shape):
    """Calls of the drafter a round of this shape makes: one per node with children."""
    return len({ranks[:-1] for ranks in shape})


def tree_speedup(shape, accept, c, verify_cost):
    """The lesson's expected_speedup for a tree: tokens per pass over the cost of a round in
    big-model steps, c per drafter call (a call gives every child of a node) plus one pass over
    the root and the nodes (verify_cost steps)."""
    return tree_tokens_per_pass(shape, accept) / (drafter_calls(shape) * c + verify_cost)


def fastest_shape(accept, budget, c, verify_cost):
    """Of the best shapes of `budget` nodes no deeper than 1, 2, ..., budget, the one
    tree_speedup expects to be fastest: shallower trees call the drafter less for as many
    nodes (siblings come from one call)."""
    shapes = [best_shape(accept, budget, depth) for depth in range(1, budget + 1)]
    return max(shapes, key=lambda shape: tree_speedup(shape, accept, c, verify_cost))


def check_budget(budget):
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise ValueError(f"a tree's budget (guesses checked per round) must be a whole number "
                         f">= 1, not {budget!r}")


def check_shape(shape, block_size):
    """A one-line ValueError unless shape is a list of rank paths, parents first, that fits."""
    check_budget(len(shape) if isinstance(shape, (list, tuple)) else shape)
    seen = {()}
    for ranks in shape:
        if not (isinstance(ranks, tuple) and ranks and ranks[:-1] in seen and
                all(isinstance(r, int) and r >= 0 for r in ranks)):
            raise ValueError(f"a tree shape is a list of rank paths, each after its parent, such "
                             f"as [(0,), (1,), (0, 0)]; {ranks!r} is not one of them")
        seen.add(ranks)
    depth = max(map(len, shape))
    if depth > block_size - 1:
        raise ValueError(f"a tree {depth} deep does not fit the target's window of {block_size} "
                         f"tokens (the root and its context need room too); keep it below "
                         f"{block_size}")


# ----------------------------------------------------------------------------------------------
# Drafters that branch


def likeliest_or_drawn(logits, width, sampling):
    """Greedy: the `width` likeliest tokens of logits (V,), no distributions; sampling: that
    many different tokens drawn from the warped distribution, with what each was drawn from."""
    if sampling.greedy:
        return np.argsort(-logits, kind="stable")[:width].tolist(), None
    return draw_distinct(sampling.warp(logits), width, sampling.rng)


class ModelBranches:
    """A GPT draft (through its Scorer): its `width` likeliest next tokens, or draws."""

    def __init__(self, scorer):
        self.scorer, self.vocab_size = scorer, scorer.vocab_size

    def branch(self, seq, depth, width, sampling):
        logits = self.scorer.score([seq], len(seq))[0, -1]                 # (V,)
        return likeliest_or_drawn(logits, width, sampling)


class HeadsBranches:
    """Extra heads (beyond/heads.py): head d's likeliest guesses (or draws) for the nodes of
    depth d, all from one state: the big model's final hidden state before the root, which the
    pass that checked the last round computed (the target's TreeScorer keeps it: attach). No
    node is deeper than the heads. A round without that state (the first, or after a window
    jump) gets it from a pass of the big model over the text before the root."""

    def __init__(self, heads):
        self.heads, self.vocab_size, self.scorer = heads, heads.vocab_size, None
        self.round = (None, None)                # (the text to the root, every head's logits)

    def attach(self, scorer, score_tree):
        """The target's TreeScorer (keeping states) and its own score_tree, for a missing state."""
        self.heads.check_width(scorer.model)
        self.scorer, self.score_tree = scorer, score_tree

    def branch(self, seq, depth, width, sampling):
        root = len(seq) - depth                  # the root's index; its state is the one before
        if depth > self.heads.n_heads or root < 1:
            return [], None
        if self.round[0] != seq[:root]:          # every node of a round: the same state
            if self.scorer.state(seq, root - 1) is None:
                self.score_tree(seq[:root], Tree([seq[root - 1]]))    # one pass, just the text
            state = self.scorer.state(seq, root - 1) * self.heads.ln_f_weight + self.heads.ln_f_bias
            self.round = seq[:root], self.heads.logits(state, self.heads.n_heads)   # (h, V)
        return likeliest_or_drawn(self.round[1][depth - 1], width, sampling)  # head `depth`


class NGramBranches:
    """An n-gram table: with prompt lookup, what followed the last characters where they
    occurred before (the chain's first guess); then the guess of its longest context seen,
    then those of shorter contexts that differ (deterministic: one-hot draft rows, sampling)."""

    def __init__(self, table):
        self.table, self.vocab_size = table, table.vocab_size

    def branch(self, seq, depth, width, sampling):
        tokens = prompt_lookup(seq, 1, LOOKUP, LOOKUP) if self.table.prompt_lookup else []
        for n in range(min(self.table.order - 1, len(seq)), -1, -1):   # contexts, longest first
            token = self.table.next_token(seq[len(seq) - n:])
            if token not in tokens:
                tokens.append(token)
        tokens = tokens[:width]
        return tokens, None if sampling.greedy else np.eye(self.vocab_size)[tokens]  # (n, V)


def as_brancher(draft):
    """A drafter that can give several guesses per position, or a one-line error."""
    if hasattr(draft, "branch"):
        return draft
    if isinstance(draft, NGramDraft):
        return NGramBranches(draft)
    if isinstance(draft, HeadsDraft):
        return HeadsBranches(draft)
    if isinstance(draft, sd.ModelDraft):
        return ModelBranches(draft.scorer)
    if hasattr(draft, "new_cache"):                    # a gpt.GPT or a NumpyGPT
        return ModelBranches(sd.as_scorer(draft))
    raise ValueError(f"{type(draft).__name__} cannot branch (it proposes a chain, one guess per "
                     f"position): a tree needs a GPT draft, an n-gram table or the extra heads; "
                     f"decode this one with speculative_generate")


def grow(brancher, seq, shape, max_depth, sampling):
    """The tree of `shape` after seq (root: seq[-1]), no deeper than max_depth. A rank the
    drafter has no guess for is left out, with everything under it."""
    tree, node_of, guesses, widths = Tree([seq[-1]]), {(): 0}, {}, {}
    for ranks in shape:                                 # how many guesses each parent needs
        widths[ranks[:-1]] = max(widths.get(ranks[:-1], 0), ranks[-1] + 1)
    for ranks in shape:                                 # parents first: depth first, in order
        parent = node_of.get(ranks[:-1])
        if parent is None or len(ranks) > max_depth:
            continue
        if parent not in guesses:                       # one call of the drafter per parent
            context = seq + [tree.tokens[i] for i in tree.path_to(parent)]
            guesses[parent] = brancher.branch(context, len(ranks), widths[ranks[:-1]], sampling)
        tokens, draft_probs = guesses[parent]
        if ranks[-1] < len(tokens):
            node_of[ranks] = tree.add(tokens[ranks[-1]], parent,
                                      None if draft_probs is None else draft_probs[ranks[-1]])
    return tree
