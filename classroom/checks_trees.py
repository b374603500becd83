"""
classroom/checks_trees.py: the checks of exercise 8, trees of guesses (parts 8a, 8b): the mask
and positions against enumeration, the greedy walk against the big model's choices, and the
sampled walk by how often each path of the tree is kept.
"""

import math

import numpy as np

from classroom.checks import Fail, check, chi_square_fails, judge_cases, kept_as_often

# ----------------------------------------------------------------------------------------------
# Exercise 8: trees of guesses


def random_parents(rng, n):
    """A tree of n guesses besides the root: each node's parent, an earlier node."""
    return [-1] + [int(rng.integers(0, a)) for a in range(1, n + 1)]


MASK_HINTS = {
    "causal nodes": "that is a causal mask over the nodes: a node sees the nodes listed before "
                    "it, siblings and their branches too; it may see only itself and its "
                    "ancestors",
    "parent only": "a node sees only itself and its parent there: it sees every ancestor, up "
                   "to the root (its parent's parent, and so on)",
    "not itself": "a node does not see itself there: the diagonal, as for any token",
    "chain unseen": "the tree's nodes do not see the chain there: every node sees every token "
                    "of the chain (the text written before the root)",
    "chain sees all": "the chain sees all of itself there: chain token i sees chain tokens "
                      "0..i only (causally)",
}


def judge_masks(ctx, tree_mask, cases):
    def student(case):
        got = tree_mask(list(case[0]), case[1], case[2])
        T = case[2] + len(case[0])
        if not isinstance(got, np.ndarray) or got.shape != (T, case[1] + T) or \
                not np.isin(got, (0, 1)).all():
            raise Fail(f"a bool array of shape {(T, case[1] + T)} (T, cached + T) for parents = "
                       f"{case[0]}, cached = {case[1]}, chain = {case[2]}",
                       f"{type(got).__name__} {getattr(got, 'shape', '')}"[:80],
                       "one row per new token (the chain's, then the nodes'), one column per "
                       "slot (the cached ones, then the new ones)")
        return got.astype(bool)

    def describe(case, want, got):
        i, j = (int(v) for v in np.argwhere(got != want)[0])
        row = lambda mask: "".join(str(int(v)) for v in mask[i])         # noqa: E731
        return (f"visible[{i}, {j}] = {bool(want[i, j])} for parents = {case[0]}, cached = "
                f"{case[1]}, chain = {case[2]}: row {i} {row(want)}", f"row {i} {row(got)}",
                None)
    judge_cases(ctx, cases, student, lambda case: ctx.ref.mask(*case), describe, MASK_HINTS,
                "every new token sees the cached slots; the chain causally; a node the whole "
                "chain, itself and its ancestors")


POSITION_HINTS = {
    "by index": "that puts node a at the root's position plus a, its index in the list: it goes "
                "at the root's position plus its depth (siblings share one)",
    "chain from 0": "the chain starts at 0 there: it comes after the cached tokens, at "
                    "position cached",
    "root at cached": "the root sits at cached there: it comes after the chain, at cached + "
                      "chain",
    "one too far": "one too far: the first chain token sits at position cached (the cached "
                   "tokens hold 0..cached - 1), the root at cached + chain, its children one on",
}


def judge_positions(ctx, tree_positions, cases):
    def student(case):
        got = tree_positions(list(case[0]), case[1], case[2])
        try:
            return [int(p) for p in got]
        except (TypeError, ValueError):
            raise Fail(f"a list of {case[2] + len(case[0])} positions for parents = {case[0]}",
                       repr(got)[:80]) from None
    judge_cases(ctx, cases, student, lambda case: ctx.ref.positions(*case),
                lambda case, want, got: (f"{want} for parents = {case[0]}, cached = {case[1]}, "
                                         f"chain = {case[2]}", f"{got}", None), POSITION_HINTS,
                "the chain at cached, cached + 1, ...; then each node at the root's position "
                "(cached + chain) plus its depth")


