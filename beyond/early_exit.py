"""
beyond/early_exit.py: self-speculation by early exit. The big model's own first L layers, its
final LayerNorm and its head draft; the whole model checks (LayerSkip, Elhoushi et al. 2024).
EarlyExit(model, L) (`--draft exitL`) shares ONE KV cache with the check; first_layers(model, L)
is an ordinary draft of the first L layers with a cache of its own. How the shared cache works,
and what differs from LayerSkip: docs/DESIGN.md, "beyond/, module by module".

Shapes: T tokens, C channels, V vocabulary, nh heads, hs head size; "rows" count positions from
the start of the current window.
"""

import contextlib

import numpy as np
import torch
import torch.nn as nn

from gpt import GPT, Config
from lessonkit.scorer import common_prefix, windows
from speculative import Drafter, Scorer, as_scorer


def check_exit(n_layer, layers):
    if not 1 <= layers <= n_layer - 1:
        raise ValueError(f"an exit layer is between 1 and {n_layer - 1} for a {n_layer}-layer "
                         f"model, not {layers}")


def first_layers(model, layers):
    """A GPT made of `model`'s embeddings, first `layers` blocks, final LayerNorm and head,
    sharing their weights (nothing is copied)."""
    check_exit(model.c.n_layer, layers)
    config = Config(**{**model.c.__dict__, "n_layer": layers})
    draft = GPT(config)
    draft.transformer = nn.ModuleDict(dict(
        wte=model.transformer.wte, wpe=model.transformer.wpe,
        h=nn.ModuleList(model.transformer.h[:layers]), ln_f=model.transformer.ln_f))
    draft.lm_head = model.lm_head
    return draft.eval()


class EarlyExit(Drafter, Scorer):
    """The drafter: `model`'s first `layers` layers (a gpt.GPT or a fast_numpy.NumpyGPT), its
    final LayerNorm and head. Checked by `model` itself (either backend), it shares its cache."""

    def __init__(self, model, layers):
        check_exit(model.c.n_layer, layers)
        self.model, self.layers, self.vocab_size = model, layers, model.c.vocab_size
        self.reset()

    def reset(self):
        self.scorer = SharedScorer(self.model, self.layers)  # drafting alone, on its own cache

    def scorer_for(self, target):
        """The target's scorer, sharing one cache with the draft: the draft then runs in the
        target's backend. Another model than the draft's checks with a cache of its own."""
        if not same_model(target, self.model):
            return as_scorer(target)
        self.scorer = SharedScorer(target, self.layers)
        return self.scorer

    def propose(self, seq, k, sampling):
        work, probs = list(seq), []
        for _ in range(k):
            logits = self.scorer.exit_logits(work, len(work))[-1]              # (V,)
            if sampling.greedy:
                work.append(int(logits.argmax()))
            else:
                probs.append(sampling.warp(logits))                            # (V,)
                work.append(sampling.draw(probs[-1]))
        return work[len(seq):], (np.array(probs) if probs else None)           # (k, V) or None

    def score(self, seqs, first):
        """The exit's logits (B, T - first + 1, V), as scorer.WindowScorer.score gives a
        model's (measure_agreement reads a drafter that is not a GPT so)."""
        return np.stack([self.scorer.exit_logits(seq, first) for seq in seqs])


def same_model(a, b):
    """Are a and b the same trained model (either backend)? Same shape and embeddings."""
    def embeddings(m):
        if isinstance(m, GPT):
            return [e.weight.detach().cpu().numpy() for e in (m.transformer.wte, m.transformer.wpe)]
        return m.wte, m.wpe                                               # a NumpyGPT
    return a is b or (getattr(a, "c", None) == getattr(b, "c", None) and all(
        np.array_equal(x, y) for x, y in zip(embeddings(a), embeddings(b))))


