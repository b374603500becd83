"""
classroom/references.py: the teacher's references (every ctx.ref.NAME of the checks), the
planted mistakes whose outputs name a student's, and the hidden checks. The student repository
leaves this file out: `classroom build` records what each reference answered on the public
seed's cases into classroom/expected.json.gz (expected.py), and that data is all a student sees.

Each reference is NAME(ctx, *args) and returns plain data: numbers, lists, tuples, dicts with
string keys and NumPy arrays. They are independent of the solutions: enumerations, exact
arithmetic and float64 autograd, never the reference solution's own code.
"""

import math

import numpy as np
import torch
from torch.nn import functional as F

from classroom import checks_exercise_3, checks_part_two, checks_trees, making
from classroom.checks import Fail, check, chi_square_fails, kept_as_often

HIDDEN_SEED = 0x9c1f_35a2_6be0_4d87_b3e1_5f02_c86a_7d19  # 128 bits; CLASSROOM_SEED replaces it

# ----------------------------------------------------------------------------------------------
# Part one


def round_verdict(ctx, draft_tokens, choices):
    kept = 0
    while kept < len(draft_tokens) and draft_tokens[kept] == choices[kept]:
        kept += 1
    return kept, choices[kept]


def replay(ctx, prompt, rounds):
    text = list(prompt)
    for draft_tokens, choices in rounds:
        kept, token = round_verdict(ctx, draft_tokens, choices)
        text += list(draft_tokens[:kept]) + [token]
    return text


def tokens_per_pass(ctx, alpha, k):
    return float(sum(alpha ** i for i in range(k + 1)))


def round_stats(ctx, alpha, k):
    """One round's tokens: their law (P(n tokens), n = 1 .. k + 1), mean and spread, and what
    counting every accepted guess instead of the leading run gives (1 + k alpha)."""
    law = [alpha ** (n - 1) * (1 - alpha) for n in range(1, k + 1)] + [alpha ** k]
    mean = tokens_per_pass(ctx, alpha, k)
    sd = math.sqrt(sum((2 * i + 1) * alpha ** i for i in range(k + 1)) - mean ** 2)
    return {"law": law, "mean": mean, "sd": sd, "every guess": 1 + k * alpha}


def speedup(ctx, alpha, k, c, verify_cost=1.0):
    return tokens_per_pass(ctx, alpha, k) / (k * c + verify_cost)


def break_even(ctx, k, c, verify_cost):
    """The alpha where the speed-up is 1, by bisection to 1e-13; nan where none helps."""
    if speedup(ctx, 1.0, k, c, verify_cost) <= 1:
        return math.nan
    low, high = 0.0, 1.0
    while high - low > 1e-13:
        middle = (low + high) / 2
        low, high = (middle, high) if speedup(ctx, middle, k, c, verify_cost) < 1 else \
            (low, middle)
    return (low + high) / 2


def layer_norm(ctx, x, weight, bias):
    normal = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return {"want": normal * weight + bias, "mistakes": {
        "no weight": normal + bias, "no bias": normal * weight, "bias first": (normal + bias) *
        weight, "the std": (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-5)
        * weight + bias}}


def greedy_rounds(ctx, target_tokens, draft_name, prompt_length, k):
    """What greedy speculative decoding does to write target_tokens (the big model's own greedy
    output, prompt included) with the fixture draft `draft_name` proposing up to k tokens a
    round: its rounds, the rounds whose check crosses a window jump (two passes each), its
    guesses, and the tokens the big model is fed (fed())."""
    draft, rounds = ctx.torch_model(draft_name), []
    goal, n = len(target_tokens), prompt_length
    while n < goal:
        k_round = min(k, goal - n - 1)
        kept = 0
        while kept < k_round and int(making.next_logits(
                draft, target_tokens[:n + kept]).argmax()) == target_tokens[n + kept]:
            kept += 1
        rounds.append((n, k_round, kept))
        n += kept + 1
    return _counted(rounds)


