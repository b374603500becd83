"""
beyond/eagle_numpy.py: the EAGLE draft of beyond/eagle.py as a fast drafter, in NumPy (the
teachers' only: its NumPy block would answer exercise 3a, so the student repository leaves it
out). EagleDraft proposes eagle_roll's greedy guesses (tests/test_eagle.py) from the features
the last check computed, with a small KV cache for the k steps and weights folded once to save
NumPy calls a step (docs/DESIGN.md, "beyond/, module by module").

Shapes: C channels (n_embd), V vocabulary, W window, nh heads, hs head size, L keys so far.
"""

import math

import numpy as np

import speculative as sd
from beyond.heads import feature_scorer
from lessonkit import machine
from lessonkit.scorer import common_prefix


def normalized(x, eps=1e-5):
    """A LayerNorm without its gain and bias, over the last axis of x (C,) or (t, C)."""
    C = x.shape[-1]
    if x.ndim == 1:  # a step's one vector: its sums as scalars, fewer NumPy calls
        x = x - x.sum() / C
        return x / math.sqrt(x @ x / C + eps)
    x = x - x.sum(-1, keepdims=True) / C
    return x / np.sqrt((x * x).sum(-1, keepdims=True) / C + eps)


def gelu(x):  # GPT-2's tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh((0.044715 * c * (x * x) + c) * x))


