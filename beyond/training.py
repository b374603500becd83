"""
beyond/training.py: the presets' training loop: the lesson's (gpt.train: AdamW in float32, cosine
decay) with what a long run needs (atomic checkpoints, Ctrl-C and resuming to the same model,
distillation) and the speedrun's levers (Muon, a warm-up/stable/decay schedule, zero-initialised
projections, bfloat16 products, torch.compile). With every lever off it trains exactly gpt.train's
model; studies/training.py measures each lever (docs/RESULTS.md, "The models").

    recipe = Recipe(optimizer="muon", schedule="wsd", init="zero", steps=550)
    train(recipe.initialise(gpt.GPT()), recipe)   # about the big preset's recipe
"""

import contextlib
import importlib.util
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import gpt
from gpt import CheckpointError, save_checkpoint
from lessonkit import corpus, machine


@dataclass
class Recipe(gpt.TrainConfig):
    """gpt.TrainConfig's settings and the levers below; the defaults are the lesson's recipe
    (AdamW, cosine), in bfloat16 where that is faster (see speedups)."""
    optimizer: str = "adamw"   # adamw (all), or muon (the blocks' matrices; AdamW the rest)
    muon_lr: float = 0.02      # Muon's peak learning rate (warmed up and decayed alike)
    precision: str = "auto"    # auto (bfloat16 where the processor has it, else float32), bfloat16 or float32
    compile: bool = False      # torch.compile the model (off by default: it does not pay here)
    schedule: str = "cosine"   # cosine (the lesson's), or wsd: warm-up, stable, linear decay
    decay_fraction: float = 0.4  # wsd: the last fraction of the steps, decayed to min_lr
    init: str = "gpt2"         # gpt2 (GPT's own), zero (residual projections start at 0), or
    #                            teacher (distillation: the teacher's embeddings and first blocks)
    newton_schulz: int = 5     # Muon's iterations per step (fewer: cheaper, and worse here)

    def __post_init__(self):
        choices = {"optimizer": ("muon", "adamw"), "precision": ("auto", "bfloat16", "float32"),
                   "schedule": ("cosine", "wsd"), "init": ("gpt2", "zero", "teacher")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, "
                                 f"not {getattr(self, name)!r}")
        if not 0 < self.decay_fraction <= 1:
            raise ValueError(f"decay_fraction must be in (0, 1], not {self.decay_fraction}")
        for name in ("lr", "muon_lr", "batch_size", "eval_every", "eval_batches",
                     "newton_schulz"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be above 0, not {getattr(self, name)}: "
                                 f"nothing would train")
        if not 0 <= self.min_lr <= self.lr or self.warmup_steps < 0:
            raise ValueError(f"min_lr must be in [0, lr] and warmup_steps at least 0, not "
                             f"{self.min_lr} and {self.warmup_steps}")

    def initialise(self, model, teacher=None):
        """A fresh model's weights as `init` says (before training; resuming overwrites them).
        zero: every block's two residual projections (c_proj) start at zero, so that each block
        starts as the identity and the first steps learn through the embeddings (as the
        modded-nanogpt speedrun does). teacher: the student takes the teacher's embeddings,
        final norm and first n_layer blocks, where their shapes match (same width)."""
        if self.init == "zero":
            with torch.no_grad():
                for block in model.transformer.h:
                    block.attn.c_proj.weight.zero_()
                    block.mlp.c_proj.weight.zero_()
        elif self.init == "teacher":
            if teacher is None:
                raise ValueError("init teacher needs a teacher (a preset that distills)")
            theirs, mine = teacher.state_dict(), model.state_dict()
            taken = {name: theirs[name] for name in mine
                     if name in theirs and theirs[name].shape == mine[name].shape}
            if not taken:
                raise ValueError("init teacher: the student shares no weight shape with its "
                                 "teacher (another width)")
            model.load_state_dict({**mine, **taken})
        return model


def rate(recipe, step, peak=None):
    """The learning rate at `step` for an optimizer whose peak is `peak` (None: recipe.lr, and
    another peak is scaled alike): gpt.learning_rate's warm-up and cosine decay, or wsd: the
    same warm-up, the peak held, then a straight line down to min_lr over the last
    decay_fraction of the steps."""
    decay_start = recipe.steps * (1 - recipe.decay_fraction)
    if recipe.schedule == "cosine":
        rate = gpt.learning_rate(step, recipe)
    elif step < recipe.warmup_steps:
        rate = recipe.lr * (step + 1) / recipe.warmup_steps
    elif step < decay_start:
        rate = recipe.lr
    else:
        rate = recipe.min_lr + (recipe.lr - recipe.min_lr) * (recipe.steps - step) / \
            (recipe.steps - decay_start)
    return rate if peak is None else rate * peak / recipe.lr


