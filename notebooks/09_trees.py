# %% [markdown]
# # 9. Trees of guesses
#
# A chain of `k` guesses ends at its first wrong one: everything the draft guessed after it is
# thrown away, even when its second choice at that position was right. Notebook 6 measured that
# a pass of the big model over a few more tokens costs little more than a pass over one; so
# check the draft's second and third guesses too. The guesses then form a **tree**
# (`beyond/tree.py`): the root is the last written character, and each node is a guess for the
# character after its parent. One pass of the big model scores every node, provided each node
# sees only the context and its own ancestors (the **tree mask**), at the position of its depth.
# A walk down the tree then keeps the longest path the big model agrees with (greedy) or,
# sampling, applies notebook 4's acceptance rule to several candidates for one position without
# changing the big model's distribution (the **multi-candidate rule**).
#
# Reading time: about 25 minutes. You write four functions: the mask and the positions (8a),
# the greedy and the sampled walk (8b); the cell after each your-turn cell checks them the way
# the course's grader does (`make check N=09` from a terminal).

# %%
# Setup. The project's modules come from its environment (`make setup`; `make notebooks` opens
# Jupyter there). The models train on first use: a few minutes, with a progress bar.
import matplotlib.pyplot as plt
import numpy as np
import torch

import speculative as sd
from beyond import eagle, heads, tree
from harness import common, registry
from beyond.tree_grow import Tree
from beyond.tree_sampling import draw_distinct
from classroom.checks import chi_square_fails
from classroom.yourturn import check
from lessonkit import corpus
from numpy_speculative import accept_probability, residual, sample
from studies import trees

models = common.notebook_models(["big", "draft"])
target = models["big"]
small_draft = registry.with_backend(models["draft"], "numpy")  # the drafter of every tree here
QUICK = common.notebook_args().quick  # tiny models (the test suite): numbers mean little
prompts = corpus.held_out_prompts(2 if QUICK else 3, 32)
N_NEW = 40 if QUICK else 100
print(f"big model: {target.num_params():,} parameters; draft: "
      f"{models['draft'].num_params():,}")

# %% [markdown]
# ## One pass over a whole tree: the mask and the positions
#
# A tree is a list of nodes, a parent always before its children: `tokens[a]` and
# `parents[a]`, node 0 the root (its parent is -1). Take a root `r`, two guesses `a` and `b`
# for the next character, and `c`, a guess after `a`: `parents = [-1, 0, 0, 1]`. The big model
# reads the four as new tokens of one pass, after the cached context. In a chain each token
# sees every token before it; here `b` must not see `a` (they are two candidates for the same
# position, never both in the text), and `c` must see `r` and `a`, not `b`. So the mask is no
# longer a triangle: row `i` (a new token) marks the slots it may attend to, every cached one
# and, among the new ones, itself and its ancestors:
#
#     3 cached tokens, then r a b c:      positions of r a b c:  3 4 4 5
#                   cached  r a b c
#              r    1 1 1   1 . . .
#              a    1 1 1   1 1 . .
#              b    1 1 1   1 . 1 .
#              c    1 1 1   1 1 . 1
#
# Attention itself is blind to order: a token's place comes from its **position** embedding.
# `a` and `b` both stand for the character after `r`, so both sit at `r`'s position plus 1:
# a node's position is the root's plus its **depth**, not its index in the list. Then every
# node's logits are exactly those it would get at the end of its own chain.
#
# One more detail from the real scorer: after a round, the text written may be longer than what
# the KV cache holds (`chain` tokens written but not cached yet, fed in the same pass before the
# root). They are ordinary text: they see the cache and each other causally, and every node sees
# all of them.
#
# ## Your turn: the tree mask and the positions (part 8a)
#
# Write `tree_mask(parents, cached, chain)`, a bool array `(T, cached + T)` with `T = chain +
# len(parents)`, and `tree_positions(parents, cached, chain)`, the `T` positions. Their
# docstrings give the rules and the example above.

# %% your turn: beyond.tree.tree_mask beyond.tree.tree_positions
# source only: the reference answer (the notebooks put its code here instead)
from beyond.tree import tree_mask, tree_positions
import numpy as np

