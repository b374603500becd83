"""
classroom/checks_part_two.py: the checks of part two's exercises (6 to 8).

Every expected value, and the output of each planted mistake, is ctx.ref's (checks.py). A
mistake is named only where it alone fits every case the student's function ran on; where two
fit, both are named.
"""

import math

import numpy as np

from classroom.checks import Fail, a_float, check, chi_square_fails, kept_as_often

# ----------------------------------------------------------------------------------------------
# Naming a mistake from every case


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool(np.allclose(a, b, atol=1e-6, rtol=1e-5))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            abs(a - b) <= 1e-4 * max(1.0, abs(b))
    return a == b


def named(runs, hints, default):
    """runs: [(what the student's function gave, {mistake: what it gives})] for every case it
    ran on. The hint of the mistake that gives what the student's gave on every case; of each,
    where several do; else `default`."""
    fits = [name for name in hints if all(name in mistakes and same(got, mistakes[name])
                                          for got, mistakes in runs)]
    if not fits:
        return default
    if len(fits) == 1:
        return hints[fits[0]]
    return "these outputs fit more than one mistake: " + "; or ".join(hints[n] for n in fits)


def judge_cases(ctx, cases, student, reference, describe, hints, default):
    """Run `student` on every case, then fail at the first that differs from the reference's
    answer, naming the mistake that fits every case. reference(case) -> {"want", "mistakes"};
    describe(case, want, got) -> (expected, got, hint or None); default: a hint, or a function
    (case, want, got) -> one."""
    runs, failed = [], None
    for case in cases:
        answer = reference(case)
        got = student(case)
        runs.append((got, answer["mistakes"]))
        if failed is None and not same(got, answer["want"]):
            failed = case, answer["want"], got
    if failed is not None:
        case, want, got = failed
        expected, shown, hint = describe(case, want, got)
        if callable(default):
            default = default(case, want, got)
        raise Fail(expected, shown, hint or named(runs, hints, default))


# ----------------------------------------------------------------------------------------------
# Exercise 6: drafts without a second model


LOOKUP_HINTS = {
    "shortest tail first": "that is the match of a shorter tail: try the longest tail first, "
                           "from longest down to shortest",
    "earliest occurrence": "that is what followed the first earlier occurrence: search from "
                           "the end, the latest occurrence first (its continuation is the "
                           "likelier one)",
    "the match itself": "that starts at the matched tokens themselves: propose what followed "
                        "them",
}


def lookup_tokens(value):
    if not isinstance(value, (list, tuple)) or \
            not all(isinstance(t, (int, np.integer)) for t in value):
        raise Fail("prompt_lookup returns a list of tokens", repr(value)[:80])
    return [int(t) for t in value]


def judge_lookups(ctx, prompt_lookup, cases):
    def describe(case, want, got):
        seq, k, longest, shortest = case
        hint = None
        if want and got == []:
            hint = ("nothing proposed where the tail occurred earlier: did the search find the "
                    "tail itself, at the end of seq? It is no earlier occurrence (the latest "
                    "earlier one starts at len(seq) - n - 1 or before)")
        elif got and not want:
            hint = ("no tail of shortest to longest tokens occurred earlier: propose nothing "
                    "(the tail itself is not an earlier occurrence)")
        return (f"{want!r} for seq = {seq!r}, k = {k}, longest = {longest}, shortest = "
                f"{shortest}", repr(got), hint)
    judge_cases(ctx, cases, lambda case: lookup_tokens(prompt_lookup(list(case[0]), *case[1:])),
                lambda case: ctx.ref.lookup(*case), describe, LOOKUP_HINTS,
                "the longest tail (from longest down to shortest) that occurred earlier "
                "decides, at its latest earlier occurrence")


def random_lookup_case(rng, size):
    seq = rng.integers(0, 4, size).tolist()                # few letters: repeats are common
    longest = int(rng.integers(1, 5))
    return seq, int(rng.integers(0, 7)), longest, int(rng.integers(1, longest + 1))


@check("6a", 2)
def prompt_lookup_finds_the_longest_latest_match(ctx):
    cases = [random_lookup_case(ctx.rng, int(ctx.rng.integers(2, 25))) for _ in range(300)]
    judge_lookups(ctx, ctx.student("beyond.ngram").prompt_lookup, cases)


