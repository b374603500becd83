"""
numpy_speculative.py: exercise 3, speculative decoding in NumPy alone, read top to bottom.

`model = load("checkpoints/big.npz")` (the weights gpt.export_npz writes, no torch), then
`generate(model, prompt_tokens, 100)` or `speculative_greedy(model, draft, prompt_tokens, 100)`.
In the order a student writes them, between the solution markers: 1. the forward pass
(picoGPT-style, with a KV cache that forgets rejected tokens); 2. plain and greedy speculative
decoding under the window rule (lessonkit/scorer.py); 3. the acceptance rule (Leviathan et al.
2023; Chen et al. 2023) and speculative sampling: speculative.py uses this rule too. target: the
big model (p), draft: the small one (q). Shapes: T new, L cached, C channels, V vocabulary.
"""

import json
import math

import numpy as np

from lessonkit.scorer import window_start, windows  # noqa: F401 (the window rule, written there)

# ----------------------------------------------------------------------------------------------
# 1. The forward pass: the weights, then the blocks


class Model:
    """A GPT's weights by GPT-2 name (params), its shape (config) and its vocabulary."""

    def __init__(self, params, config, vocab):
        self.params, self.config, self.vocab = params, config, vocab
        self.n_layer, self.n_head = config["n_layer"], config["n_head"]
        self.block_size, self.vocab_size = config["block_size"], config["vocab_size"]

    def layer(self, i):  # block i's parameters, without the 'transformer.h.i.' prefix
        prefix = f"transformer.h.{i}."
        return {k[len(prefix):]: v for k, v in self.params.items() if k.startswith(prefix)}


def load(path):
    """A Model from an .npz written by gpt.export_npz (numbers only: no pickle, no torch)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            params = {k: f[k] for k in f.files if not k.startswith("meta.")}
            config, vocab = json.loads(str(f["meta.config"])), json.loads(str(f["meta.vocab"]))
    except FileNotFoundError:
        raise ValueError(f"no exported weights at {path}; `python train.py` writes them next to "
                         f"each checkpoint (.npz beside .pt)") from None
    return Model(params, config, vocab)


def gelu(x):
    """GPT-2's GELU (the tanh approximation)."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(x):  # along the last axis
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def linear(x, weight, bias=None):
    """x (T, in) -> (T, out). weight is (out, in), as torch's nn.Linear stores it."""
    y = x @ weight.T
    return y if bias is None else y + bias


def layer_norm(x, weight, bias, eps=1e-5):
    """Normalise each row of x (T, C) to mean 0 and variance 1, then scale and shift."""
    # BEGIN SOLUTION
    mean = x.mean(-1, keepdims=True)                     # (T, 1)
    variance = x.var(-1, keepdims=True)                  # (T, 1)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias
    # END SOLUTION


class Cache:
    """Keys and values of every layer for the tokens at positions start .. start + length - 1
    (`tokens`) of the current window; a forward pass appends to it. forget_from(position) drops
    every token from there on: call it after a rejection, or rejected guesses stay in context."""

    def __init__(self, model, start=0):
        self.model = model
        self.reset(start)

    def reset(self, start):
        """Empty the cache for a window that starts at position `start`."""
        self.start, self.tokens = start, []
        C = self.model.config["n_embd"]
        self.keys = [np.zeros((0, C), np.float32) for _ in range(self.model.n_layer)]  # (L, C)
        self.values = [np.zeros((0, C), np.float32) for _ in range(self.model.n_layer)]

    @property
    def length(self):
        return len(self.tokens)

    def forget_from(self, position):
        keep = max(0, min(self.length, position - self.start))
        self.tokens = self.tokens[:keep]
        self.keys = [k[:keep] for k in self.keys]
        self.values = [v[:keep] for v in self.values]


