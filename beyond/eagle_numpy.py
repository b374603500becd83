"""
beyond/eagle_numpy.py: the EAGLE draft of beyond/eagle.py as a fast drafter, in NumPy (the
teachers' only: its NumPy block, attention and MLP, would answer exercise 3a, so the student
repository leaves this file out, as it does beyond/fast_numpy.py; --draft eagle says so there).

EagleDraft rolls the draft forward exactly as beyond.eagle.eagle_roll does (its greedy guesses
are eagle_roll's: tests/test_eagle.py), but from the big model's features that the pass which
checked the last round has already computed (beyond/heads.py's HiddenScorer keeps them), with a
small KV cache for the k steps instead of the draft's whole window again at every step: a step
is a few small products, far less than a pass of the big model.

Shapes: C channels (n_embd), V vocabulary, W window, nh heads, hs head size.
"""

import math

import numpy as np

import speculative as sd
from beyond.heads import feature_scorer
from lessonkit import machine


def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):  # GPT-2's tanh approximation
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class EagleDraft(sd.Drafter):
    """The drafter (a speculative.Drafter): the draft rolled forward k steps in NumPy from the
    big model's features of the last `window` tokens, the last of them the state whose
    prediction was seq[-1] (at len(seq) - 2), computed while checking the last round."""

    def __init__(self, eagle, big):
        def a(t):  # -> a float32 NumPy array
            return t.detach().cpu().float().numpy()
        h = eagle.h
        self.fc_w, self.fc_b = a(eagle.fc.weight.T), a(eagle.fc.bias)          # (2C, C), (C,)
        self.ln_1 = a(h.ln_1.weight), a(h.ln_1.bias)                           # (C,) each
        self.c_attn_w, self.c_attn_b = a(h.attn.c_attn.weight.T), a(h.attn.c_attn.bias)  # (C, 3C)
        self.attn_proj_w, self.attn_proj_b = a(h.attn.c_proj.weight.T), a(h.attn.c_proj.bias)
        self.ln_2 = a(h.ln_2.weight), a(h.ln_2.bias)
        self.c_fc_w, self.c_fc_b = a(h.mlp.c_fc.weight.T), a(h.mlp.c_fc.bias)  # (C, 4C)
        self.mlp_proj_w, self.mlp_proj_b = a(h.mlp.c_proj.weight.T), a(h.mlp.c_proj.bias)
        self.wte = a(big.transformer.wte.weight)                               # (V, C)
        self.head_w = a(big.lm_head.weight.T)                                  # (C, V)
        self.ln_f = a(big.transformer.ln_f.weight), a(big.transformer.ln_f.bias)
        self.n_head, self.window = h.attn.n_head, eagle.window
        self.vocab_size = self.wte.shape[0]
        self.scorer = None
        machine.single_threaded_blas()  # a step of small products: one BLAS thread

    def reset(self):
        self.scorer = None

    def scorer_for(self, target):
        self.scorer = feature_scorer(target, self.fc_b.shape[0], self.ln_f)
        return self.scorer

    def inputs(self, states, tokens):
        """fc of [features (t, C) ; the tokens' embeddings]: (t, C), and their keys and values
        (t, C) each (the queries too)."""
        x = np.concatenate([states, self.wte[tokens]], -1) @ self.fc_w + self.fc_b   # (t, C)
        q, k, v = np.split(layer_norm(x, *self.ln_1) @ self.c_attn_w + self.c_attn_b, 3, -1)
        return x, q, k, v

    def output(self, x, q, keys, values):
        """The block's output (C,) for one input x (C,) with query q (C,), attending over the
        keys and values (W, C) of the window, its own last."""
        C = x.shape[0]
        nh, hs = self.n_head, C // self.n_head
        q = q.reshape(nh, 1, hs)                                          # (nh, 1, hs)
        k = keys.reshape(-1, nh, hs).transpose(1, 2, 0)                   # (nh, hs, W)
        v = values.reshape(-1, nh, hs).transpose(1, 0, 2)                 # (nh, W, hs)
        att = (q @ k) / math.sqrt(hs)                                     # (nh, 1, W)
        att = np.exp(att - att.max(-1, keepdims=True))
        y = (att / att.sum(-1, keepdims=True)) @ v                        # (nh, 1, hs)
        x = x + y.reshape(C) @ self.attn_proj_w + self.attn_proj_b
        m = gelu(layer_norm(x, *self.ln_2) @ self.c_fc_w + self.c_fc_b)   # (4C,)
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
        states = self.scorer.hidden[first - start:pos - start + 1]        # f_first..f_pos (W, C)
        x, q, keys, values = self.inputs(states, seq[first + 1:pos + 2])  # each paired with x_{t+1}
        feature = self.output(x[-1], q[-1], keys, values)                 # f'_{pos+1} (C,)
        guesses, probs = [], []
        for step in range(k):
            logits = feature @ self.head_w                                # (V,)
            if sampling.greedy:
                guesses.append(int(logits.argmax()))
            else:
                probs.append(sampling.warp(logits))
                guesses.append(sampling.draw(probs[-1]))
            if step == k - 1:
                break
            x, q, k_, v = self.inputs(feature[None], [guesses[-1]])       # (1, C) each
            keys = np.concatenate([keys, k_])[-self.window:]              # (W, C)
            values = np.concatenate([values, v])[-self.window:]
            feature = self.output(x[0], q[0], keys, values)
        return guesses, (np.array(probs) if probs else None)              # (k, V) or None
