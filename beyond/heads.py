"""
beyond/heads.py: extra decoding heads on the big model's last hidden state as a drafter (Medusa:
Cai, Li, Geng, Peng, Lee, Chen, Dao (2024), "Medusa: Simple LLM Inference Acceleration Framework
with Multiple Decoding Heads", ICML). Head i reads the state whose prediction was token t + 1 and
guesses token t + 1 + i (x + SiLU(W x), then a projection to the vocabulary); a round's guesses
cost only the heads, evaluated in NumPy. Training: python -m beyond.heads (exercise 6b is their
loss); --speed times them. How a round gets its state, why HEADS = 5 and what differs from
Medusa: docs/DESIGN.md, "beyond/, module by module".
"""

import copy
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

import gpt
import speculative as sd
from beyond import compare, frozen, presets
from beyond.backends import with_backend
from lessonkit import cli, corpus, machine
from lessonkit.scorer import Model, WindowScorer

HEADS = 5  # chosen by measurement: see the module docstring


def final_states(model, idx, cache=None, normalised=False, **where):
    """A gpt.GPT's logits (B, T, V) and final hidden states after ln_f (B, T, C) for idx (B, T),
    caught by a forward hook on ln_f that lives only during this pass; normalised: ln_f without
    its gain and bias instead. where: the forward pass's positions and mask (a tree's)."""
    states = []
    hook = model.transformer.ln_f.register_forward_hook(
        lambda m, i, out: states.append(F.layer_norm(i[0], m.normalized_shape) if normalised
                                        else out))
    try:
        logits, _ = model(idx, cache=cache, **where)
    finally:
        hook.remove()
    return logits, states[0]


# ----------------------------------------------------------------------------------------------
# The heads


class Head(nn.Module):
    """Medusa's head: a residual block, then a projection to the vocabulary."""

    def __init__(self, n_embd, vocab_size):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        nn.init.zeros_(self.c_fc.weight)  # at first the block is the identity (as in Medusa)
        nn.init.zeros_(self.c_fc.bias)

    def forward(self, x):                            # (..., C) -> (..., V)
        return self.lm_head(x + F.silu(self.c_fc(x)))


class Heads(nn.Module):
    """h heads on the big model's final hidden state; head i guesses the token i after next."""

    def __init__(self, n_embd, vocab_size, n_heads=HEADS):
        super().__init__()
        self.h = nn.ModuleList(Head(n_embd, vocab_size) for _ in range(n_heads))
        # The big model's final LayerNorm, for unfolding it from a NumPy target (not trained).
        self.register_buffer("ln_f_weight", torch.ones(n_embd))
        self.register_buffer("ln_f_bias", torch.zeros(n_embd))

    @classmethod
    def for_model(cls, big, n_heads=HEADS):
        """Untrained heads for gpt.GPT `big`: each starts as the big model's own head."""
        heads = cls(big.c.n_embd, big.c.vocab_size, n_heads)
        with torch.no_grad():
            for head in heads.h:
                head.lm_head.weight.copy_(big.lm_head.weight)
            heads.ln_f_weight.copy_(big.transformer.ln_f.weight)
            heads.ln_f_bias.copy_(big.transformer.ln_f.bias)
        return heads

    def forward(self, hidden):                       # (B, T, C) -> (B, T, h, V)
        return torch.stack([head(hidden) for head in self.h], 2)


# ----------------------------------------------------------------------------------------------
# The drafter


class HiddenScorer(WindowScorer):
    """A scorer.WindowScorer (batch 1) that also keeps the big model's final hidden state
    (after ln_f) of every token in its cache: hidden[j] is that of the token at start + j.

    A gpt.GPT gives its states through final_states(); a beyond.fast_numpy.NumpyGPT is copied with
    its head widened from (C, V) to (C, V + C), so that one product writes both the logits and the
    state: the folded head is n @ (g W) + b W, the added columns n @ diag(g) + b, where n is the
    normalised state and g, b are ln_f's gain and bias."""

    def __init__(self, model, ln_f_weight, ln_f_bias):
        if not isinstance(model, nn.Module):                       # beyond.fast_numpy.NumpyGPT
            model = copy.copy(model)
            model.head_w = np.concatenate([model.head_w, np.diag(ln_f_weight)], 1)  # (C, V + C)
            model.head_b = np.concatenate([model.head_b, ln_f_bias])              # (V + C,)
        super().__init__(model)
        self.hidden = np.zeros((self.block_size, model.c.n_embd), np.float32)

    def logits(self, new):
        first, V = self.cache.length, self.vocab_size
        if isinstance(self.model, nn.Module):
            with torch.inference_mode():
                idx = torch.tensor(new, device=self.cache.k.device)
                logits, hidden = final_states(self.model, idx, self.cache)
                logits, hidden = logits.float().cpu().numpy(), hidden[0].float().cpu().numpy()
        else:
            both = self.model.logits(np.array(new), self.cache)     # (1, t, V + C)
            logits, hidden = both[..., :V], both[0, :, V:]
        self.hidden[first:first + len(hidden)] = hidden              # (t, C)
        return logits

    def state(self, seq, pos):
        return cached_state(self, self.hidden, seq, pos)


