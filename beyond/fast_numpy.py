"""
beyond/fast_numpy.py: the forward pass of gpt.GPT in plain NumPy, folded for speed, with the same
KV cache interface. NumpyGPT(model) copies a trained gpt.GPT and decodes like it (torch in and
out, logits equal to float32 rounding): every NumPy forward pass of the library lives here (the
student repository leaves this file out). Why a second implementation, and the exact rewrites it
makes: docs/DESIGN.md, "beyond/, module by module".

Shapes: B batch, T time, C channels, V vocabulary, nh heads, hs head size, L cached length.
"""

import math

import numpy as np
import torch

from gpt import KVCache
from lessonkit import machine

EPS = 1e-5  # nn.LayerNorm's default


def normalise(x):
    """LayerNorm without its gain and bias (those are folded into the next layer)."""
    centred = x - x.sum(-1, keepdims=True) * (1.0 / x.shape[-1])
    return centred / np.sqrt((centred * centred).sum(-1, keepdims=True) * (1.0 / x.shape[-1]) + EPS)


def normalise_vector(x):
    """normalise() for one vector, with its mean and variance as Python floats (fewer calls)."""
    centred = x - x.sum() * (1.0 / x.shape[0])
    return centred * (1.0 / math.sqrt(float(centred @ centred) * (1.0 / x.shape[0]) + EPS))


def linear(x, w, b):
    """x (N, in) @ w + b. OpenBLAS multiplies 2 or 3 rows more slowly than 4, and more slowly
    than as many single rows (measured on the big model's 128 x 512 weights): those go one row
    at a time, which makes a check of k = 1 or 2 guesses cheaper
    (python -m studies.forwards times both ways)."""
    if 1 < len(x) < 4:
        return np.stack([row @ w for row in x]) + b
    return x @ w + b


def twice_gelu(x):
    """2 * GELU(x), GPT-2's tanh approximation; the 0.5 lives in the next layer's weights.
    x * x * x, not x ** 3: NumPy's float32 power is twenty times slower."""
    return x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


class NumpyCache(KVCache):
    """gpt.KVCache over NumPy arrays, k and v (n_layer, B, nh, S, hs)."""

    def append(self, layer, k, v, start):
        """Write layer's keys and values k, v (B, nh, T, hs) at slots start..; return every key up
        to them, transposed (B, nh, hs, end), and every value (B, nh, end, hs)."""
        end = start + k.shape[2]
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        return self.k[layer, :, :, :end].transpose(0, 1, 3, 2), self.v[layer, :, :, :end]


class RaggedCache(KVCache):
    """beyond/batched.py's cache for B rows of their own lengths: S = block_size + 1 slots a row
    (the last takes the padding's keys and values, never attended to), the keys stored
    transposed, (n_layer, B, nh, hs, S), so that queries @ keys needs no copy. A pass's rows (sel:
    the same as a slice where they are consecutive), the slot each new token's keys go to
    (write (R, T)) and the slots attended (E) are set before it (place)."""

    def place(self, rows, sel, write, E):
        self.r, self.sel, self.write, self.E = rows[:, None], sel, write, E

    def append(self, layer, k, v, start):                           # k, v (R, nh, T, hs)
        self.k[layer][self.r, :, :, self.write] = k.transpose(0, 2, 1, 3)  # slot by slot
        self.v[layer][self.r, :, self.write] = v.transpose(0, 2, 1, 3)
        return self.k[layer][self.sel, ..., :self.E], self.v[layer][self.sel, :, :self.E]


