"""
numpy_gpt.py: the forward pass of gpt.GPT in plain NumPy, with the same KV cache interface.

Why a second implementation? A tiny model's decoding step does little arithmetic: on a laptop
CPU most of a 1-token torch step is framework overhead (dispatch, autograd bookkeeping, small
allocations). NumPy has less of it, so the same weights decode several times faster, and
speculative decoding's draft gets cheap enough to pay for itself. It also shows, in 60 lines,
everything a GPT forward pass does (picoGPT, by Jay Mody, does the same for GPT-2).

NumpyGPT(model) copies a trained gpt.GPT's weights (same GPT-2 names) and behaves like it where
decoding looks: `c`, `new_cache(batch_size)` and `model(idx, cache=cache) -> (logits, None)`
with torch tensors in and out, so speculative.generate and speculative_generate take it as a
target or a draft. Its logits equal the torch model's to float32 rounding (tested).

Shapes: B batch, T time, C channels, V vocabulary, nh heads, hs head size, L cached length.
"""

import numpy as np
import torch


class NumpyCache:
    """Keys and values per layer, preallocated to block_size; see gpt.KVCache."""

    def __init__(self, c, batch_size):
        hs = c.n_embd // c.n_head
        self.k = np.zeros((c.n_layer, batch_size, c.n_head, c.block_size, hs), np.float32)
        self.v = np.zeros_like(self.k)
        self.length = 0

    def rollback(self, length):
        assert 0 <= length <= self.length, f"cannot roll back to {length} of {self.length} tokens"
        self.length = length


def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):  # GPT-2's tanh approximation, as in gpt.MLP
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


class NumpyGPT:

    def __init__(self, model):
        self.c = model.c
        w = {name: t.detach().cpu().float().numpy() for name, t in model.state_dict().items()}
        self.wte, self.wpe = w["transformer.wte.weight"], w["transformer.wpe.weight"]  # (V, C), (block, C)
        self.ln_f = (w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
        self.head = np.ascontiguousarray(w["lm_head.weight"].T)                     # (C, V)
        self.layers = []
        for i in range(self.c.n_layer):
            p = f"transformer.h.{i}."
            self.layers.append(dict(  # linear weights transposed once, so that y = x @ W + b
                ln_1=(w[p + "ln_1.weight"], w[p + "ln_1.bias"]),
                c_attn=(np.ascontiguousarray(w[p + "attn.c_attn.weight"].T), w[p + "attn.c_attn.bias"]),
                c_proj=(np.ascontiguousarray(w[p + "attn.c_proj.weight"].T), w[p + "attn.c_proj.bias"]),
                ln_2=(w[p + "ln_2.weight"], w[p + "ln_2.bias"]),
                c_fc=(np.ascontiguousarray(w[p + "mlp.c_fc.weight"].T), w[p + "mlp.c_fc.bias"]),
                mlp_proj=(np.ascontiguousarray(w[p + "mlp.c_proj.weight"].T), w[p + "mlp.c_proj.bias"]),
            ))

    def new_cache(self, batch_size=1):
        return NumpyCache(self.c, batch_size)

    def forward(self, idx, cache):
        """idx (B, T) int array continuing cache -> logits (B, T, V) as a float32 array."""
        B, T = idx.shape
        nh, C = self.c.n_head, self.c.n_embd
        hs = C // nh
        start, end = cache.length, cache.length + T
        if end > self.c.block_size:
            raise ValueError(f"{end} tokens do not fit the model's window of {self.c.block_size}")
        x = self.wte[idx] + self.wpe[start:end]                       # (B, T, C)
        # New token i (at position start+i) may look at positions 0..start+i.
        future = np.triu(np.ones((T, end), bool), k=start + 1)        # (T, L): True = hidden
        for layer, w in enumerate(self.layers):
            h = layer_norm(x, *w["ln_1"])
            qkv = h @ w["c_attn"][0] + w["c_attn"][1]                   # (B, T, 3C)
            q, k, v = (a.reshape(B, T, nh, hs).transpose(0, 2, 1, 3)    # 3 x (B, nh, T, hs)
                       for a in np.split(qkv, 3, axis=-1))
            cache.k[layer, :, :, start:end] = k
            cache.v[layer, :, :, start:end] = v
            keys, values = cache.k[layer, :, :, :end], cache.v[layer, :, :, :end]  # (B, nh, L, hs)
            att = q @ keys.transpose(0, 1, 3, 2) / np.sqrt(hs)          # (B, nh, T, L)
            att = np.where(future, -np.inf, att) if T > 1 else att
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            y = (att @ values).transpose(0, 2, 1, 3).reshape(B, T, C)   # (B, T, C)
            x = x + y @ w["c_proj"][0] + w["c_proj"][1]
            h = layer_norm(x, *w["ln_2"])
            x = x + gelu(h @ w["c_fc"][0] + w["c_fc"][1]) @ w["mlp_proj"][0] + w["mlp_proj"][1]
        cache.length = end
        return layer_norm(x, *self.ln_f) @ self.head                  # (B, T, V)

    def __call__(self, idx, targets=None, cache=None):
        """Torch in, torch out, like gpt.GPT (no loss: this class only decodes)."""
        if cache is None:
            cache = self.new_cache(idx.shape[0])
        return torch.from_numpy(self.forward(idx.cpu().numpy(), cache)), None