@check("6a", 1)
def prompt_lookup_at_the_edges(ctx):
    judge_lookups(ctx, ctx.student("beyond.ngram").prompt_lookup, [
        ([5], 3, 3, 1), ([5, 6], 3, 3, 1), ([5, 5], 3, 3, 1),      # too short; the tail itself
        ([1, 2, 3, 9, 1, 2, 3], 8, 3, 1),                          # shorter than k: seq ends
        ([7, 7, 7, 7], 2, 2, 1),                                   # overlapping the tail
        ([1, 2, 8, 2, 9, 1, 2], 2, 2, 1),                          # longest wins, though older
        ([1, 2, 8, 2, 9, 1, 2], 2, 2, 2),
        ([1, 2, 8, 4, 9, 3, 2], 2, 3, 2),                          # nothing long enough
        ([1, 2, 3, 4, 1, 2, 5, 1, 2], 1, 2, 2),                    # earliest against latest
        ([1, 2, 3], 0, 3, 1)])                                     # k = 0


def random_heads(rng, h, C, V):
    """Heads' weights as a torch Head holds them (c_fc.weight (C, C), bias, lm_head.weight
    (V, C)), scaled so that SiLU's curve matters."""
    return [(rng.normal(size=(C, C)) * 0.7, rng.normal(size=C) * 0.5, rng.normal(size=(V, C)))
            for _ in range(h)]


HEAD_HINTS = {
    "untransposed": "that is x @ W where the head computes x @ W.T: fc_w comes transposed "
                    "already",
    "sigmoid": "that is the sigmoid; SiLU(z) = z * sigmoid(z)",
    "no residual": "without the residual: each head's block is x + SiLU(x W + b)",
}


@check("6b", 2)
def head_logits_match_the_heads(ctx):
    head_logits = ctx.student("beyond.heads").head_logits
    cases = []
    for h, C, V in ((1, 4, 6), (3, 5, 7), (5, 8, 4)):
        cases.append((random_heads(ctx.rng, h, C, V), ctx.rng.normal(size=C)))

    def student(case):
        heads, state = case
        fc_w = np.stack([w.T for w, _, _ in heads])                      # (h, C, C)
        fc_b = np.stack([b for _, b, _ in heads])                        # (h, C)
        head_w = np.stack([w.T for _, _, w in heads])                    # (h, C, V)
        return np.asarray(head_logits(state, fc_w, fc_b, head_w), dtype=float)

    def describe(case, want, got):
        heads, state = case
        if got.shape != want.shape:
            return (f"logits of shape {want.shape} (h, V) for {len(heads)} heads",
                    f"{got.shape}", "one row per head: head i's block, then its projection")
        return (f"head 1's logits {np.round(want[0], 4)} ({len(heads)} heads, C = {len(state)})",
                f"{np.round(got[0], 4)}", None)
    judge_cases(ctx, cases, student, lambda case: ctx.ref.head_logits(case[1], case[0]),
                describe, HEAD_HINTS,
                "each head: x + SiLU(x @ fc_w[i] + fc_b[i]), then @ head_w[i]")


HEADS_LOSS_HINTS = {
    "one too far": "each head is paired with the big model's prediction one position too far; "
                   "head i at t guesses token t + 1 + i, predicted at t + i",
    "one too near": "each head is paired with the big model's prediction one position too "
                    "near: that is the big model's own target, head 0; head i at t guesses "
                    "token t + 1 + i, predicted at t + i",
    "pooled mean": "that is the mean over every (head, position) term pooled together: the loss "
                   "is the mean over heads of each head's own mean (head i has T - i positions, "
                   "so the two differ)",
}