def optimizers(recipe, model, device):
    """[(optimizer, its peak learning rate)]: with "muon", Muon for the blocks' weight matrices
    and AdamW for the rest (the embeddings, the head tied to them, the layer norms, the
    biases); with "adamw", AdamW for everything (gpt.adamw, the lesson's)."""
    named = list(model.named_parameters())
    hidden = [p for n, p in named if recipe.optimizer == "muon" and p.dim() == 2
              and n.startswith("transformer.h.")]
    rest = [(n, p) for n, p in named if id(p) not in set(map(id, hidden))]
    muon = Muon(hidden, lr=recipe.muon_lr, weight_decay=recipe.weight_decay,
                newton_schulz=recipe.newton_schulz) if hidden else None
    return [(gpt.adamw(rest, recipe, device), recipe.lr)] + ([(muon, recipe.muon_lr)] if muon else [])


def loss_of(model, x, y, teacher=None):
    """Cross-entropy against the next characters; with a teacher (a trained model to imitate:
    distillation), against the teacher's whole next-token distributions instead."""
    if teacher is None:
        return model(x, y)[1]
    with torch.no_grad():
        soft_targets = torch.softmax(teacher(x)[0].float(), -1)     # (B, T, V)
    logits, _ = model(x)                                          # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), soft_targets.flatten(0, 1))


def loss_function(recipe, model, device, teacher, precision, note):
    """(loss(x, y), the precision it runs in): loss_of under autocast (bfloat16) and
    torch.compile where they are on (see speedups)."""
    autocast, compiled, notes = speedups(recipe, device, precision, model.c.n_embd)
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
            return loss_of(forward, x, y, teacher)

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
    return loss_or_uncompiled, "bfloat16" if autocast else "float32"


# ----------------------------------------------------------------------------------------------
# The loop


def train(model, recipe, source=None, *, corpus_name=None, teacher=None, device=None,
          checkpoint=None, resume=None, on_eval=None, extra=None, log_every=0, note=None):
    """Train `model` in place with `recipe` (a Recipe, or a gpt.TrainConfig: the lesson's);
    return it. source, as gpt.train's. The rest:
    corpus_name the corpus's name in the checkpoint (default: shakespeare, or custom)
    teacher     a trained model to imitate (see loss_of: distillation)
    device      "cpu", "cuda" or "auto"; None (the default) trains where the model already is
    checkpoint  a path: saved (atomically) at every evaluation, at the end, and on Ctrl-C
    resume      a checkpoint dictionary from gpt.load_checkpoint to continue from
    on_eval     called as on_eval(step, val_loss) after each evaluation
    extra       more entries for the checkpoint (beyond/presets.py records its settings there)
    log_every   print a step's line every this many steps (0: none)
    note        called with one line for each lever of the recipe that is off, and why
                (default: printed unless log_every is 0)
    Ctrl-C finishes the current step, saves the checkpoint and raises KeyboardInterrupt.
    Losses repeat to the last digit for the same seed, device and torch thread count (sums are
    split differently across threads); the thread count is recorded in the checkpoint, and a
    resumed run keeps it (and its precision), so that resuming gives exactly the model of an
    uninterrupted run.
    """
    recipe = recipe if isinstance(recipe, Recipe) else Recipe(**vars(recipe))
    device = torch.device(model.lm_head.weight.device if device is None
                          else machine.resolve_device(device))
    train_source, val_source = (corpus.train_data, corpus.val_data) if source is None \
        else corpus.split_source(source)
    corpus_name = corpus_name or ("shakespeare" if source is None else "custom")
    model.to(device).train()
    if teacher is not None:
        teacher.to(device).eval()
    steppers = optimizers(recipe, model, device)
    generator = torch.Generator().manual_seed(recipe.seed)
    step, val_loss, threads, precision = 0, float("nan"), recipe.threads, recipe.precision
    if resume is not None:
        if len(resume["optimizer"]) != len(steppers):
            names = " and ".join(type(optimizer).__name__ for optimizer, _ in steppers)
            raise CheckpointError(f"this checkpoint was trained with another optimizer than "
                                  f"{names}: start anew (train.py --fresh), or resume with the "
                                  f"optimizer it was trained with")
        model.load_state_dict(resume["model"])
        for (optimizer, _), state in zip(steppers, resume["optimizer"]):
            optimizer.load_state_dict(state)
        generator.set_state(resume["rng"])
        step, val_loss = resume["step"], resume["val_loss"]
        threads = threads or resume["threads"]
        precision = resume["precision"] if precision == "auto" else precision
    threads = threads or machine.training_threads()
    note = note or (print if log_every else lambda line: None)
    loss_of_batch, precision = loss_function(recipe, model, device, teacher, precision, note)

    def save(last=False):  # a failed save along the way is one line; a failed last one raises
        if not checkpoint:
            return
        try:
            save_checkpoint(checkpoint, model, step=step, val_loss=val_loss, train_config=recipe,
                            optimizers=[optimizer for optimizer, _ in steppers],
                            generator=generator, corpus_name=corpus_name,
                            extra={**(extra or {}), "threads": threads, "precision": precision})
        except CheckpointError as e:
            if last:
                raise
            note(f"step {step}: {e}; training goes on")

    def next_loss():
        x, y = gpt.get_batch("train", train_source, batch_size=recipe.batch_size,
                             block_size=model.c.block_size, generator=generator, device=device)
        return loss_of_batch(x, y)

    def after(done, loss):
        nonlocal step, val_loss
        step = done
        if step % recipe.eval_every == 0 or step == recipe.steps:
            val_loss = gpt.estimate_loss(model, val_source, recipe, device)
            if on_eval:
                on_eval(step, val_loss)
            save(last=step == recipe.steps)
        if log_every and (step % log_every == 0 or step == recipe.steps):
            print(gpt.progress_line(step, loss.item(), val_loss, time.time() - started))

    started, stop = time.time(), StopOnInterrupt()
    with machine.threads(threads):  # one setting for the whole run (see the docstring)
        try:
            optimise(model, steppers, lambda at, peak: rate(recipe, at, peak), next_loss, step,
                     recipe.steps, clip=recipe.grad_clip, after=after, stop=lambda: stop.asked)
        finally:
            stop.restore()
    if stop.asked:
        save(last=True)
        raise KeyboardInterrupt(f"stopped at step {step}")
    model.eval()
    model.val_loss, model.step = val_loss, step
    return model


