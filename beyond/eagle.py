"""
beyond/eagle.py: a one-layer draft that reads the big model's features (EAGLE: Li, Wei, Zhang,
Zhang (2024), "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty", ICML).

The big model's final hidden state at position t (after ln_f: its "feature" f_t) is what its head
turns into the logits of token t + 1. Predicting the next feature is easier than predicting the
next token, and the head (which stays the big model's) does the rest. The draft is ONE decoder
layer (a gpt.Block) over a Linear (fc) of [f_t ; wte(x_{t+1})]: the feature AND the token that
was actually sampled from it, which removes the feature's uncertainty about that token. Its
output is its guess of f_{t+1}; the big model's lm_head turns that into the logits of x_{t+2}.
The big model's wte and lm_head are used frozen, never copied into the draft's parameters.

    position        t                t + 1              t + 2
    big model       f_t  --head-->   x_{t+1}
    draft reads     [f_t ; wte(x_{t+1})]  --fc, Block-->  f'_{t+1}  --head-->  x_{t+2}

The one-position shift is the classic pitfall: the feature at t predicts token t + 1, so the
draft's input at t pairs f_t with x_{t+1} (not x_t) and its target is f_{t+1}; shifted() does it
in one place, and tests/test_eagle.py shows what the wrong shift costs.

Rolled forward, the draft reads its own guess of the feature: [f'_{t+1} ; wte(guess)] -> f'_{t+2},
and so on, k guesses for k steps. Each step attends over the last `window` inputs (a band of the
causal mask, the same in training and decoding), so a round starts from the big model's real
features of the last `window` tokens, which the pass that checked the last round has already
computed (beyond/heads.py's HiddenScorer keeps them), and a small KV cache carries the k steps.
The drafter runs in NumPy: a step is a few small products, far less than a pass of the big model.

Training (python -m beyond.eagle; the first `--draft eagle` does the same once): the big model
stays frozen, continues the first quarter of a few training windows greedily (greedy decoding
writes its greedy text, so that is the text to learn, as for the heads) and writes its features
of that text; the draft learns them with a feature regression (SmoothL1, weight 1) plus the
cross-entropy of the head's logits of its guess against the head's distribution at the true
feature (weight 0.1), with uniform noise on the input features (the rolled-forward draft reads
its own imperfect ones).
`python -m beyond.eagle --speed` compares it with the extra heads (beyond/heads.py) and the
distilled draft: characters per big-model pass and the speed-up over plain greedy decoding
(the figures are the run's: they depend on the machine).

Changes from EAGLE: a chain of top guesses instead of a tree; the draft attends over a band of
its last inputs instead of the whole context; no position encoding (the features carry it); a
character model trained on its own greedy text for a minute or two of CPU.

Shapes: B batch, T time, C channels (n_embd), V vocabulary, W window, nh heads, hs head size.
"""

import math
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

import gpt
import speculative as sd
from beyond import frozen, presets
from beyond.backends import with_backend
from beyond.heads import HiddenScorer, final_states
from beyond.heads import load as load_heads
from lessonkit import cli, machine
from lessonkit.scorer import Model

WINDOW = 16  # inputs each draft position attends over (itself and the ones before it)


# ----------------------------------------------------------------------------------------------
# The draft


class Eagle(nn.Module):
    """fc: Linear(2C, C) over [feature ; next token's embedding], then one gpt.Block whose
    attention sees the last `window` inputs. The big model's wte and lm_head are arguments."""

    def __init__(self, config, window=WINDOW):
        super().__init__()
        C = config.n_embd
        self.window = window
        self.fc = nn.Linear(2 * C, C)
        self.h = gpt.Block(replace(config, dropout=0.0))

    @classmethod
    def for_model(cls, big, window=WINDOW):
        """An untrained draft for gpt.GPT `big`: fc first copies the feature (f_t, not 0)."""
        eagle = cls(big.c, window)
        with torch.no_grad():
            eagle.apply(gpt.GPT._init_weights)
            C = big.c.n_embd
            eagle.fc.weight[:, :C].add_(torch.eye(C))
        return eagle

    def band(self, T, device):
        """(T, T) mask: position i attends to i - window + 1 .. i."""
        i = torch.arange(T, device=device)
        return (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < self.window)

    def forward(self, states, tokens, wte):
        """states (B, T, C): features f_t; tokens (B, T): x_{t+1}, the token after each; wte
        (V, C): the big model's embedding -> the guesses of f_{t+1} (B, T, C)."""
        x = self.fc(torch.cat([states, F.embedding(tokens, wte)], -1))   # (B, T, C)
        attn = self.h.attn
        B, T, C = x.shape
        nh, hs = attn.n_head, C // attn.n_head
        q, k, v = attn.c_attn(self.h.ln_1(x)).split(C, dim=2)             # 3 x (B, T, C)
        q, k, v = (a.view(B, T, nh, hs).transpose(1, 2) for a in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.band(T, x.device))
        x = x + attn.c_proj(y.transpose(1, 2).reshape(B, T, C))           # (B, T, C)
        return x + self.h.mlp(self.h.ln_2(x))                             # (B, T, C)