def random_mask_cases(rng, count, largest):
    cases = [([-1], 0, 0), ([-1], 2, 0), ([-1, 0, 0, 1], 3, 0), ([-1, 0], 1, 2),
             ([-1, 0, 1, 2], 0, 1), ([-1, 0, 0, 0], 2, 3)]          # a root; the docstring's;
    for _ in range(count):                                          # a chain; a fan
        cases.append((random_parents(rng, int(rng.integers(1, largest + 1))),
                      int(rng.integers(0, 6)), int(rng.integers(0, 4))))
    return cases


@check("8a", 2)
def tree_mask_shows_each_node_its_ancestors_only(ctx):
    judge_masks(ctx, ctx.student("beyond.tree").tree_mask, random_mask_cases(ctx.rng, 40, 9))


@check("8a", 1)
def tree_positions_go_by_depth(ctx):
    judge_positions(ctx, ctx.student("beyond.tree").tree_positions,
                    random_mask_cases(ctx.rng, 40, 9))


def random_greedy_case(rng, n, V=6):
    """A tree of n guesses, siblings holding different tokens, and the big model's choices,
    which a child holds more often than not (the walk goes deep)."""
    parents = [-1]
    for a in range(1, n + 1):                 # at most V - 1 children: one token held by none
        parents.append(int(rng.choice([p for p in range(a) if parents.count(p) < V - 1])))
    tokens = [int(rng.integers(0, V))]
    for a in range(1, n + 1):
        taken = {tokens[c] for c in range(1, a) if parents[c] == parents[a]}
        tokens.append(int(rng.choice([t for t in range(V) if t not in taken])))
    choices = []
    for a in range(n + 1):
        held = [tokens[c] for c in range(1, n + 1) if parents[c] == a]
        free = [t for t in range(V) if t not in held]
        choices.append(int(rng.choice(held if held and rng.random() < 0.75 else free)))
    return tokens, parents, choices


GREEDY_HINTS = {
    "first child only": "only the first child (rank 0) is tried there: any child may hold the "
                        "big model's choice; look at every child",
    "by child": "child c is kept there when its token is choices[c]: it is kept when its token "
                "is the big model's choice after its parent, choices[node]",
    "one level": "the walk stops after the root's children there: from a kept child, try its "
                 "own children, down to a leaf",
    "token after root": "the token added there is the big model's choice after the root, "
                        "choices[0]: it is its choice after the last kept node, "
                        "choices[path[-1]]",
    "root in path": "the root is in the path there: the path starts at the root's child (the "
                    "root, node 0, is written already)",
    "tokens for nodes": "the path lists tokens there: it lists node numbers (indices into "
                        "tree.tokens)",
}


def judge_greedy(ctx, cases):
    got = ctx.helper("greedy_walks", "beyond.tree_sampling", "greedy_walk", cases)
    if isinstance(got, str):
        raise Fail("greedy_walk returns (path, token): a list of nodes and a token", got,
                   "after the last kept node the big model still adds its own token, "
                   "choices[last kept node] (the bonus when the walk reaches a leaf): return "
                   "(path, token) on every way out of the walk" if got.startswith("no token")
                   else "")
    walks = iter(got)

    def default(case, want, got):
        if got[0] == list(want[0]):
            return ("the right path, the wrong token: the big model adds its choice after the "
                    "last kept node, choices[path[-1]] (choices[0] when none is kept)")
        return ("from the root down, keep the child whose token is choices[node], while one "
                "does; then the big model adds choices[last kept node]")
    judge_cases(ctx, cases, lambda case: list(next(walks)),
                lambda case: ctx.ref.greedy_walk(*case),
                lambda case, want, got: (f"{tuple(want)} for tokens = {case[0]}, parents = "
                                         f"{case[1]}, choices = {case[2]}", f"{tuple(got)}",
                                         None), GREEDY_HINTS, default)


@check("8b", 2)
def greedy_walk_follows_the_big_models_choices(ctx):
    judge_greedy(ctx, [random_greedy_case(ctx.rng, int(ctx.rng.integers(1, 12)))
                       for _ in range(150)])


