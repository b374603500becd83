"""
training.py: what the presets train with beyond the lesson's recipe (gpt.train, AdamW in
float32): Muon for the blocks' weight matrices, matrix products in bfloat16 where the processor
has them, and torch.compile. gpt.train's loop runs it unchanged: a Recipe is a gpt.TrainConfig
that gives other optimizers, their schedule's peaks and another loss function.

    from training import Recipe
    gpt.train(model, config=Recipe(optimizer="muon", steps=600))   # the big preset's recipe

References: K. Jordan et al. (2024), "Muon: an optimizer for hidden layers in neural networks";
torch.autocast (mixed precision) and torch.compile, as the PyTorch documentation describes
them. Measured here (docs/RESULTS.md, "The models"): with Muon the big model reaches AdamW's
loss in well under half the steps; bfloat16 products make a step faster on a CPU that has them
natively (elsewhere training stays in float32); compiling made the first steps slow and the
rest no faster on that CPU, so it is off unless asked for.
"""

import contextlib
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import gpt


@dataclass
class Recipe(gpt.TrainConfig):
    """gpt.TrainConfig's settings and these: the optimizer, Muon's peak learning rate, the
    precision of the matrix products and whether to compile. The defaults are the lesson's
    recipe (AdamW), in bfloat16 where that is faster (see speedups)."""
    optimizer: str = "adamw"   # adamw (all), or muon (the blocks' matrices; AdamW the rest)
    muon_lr: float = 0.02      # Muon's peak learning rate (warmed up and decayed alike)
    precision: str = "auto"    # auto (bfloat16 where the processor has it, else float32), bfloat16 or float32
    compile: bool = False      # torch.compile the model (off by default: it does not pay here)

    def __post_init__(self):
        if self.optimizer not in ("muon", "adamw"):
            raise ValueError(f"optimizer must be muon or adamw, not {self.optimizer!r}")
        if self.precision not in ("auto", "bfloat16", "float32"):
            raise ValueError(f"precision must be auto, bfloat16 or float32, not "
                             f"{self.precision!r}")

    def optimizers(self, model, device):
        """"muon": Muon for the blocks' weight matrices and AdamW for the rest (the embeddings,
        the head tied to them, the layer norms, the biases); "adamw": AdamW for everything."""
        named = list(model.named_parameters())
        hidden = [p for n, p in named if self.optimizer == "muon" and p.dim() == 2
                  and n.startswith("transformer.h.")]
        rest = [(n, p) for n, p in named if id(p) not in set(map(id, hidden))]
        return [gpt.adamw(rest, self, device)] + \
            ([Muon(hidden, lr=self.muon_lr, weight_decay=self.weight_decay)] if hidden else [])

    def peak_lr(self, optimizer):
        return self.muon_lr if isinstance(optimizer, Muon) else None

    def loss_function(self, model, device, teacher, resume, note):
        """gpt.loss_of under autocast (bfloat16) and torch.compile where they are on (see
        speedups; a resumed run keeps the precision it started in, like its threads)."""
        precision = resume["precision"] if resume is not None and self.precision == "auto" \
            else self.precision
        autocast, compiled, notes = speedups(self, device, precision, model.c.n_embd)
        for line in notes:
            note(line)
        forward = torch.compile(model) if compiled else model
        # In bfloat16 the plain attention (two matrix products and a softmax) trains faster on
        # a CPU than the fused kernel, whose backward pass took half of a step (docs/RESULTS.md,
        # "The models").
        plain = autocast is not None and device.type == "cpu"

        def loss(x, y):
            with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None), \
                    (sdpa_kernel(SDPBackend.MATH) if plain else contextlib.nullcontext()):
                return gpt.loss_of(forward, x, y, teacher)

        def loss_or_uncompiled(x, y):
            nonlocal forward
            try:
                return loss(x, y)
            except Exception as e:  # a compiler that fails on its first step: run without
                if forward is model:
                    raise
                forward, why = model, (str(e).strip().splitlines() or [""])[0][:80]
                note(f"torch.compile is off: it failed ({type(e).__name__}: {why}); "
                     f"training without it (the same model)")
                return loss(x, y)
        return loss_or_uncompiled, {"precision": "bfloat16" if autocast else "float32"}


# ----------------------------------------------------------------------------------------------
# Muon