def attention(x, params, n_head, cache, layer):
    """Causal self-attention of the new tokens x (T, C) over the cached ones and themselves.
    Appends the new keys and values to cache.keys[layer] / cache.values[layer] (L, C).
    New token i sits at position L + i and may attend to positions 0 .. L + i."""
    # BEGIN SOLUTION
    T, C = x.shape
    hs = C // n_head
    q, k, v = np.split(linear(x, params["attn.c_attn.weight"], params["attn.c_attn.bias"]),
                       3, axis=-1)                                          # 3 x (T, C)
    cache.keys[layer] = np.concatenate([cache.keys[layer], k])             # (L + T, C)
    cache.values[layer] = np.concatenate([cache.values[layer], v])         # (L + T, C)
    k, v = cache.keys[layer], cache.values[layer]
    L = len(k) - T
    visible = np.arange(L + T)[None, :] <= L + np.arange(T)[:, None]       # (T, L + T)
    heads = []
    for h in range(n_head):
        part = slice(h * hs, (h + 1) * hs)
        scores = q[:, part] @ k[:, part].T / math.sqrt(hs)                 # (T, L + T)
        scores = np.where(visible, scores, -np.inf)
        heads.append(softmax(scores) @ v[:, part])                         # (T, hs)
    y = np.concatenate(heads, axis=-1)                                      # (T, C)
    return linear(y, params["attn.c_proj.weight"], params["attn.c_proj.bias"])
    # END SOLUTION


def mlp(x, params):
    """The feed-forward part of a block: widen to 4C, GELU, back to C."""
    # BEGIN SOLUTION
    h = gelu(linear(x, params["mlp.c_fc.weight"], params["mlp.c_fc.bias"]))  # (T, 4C)
    return linear(h, params["mlp.c_proj.weight"], params["mlp.c_proj.bias"])  # (T, C)
    # END SOLUTION


def forward(model, tokens, cache=None):
    """Logits (T, V) for the new tokens (a list of T ids), continuing the cache if one is given:
    row i predicts the token after tokens[i]. Positions start at cache.length, below block_size.
    Embeddings transformer.wte (token) and .wpe (position); every block (pre-LayerNorm: ln_1,
    attention, residual; ln_2, MLP, residual); transformer.ln_f and the head, tied to wte."""
    cache = cache if cache is not None else Cache(model)
    start, T = cache.length, len(tokens)
    if start + T > model.block_size:
        raise ValueError(f"{start + T} tokens do not fit the window of {model.block_size}")
    p = model.params
    # Compute logits (T, V) for the tokens at positions start .. start + T - 1.
    # BEGIN SOLUTION
    x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][start:start + T]  # (T, C)
    for i in range(model.n_layer):
        b = model.layer(i)
        x = x + attention(layer_norm(x, b["ln_1.weight"], b["ln_1.bias"]), b, model.n_head,
                          cache, i)                                         # (T, C)
        x = x + mlp(layer_norm(x, b["ln_2.weight"], b["ln_2.bias"]), b)     # (T, C)
    x = layer_norm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"])
    logits = linear(x, p["transformer.wte.weight"])                         # (T, V)
    # END SOLUTION
    cache.tokens = cache.tokens + list(tokens)
    return logits


# ----------------------------------------------------------------------------------------------
# 2. Decoding under the window rule


def score(model, cache, seq, first):
    """Logits (len(seq) - first + 1, V): row i predicts position first + i of seq from the
    tokens before it, each from its window. Feeds the cache what it lacks. The cache must hold
    tokens of seq: after a rejection, forget them (cache.forget_from) before scoring again.
    (Strict so that a forgotten forget_from shows; scorer.WindowScorer serves every other model.)"""
    rows = []
    for pos, start, end in windows(first, len(seq), model.block_size):
        if start != cache.start:                 # the window jumped: a fresh cache
            cache.reset(start)
        if cache.tokens != seq[start:start + cache.length]:
            wrong = next(i for i, t in enumerate(cache.tokens) if seq[start + i:][:1] != [t])
            raise ValueError(f"the cache holds a token that is not in the sequence (position "
                             f"{start + wrong}): forget rejected tokens before scoring again")
        cache.forget_from(pos - 1)               # the token before pos must be fed again
        cached = cache.length
        logits = forward(model, seq[start + cached:end], cache)  # predicts start+cached+1..end
        rows.append(logits[pos - 1 - start - cached:])
    return np.concatenate(rows)