def perfect_rounds(ctx, prompt_length, n, k):
    """The same with a draft that is the big model (every guess kept), and the draws sampling
    makes: 2 k_round + 1 a round."""
    written, rounds = 0, []
    while written < n:
        k_round = min(k, n - written - 1)
        rounds.append((prompt_length + written, k_round, k_round))
        written += k_round + 1
    return _counted(rounds)


def _counted(rounds):
    """What rounds [(n, k_round, kept)] make the big model do through the lesson's score():
    each round scores positions n .. n + k_round, feeding its cache what it lacks (a window
    that jumps starts a fresh one), and then forgets the rejected guesses."""
    done = {"rounds": len(rounds), "crossing": 0, "guesses": 0, "draws": 0, "fed": 0}
    start, cached = 0, 0
    for n, k_round, kept in rounds:
        done["guesses"] += k_round
        done["draws"] += 2 * k_round + 1
        done["crossing"] += making.window_start(n, making.BLOCK) != \
            making.window_start(n + k_round, making.BLOCK)
        pos = n
        while pos <= n + k_round:                 # the lesson's windows(n, n + k_round)
            window = making.window_start(pos, making.BLOCK)
            end = min(n + k_round, window + making.BLOCK)
            if window != start:
                start, cached = window, 0
            cached = min(cached, pos - 1 - start)
            done["fed"] += end - (start + cached)
            cached, pos = end - start, end + 1
        cached = max(0, min(cached, n + kept - start))
    return done


def alpha(ctx, target, draft):
    return float(np.minimum(np.asarray(target, float), np.asarray(draft, float)).sum())


def warp(logits, temperature=1.0, top_k=None):
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(logits.shape[-1])[logits.argmax(-1)]
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = np.sort(logits, -1)[..., -top_k, None]
        logits = np.where(logits < kth, -np.inf, logits)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return probs / probs.sum(-1, keepdims=True)


def agreement(ctx, target, draft, temperature, top_k):
    both = np.minimum(warp(target, temperature, top_k), warp(draft, temperature, top_k))
    return float(both.sum(-1).mean()), float((target.argmax(-1) == draft.argmax(-1)).mean())


# ----------------------------------------------------------------------------------------------
# Exercise 6


def _lookup(seq, k, longest, shortest, *, longest_first=True, latest=True, after=True):
    found = [(n if longest_first else -n, start if latest else -start)
             for n in range(shortest, longest + 1) if n < len(seq)
             for start in range(len(seq) - n) if seq[start:start + n] == seq[-n:]]
    if not found:
        return []
    n, start = (abs(v) for v in max(found))
    return list(seq[start + n:start + n + k] if after else seq[start:start + k])


def lookup(ctx, seq, k, longest, shortest):
    """Prompt lookup by enumeration: every earlier occurrence of every tail, the longest tail
    first, then the latest start."""
    return {"want": _lookup(seq, k, longest, shortest), "mistakes": {
        "shortest tail first": _lookup(seq, k, longest, shortest, longest_first=False),
        "earliest occurrence": _lookup(seq, k, longest, shortest, latest=False),
        "the match itself": _lookup(seq, k, longest, shortest, after=False)}}


def head_logits(ctx, state, heads):
    """The Medusa heads as beyond.heads.Head computes them, in torch (float64)."""
    x = torch.tensor(state)

    def logits(block):
        return torch.stack([block(x, torch.tensor(w), torch.tensor(b)) @ torch.tensor(hw).T
                            for w, b, hw in heads]).numpy()
    return {"want": logits(lambda x, w, b: x + F.silu(x @ w.T + b)), "mistakes": {
        "untransposed": logits(lambda x, w, b: x + F.silu(x @ w + b)),
        "sigmoid": logits(lambda x, w, b: x + torch.sigmoid(x @ w.T + b)),
        "no residual": logits(lambda x, w, b: F.silu(x @ w.T + b))}}