class Muon(torch.optim.Optimizer):
    """Muon: momentum whose step for each weight matrix is orthogonalised, its singular values
    pushed to about 1, so that every direction of the matrix learns at the same rate. For the
    hidden layers' 2-D weights only (Recipe.optimizers). Here the big model reaches AdamW's loss
    in well under half the steps, but the small drafts, trained as briefly, end worse
    (docs/RESULTS.md, "The models"): the big preset trains with it (presets.py), Recipe's
    default stays AdamW (--optimizer muon).

    Changes from torch.optim.Muon, which it follows otherwise (its Nesterov momentum, the
    quintic's coefficients, the rate scaled by sqrt(max(1, rows / columns)), decoupled weight
    decay): the iteration runs in float32. torch's runs in bfloat16, which a CPU without native
    bfloat16 emulates, slowly.
    """

    def __init__(self, params, lr=0.02, weight_decay=0.1, momentum=0.95):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                average = state["momentum_buffer"].lerp_(p.grad, 1 - momentum)  # of gradients
                update = orthogonalise(p.grad.lerp(average, momentum))  # Nesterov: a look ahead
                rows, columns = p.shape
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update, alpha=-lr * max(1.0, rows / columns) ** 0.5)


def orthogonalise(matrix, steps=5, eps=1e-7):
    """About U V^T for matrix = U S V^T, without an SVD: `steps` iterations of Muon's quintic
    X <- a X + b (X X^T) X + c (X X^T)^2 X, whose coefficients push every singular value into
    about 0.7-1.2 as fast as they can (not exactly to 1: that would take more steps)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = matrix.shape[0] > matrix.shape[1]
    x = matrix.T if tall else matrix                       # (short, long): a small X X^T
    x = x / x.norm().clamp(min=eps)                        # every singular value <= 1
    for _ in range(steps):
        gram = x @ x.T                                     # (short, short)
        x = a * x + (b * gram + c * gram @ gram) @ x       # (short, long)
    return x.T if tall else x


# ----------------------------------------------------------------------------------------------
# bfloat16 and torch.compile: where each is on


def native_bfloat16(device):
    """Does `device` multiply bfloat16 matrices natively? Elsewhere autocast converts in software
    and trains slower, not faster. (On x86, torch.cpu's private checks for AVX512-BF16 and AMX.)"""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return device.type == "cpu" and any(getattr(torch.cpu, c, lambda: False)() for c in checks)


def compiler_missing(device):
    """Why torch.compile cannot run on `device` here, in a few words; None if it can."""
    if not torch._dynamo.is_dynamo_supported():
        return f"torch {torch.__version__} cannot compile on Python {sys.version.split()[0]}"
    if torch.device(device).type == "cpu" and not any(
            shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++")):
        return "no C++ compiler (g++ or clang++) on PATH"
    if torch.device(device).type == "cuda" and importlib.util.find_spec("triton") is None:
        return "Triton is not installed"
    return None


# Narrower models train faster in float32: converting their small matrices to bfloat16 and back
# costs more than the products save (measured: the 1 x 32 draft's step took longer in bfloat16,
# the 1 x 128 distilled draft's less).
BFLOAT16_MIN_WIDTH = 128


def speedups(tc, device, precision=None, width=BFLOAT16_MIN_WIDTH):
    """The levers a Recipe pulls on `device`: (autocast dtype or None, compile: bool, notes), a
    note being one line for each lever asked for or meant to be on that is off, and why.

    bfloat16 autocast runs the matrix products in bfloat16 and keeps the weights, the optimizer,
    the softmax and the loss in float32 (validation too); "auto" uses it where the processor has
    it and the model is `width` (n_embd) >= BFLOAT16_MIN_WIDTH. precision: tc.precision unless
    given."""
    precision = precision or tc.precision
    notes = []
    wanted = precision == "auto" and width >= BFLOAT16_MIN_WIDTH
    native = wanted and native_bfloat16(device)
    bf16 = precision == "bfloat16" or native
    if wanted and not native:
        notes.append(f"training in float32: {torch.device(device).type} has no native bfloat16 "
                     f"here, and autocast would convert in software (slower, not faster)")
    why = compiler_missing(device) if tc.compile else None
    if why:
        notes.append(f"torch.compile is off: {why}; training without it (the same model)")
    return (torch.bfloat16 if bf16 else None), tc.compile and not why, notes