class EagleDraft(sd.Drafter):
    """The drafter (a speculative.Drafter): the draft rolled forward k steps in NumPy from the
    big model's features of the last `window` tokens, the last of them the state whose
    prediction was seq[-1] (at len(seq) - 2), computed while checking the last round."""

    def __init__(self, eagle, big):
        def a(t):  # -> a float64 NumPy array: folded in float64, kept in float32
            return t.detach().cpu().double().numpy()

        def folded(ln, linear):  # (norm(x) g + beta) W + b = norm(x) (g W) + (beta W + b)
            w, b = a(linear.weight.T), a(linear.bias)
            return a(ln.weight)[:, None] * w, a(ln.bias) @ w + b

        h, C = eagle.h, eagle.fc.bias.shape[0]
        self.n_head, self.window = h.attn.n_head, eagle.window
        fc_w, fc_b = a(eagle.fc.weight.T), a(eagle.fc.bias)                  # (2C, C), (C,)
        wte, head_w = a(big.transformer.wte.weight), a(big.lm_head.weight.T)  # (V, C), (C, V)
        qkv_w, qkv_b = folded(h.ln_1, h.attn.c_attn)                          # (C, 3C), (3C,)
        scale = np.r_[np.full(C, 1 / math.sqrt(C // self.n_head)), np.ones(2 * C)]  # queries'
        mlp_fc_w, mlp_fc_b = folded(h.ln_2, h.mlp.c_fc)                       # (C, 4C), (4C,)
        weights = dict(
            feature_w=fc_w[:C],                                               # (C, C)
            token_rows=wte @ fc_w[C:] + fc_b,                                 # (V, C)
            head_and_fc=np.concatenate([head_w, fc_w[:C]], 1),                # (C, V + C)
            qkv_w=qkv_w * scale, qkv_b=qkv_b * scale,
            attn_proj_w=a(h.attn.c_proj.weight.T), attn_proj_b=a(h.attn.c_proj.bias),
            mlp_fc_w=mlp_fc_w, mlp_fc_b=mlp_fc_b,
            mlp_proj_w=a(h.mlp.c_proj.weight.T), mlp_proj_b=a(h.mlp.c_proj.bias))
        for name, value in weights.items():
            setattr(self, name, value.astype(np.float32))
        self.ln_f = tuple(a(p).astype(np.float32) for p in
                          (big.transformer.ln_f.weight, big.transformer.ln_f.bias))
        self.vocab_size = wte.shape[0]
        self.scorer = None
        machine.single_threaded_blas()  # a step of small products: one BLAS thread

    def reset(self):
        self.scorer = None

    def scorer_for(self, target):
        self.scorer = feature_scorer(target, self.feature_w.shape[0], self.ln_f)
        rows = (self.scorer.block_size, self.feature_w.shape[0])
        self.key_rows, self.value_rows = np.empty(rows, np.float32), np.empty(rows, np.float32)
        self.known = (0, [])   # the window start and the tokens the rows were computed from
        return self.scorer

    def rows_done(self, seq, start):
        """Where the rows of keys and values still to compute begin: row t (the pair of f_t and
        x_{t+1}) holds while seq[start..t+1] is what it was computed from."""
        known_start, tokens = self.known
        if known_start != start:                    # the big model's window jumped
            return start
        same = common_prefix(tokens, seq, start, min(len(tokens), len(seq) - start))
        return start + max(0, same - 1)

    def inputs(self, features, tokens):
        """fc of [features (t, C) ; the tokens' embeddings], (t, C), and their queries, keys
        and values, (t, C) each."""
        x = features @ self.feature_w + self.token_rows[tokens]               # (t, C)
        qkv = normalized(x) @ self.qkv_w + self.qkv_b                          # (t, 3C)
        C = x.shape[1]
        return x, qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]

    def output(self, x, q, keys, values):
        """The block's output (C,) for one input x (C,) with query q (C,), attending over the
        keys (nh, hs, L) and values (nh, L, hs) of the window, its own last."""
        nh = self.n_head
        att = q.reshape(nh, 1, -1) @ keys                                 # (nh, 1, L)
        att = np.exp(att - att.max(-1, keepdims=True))
        y = (att / att.sum(-1, keepdims=True)) @ values                   # (nh, 1, hs)
        x = x + y.reshape(-1) @ self.attn_proj_w + self.attn_proj_b
        m = gelu(normalized(x) @ self.mlp_fc_w + self.mlp_fc_b)          # (4C,)
        return x + m @ self.mlp_proj_w + self.mlp_proj_b                  # (C,)

    def propose(self, seq, k, sampling):
        if self.scorer is None:
            raise ValueError("EAGLE drafts from the big model's own features: decode with "
                             "speculative_generate, which asks the drafter's scorer_for(target)")
        if len(seq) < 2:  # no feature before the only token: guess it again
            tokens = [seq[-1]] * k
            return tokens, None if sampling.greedy else np.eye(self.vocab_size)[tokens]  # (k, V)
        pos = len(seq) - 2                       # the feature whose prediction was seq[-1]
        if self.scorer.state(seq, pos) is None:  # the first round: nothing has read seq
            self.scorer.score([seq[:-1]], len(seq) - 1)
        start = self.scorer.starts[0]
        first = max(start, pos - self.window + 1)
        # The window's pairs f_t with x_{t+1}, t = first..pos: those of earlier rounds are kept
        # (keys and values by row, t - start); the new ones, and pos's (its x and query), here.
        new = min(pos, max(first, self.rows_done(seq, start)))
        states = self.scorer.hidden[new - start:pos - start + 1]         # f_new..f_pos (t, C)
        x, q, k_, v = self.inputs(states, seq[new + 1:pos + 2])          # each paired with x_{t+1}
        self.key_rows[new - start:pos - start + 1] = k_
        self.value_rows[new - start:pos - start + 1] = v
        self.known = (start, seq[start:pos + 2])
        n, C = pos - first + 1, x.shape[1]
        nh = self.n_head
        keys = np.empty((nh, C // nh, n + k), np.float32)                # the KV cache
        values = np.empty((nh, n + k, C // nh), np.float32)
        keys[:, :, :n] = self.key_rows[first - start:pos - start + 1].reshape(n, nh, -1) \
            .transpose(1, 2, 0)
        values[:, :n] = self.value_rows[first - start:pos - start + 1].reshape(n, nh, -1) \
            .transpose(1, 0, 2)
        feature = self.output(x[-1], q[-1], keys[:, :, :n], values[:, :n])  # f'_{pos+1} (C,)
        guesses, probs = [], []
        V = self.vocab_size
        for step in range(k):
            both = feature @ self.head_and_fc                             # (V + C,)
            logits = both[:V]                                             # the big model's head
            if sampling.greedy:
                guesses.append(int(logits.argmax()))
            else:
                probs.append(sampling.warp(logits))
                guesses.append(sampling.draw(probs[-1]))
            if step == k - 1:
                break
            x = both[V:] + self.token_rows[guesses[-1]]                   # fc of [f' ; wte(guess)]
            qkv = normalized(x) @ self.qkv_w + self.qkv_b                 # (3C,)
            q, k_, v = qkv[:C], qkv[C:2 * C], qkv[2 * C:]
            keys[:, :, n] = k_.reshape(nh, -1)
            values[:, n] = v.reshape(nh, -1)
            n += 1
            lo = max(0, n - self.window)                                  # the last W keys
            feature = self.output(x, q, keys[:, :, lo:n], values[:, lo:n])
        return guesses, (np.array(probs) if probs else None)              # (k, V) or None
