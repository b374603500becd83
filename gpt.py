"""
gpt.py: a tiny character-level GPT, its data, its training loop and its checkpoints.

GPT-2 (Radford et al., 2019) in miniature with GPT-2's parameter names (wte, wpe, h[i].ln_1,
attn.c_attn, ...), following nanoGPT's model.py (Karpathy). Changes from nanoGPT: logits at every
position (a verification pass scores k+1 at once); a KV cache extended by several tokens in one
call and rolled back to any length; two corpora with one vocabulary, loaded lazily (importing
this file reads and trains nothing); atomic checkpoints; the lesson's recipe in one screen (the
presets' loop is beyond/training.py's). Shapes: B batch, T time, C channels (n_embd), V
vocabulary, nh heads, hs head size.
"""

import math
import time
from dataclasses import dataclass, fields, replace

import torch
import torch.nn as nn
from torch.nn import functional as F

from lessonkit import corpus, machine, waiting
from lessonkit.checkpoint import CheckpointError, export_npz, load_model, save_checkpoint  # noqa: F401
from lessonkit.corpus import decode, encode, get_batch, split_source, vocab  # noqa: F401 (lesson API)

# ----------------------------------------------------------------------------------------------
# Configuration


@dataclass
class Config:
    """The model's shape. Config() is the lesson's big model (4 x 128, about 0.8M parameters)."""
    block_size: int = 128   # context window in characters: the most the model sees at once
    vocab_size: int = 0     # 0: the corpus' vocabulary (63 characters), read by GPT(config)
    n_layer: int = 4        # transformer blocks
    n_head: int = 4         # attention heads (n_embd must be a multiple)
    n_embd: int = 128       # width: channels of every token's vector
    dropout: float = 0.0    # dropout probability while training

    def __post_init__(self):  # reads nothing: the vocabulary is filled in by fill_vocab()
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")

    def fill_vocab(self):
        """vocab_size 0 becomes the corpus' vocabulary (prepared on first use); returns self."""
        if self.vocab_size == 0:
            self.vocab_size = len(vocab())
        return self


# ----------------------------------------------------------------------------------------------
# The model


class KVCache:
    """Every layer's keys and values for the tokens seen so far, preallocated to block_size.

    k, v: (n_layer, B, nh, block_size, hs), torch tensors (or NumPy arrays, for the fast NumPy
    forward in beyond/fast_numpy.py). `length` tokens are cached. A forward pass with the cache
    appends its T tokens (positions length .. length+T-1) and attends to everything before
    them; `rollback(n)` forgets all but the first n: that is how rejected guesses go.
    """

    def __init__(self, k, v):
        self.k, self.v, self.length = k, v, 0

    def rollback(self, length):
        assert 0 <= length <= self.length, f"cannot roll back to {length} of {self.length} tokens"
        self.length = length

    def append(self, layer, k, v):
        """Write layer's keys and values of T new tokens, k and v (B, nh, T, hs), after the
        cached ones; return every cached key and value, the new included (B, nh, length + T, hs)."""
        start, T = self.length, k.shape[2]
        self.k[layer].narrow(2, start, T).copy_(k)
        self.v[layer].narrow(2, start, T).copy_(v)
        end = start + T
        return self.k[layer].narrow(2, 0, end), self.v[layer].narrow(2, 0, end)


class CausalSelfAttention(nn.Module):

    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)  # query, key, value for all heads
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.dropout = c.dropout
        # mask[i, j]: may position i attend to position j? Sliced when a cache is in use.
        self.register_buffer("mask", torch.ones(c.block_size, c.block_size).tril().bool(),
                             persistent=False)

    def forward(self, x, cache=None, layer=0, mask=None):
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)      # 3 x (B, T, C)
        q = q.view(B, T, nh, hs).transpose(1, 2)      # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)      # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)      # (B, nh, T, hs)
        if cache is None:
            causal = mask is None
        else:
            # Append the new keys and values, then attend over the whole cached prefix.
            start, end = cache.length, cache.length + T
            k, v = cache.append(layer, k, v)          # 2 x (B, nh, end, hs)
            # New token i sits at position start+i and sees positions 0..start+i, unless the
            # caller says what each new token may see (a tree of guesses: mask (T, end)).
            if mask is None and T > 1:
                mask = self.mask[start:end, :end]
            causal = False
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           dropout_p=dropout)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)       # (B, T, C)
        y = self.c_proj(y)
        return F.dropout(y, dropout, self.training) if dropout else y