def _heads_loss(guesses, logits, targets, shift=0, pooled=False):
    """(loss, its gradient with respect to the guesses), in float64 autograd: head i at t
    against the big model's prediction at t + i (+ shift), the mean over heads of each head's
    mean (pooled: the mean of every term)."""
    guesses = torch.tensor(guesses, dtype=torch.float64, requires_grad=True)
    logits = torch.tensor(logits, dtype=torch.float64)
    B, T, h, V = guesses.shape
    per_head, terms = [], []
    for i in range(1, h + 1):
        first, last = max(0, -(i + shift)), T - (i + shift)
        if last <= first:
            continue
        teacher = logits[:, first + i + shift:last + i + shift]            # (B, n, V)
        want = torch.softmax(teacher, -1) if targets == "soft" else \
            F.one_hot(teacher.argmax(-1), V).double()
        term = -(want * torch.log_softmax(guesses[:, first:last, i - 1], -1)).sum(-1)
        per_head.append(term.mean())
        terms.append(term.flatten())
    loss = torch.cat(terms).mean() if pooled else torch.stack(per_head).mean()
    loss.backward()
    return float(loss.detach()), guesses.grad.numpy()


def heads_loss(ctx, guesses, logits, targets):
    want, gradient = _heads_loss(guesses, logits, targets)
    return {"want": want, "gradient": gradient, "mistakes": {
        "one too far": _heads_loss(guesses, logits, targets, shift=1)[0],
        "one too near": _heads_loss(guesses, logits, targets, shift=-1)[0],
        "pooled mean": _heads_loss(guesses, logits, targets, pooled=True)[0]}}


# ----------------------------------------------------------------------------------------------
# Exercise 7


def _weights(draft, grad=False):
    weights, _, _ = draft
    return {name: torch.tensor(np.asarray(value, dtype=np.float64), requires_grad=grad)
            for name, value in weights.items()}


def _draft(W, n_head, window, states, tokens, wte):
    """The draft's output (T, C) at every position of the pairs [states[t] ; wte[tokens[t]]],
    one position at a time, in float64: fc, then x + attention over the last `window` inputs
    (ln_1 first), then x + the GELU MLP (ln_2 first), as beyond.eagle.Eagle's docstrings say."""
    def norm(x, name):
        return F.layer_norm(x, x.shape, W[f"h.{name}.weight"], W[f"h.{name}.bias"])
    xs = [W["fc.weight"] @ torch.cat([s, wte[int(t)]]) + W["fc.bias"]
          for s, t in zip(states, tokens)]
    C = len(xs[0])
    hs = C // n_head
    qkv = [W["h.attn.c_attn.weight"] @ norm(x, "ln_1") + W["h.attn.c_attn.bias"] for x in xs]
    out = []
    for i, x in enumerate(xs):
        seen = range(max(0, i - window + 1), i + 1)
        heads = []
        for h in range(n_head):
            q = qkv[i][h * hs:(h + 1) * hs]
            scores = torch.stack([q @ qkv[j][C + h * hs:C + (h + 1) * hs] for j in seen])
            att = torch.softmax(scores / math.sqrt(hs), 0)
            heads.append(sum(a * qkv[j][2 * C + h * hs:2 * C + (h + 1) * hs]
                             for a, j in zip(att, seen)))
        x = x + W["h.attn.c_proj.weight"] @ torch.cat(heads) + W["h.attn.c_proj.bias"]
        m = F.gelu(W["h.mlp.c_fc.weight"] @ norm(x, "ln_2") + W["h.mlp.c_fc.bias"],
                   approximate="tanh")
        out.append(x + W["h.mlp.c_proj.weight"] @ m + W["h.mlp.c_proj.bias"])
    return torch.stack(out)