def shifted(features, idx):
    """The draft's inputs and targets, one position apart: features (B, T, C) are the big
    model's states of idx (B, T), features[:, t] predicting idx[:, t + 1]. -> (states (B, T-1, C),
    tokens (B, T-1), targets (B, T-1, C)): at t the draft reads [f_t ; wte(x_{t+1})] and
    learns f_{t+1}, whose logits predict x_{t+2}."""
    return features[:, :-1], idx[:, 1:], features[:, 1:]


def loss_of(eagle, features, idx, wte, lm_head, noise=0.0, ce_weight=0.1, generator=None):
    """EAGLE's loss: SmoothL1 of the guessed features against the true ones, plus ce_weight
    times the cross-entropy of their logits against the big model's distribution at the true
    ones. features (B, T, C), idx (B, T); wte (V, C) and lm_head (V, C) frozen (detached);
    noise: the width of the uniform noise added to the input features."""
    states, tokens, targets = shifted(features, idx)
    if noise:
        states = states + (torch.rand(states.shape, generator=generator) - 0.5) * noise
    guess = eagle(states, tokens, wte)                                   # (B, T-1, C)
    regression = F.smooth_l1_loss(guess, targets)
    want = F.softmax(F.linear(targets, lm_head), -1)                     # (B, T-1, V)
    cross_entropy = -(want * F.log_softmax(F.linear(guess, lm_head), -1)).sum(-1).mean()
    return regression + ce_weight * cross_entropy


def frozen_weights(big):
    """The big model's embedding and head weights (V, C) each, detached: used, never trained."""
    return big.transformer.wte.weight.detach(), big.lm_head.weight.detach()


# ----------------------------------------------------------------------------------------------
# The drafter


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
        wte, lm_head = frozen_weights(big)
        self.wte, self.head_w = a(wte), a(lm_head.T)                           # (V, C), (C, V)
        self.ln_f = a(big.transformer.ln_f.weight), a(big.transformer.ln_f.bias)
        self.n_head, self.window = h.attn.n_head, eagle.window
        self.vocab_size = self.wte.shape[0]
        self.scorer = None

    def reset(self):
        self.scorer = None

    def scorer_for(self, target):
        if not isinstance(target, Model):
            raise ValueError("EAGLE drafts from the big model's own features: the target must "
                             "be a gpt.GPT or a beyond.fast_numpy.NumpyGPT")
        if target.c.n_embd != self.fc_b.shape[0]:
            raise ValueError(f"this draft reads {self.fc_b.shape[0]}-channel features, the "
                             f"target's are {target.c.n_embd}: it was trained for another model")
        self.scorer = HiddenScorer(target, *self.ln_f)
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


# ----------------------------------------------------------------------------------------------
# Training against the frozen big model, and loading


