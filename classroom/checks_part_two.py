"""
classroom/checks_part_two.py: the checks of exercises 6 and 7: prompt lookup, the Medusa heads
(their guesses and their loss, by its gradient), the EAGLE-style draft (its roll forward, its
shift and its loss). Every expected value and each planted mistake's output is ctx.ref's; a
mistake is named where it alone fits every case the student's function ran on (checks.named).
"""

import numpy as np

from classroom.checks import Fail, a_float, check, judge_cases, named, same

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


@check("7b", 3)
def eagle_roll_feeds_its_own_features(ctx):
    rng = ctx.worker_rng(71)
    for n, k, window in ((5, 4, 3), (3, 5, 4), (7, 3, 2), (4, 6, 8)):
        draft, features, seq, wte, lm_head = random_roll_case(rng, n, window=window)
        judge_roll(ctx, draft, features, seq, wte, lm_head, k)


@check("7b", 1)
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


@check("7a", 1)
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


@check("7a", 2)
def eagle_loss_learns_the_next_feature(ctx):
    rng = ctx.worker_rng(74)
    for (B, T, window), ce_weight in (((2, 6, 3), 0.1), ((1, 8, 2), 1.0), ((3, 4, 5), 0.5)):
        judge_eagle_loss(ctx, *random_loss_case(rng, B, T, window=window), ce_weight)


@check("7a", 1)
def eagle_loss_noise_and_gradient(ctx):
    rng = ctx.worker_rng(75)
    judge_eagle_loss(ctx, *random_loss_case(rng, 2, 5), 0.1, noise=0.5,
                     seed=int(rng.integers(1 << 30)))