def check_features(target, width):
    """A one-line error where `target`'s features are not the `width` channels a draft reads."""
    if target.c.n_embd != width:
        raise ValueError(f"this draft reads {width}-channel features, the target's are "
                         f"{target.c.n_embd}: it was trained for another model")


def feature_scorer(target, width, ln_f, who="EAGLE drafts"):
    """A HiddenScorer of `target` for a drafter that reads its `width`-channel features (ln_f:
    the big model's final LayerNorm, (weight, bias) as NumPy arrays), or a one-line error."""
    if not isinstance(target, Model):
        raise ValueError(f"{who} from the big model's own features: the target must be a "
                         "gpt.GPT or a beyond.fast_numpy.NumpyGPT")
    check_features(target, width)
    return HiddenScorer(target, *ln_f)


def cached_state(scorer, states, seq, pos):
    """states[j] (C,), the state of seq's token at `pos`, if the scorer's cache (one sequence)
    holds seq up to there; else None."""
    j, fed = pos - scorer.starts[0], scorer.fed[0]
    if 0 <= j < len(fed) and fed[:j + 1] == seq[scorer.starts[0]:pos + 1]:
        return states[j]
    return None


def silu(x):
    return x / (1.0 + np.exp(-x))


def head_logits(state, fc_w, fc_b, head_w):
    """Medusa heads 1..h on one final hidden state: their logits, row i - 1 for head i, which
    guesses the token i after the one the big model's own head predicts from this state.

    state (C,); fc_w (h, C, C) and fc_b (h, C): each head's residual block x + SiLU(x W + b);
    head_w (h, C, V): each head's projection to the vocabulary. Returns (h, V). (x @ W here,
    where a torch Linear computes x @ W.T: the weights come transposed.)"""
    # BEGIN SOLUTION
    x = state + silu(state @ fc_w + fc_b)                                  # (h, C)
    return (x[:, None, :] @ head_w)[:, 0]                                  # (h, V)
    # END SOLUTION


class HeadsDraft(sd.Drafter):
    """The drafter (a speculative.Drafter): heads 1..k guess the k tokens after seq[-1],
    from the state the big model computed while checking the last round."""

    def __init__(self, heads):
        def stack(tensors):  # -> one float32 array, heads first
            return np.stack([t.detach().cpu().float().numpy() for t in tensors])
        self.fc_w = stack(head.c_fc.weight.T for head in heads.h)           # (h, C, C)
        self.fc_b = stack(head.c_fc.bias for head in heads.h)               # (h, C)
        self.head_w = stack(head.lm_head.weight.T for head in heads.h)      # (h, C, V)
        self.ln_f_weight, self.ln_f_bias = stack([heads.ln_f_weight, heads.ln_f_bias])  # (C,)
        self.n_heads, self.vocab_size = len(heads.h), self.head_w.shape[2]
        self.module = heads                 # the torch Heads (heads.agreement measures it)
        machine.single_threaded_blas()      # a step of small products: one BLAS thread
        self.scorer = None

    def reset(self):
        self.scorer = None

    def check_width(self, target):
        if target.c.n_embd != self.fc_w.shape[1]:
            raise ValueError(f"these heads read {self.fc_w.shape[1]}-channel states, the "
                             f"target's are {target.c.n_embd}: they were trained for another model")

    def scorer_for(self, target):
        if not isinstance(target, Model):
            raise ValueError("extra heads draft from the big model's own pass: the target must "
                             "be a gpt.GPT or a beyond.fast_numpy.NumpyGPT")
        self.check_width(target)
        self.scorer = HiddenScorer(target, self.ln_f_weight, self.ln_f_bias)
        return self.scorer

    def logits(self, state, k):
        """Heads 1..k on one final hidden state (C,): their logits (k, V)."""
        return head_logits(state, self.fc_w[:k], self.fc_b[:k], self.head_w[:k])

    def propose(self, seq, k, sampling):
        k = min(k, self.n_heads)            # one guess per head: a longer k gets h guesses
        if self.scorer is None:
            raise ValueError("extra heads draft from the big model's own pass: decode with "
                             "speculative_generate, which asks the drafter's scorer_for(target)")
        if len(seq) < 2:  # no state before the only token: guess it again
            tokens = [seq[-1]] * k
            return tokens, None if sampling.greedy else np.eye(self.vocab_size)[tokens]  # (k, V)
        state = self.scorer.state(seq, len(seq) - 2)    # the state whose prediction was seq[-1]
        if state is None:                               # the first round: nothing has read seq
            self.scorer.score([seq[:-1]], len(seq) - 1)
            state = self.scorer.state(seq, len(seq) - 2)
        logits = self.logits(state, k)                                     # (k, V)
        if sampling.greedy:
            return logits.argmax(-1).tolist(), None
        probs = sampling.warp(logits)                                      # (k, V)
        return [sampling.draw(p) for p in probs], probs