def _roll(draft, features, seq, wte, lm_head, k, mistake=None):
    _, n_head, window = draft
    W = _weights(draft)
    f64 = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    head, embed = (f64(wte), f64(lm_head)) if mistake == "swapped" else (f64(lm_head), f64(wte))
    states = [f64(f) for f in features]
    tokens = list(seq[:-1] if mistake == "unshifted" else seq[1:])
    guesses, logits = [], []
    with torch.no_grad():
        for _ in range(k):
            last = 1 if mistake == "last pair only" else len(states)
            feature = _draft(W, n_head, window, states[-last:], tokens[-last:], embed)[-1]
            logits.append(head @ feature)
            guesses.append(int(logits[-1].argmax()))
            states.append(states[len(features) - 1] if mistake == "big feature" else feature)
            tokens.append(tokens[-1] if mistake == "stale token" else guesses[-1])
    return guesses, torch.stack(logits).numpy()


def roll(ctx, draft, features, seq, wte, lm_head, k):
    """The draft's k greedy guesses after seq and their logits (k, V), step by step."""
    return {"want": _roll(draft, features, seq, wte, lm_head, k), "mistakes": {
        name: _roll(draft, features, seq, wte, lm_head, k, name)[1]
        for name in checks_part_two.ROLL_HINTS}}


def shift(ctx, features, idx):
    f, x = features, idx
    return {"want": (f[:, :-1], x[:, 1:], f[:, 1:]), "mistakes": {
        "unshifted": [f[:, :-1], x[:, :-1], f[:, 1:]], "own input": [f[:, :-1], x[:, 1:],
                                                                     f[:, :-1]],
        "late states": [f[:, 1:], x[:, 1:], f[:, 1:]]}}


def _noise(shape, noise, seed):
    generator = torch.Generator().manual_seed(seed)
    return ((torch.rand(shape, generator=generator) - 0.5) * noise).double()


def _eagle_loss(draft, features, idx, wte, lm_head, ce_weight, noise, seed, mistake=None):
    """(the loss, {weight name: its gradient}) in float64, by positions: SmoothL1 (beta 1) of
    each guessed feature against the big model's next one, plus ce_weight times the
    cross-entropy of its logits against the head's distribution at the true next feature."""
    _, n_head, window = draft
    W = _weights(draft, grad=True)
    features = torch.tensor(np.asarray(features, dtype=np.float64))
    B, T, C = features.shape
    inputs = features.clone()
    if noise and mistake == "noisy targets":
        inputs = features = features + _noise((B, T, C), noise, seed)
    elif noise and mistake != "no noise":
        inputs[:, :-1] += _noise((B, T - 1, C), noise, seed)
    f64 = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    embed, head = (f64(lm_head), f64(wte)) if mistake == "swapped" else (f64(wte), f64(lm_head))
    regression, cross_entropy = [], []
    for b in range(B):
        tokens = idx[b, :-1] if mistake == "unshifted" else idx[b, 1:]
        guesses = _draft(W, n_head, window, inputs[b, :-1], tokens, embed)    # (T - 1, C)
        target = features[b, :-1] if mistake == "own input" else features[b, 1:]
        d = (guesses - target).abs()
        regression.append(d ** 2 if mistake == "squared" else
                          torch.where(d < 1, 0.5 * d ** 2, d - 0.5))
        teacher = inputs[b, :-1] if mistake == "head at f_t" else features[b, 1:]
        want = torch.softmax(teacher @ head.T, -1)
        cross_entropy.append(-(want * torch.log_softmax(guesses @ head.T, -1)).sum(-1))
    loss = torch.cat(regression).mean() + ce_weight * torch.cat(cross_entropy).mean()
    loss.backward()
    return float(loss.detach()), {name: w.grad.numpy() for name, w in W.items()}


def eagle_loss(ctx, draft, features, idx, wte, lm_head, ce_weight, noise, seed):
    want, gradients = _eagle_loss(draft, features, idx, wte, lm_head, ce_weight, noise, seed)
    names = [n for n in checks_part_two.LOSS_HINTS
             if noise or n not in ("noisy targets", "no noise")]
    return {"want": want, "gradients": gradients, "mistakes": {
        name: _eagle_loss(draft, features, idx, wte, lm_head, ce_weight, noise, seed, name)[0]
        for name in names}}