class SharedScorer(Scorer):
    """One cache for all of a model's layers: exit_logits() drafts, score() checks.

    score(seqs, first) is scorer.WindowScorer's (one sequence): the whole model's logits
    (1, T - first + 1, V) for positions first..T, under the window rule. exit_logits(seq, first)
    gives the exit's (T - first + 1, V) and runs the lower layers only.
    """

    def __init__(self, model, layers):
        self.run = (TorchLayers if isinstance(model, GPT) else NumpyLayers)(model, layers)
        # The cache, in self.run: both groups' keys and values and the lower group's outputs.
        self.vocab_size, self.block_size = model.c.vocab_size, model.c.block_size
        self.fed = []    # the tokens the lower layers have seen, row by row
        self.upper = 0   # how many of them the upper layers have seen
        self.passes = 0  # checks (window segments) made

    def score(self, seqs, first):
        assert len(seqs) == 1, "early exit decodes one sequence at a time"
        return self.logits(seqs[0], first, full=True)[None]

    def exit_logits(self, seq, first):
        return self.logits(seq, first, full=False)

    def logits(self, seq, first, full):
        """The window walk of scorer.WindowScorer over one cache for two groups of layers,
        which keep different lengths (so WindowScorer's one-length rollback cannot serve)."""
        out = []
        with self.run.mode():
            for pos, start, end in windows(first, len(seq), self.block_size):
                end -= start                                    # rows 0..end-1: the window
                row = pos - 1 - start                           # the row that predicts pos
                # A row is right while the window's tokens up to it are the cached ones (after
                # a rejection, or a window jump, which moves every token to another row).
                keep = common_prefix(self.fed, seq, start, min(len(self.fed), end))
                del self.fed[keep:]
                self.upper = min(self.upper, keep)
                self.fed += seq[start + keep:start + end]
                if keep < end:
                    self.run.lower(self.fed[keep:], keep)
                if full:
                    self.upper = min(self.upper, row)           # from the row before pos
                    out.append(self.run.upper(self.upper, end)[row - self.upper:])
                    self.upper = end
                    self.passes += 1
                else:
                    out.append(self.run.exit(row, end))
        return out[0] if len(out) == 1 else np.concatenate(out)


class Layers:
    """A model's layers a few at a time, on one cache: lower(tokens, row) runs layers 0..L-1
    on tokens at rows row.. and keeps their output; upper(row, end) runs layers L..n-1 on the
    kept rows row..end-1 -> logits (T, V); exit(row, end) reads the head off them -> (T, V).
    A backend gives embed(tokens, row) -> (T, C), layers(x, row, lo, hi) -> (T, C), head(x),
    each running the model's own code (no forward pass of its own: a layer range at a time)."""

    def __init__(self, model, layers):
        self.m, self.exit_layer, self.n_layer = model, layers, model.c.n_layer
        self.cache = model.new_cache(1)

    def lower(self, tokens, row):
        x = self.layers(self.embed(tokens, row), row, 0, self.exit_layer)
        self.hidden[row:row + len(tokens)] = x                                # (T, C)

    def upper(self, row, end):
        return self.head(self.layers(self.hidden[row:end], row, self.exit_layer, self.n_layer))

    def exit(self, row, end):
        return self.head(self.hidden[row:end])


class TorchLayers(Layers):
    """For a gpt.GPT: its blocks, each run on the cache from `row` on."""

    mode = torch.inference_mode

    def __init__(self, model, layers):
        super().__init__(model, layers)
        p = model.lm_head.weight
        self.hidden = torch.zeros(model.c.block_size, model.c.n_embd, device=p.device,
                                  dtype=p.dtype)                           # (block, C)

    def embed(self, tokens, row):
        t, device = self.m.transformer, self.hidden.device
        return t.wte(torch.tensor(tokens, device=device)) + \
            t.wpe(torch.arange(row, row + len(tokens), device=device))         # (T, C)

    def layers(self, x, row, lo, hi):
        """x (T, C), layer lo's input at rows row.. -> layer hi - 1's output (T, C)."""
        self.cache.length, x = row, x[None]
        for layer in range(lo, hi):
            x = self.m.transformer.h[layer](x, self.cache, layer)
        return x[0]

    def head(self, x):
        return self.m.lm_head(self.m.transformer.ln_f(x)).float().cpu().numpy()


class NumpyLayers(Layers):
    """For a beyond.fast_numpy.NumpyGPT: its own layer code (block_layers, vector_layers), a layer
    range at a time; one or two tokens on vectors, as NumpyGPT.logits does."""

    mode = contextlib.nullcontext

    def __init__(self, model, layers):
        super().__init__(model, layers)
        self.hidden = np.zeros((model.c.block_size, model.c.n_embd), np.float32)  # (block, C)

    def embed(self, tokens, row):
        return self.m.wte[tokens] + self.m.wpe[row:row + len(tokens)]           # (T, C)

    def head(self, x):
        return self.m.head(x)                                                  # (T, V)

    def layers(self, x, row, lo, hi):
        if len(x) <= 2:  # OpenBLAS multiplies 2 rows slower than 2 vectors one by one
            return np.stack([self.m.vector_layers(v, row + i, self.cache, lo, hi)
                             for i, v in enumerate(x)])
        return self.m.block_layers(x[None], row, self.cache, lo, hi)[0]