def judge_heads_loss(ctx, guesses, logits, targets):
    got = ctx.helper("torch_loss", "beyond.heads", "heads_loss", guesses, logits, targets)
    if isinstance(got, str):
        raise Fail("heads_loss returns a torch scalar that training can differentiate", got)
    value, gradient = a_float(got[0], "heads_loss"), np.asarray(got[1])
    answer = ctx.ref.heads_loss(guesses, logits, targets)
    want = answer["want"]
    if abs(value - want) > 1e-4 * max(1.0, abs(want)):
        raise Fail(f"loss {want:.5f} ({targets} targets, guesses of shape {guesses.shape})",
                   f"{value:.5f}", named([(value, answer["mistakes"])], HEADS_LOSS_HINTS,
                                         "head i at position t guesses token t + 1 + i, "
                                         "predicted by the big model at t + i; the mean over "
                                         "heads of each head's mean cross-entropy"))
    error = float(np.abs(gradient - answer["gradient"]).max())
    if gradient.shape != guesses.shape or error > 1e-4:
        raise Fail("the loss's gradient with respect to the guesses, as autograd gives it for "
                   "the reference loss in float64", "zero everywhere" if not gradient.any()
                   else f"off by {error:.3g}",
                   "compute the loss from the guesses with torch operations, without "
                   ".detach(), .item() or NumPy on the way: training follows its gradient, and "
                   "a loss with the right value and no gradient trains nothing")


@check("6b", 2)
def heads_loss_pairs_each_head_with_its_token(ctx):
    for targets in ("hard", "soft"):
        B, T, h, V = 2, 7, 3, 5
        guesses = ctx.rng.normal(size=(B, T, h, V)).astype(np.float32)
        logits = (ctx.rng.normal(size=(B, T, V)) * 2).astype(np.float32)
        judge_heads_loss(ctx, guesses, logits, targets)


# ----------------------------------------------------------------------------------------------
# Exercise 7: a draft that reads the big model's features (EAGLE)


def random_eagle(rng, C, V, n_head, window):
    """A random EAGLE draft as the worker builds it (helpers.eagle_draft): (its weights by
    their state_dict names, float32; n_head; window), and the big model's wte and lm_head
    (V, C) each, different from each other (so that a swap shows). Scaled so that every piece
    of the block matters."""
    def w(*shape, scale=1.0):
        return (rng.normal(size=shape) * scale).astype(np.float32)
    weights = {"fc.weight": w(C, 2 * C, scale=(2 * C) ** -0.5), "fc.bias": w(C, scale=0.1),
               "h.ln_1.weight": 1 + w(C, scale=0.2), "h.ln_1.bias": w(C, scale=0.2),
               "h.attn.c_attn.weight": w(3 * C, C, scale=1.5 * C ** -0.5),
               "h.attn.c_attn.bias": w(3 * C, scale=0.2),
               "h.attn.c_proj.weight": w(C, C, scale=C ** -0.5),
               "h.attn.c_proj.bias": w(C, scale=0.1),
               "h.ln_2.weight": 1 + w(C, scale=0.2), "h.ln_2.bias": w(C, scale=0.2),
               "h.mlp.c_fc.weight": w(4 * C, C, scale=C ** -0.5),
               "h.mlp.c_fc.bias": w(4 * C, scale=0.2),
               "h.mlp.c_proj.weight": w(C, 4 * C, scale=(4 * C) ** -0.5),
               "h.mlp.c_proj.bias": w(C, scale=0.1)}
    return (weights, n_head, window), w(V, C), w(V, C)


ROLL_HINTS = {
    "unshifted": "that pairs each feature f_t with x_t, the token at t: f_t goes with the token "
                 "after it, x_{t+1}, so the features go with seq[1:] (the last, f_{n-1}, with "
                 "seq[-1]), not with seq[:-1]",
    "big feature": "from the second step on, that feeds the big model's last feature again: "
                   "append the draft's OWN predicted feature (its output at the last position), "
                   "which is all the draft has of the positions the big model has not read",
    "stale token": "that pairs the predicted feature with the last token again: append it with "
                   "the guess just made, wte(g)",
    "swapped": "wte and lm_head swapped: the draft embeds the tokens it reads with wte; the big "
               "model's head lm_head turns a feature into logits, F.linear(feature, lm_head)",
    "last pair only": "that runs the draft on only the last pair: run it over all the pairs so "
                      "far (it attends over its last `window` of them) and take its output at "
                      "the last position",
}