# ----------------------------------------------------------------------------------------------
# Exercise 8


def _lineage(parents, a, *, parent_only=False, itself=True):
    seen = {a} if itself else set()
    while parents[a] >= 0:
        a = parents[a]
        seen.add(a)
        if parent_only:
            break
    return seen


def _mask(parents, cached, chain, *, causal_nodes=False, chain_seen=True, causal_chain=True,
          **lineage_options):
    T = chain + len(parents)
    visible = np.zeros((T, cached + T), dtype=bool)
    for i in range(T):
        for j in range(cached + T):
            if j < cached:
                visible[i, j] = True
            elif j < cached + chain:                                  # a chain token
                visible[i, j] = (j - cached <= i or not causal_chain) if i < chain else chain_seen
            elif i >= chain:                                          # node over node
                a, b = i - chain, j - cached - chain
                visible[i, j] = b <= a if causal_nodes else \
                    b in _lineage(parents, a, **lineage_options)
    return visible


def mask(ctx, parents, cached, chain):
    """tree_mask by enumeration, slot by slot, from the docstring's rules."""
    return {"want": _mask(parents, cached, chain), "mistakes": {
        "causal nodes": _mask(parents, cached, chain, causal_nodes=True),
        "parent only": _mask(parents, cached, chain, parent_only=True),
        "not itself": _mask(parents, cached, chain, itself=False),
        "chain unseen": _mask(parents, cached, chain, chain_seen=False),
        "chain sees all": _mask(parents, cached, chain, causal_chain=False)}}


def _positions(parents, cached, chain, *, start=None, depth=True, after_chain=True, plus=0):
    first = cached if start is None else start
    root = first + (chain if after_chain else 0)
    return [p + plus for p in list(range(first, first + chain)) + [
        root + (len(_lineage(parents, a)) - 1 if depth else a) for a in range(len(parents))]]


def positions(ctx, parents, cached, chain):
    return {"want": _positions(parents, cached, chain), "mistakes": {
        "by index": _positions(parents, cached, chain, depth=False),
        "chain from 0": _positions(parents, cached, chain, start=0),
        "root at cached": _positions(parents, cached, chain, after_chain=False),
        "one too far": _positions(parents, cached, chain, plus=1)}}


def _greedy_walk(tokens, parents, choices, *, first_only=False, by_child=False, depth=None,
                 token_after_root=False):
    node, path = 0, []
    while depth is None or len(path) < depth:
        children = [c for c in range(1, len(parents)) if parents[c] == node]
        children = children[:1] if first_only else children
        held = [c for c in children if tokens[c] == (choices[c] if by_child else choices[node])]
        if not held:
            break
        node = held[0]
        path.append(node)
    return path, choices[0 if token_after_root else node]


def greedy_walk(ctx, tokens, parents, choices):
    want = _greedy_walk(tokens, parents, choices)
    return {"want": want, "mistakes": {
        "first child only": _greedy_walk(tokens, parents, choices, first_only=True),
        "by child": _greedy_walk(tokens, parents, choices, by_child=True),
        "one level": _greedy_walk(tokens, parents, choices, depth=1),
        "token after root": _greedy_walk(tokens, parents, choices, token_after_root=True),
        "root in path": ([0] + want[0], want[1]),
        "tokens for nodes": ([tokens[a] for a in want[0]], want[1])}}


def _sample_law(probs):
    """The law of numpy_speculative.sample(probs, rng) for any probs >= 0 (a draw past their
    sum takes the last token that has any)."""
    probs = np.asarray(probs, dtype=float)
    law = np.diff(np.concatenate([[0.0], np.minimum(np.cumsum(probs), 1.0)]))
    if probs.any():
        law[np.flatnonzero(probs)[-1]] += max(0.0, 1.0 - probs.sum())
    return law


def _residual(t, d, normalised=True):
    left = np.maximum(t - d, 0.0)
    return left if not normalised or left.sum() == 0 else left / left.sum()