# %%
check("8a")

# %% [markdown]
# With your mask and positions, the big model scores a tree of 7 guesses grown by the draft
# after a held-out prompt, in one pass; then each node's logits are compared with a separate
# pass over its own chain (the prompt and the node's path), one node at a time.

# %%
seq = prompts[0][0].tolist()
shape = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]  # rank paths (beyond/tree_grow.py)
scorer = tree.TreeScorer(target, len(shape))
grown = tree.grow(tree.as_brancher(small_draft), seq, shape, scorer.room(seq), sd.Sampling())
logits = scorer.score_tree(seq, grown)                                   # (N+1, V): one pass
with torch.no_grad():
    for node in range(len(grown.tokens)):
        own_chain = seq + [grown.tokens[i] for i in grown.path_to(node)]
        alone = target(torch.tensor([own_chain]))[0][0, -1].numpy()     # its own chain's pass
        assert np.allclose(logits[node], alone, atol=1e-4), node
print(f"after {corpus.decode(seq)[-20:]!r}: node (parent) guess, and the mask over the "
      f"tree's slots (x: may attend)")
for node, row in enumerate(tree_mask(grown.parents, 0, 0)):
    print(f"  {node} ({grown.parents[node]:2d}) {corpus.decode([grown.tokens[node]])!r:>5}  "
          + " ".join("x" if v else "." for v in row))
print(f"positions after {len(seq) - 1} cached tokens: "
      f"{tree_positions(grown.parents, len(seq) - 1, 0)}; every node's logits are its own "
      "chain's")

# %% [markdown]
# ## Greedy: the longest path the big model agrees with
#
# The pass gives the big model's choice after every node: `choices[a]`, the argmax of its
# logits there. Start at the root: if one of its children holds `choices[0]`, the big model
# would have written that character itself, so keep it and go on from that child; when no
# child holds the choice, stop, and the big model writes `choices[last kept node]`, as in the
# lesson's round (its correction, or a bonus character after a leaf). Siblings hold different
# characters, so at most one child can match: the walk is one path, and the text is exactly
# the big model's own.

# %% [markdown]
# ## Sampling: several candidates, one distribution
#
# Sampling, each child was drawn from the draft: the first from its distribution `q`, the next
# from `q` less the first (renormalised), and so on (`draw_distinct`: no character twice). Each
# child `c` comes with the distribution `draft_c` it was drawn from. Notebook 4's rule for one
# guess `x`: keep it with probability `min(1, p(x) / q(x))`; rejected, draw from the residual
# `norm(max(0, p - q))`. With several candidates for one position (SpecInfer, Miao et al.
# 2024), try them one after another, each against what is left:
#
# 1. try child `x_1` against `p`: keep it with `min(1, p(x_1) / draft_1(x_1))`;
# 2. rejected, the target becomes the residual `p' = norm(max(0, p - draft_1))` (what `draft_1`
#    under-proposed), and `x_2` is tried against `p'`, and so on;
# 3. every child rejected: the target writes a character drawn from the last residual.
#
# Why the output is exactly `p`: by induction from the last sibling. If trying `x_2, ...`
# against `p'` writes a character distributed as `p'`, then trying `x_1` against `p` writes `x`
# with probability `min(p(x), draft_1(x))` (kept) plus `P(rejected) p'(x)`, and
# `P(rejected) p'(x) = max(0, p(x) - draft_1(x))`: the sum is `p(x)`. A kept child is then
# checked the same way against the target after it, down the tree.
#
# ## Your turn: verify a tree (part 8b)
#
# Write `greedy_walk(tree, choices)`: the kept nodes (root's child first; the root is never in
# the path) and the big model's token after the last of them. Then `sample_walk(tree,
# target_probs, rng)`, the rule above, returning the same pair (its docstring says which
# functions of `numpy_speculative` it may use, and how to draw from `rng`).