def judge_roll(ctx, draft, features, seq, wte, lm_head, k):
    got = ctx.helper("eagle_rollout", "beyond.eagle", "eagle_roll", *draft, features, seq, wte,
                     lm_head, k)
    if isinstance(got, str):
        raise Fail("eagle_roll returns (guesses, logits): a list of k ints and a tensor (k, V)",
                   got)
    guesses, logits = got
    answer = ctx.ref.roll(draft, features, seq, wte, lm_head, k)
    want, want_logits = answer["want"]
    case = f"seq = {list(seq)}, k = {k}, window = {draft[2]}"
    if logits.shape != want_logits.shape or len(guesses) != k:
        raise Fail(f"{k} guesses and logits of shape {want_logits.shape} (k, V) for {case}",
                   f"{len(guesses)} guesses, logits of shape {logits.shape}",
                   "one guess a step, k steps; row i of the logits is step i + 1's")
    close = np.allclose(logits, want_logits, rtol=1e-4, atol=1e-4)
    if close and list(guesses) == list(want):
        return
    hint = "each guess is the argmax of its step's logits (the greedy choice)" if close else \
        named([(logits, answer["mistakes"])], ROLL_HINTS,
              "step 1: the draft over the pairs [f_t ; wte(x_{t+1})], its output at the last "
              "position through the big model's head; then append (that output, the guess) "
              "and run it again")
    raise Fail(f"guesses {list(want)}, the first logits {np.round(want_logits[0], 3)} ({case})",
               f"{list(guesses)}, {np.round(logits[0], 3)}", hint)


def random_roll_case(rng, n, C=8, V=7, n_head=2, window=3):
    draft, wte, lm_head = random_eagle(rng, C, V, n_head, window)
    features = rng.normal(size=(n, C)).astype(np.float32)
    seq = rng.integers(0, V, n + 1).tolist()
    return draft, features, seq, wte, lm_head


@check("7a", 3)
def eagle_roll_feeds_its_own_features(ctx):
    rng = ctx.worker_rng(71)
    for n, k, window in ((5, 4, 3), (3, 5, 4), (7, 3, 2), (4, 6, 8)):
        draft, features, seq, wte, lm_head = random_roll_case(rng, n, window=window)
        judge_roll(ctx, draft, features, seq, wte, lm_head, k)


@check("7a", 1)
def eagle_roll_at_the_edges(ctx):
    rng = ctx.worker_rng(72)
    for n, k, window in ((1, 4, 3), (2, 1, 3), (11, 2, 1), (9, 3, 16)):   # one feature; k = 1;
        draft, features, seq, wte, lm_head = random_roll_case(rng, n, window=window)  # a window
        judge_roll(ctx, draft, features, seq, wte, lm_head, k)       # of one; longer than seq


def shift_case(rng, B, T, C, V):
    return (rng.normal(size=(B, T, C)).astype(np.float32),
            rng.integers(0, V, (B, T)).astype(np.int64))


SHIFT_HINTS = {
    "unshifted": "that pairs f_t with x_t, the token at t: f_t goes with x_{t+1}, the token "
                 "that followed it (idx[:, 1:])",
    "own input": "the target is its own input feature f_t: the draft learns the NEXT feature, "
                 "f_{t+1} (features[:, 1:])",
    "late states": "the states start at f_1: the draft reads f_0 .. f_{T-2} (features[:, :-1])",
}


def shift_summary(arrays):
    """The first row (first channel) of each of shifted's three results, to show."""
    shown = []
    for name, a in zip(("states", "tokens", "targets"), arrays):
        a = np.asarray(a)
        if a.ndim >= 2 and a.shape[1] > 0 and a.dtype.kind in "iuf":
            shown.append(f"{name} {np.round(a[0].reshape(a.shape[1], -1)[:, 0], 3).tolist()}")
        else:
            shown.append(f"{name} of shape {a.shape}")
    return "; ".join(shown)


@check("7b", 1)
def shifted_pairs_each_feature_with_the_next_token(ctx):
    hand = (np.arange(5.0, dtype=np.float32).reshape(1, 5, 1), 100 + np.arange(5).reshape(1, 5))
    for features, idx in (hand, shift_case(ctx.worker_rng(73), 2, 6, 3, 9)):
        got = ctx.helper("eagle_shift", "beyond.eagle", "shifted", features, idx)
        if isinstance(got, str):
            raise Fail("shifted returns the tuple (states, tokens, targets) of tensors", got)
        answer = ctx.ref.shift(features, idx)
        if same(list(got), list(answer["want"])):
            continue
        raise Fail(f"{shift_summary(answer['want'])} (first row, first channel)",
                   shift_summary(got), named([(list(got), answer["mistakes"])], SHIFT_HINTS,
                                             "states f_0 .. f_{T-2}, tokens x_1 .. x_{T-1}, "
                                             "targets f_1 .. f_{T-1}: at t the draft reads f_t "
                                             "with x_{t+1} and learns f_{t+1}"))


