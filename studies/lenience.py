"""
studies/lenience.py: the lenient acceptance rule (speculative_generate(..., lenience=l)): a
guess x is kept with min(1, p(x) / (l q(x))) and a rejection draws from norm(max(0, p - l q)).
Its output at one position (lenient_step), its exact distribution over whole outputs by
enumerating its branches (lenient_distribution), and, on the tests' 4-token pair, how far those
outputs move from the target's, exactly and by sampling (lenience_small). Exact at lenience 1
only; studies/sampling_costs.py measures what it buys.
"""

from collections import Counter, defaultdict
from functools import lru_cache

import numpy as np
import torch

import gpt
import speculative as sd
from numpy_speculative import accept_probability, residual

SMALL_PROMPT = [1, 2, 0]                            # the 4-token pair's prompt (as in the tests)


def lenient_step(target_probs, draft_probs, lenience):
    """The lenient rule at one position, for every row of (..., V) arrays at once: (the
    distribution of the token it writes there when the draft proposes from draft_probs, the
    probability a guess is kept). The same branches as numpy_speculative.verify on
    lenience x draft_probs: keep x with min(1, p/(l q)), else draw from norm(max(0, p - l q))."""
    p, q = np.asarray(target_probs, np.float64), np.asarray(draft_probs, np.float64)
    kept = np.minimum(q, p / lenience)                   # q(x) min(1, p(x) / (l q(x)))
    leftover = np.maximum(p - lenience * q, 0.0)
    total = leftover.sum(-1, keepdims=True)
    fallback = p / p.sum(-1, keepdims=True)              # residual's: nothing left over
    res = np.where(total > 0, leftover / np.where(total > 0, total, 1), fallback)
    alpha = kept.sum(-1)
    return kept + (1 - alpha)[..., None] * res, alpha


def total_variation(a, b):
    """Total variation distance of two distributions: dicts {outcome: p} or arrays (..., V)."""
    if isinstance(a, dict):
        return 0.5 * sum(abs(a.get(x, 0.0) - b.get(x, 0.0)) for x in set(a) | set(b))
    return 0.5 * np.abs(np.asarray(a) - np.asarray(b)).sum(-1)


def next_token_probs(model, **warp):
    """seq (a tuple of ids) -> the model's warped distribution (V,) of the next token, cached."""
    @lru_cache(maxsize=None)
    def probs(seq):
        with torch.no_grad():
            logits = model(torch.tensor([seq]))[0][0, -1].float().numpy()
        return sd.warp(logits, **warp)
    return probs


def lenient_distribution(target_probs, draft_probs, prompt, n_tokens, k, lenience=1.0):
    """{first n_tokens: probability} that speculative sampling at k with this lenience writes,
    computed exactly by enumerating the rule's branches as speculative.decode_row takes
    them: rounds of k_round = min(k, tokens left - 1) guesses; guess x (drawn from q) is kept
    with accept_probability(p(x), l q(x)) and the round goes on; a rejection writes a token from
    residual(p, l q) and ends the round; a round whose guesses were all kept (or that had none)
    ends with a token from the target's own p. target_probs / draft_probs: seq (tuple) -> (V,).
    At lenience 1 this is exactly the target's distribution."""
    out, goal = defaultdict(float), len(prompt) + n_tokens

    def new_round(seq, prob):
        if len(seq) == goal:
            out[seq[len(prompt):]] += prob
            return
        guess(seq, 0, min(k, goal - len(seq) - 1), prob)

    def guess(seq, i, k_round, prob):
        p = target_probs(seq)
        if i == k_round:                       # the bonus token (or a round without guesses)
            for x in np.flatnonzero(p):
                new_round(seq + (int(x),), prob * p[x])
            return
        lq = lenience * draft_probs(seq)
        kept = np.array([lq[x] / lenience * accept_probability(p[x], lq[x])
                         for x in range(len(p))])             # q(x) x P(keep x)
        for x in np.flatnonzero(kept):
            guess(seq + (int(x),), i + 1, k_round, prob * kept[x])
        rejected = 1.0 - kept.sum()
        if rejected > 1e-15:
            correction = residual(p, lq)
            for x in np.flatnonzero(correction):
                new_round(seq + (int(x),), prob * rejected * correction[x])

    new_round(tuple(prompt), 1.0)
    return dict(out)


def small_pair():
    """The tests' 4-token pair (tests/test_speculative.py, small_pair): random GPTs whose
    larger weights give peaked, varied distributions, so every output of 3 tokens is
    enumerable (4^3) and the rule's effect is large enough to see by sampling."""
    def make(seed, n_layer):
        torch.manual_seed(seed)
        model = gpt.GPT(gpt.Config(vocab_size=4, block_size=16, n_layer=n_layer, n_head=2,
                                   n_embd=16)).eval()
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.normal_(0, 0.4)
        return model
    return make(10, 2), make(11, 1)


def lenience_small(leniences, samples, seed, k=2, n_tokens=3):
    """Per lenience on the 4-token pair: the exact TV distance of 3-token outputs from the
    target's, and the same from `samples` sampled outputs (sampling noise included)."""
    target, draft = small_pair()
    p_of, q_of = next_token_probs(target, temperature=1.0), next_token_probs(draft,
                                                                             temperature=1.0)
    want = lenient_distribution(p_of, q_of, SMALL_PROMPT, n_tokens, k, 1.0)
    prompt = torch.tensor([SMALL_PROMPT])
    rows = []
    for lenience in leniences:
        exact = lenient_distribution(p_of, q_of, SMALL_PROMPT, n_tokens, k, lenience)
        g = torch.Generator().manual_seed(seed)
        counts, stats = Counter(), sd.Stats(k=k)
        for _ in range(samples):
            out, s = sd.speculative_generate(target, draft, prompt, n_tokens, k=k,
                                             temperature=1.0, generator=g, lenience=lenience)
            counts[tuple(out[0, len(SMALL_PROMPT):].tolist())] += 1
            stats.add(s)
        sampled = {x: c / samples for x, c in counts.items()}
        rows.append({"lenience": lenience, "exact_tv": total_variation(exact, want),
                     "sampled_tv": total_variation(sampled, want),
                     "sampled_tv_to_lenient": total_variation(sampled, exact),
                     "acceptance_rate": stats.acceptance_rate})
    return rows