class MLP(nn.Module):

    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)
        self.dropout = c.dropout

    def forward(self, x):
        x = F.gelu(self.c_fc(x), approximate="tanh")  # (B, T, 4C), GPT-2's GELU
        x = self.c_proj(x)
        return F.dropout(x, self.dropout, self.training) if self.dropout and self.training else x


class Block(nn.Module):

    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = MLP(c)

    def forward(self, x, cache=None, layer=0, mask=None):
        x = x + self.attn(self.ln_1(x), cache, layer, mask)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):

    def __init__(self, config=None):
        super().__init__()
        self.c = c = (config if config is not None else Config()).fill_vocab()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd),
            wpe=nn.Embedding(c.block_size, c.n_embd),
            h=nn.ModuleList(Block(c) for _ in range(c.n_layer)),
            ln_f=nn.LayerNorm(c.n_embd),
        ))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def new_cache(self, batch_size=1):
        c, p = self.c, self.lm_head.weight
        shape = (c.n_layer, batch_size, c.n_head, c.block_size, c.n_embd // c.n_head)
        return KVCache(torch.zeros(shape, device=p.device, dtype=p.dtype),
                       torch.zeros(shape, device=p.device, dtype=p.dtype))

    @torch.inference_mode()
    def logits(self, new, cache):
        """new tokens (B, t), a NumPy array, continuing the cache -> logits (B, t, V), NumPy: what
        scorer.WindowScorer asks of every model (beyond/fast_numpy.py's NumpyGPT too)."""
        idx = torch.from_numpy(new).to(self.lm_head.weight.device)
        return self(idx, cache=cache)[0].float().cpu().numpy()

    def forward(self, idx, targets=None, cache=None, positions=None, mask=None):
        """idx (B, T) -> (logits (B, T, V), loss or None). With a cache, idx continues it.
        positions (T,) and mask (T, cached + T), where given, replace each new token's position
        (cache.length + i) and causal mask: what a tree of guesses needs (beyond/tree.py)."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if positions is None and start + T > self.c.block_size:
            raise ValueError(
                f"{start + T} tokens do not fit the model's window of {self.c.block_size}; "
                f"keep the last {self.c.block_size} (idx[:, -{self.c.block_size}:]) or decode "
                f"with speculative.generate, which handles long contexts")
        pos = torch.arange(start, start + T, device=idx.device) if positions is None \
            else positions                                         # (T,)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C)
        for layer, block in enumerate(self.transformer.h):
            x = block(x, cache, layer, mask)                       # (B, T, C)
        logits = self.lm_head(self.transformer.ln_f(x))            # (B, T, V)
        if cache is not None:
            cache.length += T
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss


@torch.no_grad()
def recompute_generate(model, idx, max_new_tokens):
    """The lesson's first loop: no cache, the whole (cropped) context through the model per
    token, greedy (speculative.generate is the one with a KV cache)."""
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.c.block_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


# ----------------------------------------------------------------------------------------------
# Data (lessonkit/corpus.py): one vocabulary for both corpora, read on first use


def __getattr__(name):
    """train_data, val_data (90/10 split of Shakespeare) and names_data, read on first use."""
    if name in corpus.TENSORS:
        return getattr(corpus, name)
    raise AttributeError(f"module 'gpt' has no attribute {name!r}")


# ----------------------------------------------------------------------------------------------
# Training


@dataclass
class TrainConfig:
    """How to train: the lesson's recipe, AdamW in float32. The defaults, chosen by measurement,
    train Config() in minutes on a CPU (the loss, and why a batch of 20: docs/RESULTS.md,
    "The models"). beyond/training.py's Recipe, what the presets train with, adds to it."""
    steps: int = 1500          # optimizer steps
    batch_size: int = 20       # sequences per step (20 x 128 characters; more: lower loss, slower)
    lr: float = 4e-3           # AdamW's peak learning rate, after a linear warm-up
    min_lr: float = 4e-4       # cosine decay ends at this learning rate
    warmup_steps: int = 50     # linear warm-up steps
    weight_decay: float = 0.1  # AdamW weight decay (matrices only)
    grad_clip: float = 1.0     # clip the gradient norm to this
    eval_every: int = 250      # validation loss every this many steps (and at the end)
    eval_batches: int = 16     # batches per validation
    seed: int = 1337           # seed for initialisation and batches
    threads: int = 0           # torch threads; 0: all cores, or 1 if the machine is busy


def adamw(named_parameters, tc, device):
    """AdamW for (name, parameter) pairs, weight decay for matrices only; fused: every parameter
    updated in one kernel (CPU and CUDA), not a loop over them."""
    params = [p for _, p in named_parameters]
    return torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": tc.weight_decay},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=tc.lr, betas=(0.9, 0.99), fused=torch.device(device).type in ("cpu", "cuda"))


def learning_rate(step, tc):
    """Linear warm-up to tc.lr, then cosine decay to tc.min_lr at the last step."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    progress = (step - tc.warmup_steps) / max(1, tc.steps - tc.warmup_steps)
    return tc.min_lr + 0.5 * (tc.lr - tc.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


@torch.no_grad()
def estimate_loss(model, source, tc, device):
    """Mean loss over tc.eval_batches fixed windows of `source` (the same windows every time)."""
    was_training = model.training
    model.eval()
    g = torch.Generator().manual_seed(tc.seed + 1)
    block = min(model.c.block_size, len(source) - 1)  # a held-out part may be short
    losses = [model(*get_batch("val", source, batch_size=tc.batch_size, block_size=block,
                                generator=g, device=device))[1].item()
              for _ in range(tc.eval_batches)]
    model.train(was_training)
    return sum(losses) / len(losses)


def train(model, steps=None, log_every=100, source=None, *, config=None, progress=False):
    """Train `model` in place, where it is (CPU or GPU), with AdamW and learning_rate; return it.

    steps: None for the config's (a TrainConfig); source: a 1-D LongTensor to train on instead
    of the Shakespeare train split (its last tenth held out for validation); log_every=0 prints
    nothing; progress: one line redrawn in place (a bar, or one output in a notebook). The last
    validation loss is model.val_loss. The presets train with beyond/training.py's loop, which
    adds checkpoints, resuming, Muon, bfloat16 and distillation to this one.
    """
    tc = replace(config or TrainConfig(), **({} if steps is None else {"steps": steps}))
    train_source, val_source = (corpus.train_data, corpus.val_data) if source is None \
        else split_source(source)
    device = model.lm_head.weight.device
    optimizer = adamw(model.named_parameters(), tc, device)
    generator = torch.Generator().manual_seed(tc.seed)
    bar = waiting.ProgressLine(tc.steps) if progress else None
    val_loss, started = float("nan"), time.time()
    model.train()
    with machine.threads(tc.threads or machine.training_threads()):
        for step in range(1, tc.steps + 1):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step - 1, tc)
            x, y = get_batch("train", train_source, batch_size=tc.batch_size,
                             block_size=model.c.block_size, generator=generator, device=device)
            _, loss = model(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            optimizer.step()
            if step % tc.eval_every == 0 or step == tc.steps:
                val_loss = estimate_loss(model, val_source, tc, device)
            if bar:
                bar.update(step, progress_line(step, loss.item(), val_loss, time.time() - started))
            elif log_every and (step % log_every == 0 or step == tc.steps):
                print(progress_line(step, loss.item(), val_loss, time.time() - started))
    if bar:
        bar.close()
    model.eval()
    model.val_loss, model.step = val_loss, tc.steps
    return model


def progress_line(step, loss, val_loss, seconds):
    """A training step's line; no validation loss before the first evaluation (never "nan")."""
    val = "  -   " if math.isnan(val_loss) else f"{val_loss:.4f}"
    return f"step {step:5d} | loss {loss:.4f} | val {val} | {seconds:.0f}s"


# ----------------------------------------------------------------------------------------------
# Checkpoints (lessonkit/checkpoint.py: the file, written atomically, read with weights_only=True)


def load_checkpoint(path, device="cpu", hint=None):
    """-> (model in eval mode, the checkpoint dictionary). hint: how to make a missing one."""
    return load_model(path, lambda state: GPT(Config(**{
        f.name: state["config"][f.name] for f in fields(Config)})), device, hint)