@dataclass
class EagleConfig:
    window: int = WINDOW        # inputs each draft position attends over
    steps: int = 300            # optimizer steps
    batch_size: int = 16        # windows of training text per step
    block: int = 64             # characters per window
    lr: float = 3e-3            # AdamW learning rate, decaying to a tenth of it (cosine)
    noise: float = 0.2          # width of the uniform noise on the input features
    text: str = "greedy"        # greedy: the big model's continuations of the text; real: the text
    pool: int = 64              # windows of greedy text, written once before training
    ce_weight: float = 0.1      # weight of the cross-entropy through the head (regression: 1)
    save_every: int = 100       # save eagle.pt every this many steps (an interruption resumes)
    seed: int = 1337            # seed of the training batches and the noise
    threads: int = 0            # torch threads; 0: every core, or 1 if the machine is busy
    checkpoints: str = ""       # folder of big.pt, where eagle.pt goes (default: checkpoints/)
    fresh: bool = False         # start over, even if eagle.pt holds a run to resume
    speed: bool = False         # then compare with the heads and the distilled draft (minutes)

    def __post_init__(self):
        frozen.check_flags(self, ("window", "steps", "batch_size", "save_every"))
        if self.block < 3:
            raise ValueError(f"--block must be at least 3 (a feature, its next token and the "
                             f"one after), not {self.block}")


KIND = frozen.Kind("eagle", "the EAGLE draft is", EagleConfig)


def eagle_path(folder=None):
    return KIND.path(folder)


