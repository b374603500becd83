"""
studies/lenience.py: the lenient acceptance rule (speculative_generate(..., lenience=l)) keeps a
guess x with min(1, p(x) / (l q(x))) and draws a rejection from norm(max(0, p - l q)): exact at
lenience 1 only. Its output at one position, its exact distribution over whole outputs, and how
far those move from the target's on a 4-token pair; studies/sampling_costs.py measures what it
buys.
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
    distribution of the token it writes there, the probability a guess is kept); the same
    branches as numpy_speculative.verify on lenience x draft_probs."""
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
    by enumerating the rule's branches as speculative.decode_row takes them: rounds of
    min(k, tokens left - 1) guesses, each kept with accept_probability(p(x), l q(x)); a
    rejection writes from residual(p, l q) and ends the round; a round that kept every guess
    ends with a token from p. target_probs / draft_probs: seq (tuple) -> (V,)."""
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
    """The tests' 4-token pair (tests/test_speculative.py): random GPTs with peaked, varied
    distributions: every 3-token output enumerable, the rule's effect visible by sampling."""
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
    p_of, q_of = (next_token_probs(model, temperature=1.0) for model in (target, draft))
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