# %% your turn: beyond.tree_sampling.greedy_walk beyond.tree_sampling.sample_walk
# source only: the reference answer (the notebooks put its code here instead)
from beyond.tree_sampling import greedy_walk, sample_walk
from numpy_speculative import accept_probability, residual, sample

# %%
check("8b")

# %% [markdown]
# With your greedy walk, tree decoding (`tree.tree_generate`) writes the big model's own text,
# character for character, with a tree of 8 guesses a round; and one round, node by node:

# %%
eight = tree.best_shape([0.6, 0.2, 0.1], 8)  # a tree of 8 guesses (its shape: see below)
for p in prompts:
    out, _ = tree.tree_generate(target, small_draft, p, N_NEW, shape=eight)
    assert torch.equal(out, sd.generate(target, p, N_NEW))  # greedy: the big model's own text
print(trees.one_round(target, small_draft, prompts[0], eight))

# %% [markdown]
# The claim, checked by simulation: a target `p` after the root and a draft `q` that likes what
# `p` does not; 3 children drawn from `q` without replacement, a fresh tree each round; the
# first character of each round counted. A rule that looks just as reasonable, trying each
# sibling against the same, unchanged `p` (each is a fair guess on its own, after all), gives a
# popular character two or three chances, and its counts lean towards what the draft likes.
# Pearson's chi-square says whether counts this far from `p` could happen by chance
# (`chi_square_fails`: below a probability of about one in a million, the grader's test).

# %%
V, WIDTH, ROUNDS = 5, 3, 10000
p_root = np.array([0.35, 0.25, 0.2, 0.15, 0.05])     # the target after the root
q_root = np.array([0.05, 0.1, 0.2, 0.3, 0.35])       # the draft's
p_after = np.full((V, V), 1 / V)                     # the target after each child (unused here)


def independent_walk(guesses, target_probs, rng):
    """The wrong rule: each child tried against the same, unchanged target."""
    node, path = 0, []
    while True:
        children = guesses.children(node)
        for child in children:
            token, draft = guesses.tokens[child], guesses.draft_probs[child]
            if rng.random() < accept_probability(target_probs[node][token], draft[token]):
                path.append(child)
                node = child
                break
        else:
            last = guesses.draft_probs[children[-1]] if children else 0 * target_probs[node]
            return path, sample(residual(target_probs[node], last), rng)


def first_character(walk, rng):
    """One round on a fresh tree of WIDTH children of the root: the first character written."""
    guesses, drawn_from = draw_distinct(q_root, WIDTH, rng)
    one = Tree([0])
    for token, probs in zip(guesses, drawn_from):
        one.add(token, 0, probs)
    path, token = walk(one, np.vstack([p_root] + [p_after[x] for x in guesses]), rng)
    return one.tokens[path[0]] if path else token


rng, fails = np.random.default_rng(0), {}
for name, walk in [("the multi-candidate rule", sample_walk),
                   ("siblings tried independently", independent_walk)]:
    counts = np.bincount([first_character(walk, rng) for _ in range(ROUNDS)], minlength=V)
    chi2 = float(((counts - ROUNDS * p_root) ** 2 / (ROUNDS * p_root)).sum())
    fails[name] = chi_square_fails(counts, p_root)
    print(f"{name:29}: {np.round(counts / ROUNDS, 3)} against p {p_root}; chi-square "
          f"{chi2:7.1f} ({V - 1} degrees of freedom): "
          f"{'not p, beyond doubt' if fails[name] else 'as p would give'}")
assert not fails["the multi-candidate rule"] and fails["siblings tried independently"]