def first_token_law(target, draft, width, rule="exact"):
    """The first token a round writes, by enumeration of every draw, when `width` guesses are
    drawn from draft one after another without replacement and checked by `rule` (the exact
    one, or a mistake of SIBLING_HINTS)."""
    law = np.zeros(len(target))

    def go(t, left, n, weight, last):
        if n == 0 or left.sum() <= 0:
            end = {"independent": _residual(target, last) if last is not None else target,
                   "no residual": target, "target at the end": target}.get(rule, t)
            law[:] += weight * _sample_law(end)
            return
        draft_i = left / left.sum()
        for x in np.flatnonzero(draft_i):
            against = target if rule in ("independent", "no residual") else t
            keep = min(1.0, against[x] / draft_i[x])
            law[x] += weight * draft_i[x] * keep
            if keep < 1:
                rest = left.copy()
                rest[x] = 0.0
                go(_residual(t, draft_i, rule != "unnormalised"), rest, n - 1,
                   weight * draft_i[x] * (1 - keep), draft_i)
    go(np.asarray(target, float), np.asarray(draft, float), width, 1.0, None)
    return law


def sibling_laws(ctx, target, draft, width):
    return {rule: first_token_law(target, draft, width, rule)
            for rule in checks_trees.SIBLING_HINTS}


def sibling_mistakes_show(ctx, target, draft, width, runs):
    """Whether every sibling mistake moves the first token's law far enough that `runs` rounds
    show it every time (the chi-square statistic's expected excess over 150)."""
    live = target > 0
    for law in sibling_laws(ctx, target, draft, width).values():
        excess = runs * float(((law[live] - target[live]) ** 2 / target[live]).sum()) + \
            (runs if (law[~live] > 0).any() else 0.0)
        if excess <= 150:
            return False
    return True


def path_law(ctx, parents, root_target, targets, root_draft, drafts):
    """{the kept path, its nodes joined by spaces: probability} by enumeration of every draw:
    the children of a node drawn one after another from its draft row without replacement,
    each tried against the current target, a rejection leaving the residual (the rule of
    beyond/tree_sampling.py); a kept child goes on down against its own row."""
    children = {a: [c for c in range(1, len(parents)) if parents[c] == a]
                for a in range(len(parents))}
    depth = {0: 0}
    for a in range(1, len(parents)):
        depth[a] = depth[parents[a]] + 1
    law = {}

    def node(a, target, draft, path, weight):
        try_child(a, children[a], target, np.asarray(draft, float), path, weight)

    def try_child(a, left_children, target, left, path, weight):
        if not left_children or left.sum() <= 0:
            key = " ".join(map(str, path))
            law[key] = law.get(key, 0.0) + weight
            return
        c, rest_children = left_children[0], left_children[1:]
        drawn_from = left / left.sum()
        for x in np.flatnonzero(drawn_from):
            keep = min(1.0, target[x] / drawn_from[x])
            if keep > 0:
                node(c, targets[depth[c] - 1, x], drafts[depth[c] - 1, x], path + [c],
                     weight * drawn_from[x] * keep)
            if keep < 1:
                rest = left.copy()
                rest[x] = 0.0
                try_child(a, rest_children, _residual(target, drawn_from), rest, path,
                          weight * drawn_from[x] * (1 - keep))
    node(0, np.asarray(root_target, float), root_draft, [], 1.0)
    return law


# ----------------------------------------------------------------------------------------------
# Hidden checks: they rerun properties on other shapes and draws than the public checks, so
# hard-coding what those print earns nothing.


@check("3b", 2, torch_free=True, hidden=True)
def greedy_hidden_lengths_and_k(ctx):
    checks_exercise_3.check_greedy(ctx, "draft", ks=(1, 8))