@check("8b", 1)
def greedy_walk_at_the_edges(ctx):
    judge_greedy(ctx, [
        ([3], [-1], [4]),                                          # no guess: the token alone
        ([3, 4, 5], [-1, 0, 0], [2, 0, 0]),                        # no child holds it
        ([3, 4, 5], [-1, 0, 0], [5, 0, 1]),                        # the second child holds it
        ([3, 4, 5, 6], [-1, 0, 1, 2], [4, 5, 6, 1]),               # a chain, all kept
        ([3, 4, 5, 4, 5], [-1, 0, 0, 1, 2], [5, 1, 5, 2, 0]),      # the same token, two depths
    ])


SIBLING_HINTS = {
    "independent": "each sibling tried against the same, unchanged target (as if each were the "
                   "only guess)",
    "no residual": "each sibling tried against the same, unchanged target, and the token after "
                   "the last rejection drawn from it too: no residual at all",
    "unnormalised": "a residual that is not renormalised, max(0, target - draft) as it is",
    "target at the end": "the token after every rejection drawn from the target itself, not "
                         "from the last residual",
}


def favoured_rows(rng, V, shape=()):
    """Targets and drafts (shape + (V,) each) where the target favours a token that its draft
    under-proposes: then a residual never runs out, and no mistake crashes instead of showing
    in the counts."""
    target, draft = rng.dirichlet(np.ones(V), shape), rng.dirichlet(np.ones(V), shape)
    favourite = np.eye(V)[rng.integers(0, V, shape)]                  # shape + (V,)
    target = 0.6 * target + 0.4 * favourite
    draft = np.where(favourite > 0, 0.0, draft)
    draft = 0.98 * draft / draft.sum(-1, keepdims=True) + 0.02 * favourite
    return target, draft


def sample_walk_case(ctx, V, width, runs):
    """(target, draft) at the root, drawn until each sibling mistake moves the first token far
    enough for `runs` rounds to show it every time."""
    while True:
        target, draft = favoured_rows(ctx.rng, V)
        if ctx.ref.sibling_mistakes_show(target, draft, width, runs):
            return target, draft


TREE_SHAPE = [-1, 0, 0, 0, 1, 1, 2, 4]   # three guesses after the root, two after the first,...


def sampled_rounds(ctx, parents, root_target, targets, root_draft, drafts, runs, salt=None,
                   seed=None):
    """sample_walk's rounds (helpers.sample_walks), checked for their form."""
    rng = ctx.worker_rng(salt) if seed is None else np.random.default_rng(seed)
    done = ctx.helper("sample_walks", "beyond.tree_sampling", "sample_walk", parents,
                      root_target, targets, root_draft, drafts, rng, runs)
    if isinstance(done, str):
        raise Fail("sample_walk returns (path, token): a list of nodes and a token", done)
    trees, paths, added = (np.asarray(a) for a in done)
    V = len(root_target)
    for path, token in zip(paths, added):
        path = [int(a) for a in path if a >= 0]
        if not all(parents[a] == before for a, before in zip(path, [0] + path)) or \
                not 0 <= token < V:
            raise Fail("a path of nodes from the root's child down, each a child of the one "
                       f"before (parents = {parents}), and a token of the vocabulary",
                       f"path {path}, token {token}")
    return trees, paths, added