# %% [markdown]
# The exact rule's counts sit within chance of `p` (a chi-square near its 4 degrees of
# freedom); the independent one gives the draft's favourites far more than `p` does. Two more
# mistakes the grader names: a residual left unnormalised (the next sibling is then judged
# against too small a target), and the final character drawn from `p` itself instead of the last
# residual. Both fail the same test.
#
# ## Measured: characters per pass, tree against chain
#
# Which tree? If the big model's choice is the draft's r-th guess with probability
# `accept[r]`, a node is kept with the product of `accept` along its path, and a round writes
# 1 plus the sum of those products per pass. `tree.best_shape(accept, 8)` keeps the 8 nodes
# with the largest products (a child's never exceeds its parent's, so they form a tree). Below:
# `accept` measured for the draft on other prompts, then a chain of 8, the best tree of 8 and
# that tree's own chain of first guesses, each in greedy tree decoding on the same prompts and
# the same drafter (only the shape differs), checked against plain decoding. A tree keeps every
# round at least what its own chain of first guesses keeps, and beats a chain of 8 when second
# guesses are often right (docs/RESULTS.md: more drafters, clocks).
#
# By the clock, expect the `x plain` column near 1 or below on a CPU: the lesson's draft is a
# model of its own, run once per node, and the check is one pass over every node, which a CPU
# pays for nearly per character (notebook 1 measured a pass over five characters against one).
# These trees measure how much a pass can write; where a pass over many guesses costs about one
# (a GPU) and the guesses are nearly free (Medusa's heads, EAGLE-2's draft), that is what pays.

# %%
rows = {}
plain_out = [sd.generate(target, p, N_NEW) for p in prompts]
accept, _ = trees.rank_acceptance(target, tree.as_brancher(small_draft),  # on other prompts
                                  corpus.held_out_prompts(6, 32)[1::2], N_NEW, 3)
print("the big model's choice is the draft's guess 1, 2, 3:", [f"{a:.0%}" for a in accept])
best = tree.best_shape(accept, 8)
inside = tree.chain_shape(sum(not any(ranks) for ranks in best))  # its chain of first guesses
for kind, shape in [("chain", tree.chain_shape(8)), ("tree", best), ("its chain", inside)]:
    r = rows[kind] = trees.measure(target, small_draft, prompts, N_NEW, kind, shape, plain_out, 3)
    print(f"{kind} of {len(shape)}: {r['tokens_per_pass']:.2f} per pass, {r['speedup']:.2f}x plain")
assert rows["tree"]["tokens_per_pass"] >= rows["its chain"]["tokens_per_pass"]

# %% [markdown]
# ## Trees from the drafts that serve them
#
# Medusa grows its trees from its heads' guesses, and EAGLE-2 from its draft's: guesses that
# cost next to nothing, so a wider tree costs the check alone. Here the heads of notebook 7
# (trained there, or here on first use): `accept` per depth this time (head `d` guesses depth
# `d`, so a tree is at most as deep as there are heads), the chain of all the heads, then the
# best trees of 8 and 12 nodes grown from their top guesses and the chain of first guesses
# inside the tree of 8, each checked against plain decoding and timed against it. A tree keeps
# every round at least what its own chain keeps; with well-trained heads the tree of 8 holds
# the chain of all the heads and adds second guesses where they pay most.

# %%
heads_draft = heads.load(target, common.checkpoint_folder(common.notebook_args()))
by_depth, _ = trees.heads_acceptance(target, heads_draft, corpus.held_out_prompts(6, 32)[1::2],
                                     N_NEW, 3)
print("head d's guess 1, 2, 3 is the big model's choice:",
      [[f"{a:.0%}" for a in depth] for depth in by_depth])
heads_rows = {}
grown = tree.best_shape(by_depth, 8, max_depth=heads_draft.n_heads)
for kind, shape in [("chain", tree.chain_shape(heads_draft.n_heads)), ("tree", grown),
                    ("its chain", tree.chain_shape(sum(not any(ranks) for ranks in grown))),
                    ("wide tree", tree.best_shape(by_depth, 12, max_depth=heads_draft.n_heads))]:
    r = heads_rows[kind] = trees.measure(target, heads_draft, prompts, N_NEW, kind, shape,
                                         plain_out, 3)
    label = {"chain": "the heads' chain", "its chain": "the tree's own chain"}.get(kind, kind)
    print(f"{label} of {len(shape)}: {r['tokens_per_pass']:.2f} characters per pass, "
          f"{r['speedup']:.2f}x plain decoding by the clock")