# ----------------------------------------------------------------------------------------------
# Training against the frozen big model, and loading


@dataclass
class HeadsConfig:
    heads: int = HEADS          # extra heads: head i guesses the token i after the next one
    steps: int = 400            # optimizer steps
    batch_size: int = 32        # windows of training text per step (each block_size long)
    pool: int = 512             # windows of greedy text, written once before training
    lr: float = 3e-3            # AdamW learning rate, decaying to a tenth of it (cosine)
    targets: str = "hard"       # hard: the big model's top tokens; soft: its distributions
    text: str = "greedy"        # greedy: the big model's continuations of the text; real: the text
    save_every: int = 100       # save heads.pt every this many steps (an interruption resumes)
    seed: int = 1337            # seed of the training batches
    threads: int = 0            # torch threads; 0: every core, or 1 if the machine is busy
    checkpoints: str = ""       # folder of big.pt, where heads.pt goes (default: checkpoints/)
    fresh: bool = False         # start over, even if heads.pt holds a run to resume
    speed: bool = False         # then time greedy decoding against plain, k = 1..heads (minutes)

    def __post_init__(self):
        frozen.check_flags(self, ("heads", "steps", "batch_size", "save_every"))
        if self.targets not in ("soft", "hard"):
            raise ValueError(f"--targets is soft or hard, not {self.targets!r}")


KIND = frozen.Kind("heads", "the extra heads are", HeadsConfig,
                   lambda: (heads_loss,))        # as the module holds it when training starts


def heads_path(folder=None):
    return KIND.path(folder)


def heads_loss(guesses, logits, targets):
    """The heads' training loss: the mean over heads of each head's cross-entropy against the
    big model's prediction for the token that head guesses, where head i (1-based) reading the
    state at position t guesses token t + 1 + i, which the big model predicts at position t + i.

    guesses (B, T, h, V): head i's logits at [:, :, i - 1], from the states at 0..T-1;
    logits (B, T, V): the big model's own, for the same positions; targets: "soft" (its
    distribution, softmax of its logits) or "hard" (its top token). A head has no target
    where t + i runs past the window: those positions drop out."""
    # BEGIN SOLUTION
    losses = []
    for i in range(1, guesses.shape[2] + 1):
        guess = guesses[:, :-i, i - 1].flatten(0, 1)    # state t guesses token t + 1 + i
        teacher = logits[:, i:].flatten(0, 1)           # the big model's prediction for it
        want = torch.softmax(teacher, -1) if targets == "soft" else teacher.argmax(-1)
        losses.append(F.cross_entropy(guess, want))
    return torch.stack(losses).mean()
    # END SOLUTION