def greedy_pool(big, source, n, seed):
    """n windows (n, T) of the big model's greedy text, each continuing the first quarter of a
    window of `source`, and its features of them (n, T, C): what greedy decoding will show the
    draft, written once (a pass a character) and then read many times."""
    T = min(big.c.block_size, len(source) - 1)
    x, _ = gpt.get_batch("train", source, batch_size=n, block_size=T,
                         generator=torch.Generator().manual_seed(seed))
    x = sd.generate(big, x[:, :T // 4], T - T // 4, threads=None)           # (n, T)
    with torch.no_grad():
        return x, final_states(big, x)[1]                                   # (n, T, C)


def batch_of(pool, batch_size, block, generator):
    """batch_size random windows of `block` tokens of the pool (tokens (n, T), features
    (n, T, C)): (B, block) and (B, block, C)."""
    x, features = pool
    rows = torch.randint(len(x), (batch_size,), generator=generator)
    starts = torch.randint(x.shape[1] - block + 1, (batch_size,), generator=generator)
    at = starts[:, None] + torch.arange(block)                              # (B, block)
    return x[rows[:, None], at], features[rows[:, None], at]


def train(big, ec, path, source=None, log=print, progress=False):
    """Train the draft for the frozen gpt.GPT `big` (ec: an EagleConfig) on the big model's
    features of windows of `source` (a 1-D token tensor; default the training split), in
    beyond/frozen.py's loop: saved atomically at `path` every ec.save_every steps, a run with
    the same settings for the same big model resuming from there."""
    source = gpt.train_data if source is None else source
    torch.manual_seed(ec.seed)
    eagle = Eagle.for_model(big, ec.window)
    wte, lm_head = frozen_weights(big)
    block = min(ec.block, big.c.block_size, len(source) - 1)
    pool = []   # the big model's greedy text and its features, written once (prepare)

    def prepare():
        if ec.text == "greedy":
            pool.append(greedy_pool(big, source, ec.pool, ec.seed))

    def loss_of_step(generator):
        if pool:
            x, features = batch_of(pool[0], ec.batch_size, block, generator)  # (B, T), (B, T, C)
        else:
            x, _ = gpt.get_batch("train", source, batch_size=ec.batch_size, block_size=block,
                                 generator=generator)                   # (B, T)
            with torch.no_grad():
                _, features = final_states(big, x)                      # (B, T, C)
        return loss_of(eagle, features, x, wte, lm_head, ec.noise, ec.ce_weight, generator)
    return frozen.train(KIND, eagle, big, ec, path, loss_of_step, keep={"window": ec.window},
                        clip=1.0, prepare=prepare, log=log, progress=progress)


# The draft a first use trains (load): EagleConfig's defaults for the lesson's big model; for the
# tests' tiny one (presets.SIZES["quick"]) a few steps, as --quick trains its GPTs.
FIRST_USE = {"lesson": EagleConfig(), "quick": EagleConfig(steps=20, batch_size=8, block=32)}


def first_use_config(big):
    return frozen.first_use(big, FIRST_USE)


def load(big, folder=None, log=print):
    """The trained draft for gpt.GPT `big` as an EagleDraft, trained here on first use, once
    (frozen.load: a file of another big model, or not an EAGLE file, is a one-line error)."""
    def build(state):
        eagle = Eagle(big.c, state["window"])
        eagle.load_state_dict(state["eagle"])
        return eagle.eval()
    return EagleDraft(frozen.load(KIND, big, folder, FIRST_USE, train, build, log), big)


@torch.no_grad()
def agreement(big, eagle, data, windows=64):
    """The fraction of positions of held-out `data` (1-D tokens) where the draft's first guess
    (from the big model's features and the real text) is the big model's own top token."""
    T = big.c.block_size
    starts = torch.linspace(0, len(data) - T - 1, windows).long()
    x = torch.stack([data[s:s + T] for s in starts])                    # (W, T)
    _, features = final_states(big, x)                                  # (W, T, C)
    wte, lm_head = frozen_weights(big)
    states, tokens, targets = shifted(features, x)
    guess = F.linear(eagle(states, tokens, wte), lm_head)               # (W, T-1, V)
    want = F.linear(targets, lm_head)                                   # (W, T-1, V)
    return (guess.argmax(-1) == want.argmax(-1)).float().mean().item()


# ----------------------------------------------------------------------------------------------
# Measured: characters per pass and the speed-up, against the heads and the distilled draft


def speed_table(big, drafts, ks, prompts, new_tokens=200, repeats=3, log=print):
    """Greedy decoding with each of `drafts` ({name: drafter}) against plain decoding with the
    torch big model: characters per target pass (the bonus token counted) and the wall-clock
    speed-up (median of `repeats` ratios, the two timed alternately), after checking that the
    output is plain decoding's, token for token. Returns {(name, k): (per pass, speed-up)}."""
    def plain():
        return [sd.generate(big, p, new_tokens) for p in prompts]
    want, table = plain(), {}
    for name, draft in drafts.items():
        for k in ks:
            def speculative(draft=draft, k=k):
                return [sd.speculative_generate(big, draft, p, new_tokens, k=k) for p in prompts]
            stats = sd.Stats(k=k)
            for (out, run), expected in zip(speculative(), want):
                if not torch.equal(out, expected):
                    raise SystemExit(f"greedy output with {name} differs from plain decoding "
                                     f"(k = {k}): a bug, please report it")
                stats.add(run)
            with machine.Busy() as busy:
                plain_s, _, speedup, ratios = machine.paired_times(plain, speculative, repeats)
            table[name, k] = stats.tokens_per_pass, speedup
            log(f"{name:9s} k = {k}: {stats.tokens_per_pass:.2f} characters per pass, "
                f"{speedup:.2f}x plain decoding ({len(prompts) * new_tokens / plain_s:,.0f} "
                f"characters/s) {busy.note([machine.spread(ratios)])}")
    return table


PROMPTS = ("ROMEO:\n", "JULIET:\n", "KING RICHARD III:\n", "First Citizen:\n", "MENENIUS:\n")


def main(argv=None):
    """Train the EAGLE draft for checkpoints/big.pt, then report its agreement and characters
    per pass."""
    parser = cli.Parser(description=main.__doc__)
    cli.add_fields(parser, EagleConfig, title="eagle")
    ec = cli.take(EagleConfig, parser.parse_args(argv))
    folder = ec.checkpoints or None
    big = presets.load_trained("big", folder)
    started = time.time()
    eagle = train(big, ec, eagle_path(folder))
    print(f"trained in {time.time() - started:.0f}s; the first guess agrees with the big model "
          f"on {agreement(big, eagle, gpt.val_data, windows=256):.1%} of held-out positions")
    prompts = [torch.tensor([gpt.encode(p)]) for p in PROMPTS]
    for k in range(1, 7):
        stats = sd.Stats(k=k)
        for prompt in prompts:
            stats.add(sd.speculative_generate(big, EagleDraft(eagle, big), prompt, 200, k=k)[1])
        print(f"greedy, the lesson's {len(prompts)} prompts x 200 characters, k = {k}: "
              f"{stats.tokens_per_pass:.2f} characters per pass")
    if ec.speed:
        drafts = {"eagle": EagleDraft(eagle, big), "heads": load_heads(big, folder),
                  "distilled": with_backend(presets.load_trained("distilled", folder), "numpy")}
        speed_table(big, drafts, range(1, 7), prompts)


if __name__ == "__main__":
    sys.exit(cli.run(main))