def generate(model, prompt, max_new_tokens, *, temperature=0.0, top_k=None, rng=None):
    """Plain decoding with a KV cache: one forward pass per new token. Returns the token list.
    Temperature 0 is greedy; otherwise tokens are sampled from warp(...) with rng.random()."""
    seq, cache = list(prompt), Cache(model)
    for _ in range(max_new_tokens):
        logits = score(model, cache, seq, len(seq))[-1]                     # (V,)
        if temperature == 0:
            seq.append(int(logits.argmax()))
        else:
            seq.append(sample(warp(logits, temperature, top_k), rng))
    return seq


def greedy_verdict(draft_tokens, target_choices):
    """One greedy round: (how many draft tokens are kept, the token the target adds).
    draft_tokens (k,): the draft's guesses; target_choices (k+1,): the target's own choice at
    each of those positions and one more. Guesses are kept from the left while they equal the
    target's choice; the target then adds its own choice at the first mismatch (a correction),
    or at position k when all were kept (the bonus token)."""
    # BEGIN SOLUTION
    kept = 0
    while kept < len(draft_tokens) and draft_tokens[kept] == target_choices[kept]:
        kept += 1
    return kept, target_choices[kept]
    # END SOLUTION


def replay(prompt, rounds):
    """The text a run writes: prompt tokens, then for each round (draft_tokens, target_choices)
    the kept guesses and the target's token. Returns the token list."""
    # BEGIN SOLUTION
    seq = list(prompt)
    for draft_tokens, target_choices in rounds:
        kept, added = greedy_verdict(draft_tokens, target_choices)
        seq += list(draft_tokens[:kept]) + [added]
    return seq
    # END SOLUTION


def speculative_greedy(target, draft, prompt, max_new_tokens, k=4):
    """Greedy speculative decoding with two KV caches. Returns (tokens, target passes): one a
    round (a check crossing a window jump makes two forward calls, counted once). Each round:
    the draft proposes up to k tokens (one score() each); the target scores the last accepted
    token and every proposal in one score(); guesses are kept while they match the target's
    choices, and the target adds its own token. The output must equal generate(target, prompt,
    max_new_tokens) token for token, for any length."""
    # BEGIN SOLUTION
    seq, passes = list(prompt), 0
    target_cache, draft_cache = Cache(target), Cache(draft)
    goal = len(seq) + max_new_tokens
    while len(seq) < goal:
        n = len(seq)
        k_round = min(k, goal - n - 1)        # never propose tokens that would not be kept
        for _ in range(k_round):              # 1. the draft guesses, one token at a time
            seq.append(int(score(draft, draft_cache, seq, len(seq))[-1].argmax()))
        choices = score(target, target_cache, seq, n).argmax(-1)   # 2. one pass (k_round+1,)
        passes += 1
        kept, added = greedy_verdict(seq[n:], [int(c) for c in choices])  # 3. compare
        del seq[n + kept:]                    # the rejected guesses ...
        for cache in (target_cache, draft_cache):
            cache.forget_from(n + kept)       # ... leave both caches too
        seq.append(added)
    return seq, passes
    # END SOLUTION


# ----------------------------------------------------------------------------------------------
# 3. Sampling without changing the distribution


def warp(logits, temperature=1.0, top_k=None, top_p=None):
    """Logits (..., V) -> probabilities (..., V) after temperature, top-k and top-p, in order.
    Temperature 0 is greedy: a one-hot at the argmax (ties go to the lowest id)."""
    logits = np.asarray(logits, dtype=np.float64)
    V = logits.shape[-1]
    if temperature == 0:
        return np.eye(V)[logits.argmax(-1)]
    logits = logits / temperature
    if top_k is not None and top_k < V:
        kth = np.sort(logits, -1)[..., -top_k, None]             # the k-th largest logit
        logits = np.where(logits < kth, -np.inf, logits)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1.0:
        # Keep the smallest set of most likely tokens whose probability reaches top_p.
        order = np.argsort(-probs, -1, kind="stable")
        sorted_probs = np.take_along_axis(probs, order, -1)
        drop_sorted = (np.cumsum(sorted_probs, -1) - sorted_probs) >= top_p
        drop = np.empty_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, -1)
        probs = np.where(drop, 0.0, probs)
        probs /= probs.sum(-1, keepdims=True)
    return probs