def greedy_pool(big, source, n, seed):
    """n windows (n, T) of the big model's greedy text, each continuing the first quarter of a
    window of `source`, and its final states of them (n, T, C): what greedy decoding will show a
    draft (the heads, the EAGLE draft), written once (n windows a pass) and then read many
    times."""
    T = min(big.c.block_size, len(source) - 1)
    x, _ = gpt.get_batch("train", source, batch_size=n, block_size=T,
                         generator=torch.Generator().manual_seed(seed))
    x = sd.generate(big, x[:, :T // 4], T - T // 4, threads=None)           # (n, T)
    with torch.no_grad():
        return x, final_states(big, x)[1]                                   # (n, T, C)


def batch_of(pool, batch_size, block, generator):
    """batch_size random windows of `block` tokens of a greedy_pool (tokens (n, T), states
    (n, T, C)): (B, block) and (B, block, C)."""
    x, features = pool
    rows = torch.randint(len(x), (batch_size,), generator=generator)
    starts = torch.randint(x.shape[1] - block + 1, (batch_size,), generator=generator)
    at = starts[:, None] + torch.arange(block)                              # (B, block)
    return x[rows[:, None], at], features[rows[:, None], at]


def train(big, hc, path, source=None, log=print, progress=False):
    """Train heads for the frozen gpt.GPT `big` (hc: a HeadsConfig) on `source` (a 1-D token
    tensor; default the training split), in beyond/frozen.py's loop: saved atomically at `path`
    every hc.save_every steps, a run with the same settings for the same big model resuming
    from there; with `progress`, a progress line and its forecast."""
    source = gpt.train_data if source is None else source
    heads = Heads.for_model(big, hc.heads)
    pool = []   # the big model's greedy text and its states, written once (prepare)

    def prepare():
        if hc.text == "greedy":
            pool.append(greedy_pool(big, source, hc.pool, hc.seed))

    def loss_of_step(generator):
        with torch.no_grad():
            if pool:                                               # whole windows of the pool
                _, hidden = batch_of(pool[0], hc.batch_size, pool[0][0].shape[1], generator)
                logits = big.lm_head(hidden)                       # (B, T, V)
            else:
                x, _ = gpt.get_batch("train", source, batch_size=hc.batch_size,
                                     block_size=big.c.block_size, generator=generator)
                logits, hidden = final_states(big, x)              # (B, T, V), (B, T, C)
        return heads_loss(heads(hidden), logits, hc.targets)
    return frozen.train(KIND, heads, big, hc, path, loss_of_step, keep={"n_heads": hc.heads},
                        prepare=prepare, log=log, progress=progress)


# The heads a first use trains (load): HeadsConfig's defaults for the lesson's big model; for the
# tests' tiny one (presets.SIZES["quick"]) a few steps, as --quick trains its GPTs.
FIRST_USE = {"lesson": HeadsConfig(), "quick": HeadsConfig(steps=20, batch_size=8)}


def first_use_config(big):
    return frozen.first_use(big, FIRST_USE)


def load(big, folder=None, log=print):
    """The trained heads for gpt.GPT `big` as a HeadsDraft, trained here on first use, once
    (frozen.load: a file of another big model, or not a heads file, is a one-line error)."""
    def build(state):
        heads = Heads(big.c.n_embd, big.c.vocab_size, state["n_heads"])
        heads.load_state_dict(state["heads"])
        return heads.eval()
    return HeadsDraft(frozen.load(KIND, big, folder, FIRST_USE, train, build, log))


@torch.no_grad()
def agreement(big, heads, data, windows=64):
    """Per head, the fraction of positions of held-out `data` (1-D tokens) where its top guess
    is the big model's own top choice for that token (reading the real text in between)."""
    T = big.c.block_size
    starts = torch.linspace(0, len(data) - T - 1, windows).long()
    x = torch.stack([data[s:s + T] for s in starts])                    # (W, T)
    logits, hidden = final_states(big, x)                               # (W, T, V), (W, T, C)
    best, guesses = logits.argmax(-1), heads(hidden).argmax(-1)         # (W, T), (W, T, h)
    return [(guesses[:, :-i, i - 1] == best[:, i:]).float().mean().item()
            for i in range(1, len(heads.h) + 1)]


def speed_table(big, draft, ks, prompts, new_tokens=200, repeats=5, log=print):
    """Greedy decoding with the heads against plain decoding, for a torch and a NumPy target
    (beyond/compare.py: the output checked to be plain decoding's, then timed)."""
    for backend in ("torch", "numpy"):
        compare.greedy_table(with_backend(big, backend), {f"heads, {backend}": draft}, ks,
                             prompts, new_tokens, repeats, log)


def main(argv=None):
    """Train the heads for checkpoints/big.pt, then report each head's acceptance."""
    parser = cli.Parser(description=main.__doc__)
    cli.add_fields(parser, HeadsConfig, title="heads")
    hc = cli.take(HeadsConfig, parser.parse_args(argv))
    folder = hc.checkpoints or None
    big = presets.load_trained("big", folder)
    heads = train(big, hc, heads_path(folder))
    agree = agreement(big, heads, gpt.val_data, windows=256)
    stats = sd.Stats(k=hc.heads)
    prompts = corpus.held_out_prompts(8, 32)
    for prompt in prompts:
        stats.add(sd.speculative_generate(big, HeadsDraft(heads), prompt, 200, k=hc.heads)[1])
    print(f"greedy, 8 held-out prompts x 200 characters, k = {hc.heads}: "
          f"{stats.tokens_per_pass:.2f} characters per pass")
    reached = stats.rounds
    for i, (a, kept) in enumerate(zip(agree, stats.accepted_per_position), 1):
        print(f"head {i}: agrees with the big model on {a:.1%} of held-out positions; "
              f"kept in {kept / stats.rounds:.1%} of rounds "
              f"({kept / max(1, reached):.1%} of those that reached it)")
        reached = kept
    if hc.speed:
        speed_table(big, HeadsDraft(heads), range(1, hc.heads + 1), prompts)


if __name__ == "__main__":
    sys.exit(cli.run(main))