def optimise(model, steppers, rate_at, next_loss, step, steps, *, clip=None, after=None,
             stop=lambda: False):
    """The training loop every trainer here runs (the presets' train() and beyond/frozen.py's,
    for the extra heads and the EAGLE-style draft): from `step` to `steps`, each step sets each
    optimizer's learning rate (rate_at(step, its peak); steppers: [(optimizer, peak)]), takes
    next_loss(), steps every optimizer on its gradient (the norm clipped to `clip` if given),
    then calls after(steps done, loss). Ends early when stop() says so; returns the steps done."""
    while step < steps and not stop():
        for optimizer, peak in steppers:
            for group in optimizer.param_groups:
                group["lr"] = rate_at(step, peak)
        loss = next_loss()
        for optimizer, _ in steppers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for optimizer, _ in steppers:
            optimizer.step()
        step += 1
        if after:
            after(step, loss)
    return step


class StopOnInterrupt:
    """The first Ctrl-C asks the training loop to stop after the current step (so the weights
    and optimizer are never saved half-updated); a second one stops at once."""

    def __init__(self):
        self.asked = False
        try:
            self.previous = signal.signal(signal.SIGINT, self._ask)
        except ValueError:  # not the main thread: leave Ctrl-C alone
            self.previous = None

    def _ask(self, signum, frame):
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True

    def restore(self):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


# ----------------------------------------------------------------------------------------------
# Muon


class Muon(torch.optim.Optimizer):
    """Muon: momentum whose step for each weight matrix is orthogonalised, its singular values
    pushed to about 1, so that every direction of the matrix learns at the same rate. For the
    hidden layers' 2-D weights only (optimizers()). The big preset and the distilled draft
    train with it (beyond/presets.py); Recipe's default stays AdamW (--optimizer muon).

    Changes from torch.optim.Muon, which it follows otherwise (its Nesterov momentum, the
    quintic's coefficients, the rate scaled by sqrt(max(1, rows / columns)), decoupled weight
    decay): the iteration runs in float32. torch's runs in bfloat16, which a CPU without native
    bfloat16 emulates, slowly.
    """

    def __init__(self, params, lr=0.02, weight_decay=0.1, momentum=0.95, newton_schulz=5):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      newton_schulz=newton_schulz))

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
                update = orthogonalise(p.grad.lerp(average, momentum),  # Nesterov: a look ahead
                                       steps=group["newton_schulz"])
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
    return device.type == "cpu" and torch.backends.cpu.get_cpu_capability() == "AVX512" \
        and any(getattr(torch.cpu, c, lambda: False)() for c in checks)   # (not held to AVX2)


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