@check("3c", 1, torch_free=True, hidden=True)
def verify_chi_square_at_a_hidden_seed(ctx):
    target_probs, draft_probs = ctx.rng.dirichlet(np.ones(5), 4), ctx.rng.dirichlet(np.ones(5), 3)
    rounds = ctx.helper("first_tokens", "numpy_speculative", "verify", target_probs,
                        draft_probs, ctx.worker_rng(3), 20000)
    if isinstance(rounds, str):
        raise Fail("verify returns a pair of whole numbers (kept, token)", rounds)
    rounds = np.asarray(rounds)
    if rounds.shape != (20000, 3) or not ((0 <= rounds) & (rounds < 5)).all():
        raise Fail("verify returns (kept, token) with a token of the vocabulary", "other values")
    first = np.where(rounds[:, 1] > 0, rounds[:, 0], rounds[:, 2])
    kept_as_often(ctx, float((rounds[:, 1] > 0).mean()), target_probs[0], draft_probs[0],
                  5 * math.sqrt(0.25 / 20000), "in 20,000 rounds")
    if chi_square_fails(np.bincount(first, minlength=5), target_probs[0]):
        raise Fail("the first token distributed as the target's",
                   f"{np.bincount(first, minlength=5) / len(first)}")


@check("6a", 1, hidden=True)
def prompt_lookup_on_long_texts(ctx):
    cases = []
    for _ in range(40):
        seq, k, longest, shortest = checks_part_two.random_lookup_case(
            ctx.rng, int(ctx.rng.integers(40, 200)))
        cases.append((seq, k, longest + 2, shortest))
    checks_part_two.judge_lookups(ctx, ctx.student("beyond.ngram").prompt_lookup, cases)


@check("6b", 1, hidden=True)
def heads_loss_at_other_shapes(ctx):
    for targets, (B, T, h, V) in (("soft", (3, 9, 5, 6)), ("hard", (1, 12, 4, 3))):
        guesses = ctx.rng.normal(size=(B, T, h, V)).astype(np.float32)
        logits = (ctx.rng.normal(size=(B, T, V)) * 2).astype(np.float32)
        checks_part_two.judge_heads_loss(ctx, guesses, logits, targets)


@check("7b", 1, hidden=True)
def eagle_roll_on_longer_texts(ctx):
    rng = ctx.worker_rng(76)
    for n, k, window in ((14, 6, 5), (20, 4, 4)):
        draft, wte, lm_head = checks_part_two.random_eagle(rng, 12, 9, 3, window)
        features = rng.normal(size=(n, 12)).astype(np.float32)
        checks_part_two.judge_roll(ctx, draft, features, rng.integers(0, 9, n + 1).tolist(), wte, lm_head,
                       k)


@check("7a", 1, hidden=True)
def eagle_loss_at_other_shapes(ctx):
    rng = ctx.worker_rng(77)
    checks_part_two.judge_eagle_loss(ctx, *checks_part_two.random_loss_case(rng, 3, 9, C=12, V=9, n_head=3, window=4),
                         0.3)
    checks_part_two.judge_eagle_loss(ctx, *checks_part_two.random_loss_case(rng, 2, 3, C=6, V=5, n_head=1, window=1),
                         0.1, noise=0.2, seed=int(rng.integers(1 << 30)))


@check("8a", 1, hidden=True)
def tree_mask_and_positions_on_larger_trees(ctx):
    tree = ctx.student("beyond.tree")
    cases = [(parents, cached + 20, chain)
             for parents, cached, chain in checks_trees.random_mask_cases(ctx.rng, 12, 30)[6:]]
    checks_trees.judge_masks(ctx, tree.tree_mask, cases)
    checks_trees.judge_positions(ctx, tree.tree_positions, cases)


@check("8b", 1, hidden=True)
def tree_walks_at_a_hidden_seed(ctx):
    checks_trees.judge_greedy(ctx, [checks_trees.random_greedy_case(ctx.rng, int(ctx.rng.integers(10, 40)), V=9)
                           for _ in range(40)])
    target, draft = checks_trees.sample_walk_case(ctx, 6, 3, 12000)
    checks_trees.judge_sampled(ctx, target, draft, 12000, 85)