def judge_sampled(ctx, root_target, root_draft, runs, salt):
    parents, V = TREE_SHAPE, len(root_target)
    depth = 3
    targets, drafts = favoured_rows(ctx.rng, V, (depth, V))   # after a node of depth d, token x
    trees, paths, added = sampled_rounds(ctx, parents, root_target, targets, root_draft, drafts,
                                         runs, salt)
    rounds = [[int(tree[a]) for a in path if a >= 0] + [int(token)]
              for tree, path, token in zip(trees, paths, added)]
    first = np.bincount([r[0] for r in rounds], minlength=V)
    width = parents.count(0)
    where = f"(target {np.round(root_target, 3)}, {width} guesses drawn from the draft " \
            f"{np.round(root_draft, 3)} without replacement; {runs} rounds)"
    laws = ctx.ref.sibling_laws(root_target, root_draft, width)     # (asked always: see 4b)
    if chi_square_fails(first, root_target):
        fits = [SIBLING_HINTS[rule] for rule, law in laws.items()
                if not chi_square_fails(first, law)]
        raise Fail(f"the first token of a round distributed as the target's {where}",
                   f"{np.round(first / runs, 3)}",
                   (f"these counts fit {fits[0]}: " if len(fits) == 1 else "") +
                   "keep child c with min(1, target(x) / draft_c(x)); rejected, the next "
                   "sibling is tried against residual(target, draft_c), renormalised, and the "
                   "token after the last rejection is drawn from the last residual")
    kept_as_often(ctx, float(np.mean(paths[:, 0] == 1)), root_target, root_draft,
                  5 * math.sqrt(0.25 / runs), f"in {runs} rounds")
    law = ctx.ref.path_law(parents, root_target, targets, root_draft, drafts)
    seen = {}
    for path in paths:
        key = " ".join(str(int(a)) for a in path if a >= 0)
        seen[key] = seen.get(key, 0) + 1
    names = sorted(set(law) | set(seen), key=lambda p: (len(p), p))
    if chi_square_fails([seen.get(p, 0) for p in names], [law.get(p, 0.0) for p in names]):
        worst = max(names, key=lambda p: abs(seen.get(p, 0) / runs - law.get(p, 0.0)))
        siblings = sum(seen.get(str(c), 0) + sum(v for p, v in seen.items()
                                                 if p.startswith(f"{c} ")) for c in (2, 3))
        raise Fail(f"each path as often as the rule keeps it: [{worst}] in "
                   f"{law.get(worst, 0.0):.3f} of the rounds {where}",
                   f"{seen.get(worst, 0) / runs:.3f}",
                   "a rejected child's next sibling is tried in its turn (here the second and "
                   "third children of the root were never kept)" if siblings == 0 else
                   "once child c is kept, go on from c: its children, one after another, "
                   "against target_probs[c] (its own row, not the root's, nor a residual from "
                   "the level above); at a leaf the target adds the bonus token")
    for d in range(1, depth + 1):                                 # after a kept node of depth d
        after = np.zeros((V, V))
        for r in rounds:
            if len(r) > d:
                after[r[d - 1], r[d]] += 1
        if after.sum() < 100:
            continue
        if chi_square_fails(after, after.sum(1, keepdims=True) / after.sum() * targets[d - 1]):
            x = int(np.argmax(after.sum(1)))
            raise Fail(f"after a kept guess x at depth {d}, the next token distributed as "
                       f"target_probs[that node]: for x = {x}, {np.round(targets[d - 1, x], 3)}",
                       f"{np.round(after[x] / after[x].sum(), 3)}",
                       "once child c is kept, go on from c: its children against "
                       "target_probs[c] (its own row, not the root's, nor a residual from "
                       "the level above)")


@check("8b", 2)
def sample_walk_keeps_the_target_distribution(ctx):
    for salt in (81, 82):
        target, draft = sample_walk_case(ctx, 5, 3, 12000)
        judge_sampled(ctx, target, draft, 12000, salt)


@check("8b", 1)
def sample_walk_with_a_perfect_draft(ctx):
    """Drafts equal to the targets: every first guess is kept (min(1, p/p) = 1), down to a leaf;
    the same rng seed gives the same rounds."""
    parents, V = TREE_SHAPE, 5
    targets, _ = favoured_rows(ctx.rng, V, (3, V))
    root, _ = favoured_rows(ctx.rng, V)
    runs = [sampled_rounds(ctx, parents, root, targets, root, targets, 200, seed=seed)
            for seed in (3, 3, 4)]
    chain = [1, 4, 7]                                           # the first guesses, down
    paths = runs[0][1]
    if not (paths[:, :3] == chain).all():
        wrong = next(p for p in paths.tolist() if p[:3] != chain)
        raise Fail(f"every first guess kept: path {chain} (drafts equal to the targets)",
                   f"{[a for a in wrong if a >= 0]}",
                   "keep child c with probability min(1, target(x) / draft_c(x)): 1 here, "
                   "for the first child of every node")
    if not all((a == b).all() for a, b in zip(runs[0], runs[1])) or \
            all((a == b).all() for a, b in zip(runs[0], runs[2])):
        raise Fail("the same rng seed gives the same rounds, another seed others",
                   "not so", "draw every random number from the rng argument; never reseed")