class NumpyGPT:

    def __init__(self, model):
        machine.single_threaded_blas()
        self.c = c = model.c
        self.hs = c.n_embd // c.n_head
        w = {name: t.detach().cpu().double().numpy() for name, t in model.state_dict().items()}

        def after_norm(norm, weight, bias=None):
            """LayerNorm `norm` folded into the linear layer after it: (W', b'), y = n W' + b'."""
            W = w[weight].T                                      # (in, out)
            b = w[bias] if bias else 0.0
            return w[norm + ".weight"][:, None] * W, w[norm + ".bias"] @ W + b

        f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
        self.wte = f32(w["transformer.wte.weight"])                # (V, C)
        self.wpe = f32(w["transformer.wpe.weight"])                # (block_size, C)
        self.layers = []
        for i in range(c.n_layer):
            h = f"transformer.h.{i}."
            attn_w, attn_b = after_norm(h + "ln_1", h + "attn.c_attn.weight",
                                        h + "attn.c_attn.bias")
            attn_w[:, :c.n_embd] /= math.sqrt(self.hs)           # queries pre-scaled
            attn_b[:c.n_embd] /= math.sqrt(self.hs)
            fc_w, fc_b = after_norm(h + "ln_2", h + "mlp.c_fc.weight", h + "mlp.c_fc.bias")
            self.layers.append(dict(
                attn_w=f32(attn_w), attn_b=f32(attn_b),                        # (C, 3C), (3C,)
                proj_w=f32(w[h + "attn.c_proj.weight"].T), proj_b=f32(w[h + "attn.c_proj.bias"]),
                fc_w=f32(fc_w), fc_b=f32(fc_b),                                # (C, 4C), (4C,)
                mlp_w=f32(0.5 * w[h + "mlp.c_proj.weight"].T), mlp_b=f32(w[h + "mlp.c_proj.bias"]),
            ))
        head_w, head_b = after_norm("transformer.ln_f", "lm_head.weight")
        self.head_w, self.head_b = f32(head_w), f32(head_b)       # (C, V), (V,)
        block = c.block_size
        self.mask = f32(np.triu(np.full((block, block), -np.inf), k=1))  # -inf: the future

    def new_cache(self, batch_size=1):
        c = self.c
        shape = (c.n_layer, batch_size, c.n_head, c.block_size, self.hs)
        return NumpyCache(np.zeros(shape, np.float32), np.zeros(shape, np.float32))

    def logits(self, idx, cache):
        """idx (B, T) int array continuing cache -> logits (B, T, V) as a float32 array."""
        B, T = idx.shape
        start, end = cache.length, cache.length + T
        if end > self.c.block_size:
            raise ValueError(f"{end} tokens do not fit the model's window of {self.c.block_size}")
        if B == 1 and T <= 2:  # one sequence: on vectors (OpenBLAS is slower on 2-row products)
            logits = np.stack([self.step(int(token), start + i, cache)
                               for i, token in enumerate(idx[0])])[None]
        else:
            logits = self.forward_block(idx, start, cache)
        cache.length = end
        return logits

    def forward_block(self, idx, start, cache):
        """idx (B, T) at positions start.. -> logits (B, T, V)."""
        x = self.wte[idx] + self.wpe[start:start + idx.shape[1]]    # (B, T, C)
        return normalise(self.block_layers(x, start, cache)) @ self.head_w + self.head_b

    def block_layers(self, x, start, cache, lo=0, hi=None, mask=None):
        """Layers lo..hi-1 on x (B, T, C), the input of layer lo at positions start..: their
        keys and values go into the cache (cache.append); returns the output of layer hi - 1
        (B, T, C). mask: added to the scores in place of the causal mask (0 where a new token
        may attend, -inf elsewhere; (T, L) or (B, 1, T, L)): a tree's, or a batch's rows'."""
        B, T, C = x.shape
        end, nh, hs = start + T, self.c.n_head, self.hs
        mask = self.mask[start:end, :end] if mask is None else mask   # token start+i sees ..start+i
        x = x.reshape(B * T, C)          # the linear layers: one product for every row's tokens
        for layer in range(lo, self.c.n_layer if hi is None else hi):
            w = self.layers[layer]
            qkv = linear(normalise(x), w["attn_w"], w["attn_b"])     # (B T, 3C)
            q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(B, T, nh, hs).transpose(0, 2, 1, 3)
                       for i in range(3))                            # 3 x (B, nh, T, hs)
            keys, values = cache.append(layer, k, v, start)          # (B, nh, hs|L, L|hs)
            att = q @ keys                                           # (B, nh, T, L)
            att += mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            y = att @ values                                         # (B, nh, T, hs)
            x = x + linear(y.transpose(0, 2, 1, 3).reshape(B * T, C), w["proj_w"], w["proj_b"])
            u = linear(normalise(x), w["fc_w"], w["fc_b"])           # (B T, 4C)
            x = x + linear(twice_gelu(u), w["mlp_w"], w["mlp_b"])
        return x.reshape(B, T, C)

    def step(self, token, pos, cache):
        """forward_block for one token of one sequence, on vectors: -> logits (V,)."""
        return self.head(self.vector_layers(self.wte[token] + self.wpe[pos], pos, cache)[None])[0]

    def vector_layers(self, x, pos, cache, lo=0, hi=None):
        """block_layers for one token of sequence 0 at position pos, x (C,) -> (C,)."""
        nh, hs, C = self.c.n_head, self.hs, self.c.n_embd
        for layer in range(lo, self.c.n_layer if hi is None else hi):
            w = self.layers[layer]
            qkv = normalise_vector(x) @ w["attn_w"] + w["attn_b"]    # (3C,)
            cache.k[layer, 0, :, pos] = qkv[C:2 * C].reshape(nh, hs)
            cache.v[layer, 0, :, pos] = qkv[2 * C:].reshape(nh, hs)
            keys = cache.k[layer, 0, :, :pos + 1]                    # (nh, L, hs)
            att = (keys @ qkv[:C].reshape(nh, hs, 1))[:, :, 0]        # (nh, L)
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            y = (att[:, None, :] @ cache.v[layer, 0, :, :pos + 1]).reshape(C)  # (C,)
            x = x + y @ w["proj_w"] + w["proj_b"]
            u = normalise_vector(x) @ w["fc_w"] + w["fc_b"]          # (4C,)
            x = x + twice_gelu(u) @ w["mlp_w"] + w["mlp_b"]
        return x

    def head(self, x):
        """Final hidden states x (T, C) -> logits (T, V): ln_f (folded into the head) and the
        head; one row on a vector, as step() does."""
        if len(x) == 1:
            return (normalise_vector(x[0]) @ self.head_w + self.head_b)[None]     # (1, V)
        return normalise(x) @ self.head_w + self.head_b                          # (T, V)

    # Final hidden states (T, C) -> ln_f without its gain and bias (the head holds them).
    normalised = staticmethod(normalise)

    def ragged_cache(self, batch_size):
        """beyond/batched.py's cache for B rows of their own lengths (RaggedCache)."""
        c = self.c
        shape = (c.n_layer, batch_size, c.n_head, c.block_size + 1, self.hs)
        return RaggedCache(np.zeros(shape[:3] + shape[:2:-1], np.float32),
                           np.zeros(shape, np.float32))

    def forward_rows(self, cache, rows, sel, tokens, slots, write, visible):
        """Rows of different lengths in one pass (beyond/batched.py's layout) -> logits (R, T, V).
        rows (R,): the cache rows (sel: the same as a slice where they are consecutive); tokens
        (R, T), right-padded; slots (R, T): each token's position in its window; write (R, T):
        the slot its keys go to (padding: the spare one); visible (R, T, E): may the token
        attend to slot j? The linear layers see all R x T tokens as one matrix."""
        cache.place(rows, sel, write, visible.shape[-1])
        mask = np.where(visible, np.float32(0), np.float32(-np.inf))[:, None]    # (R, 1, T, E)
        R, T = tokens.shape
        x = self.block_layers(self.wte[tokens] + self.wpe[slots], 0, cache, mask=mask)  # (R,T,C)
        return linear(normalise(x.reshape(R * T, -1)), self.head_w, self.head_b).reshape(R, T, -1)

    def __call__(self, idx, targets=None, cache=None):
        """Torch in, torch out, like gpt.GPT (no loss: this class only decodes)."""
        if cache is None:
            cache = self.new_cache(idx.shape[0])
        return torch.from_numpy(self.logits(idx.cpu().numpy(), cache)), None