def sample(probs, rng):
    """One token from probs (V,) with one rng.random() (inverse transform sampling); a draw past
    a total rounded a hair below 1 takes the last token that has any probability."""
    index = int(np.searchsorted(np.cumsum(probs), rng.random(), side="right"))
    return index if index < len(probs) else int(np.flatnonzero(probs)[-1])


def accept_probability(target_prob, draft_prob):
    """min(1, target/draft) for the proposed token; a token the draft gave 0 is accepted if the
    target gives it anything (the ratio is infinite), rejected if the target gives it 0 too."""
    if draft_prob <= 0:
        return 1.0 if target_prob > 0 else 0.0
    return min(1.0, target_prob / draft_prob)


def residual(target_probs, draft_probs):
    """norm(max(0, target - draft)): where the correction after a rejection is drawn from (all
    zero only when target == draft, when no rejection can happen: then the target's own)."""
    leftover = np.maximum(target_probs - draft_probs, 0.0)
    total = leftover.sum()
    return leftover / total if total > 0 else target_probs / target_probs.sum()


def verify(target_probs, draft_probs, draft_tokens, rng):
    """One round of speculative sampling. target_probs (k+1, V): the target's distributions for
    the k draft positions and one more; draft_probs (k, V): the draft's distributions that
    proposed draft_tokens (k,); rng: anything with .random() -> uniform [0, 1); draw every
    random number from it, and nothing else. Returns (n_accepted, next_token): how many draft
    tokens are kept, and the token the target adds (a correction, or the bonus if all passed).
    """
    # BEGIN SOLUTION
    for i, token in enumerate(draft_tokens):
        # 1. Keep draft token i with probability min(1, target/draft).
        if rng.random() < accept_probability(target_probs[i, token], draft_probs[i, token]):
            continue
        # 2. Rejected: the target writes its own token, from what the draft under-proposed.
        return i, sample(residual(target_probs[i], draft_probs[i]), rng)
    # 3. All k kept: the target's distribution after them gives one more token for free.
    return len(draft_tokens), sample(target_probs[len(draft_tokens)], rng)
    # END SOLUTION


def speculative_sample(target, draft, prompt, max_new_tokens, k, rng, *, temperature=1.0,
                       top_k=None):
    """Speculative sampling: every output token has exactly the distribution that
    generate(target, prompt, ..., temperature, top_k, rng) samples from. Returns the tokens.
    Temperature and top-k shape both models' distributions (warp) before the acceptance test;
    the draft samples its guesses from its own warped distribution; verify() decides."""
    # BEGIN SOLUTION
    seq = list(prompt)
    target_cache, draft_cache = Cache(target), Cache(draft)
    goal = len(seq) + max_new_tokens
    while len(seq) < goal:
        n = len(seq)
        k_round = min(k, goal - n - 1)
        draft_probs = []
        for _ in range(k_round):                                            # 1. propose
            probs = warp(score(draft, draft_cache, seq, len(seq))[-1], temperature, top_k)
            draft_probs.append(probs)                                       # (V,)
            seq.append(sample(probs, rng))
        target_probs = warp(score(target, target_cache, seq, n), temperature, top_k)
        draft_probs = np.array(draft_probs).reshape(k_round, target_probs.shape[1])
        kept, added = verify(target_probs, draft_probs, seq[n:], rng)       # 2-3. check
        del seq[n + kept:]
        for cache in (target_cache, draft_cache):
            cache.forget_from(n + kept)
        seq.append(added)
    return seq
    # END SOLUTION