fig, (per_pass, clock) = plt.subplots(1, 2, figsize=(9, 2.8))
names = [f"{kind}\nof {len(r['shape'])}" for kind, r in heads_rows.items()]
per_pass.bar(names, [r["tokens_per_pass"] for r in heads_rows.values()])
per_pass.set_title("characters per pass of the big model")
clock.bar(names, [r["speedup"] for r in heads_rows.values()])
clock.axhline(1, color="grey", lw=0.8)
clock.set_title("x plain decoding, by the clock")
plt.show()


def against_chain(rows, kinds=("tree", "wide tree")):
    fastest = max((rows[kind] for kind in kinds), key=lambda r: r["speedup"])
    print(f"the faster tree ({len(fastest['shape'])} nodes) against the chain: "
          f"{fastest['tokens_per_pass'] / rows['chain']['tokens_per_pass']:.2f}x the characters "
          f"per pass, {fastest['speedup'] / rows['chain']['speedup']:.2f}x the speed")


against_chain(heads_rows)
assert heads_rows["tree"]["tokens_per_pass"] >= heads_rows["its chain"]["tokens_per_pass"]

# %% [markdown]
# EAGLE-2 grows its trees from its draft instead: along each path of the tree the draft rolls
# forward as `eagle_roll` does, one step per node that gets children, each from its parent's
# feature and its own token (`eagle.EagleBranches`, the draft of notebook 8, trained there or
# here on first use). `accept` counts how often the big model's choice is the draft's first,
# second and third guess on the big model's own greedy text (what decoding sees). The draft's
# first guesses hold so often that the best shape for a budget is nearly a chain, so the trees
# here keep the chain's depth: the chain of 8 (notebook 8's), then the best trees of 12 and 16
# nodes no deeper than 8 (the chain plus second guesses where they pay most), each checked
# against plain decoding and timed through the same tree code (which costs more a round than
# notebook 8's chain loop: compare the trees with this chain, not with notebook 8's speed-up).

# %%
eagle_draft = eagle.trained(target, common.checkpoint_folder(common.notebook_args()))
texts = torch.stack([sd.generate(target, p, N_NEW)[0, -target.c.block_size:]
                     for p in corpus.held_out_prompts(6, 32)[1::2]])
accept = eagle.rank_agreement(target, eagle_draft, texts, 3)
print("the draft's guess 1, 2, 3 is the big model's choice:", [f"{a:.0%}" for a in accept])
eagle_rows = {}
for kind, shape in [("chain", tree.chain_shape(8)),
                    ("tree", tree.best_shape(accept, 12, max_depth=8)),
                    ("wide tree", tree.best_shape(accept, 16, max_depth=8))]:
    r = eagle_rows[kind] = trees.measure(target, eagle.EagleBranches(eagle_draft, target),
                                         prompts, N_NEW, kind, shape, plain_out, 3)
    label = {"chain": "the draft's chain"}.get(kind, f"the best {kind}")
    print(f"{label} of {len(shape)}: "
          f"{r['tokens_per_pass']:.2f} characters per pass, {r['speedup']:.2f}x plain decoding "
          f"by the clock")
against_chain(eagle_rows)
assert eagle_rows["tree"]["tokens_per_pass"] >= eagle_rows["chain"]["tokens_per_pass"]

# %% [markdown]
# Each tree writes at least what its own chain writes per pass. By the clock a tree pays only
# while its wider check costs less than the characters it adds: on a CPU a pass over more
# nodes costs more (notebook 1), so the clock can rank the trees differently from characters
# per pass, and it moves more from run to run. On a GPU, where the check costs about one pass
# whatever its width, characters per pass is what counts.

# %% [markdown]
# ## What to remember
#
# - A tree checks several guesses per position in one pass: each node sees the context and its
#   ancestors only (the tree mask), at its depth's position, so its logits are its own chain's.
# - Greedy: walk down while a child holds the big model's choice; the text is the big model's.
# - Sampling: try the siblings one after another, each against the residual the ones before it
#   left; the output keeps the target's distribution exactly. Trying each against the same
#   target does not.
# - A tree of N guesses writes at least what its own chain of first guesses writes per pass,
#   for one pass over more tokens: worth it while that pass stays about as cheap as one.