LOSS_HINTS = {
    "unshifted": "that pairs f_t with x_t, the token at t: f_t goes with x_{t+1}, the token that "
                 "followed it (shifted: idx[:, 1:])",
    "own input": "the regression's target is the draft's own input feature f_t: it learns the "
                 "next one, f_{t+1} (the target is one position on)",
    "head at f_t": "the cross-entropy's target is the head's distribution at f_t, which "
                   "predicts x_{t+1}, the token the draft already reads: the guess of f_{t+1} "
                   "predicts x_{t+2}, so compare with the head at the true f_{t+1}",
    "swapped": "wte and lm_head swapped: the draft embeds the tokens with wte; lm_head makes "
               "the logits, F.linear(feature, lm_head)",
    "squared": "that is the squared error: the regression is SmoothL1, F.smooth_l1_loss",
    "noisy targets": "that adds the noise to every feature, the targets too: add it to the "
                     "input features only, after the shift (torch.rand(states.shape, ...))",
    "no noise": "that is the loss without the noise: where noise is not 0, add "
                "(torch.rand(states.shape, generator=generator) - 0.5) * noise to the states",
}


def judge_eagle_loss(ctx, draft, features, idx, wte, lm_head, ce_weight, noise=0.0, seed=0):
    got = ctx.helper("eagle_loss_value", "beyond.eagle", "eagle_loss", *draft, features, idx,
                     wte, lm_head, noise, ce_weight, seed)
    if isinstance(got, str):
        raise Fail("eagle_loss returns a torch scalar that training can differentiate", got)
    value, gradients = a_float(got[0], "eagle_loss"), got[1]
    answer = ctx.ref.eagle_loss(draft, features, idx, wte, lm_head, ce_weight, noise, seed)
    want = answer["want"]
    if abs(value - want) > 1e-4 * max(1.0, abs(want)):
        raise Fail(f"loss {want:.5f} (features of shape {features.shape}, ce_weight = "
                   f"{ce_weight}{f', noise = {noise}' if noise else ''})", f"{value:.5f}",
                   named([(value, answer["mistakes"])], LOSS_HINTS,
                         "at t the draft reads [f_t ; wte(x_{t+1})] and guesses f_{t+1}: "
                         "SmoothL1 against f_{t+1}, plus ce_weight x the cross-entropy of its "
                         "logits against the head's distribution at f_{t+1}"))
    for name, want_gradient in answer["gradients"].items():
        gradient = np.asarray(gradients.get(name, np.zeros(0)))
        scale = max(1.0, float(np.abs(want_gradient).max()))
        if gradient.shape != want_gradient.shape or \
                float(np.abs(gradient - want_gradient).max()) > 2e-4 * scale:
            raise Fail(f"the loss's gradient with respect to the draft's {name}, as autograd "
                       "gives it for the reference loss in float64",
                       "zero" if not gradient.any() else "another gradient",
                       "both terms must reach the draft's weights: compute them from its "
                       "output with torch operations, without .detach() (the cross-entropy's "
                       "logits too: F.linear(guess, lm_head), the guess not detached), .item() "
                       "or NumPy")


def random_loss_case(rng, B, T, C=8, V=7, n_head=2, window=3):
    draft, wte, lm_head = random_eagle(rng, C, V, n_head, window)
    return (draft, *shift_case(rng, B, T, C, V), wte, lm_head)


@check("7b", 2)
def eagle_loss_learns_the_next_feature(ctx):
    rng = ctx.worker_rng(74)
    for (B, T, window), ce_weight in (((2, 6, 3), 0.1), ((1, 8, 2), 1.0), ((3, 4, 5), 0.5)):
        judge_eagle_loss(ctx, *random_loss_case(rng, B, T, window=window), ce_weight)


@check("7b", 1)
def eagle_loss_noise_and_gradient(ctx):
    rng = ctx.worker_rng(75)
    judge_eagle_loss(ctx, *random_loss_case(rng, 2, 5), 0.1, noise=0.5,
                     seed=int(rng.integers(1 << 30)))


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
                   "(path, token) on every way out of the walk" if got.startswith("no token") else "")
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
