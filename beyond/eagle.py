"""
beyond/eagle.py: a one-layer draft that reads the big model's features (EAGLE: Li, Wei, Zhang,
Zhang (2024), "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty", ICML): it
reads [f_t ; wte(x_{t+1})] (the big model's final hidden state at t and the token that followed)
and guesses f_{t+1}, which the big model's head turns into token t + 2. EagleRoll rolls it
forward k steps a round (the student's eagle_roll, exercise 7); EagleBranches grows trees from it.
Training: python -m beyond.eagle; --speed times it against plain decoding. Why it works, the
shift, its training and what differs from EAGLE: docs/DESIGN.md, "beyond/, module by module".
Shapes: B batch, T time, C channels (n_embd), V vocabulary, W window, nh heads, hs head size.
"""

import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

import gpt
import speculative as sd
from beyond import compare, frozen, presets
from beyond.backends import with_backend
from beyond.heads import batch_of, check_features, feature_scorer, final_states, greedy_pool
from beyond.heads import load as load_heads
from beyond.tree_grow import Tree, likeliest_or_drawn
from lessonkit import cli, corpus

try:  # the fast NumPy drafter: the reference's only (its NumPy block would answer exercise 3a)
    from beyond.eagle_numpy import EagleDraft
except ModuleNotFoundError as missing:
    if missing.name != "beyond.eagle_numpy":
        raise
    EagleDraft = None

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
        (V, C): the big model's embedding -> the guesses of f_{t+1} (B, T, C). Decoding calls
        Folded, the same layer on folded weights, one new pair at a time."""
        x = self.fc(torch.cat([states, F.embedding(tokens, wte)], -1))   # (B, T, C)
        attn = self.h.attn
        B, T, C = x.shape
        q, k, v = attn.c_attn(self.h.ln_1(x)).split(C, dim=2)             # 3 x (B, T, C)
        q, k, v = (a.view(B, T, attn.n_head, -1).transpose(1, 2) for a in (q, k, v))  # B nh T hs
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.band(T, x.device))
        x = x + attn.c_proj(y.transpose(1, 2).reshape(B, T, C))           # (B, T, C)
        return x + self.h.mlp(self.h.ln_2(x))                             # (B, T, C)


def shifted(features, idx):
    """The draft's inputs and targets, one position apart.

    features (B, T, C): the big model's features of the tokens idx (B, T), where features[:, t]
    (f_t) is what its head turned into the logits of idx[:, t + 1] (x_{t+1}). At position t the
    draft reads f_t together with x_{t+1}, the token that followed it (not x_t, the token at t),
    and learns f_{t+1}, the big model's next feature, whose logits predict x_{t+2}. The last
    position has no next feature, so T - 1 positions remain. Returns the tuple
    (states (B, T-1, C): f_0 .. f_{T-2}, tokens (B, T-1): x_1 .. x_{T-1},
    targets (B, T-1, C): f_1 .. f_{T-1}).

    For features f_0 .. f_4 and tokens x_0 .. x_4: states f_0 .. f_3, tokens x_1 .. x_4,
    targets f_1 .. f_4."""
    # BEGIN SOLUTION
    return features[:, :-1], idx[:, 1:], features[:, 1:]
    # END SOLUTION


def eagle_loss(eagle, features, idx, wte, lm_head, noise=0.0, ce_weight=0.1, generator=None):
    """The draft's training loss on the big model's features (B, T, C) of the tokens idx (B, T),
    a torch scalar that training differentiates.

    1. states, tokens, targets = shifted(features, idx): f_t with x_{t+1}, learning f_{t+1}.
    2. noise (the rolled-forward draft reads its own imperfect features): where noise is not 0,
       states + (torch.rand(states.shape, generator=generator) - 0.5) * noise, on the input
       features only (the targets stay the big model's).
    3. guess = eagle(states, tokens, wte): the draft's guesses of f_{t+1} (B, T-1, C).
    4. The regression: F.smooth_l1_loss(guess, targets), the mean over every number.
    5. The cross-entropy through the frozen head: the big model's distribution over x_{t+2} is
       softmax(targets @ lm_head.T) (its head at the TRUE next feature); the draft's logits of
       x_{t+2} are guess @ lm_head.T (F.linear(guess, lm_head)). Per position,
       -sum_v want[v] * log_softmax(logits)[v]; then the mean over positions.
    Returns regression + ce_weight * cross-entropy.

    wte (V, C) and lm_head (V, C) are the big model's embedding and head weights, frozen
    (detached): wte embeds the tokens the draft reads, lm_head makes logits of features."""
    # BEGIN SOLUTION
    states, tokens, targets = shifted(features, idx)
    if noise:
        states = states + (torch.rand(states.shape, generator=generator) - 0.5) * noise
    guess = eagle(states, tokens, wte)                                   # (B, T-1, C)
    regression = F.smooth_l1_loss(guess, targets)
    want = F.softmax(F.linear(targets, lm_head), -1)                     # (B, T-1, V)
    cross_entropy = -(want * F.log_softmax(F.linear(guess, lm_head), -1)).sum(-1).mean()
    return regression + ce_weight * cross_entropy
    # END SOLUTION


def eagle_roll(eagle, features, seq, wte, lm_head, k):
    """The draft rolled forward k steps, greedily: its k guesses of the tokens after seq.

    seq: the text so far, a list of tokens x_0 .. x_n (n >= 1). features (n, C): the big model's
    features f_0 .. f_{n-1} of every token of seq but the last (f_t is what its head turned into
    the logits of x_{t+1}; the big model has not read x_n yet). wte (V, C), lm_head (V, C): the
    big model's embedding and head weights. eagle: an Eagle; eagle(states (1, T, C),
    tokens (1, T), wte) returns its guesses of the next features (1, T, C), one per pair.

    Step 1: the draft reads the pairs [f_t ; wte(x_{t+1})] for t = 0 .. n-1 (the features with
    seq[1:], the last pair f_{n-1} with x_n). Its output at the LAST position is its guess f'_n of
    the big model's next feature; the big model's own head on it, F.linear(f'_n, lm_head), gives
    the logits (V,) of x_{n+1}, and their argmax is the first guess g_1.
    Step 2: append the pair [f'_n ; wte(g_1)] (the draft's own feature, not the big model's,
    with the guess it just made) and run the draft over all the pairs again: the output at the
    last position, f'_{n+1}, gives the logits of x_{n+2} and the guess g_2. And so on, k steps.
    (Every step recomputes every position: wasteful, and clear. The draft attends over its last
    `window` pairs only, which eagle() sees to.)

    Returns (guesses, logits): the k guesses, a list of ints, and their logits, a tensor
    (k, V) whose row i is what guess i + 1 is the argmax of."""
    # BEGIN SOLUTION
    states = features[None]                                              # (1, n, C)
    tokens = torch.tensor([seq[1:]], device=features.device)             # f_t with x_{t+1}
    guesses, logits = [], []
    for _ in range(k):
        feature = eagle(states, tokens, wte)[:, -1:]                       # f' (1, 1, C)
        logits.append(F.linear(feature[0, 0], lm_head))                    # (V,)
        guesses.append(int(logits[-1].argmax()))
        states = torch.cat([states, feature], 1)                           # the draft's own
        tokens = torch.cat([tokens, tokens.new_tensor([[guesses[-1]]])], 1)  # with its guess
    return guesses, torch.stack(logits)                                    # (k, V)
    # END SOLUTION


def frozen_weights(big):
    """The big model's embedding and head weights (V, C) each, detached: used, never trained."""
    return big.transformer.wte.weight.detach(), big.lm_head.weight.detach()


def final_norm(big):
    """The big model's final LayerNorm, (weight, bias) as NumPy float32 arrays (C,) each: a
    feature is its normalised state scaled and shifted by them."""
    return tuple(p.detach().cpu().float().numpy() for p in
                 (big.transformer.ln_f.weight, big.transformer.ln_f.bias))


class Folded:
    """The Eagle for decoding, one text (B = 1): its weights folded once, when first used (each
    LayerNorm's gain and bias into the Linear after it, fc's token half into a table by token,
    the queries scaled), and the keys and values of the pairs before passed in, so a new pair
    costs one position: step() is a dozen torch operations, a third of a call of the Eagle on a
    CPU, where a small operation's time is its fixed cost. The Eagle's outputs up to float
    rounding (tests/test_eagle.py); after training the Eagle again, make a new Folded."""

    def __init__(self, eagle):
        self.eagle, self.window, self.weights = eagle, eagle.window, None
        self.heads = eagle.h.attn.n_head

    def extend(self, states, tokens, wte, past=None):
        """The draft's outputs (t, C) at t new pairs [states (t, C) ; wte[tokens (t,)]] after
        the pairs whose keys and values are past ((nh, m, hs) each; None: none), and the keys
        and values of the last window - 1 pairs, which are all that a next pair attends to."""
        by_token, fc, qkv, qkv_bias, proj, proj_bias, up, up_bias, down, down_bias = \
            self.folded(wte)
        t, C = states.shape
        x = states @ fc + by_token[tokens]                                    # (t, C)
        q, k, v = F.linear(F.layer_norm(x, (C,)), qkv, qkv_bias).view(t, 3, self.heads, -1) \
            .permute(1, 2, 0, 3)                                              # 3 x (nh, t, hs)
        if past is not None:
            k, v = torch.cat([past[0], k], 1), torch.cat([past[1], v], 1)      # (nh, m + t, hs)
        band = self.eagle.band(k.shape[1], x.device)[k.shape[1] - t:]          # (t, m + t)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=band, scale=1.0)  # (nh, t, hs)
        x = x + F.linear(y.transpose(0, 1).reshape(t, C), proj, proj_bias)    # (t, C)
        hidden = F.gelu(F.linear(F.layer_norm(x, (C,)), up, up_bias), approximate="tanh")
        return x + F.linear(hidden, down, down_bias), *self.last(k, v)        # (t, C)

    def step(self, state, token, wte, past):
        """extend() for one pair, state (C,) and token an int, after m >= 1 pairs: (C,)."""
        by_token, fc, qkv, qkv_bias, proj, proj_bias, up, up_bias, down, down_bias = \
            self.folded(wte)
        C = state.shape[0]
        x = torch.addmv(by_token[token], fc.t(), state)                        # (C,)
        q, k, v = torch.addmv(qkv_bias, qkv, F.layer_norm(x, (C,))).view(3, self.heads, 1, -1)
        k, v = torch.cat([past[0], k], 1), torch.cat([past[1], v], 1)          # (nh, <=W, hs)
        y = torch.softmax(q @ k.transpose(1, 2), -1) @ v                       # (nh, 1, hs)
        x = x + torch.addmv(proj_bias, proj, y.view(C))                        # (C,)
        hidden = F.gelu(torch.addmv(up_bias, up, F.layer_norm(x, (C,))), approximate="tanh")
        return x + torch.addmv(down_bias, down, hidden), *self.last(k, v)     # (C,)

    def last(self, keys, values):
        if keys.shape[1] < self.window:
            return keys, values
        return keys[:, 1 - self.window:], values[:, 1 - self.window:]         # (nh, W - 1, hs)

    def folded(self, wte):
        if self.weights is None or self.weights[0] is not wte:
            self.weights = (wte, *self.fold(wte))
        return self.weights[1:]

    def fold(self, wte):
        """fc's token half as a table (V, C) with its bias, its state half transposed (C, C);
        each LayerNorm folded into the Linear after it (W g and b + W beta); the queries' rows
        scaled by 1 / sqrt(hs), as attention scales their scores."""
        fc, h = self.eagle.fc, self.eagle.h
        C = fc.weight.shape[0]
        with torch.no_grad():
            by_token = F.linear(wte, fc.weight[:, C:], fc.bias)               # (V, C)

            def after(norm, linear):  # linear(norm(x)) = (W g) normalized(x) + (b + W beta)
                return linear.weight * norm.weight, linear.bias + linear.weight @ norm.bias

            qkv, qkv_bias = after(h.ln_1, h.attn.c_attn)                      # (3C, C), (3C,)
            scale = torch.ones_like(qkv_bias)
            scale[:C] = (C // self.heads) ** -0.5
            up, up_bias = after(h.ln_2, h.mlp.c_fc)
            return (by_token, fc.weight[:, :C].t().contiguous(), qkv * scale[:, None],
                    qkv_bias * scale, h.attn.c_proj.weight, h.attn.c_proj.bias, up, up_bias,
                    h.mlp.c_proj.weight, h.mlp.c_proj.bias)


class Rolling:
    """An Eagle that remembers its last call: called again with the same pairs and one more after
    them (as eagle_roll does at every step of a round), it computes the new position only
    (Folded.step), from the keys and values of the ones before (each position attends over the
    ones before it only, so theirs do not change); any other call computes every position. The
    Eagle's own outputs at every position, up to float rounding: a cache, not another draft."""

    def __init__(self, eagle):
        self.eagle, self.folded = eagle, Folded(eagle)
        self.states = self.tokens = self.past = self.out = None

    def __call__(self, states, tokens, wte):
        """states (1, T, C), tokens (1, T), wte (V, C) -> the guesses of f_{t+1} (1, T, C)."""
        if torch.is_grad_enabled():                      # the folded weights are not trained
            return self.eagle(states, tokens, wte)
        m = 0 if self.states is None else self.states.shape[1]
        if not (0 < m < states.shape[1] and torch.equal(states[:, :m], self.states)
                and torch.equal(tokens[:, :m], self.tokens)):
            m = 0                                                   # not a continuation
        if 0 < m == states.shape[1] - 1:                            # one new pair
            x, *self.past = self.folded.step(states[0, -1], int(tokens[0, -1]), wte, self.past)
            self.out = torch.cat([self.out, x.view(1, 1, -1)], 1)              # (1, T, C)
        else:
            x, *self.past = self.folded.extend(states[0, m:], tokens[0, m:], wte,
                                               self.past if m else None)      # (t, C)
            self.out = x[None] if m == 0 else torch.cat([self.out, x[None]], 1)
        self.states, self.tokens = states, tokens
        return self.out


# ----------------------------------------------------------------------------------------------
# The drafter, in torch


class EagleRoll(sd.Drafter):
    """The draft as a speculative.Drafter, greedy, in torch: eagle_roll at every round, from the
    big model's features of the last `window` tokens, the last of them the state whose
    prediction was seq[-1] (at len(seq) - 2), which the pass that checked the last round
    computed (its scorer, beyond/heads.py's HiddenScorer, keeps them). eagle_roll calls the draft
    through Rolling, so each of its steps computes one new position; the reference's NumPy
    EagleDraft proposes the same guesses with less overhead a step."""

    def __init__(self, eagle, big):
        self.eagle, self.window = eagle.eval(), eagle.window
        self.rolling = Rolling(self.eagle)        # each step of a round: its new position only
        self.wte, self.lm_head = frozen_weights(big)                         # (V, C) each
        self.ln_f = final_norm(big)
        self.scorer = None

    def reset(self):
        self.scorer = None

    def scorer_for(self, target):
        self.scorer = feature_scorer(target, self.wte.shape[1], self.ln_f)
        return self.scorer

    def propose(self, seq, k, sampling):
        if self.scorer is None:
            raise ValueError("EAGLE drafts from the big model's own features: decode with "
                             "speculative_generate, which asks the drafter's scorer_for(target)")
        if not sampling.greedy:
            raise ValueError("EagleRoll drafts greedily (eagle_roll): decode with temperature 0")
        if len(seq) < 2:  # no feature before the only token: guess it again
            return [seq[-1]] * k, None
        pos = len(seq) - 2                       # the feature whose prediction was seq[-1]
        if self.scorer.state(seq, pos) is None:  # the first round: nothing has read seq
            self.scorer.score([seq[:-1]], len(seq) - 1)
        start = self.scorer.starts[0]
        first = max(start, pos - self.window + 1)
        features = torch.from_numpy(self.scorer.hidden[first - start:pos - start + 1])  # (n, C)
        with torch.inference_mode():      # cheaper than no_grad for each small step
            guesses, _ = eagle_roll(self.rolling, features.to(self.wte), list(seq[first:]),
                                    self.wte, self.lm_head, k)
        return guesses, None


# ----------------------------------------------------------------------------------------------
# Trees of guesses from the draft


class EagleBranches:
    """The draft as a tree's brancher (EAGLE-2's way, beyond/tree_grow.py's protocol): a node's
    children are the draft's likeliest guesses (or draws) after the path to it, from the feature
    it rolled forward along that path. The root's step reads the big model's features of the
    window (the target's TreeScorer keeps its states: attach); every other node's step is one
    position after its parent's keys and values (Folded.step), computed once a round: a tree
    of N guesses costs the draft as many steps as it has nodes with children."""

    def __init__(self, eagle, big):
        self.eagle, self.window = eagle.eval(), eagle.window
        self.wte, self.lm_head = frozen_weights(big)                         # (V, C) each
        self.ln_f = final_norm(big)
        self.vocab_size = self.wte.shape[0]
        self.folded = Folded(self.eagle)
        self.scorer, self.written, self.steps = None, None, {}

    def attach(self, scorer, score_tree):
        """The target's TreeScorer (keeping states) and its own score_tree, for missing ones."""
        check_features(scorer.model, self.wte.shape[1])
        self.scorer, self.score_tree = scorer, score_tree

    def branch(self, seq, depth, width, sampling):
        root = len(seq) - depth                  # the last token written; then the path
        if root < 1:
            return [], None
        feature, _ = self.step(seq, root)                                    # (C,)
        logits = F.linear(feature, self.lm_head).float().cpu().numpy()       # (V,)
        return likeliest_or_drawn(logits, width, sampling)

    @torch.inference_mode()
    def step(self, seq, root):
        """The draft's guess of the feature after seq (C,) and the keys and values of its last
        pairs; seq is the text up to the root (seq[root]), then a path of the tree."""
        if seq[:root + 1] != self.written:       # a new round: the last one's nodes are gone
            self.written, self.steps = seq[:root + 1], {}
        path = tuple(seq[root + 1:])
        if path not in self.steps:
            if path:                             # [its parent's feature ; its own token]
                feature, past = self.step(seq[:-1], root)
                x, *past = self.folded.step(feature, seq[-1], self.wte, past)       # (C,)
            else:                                # [f_t ; x_{t+1}] over the window, t < root
                features, first = self.features(seq, root)                  # (n, C)
                x, *past = self.folded.extend(features, torch.tensor(seq[first + 1:root + 1]),
                                              self.wte)                     # (n, C)
                x = x[-1]
            self.steps[path] = x, past
        return self.steps[path]

    def features(self, seq, root):
        """The big model's features f_first .. f_{root-1} (n, C) of the written text, the last
        `window` of its window, and `first`."""
        first = max(self.scorer.starts[0], root - self.window)
        states = [self.scorer.state(seq, t) for t in range(first, root)]
        if any(s is None for s in states):                   # a round the last pass did not read
            self.score_tree(seq[:root], Tree([seq[root - 1]]))  # one pass, just the text
            first = max(self.scorer.starts[0], root - self.window)
            states = [self.scorer.state(seq, t) for t in range(first, root)]
        weight, bias = self.ln_f
        return torch.from_numpy(np.stack(states) * weight + bias).to(self.wte), first


# ----------------------------------------------------------------------------------------------
# Training against the frozen big model, and loading


@dataclass
class EagleConfig:
    window: int = WINDOW        # inputs each draft position attends over
    steps: int = 800            # optimizer steps
    batch_size: int = 16        # windows of training text per step
    block: int = 64             # characters per window
    lr: float = 3e-3            # AdamW learning rate, decaying to a tenth of it (cosine)
    noise: float = 0.2          # width of the uniform noise on the input features
    text: str = "greedy"        # greedy: the big model's continuations of the text; real: the text
    pool: int = 512             # windows of greedy text, written once before training
    ce_weight: float = 0.1      # weight of the cross-entropy through the head (regression: 1)
    save_every: int = 100       # save eagle.pt every this many steps (an interruption resumes)
    seed: int = 1337            # seed of the training batches and the noise
    threads: int = 0            # torch threads; 0: every core, or 1 if the machine is busy
    checkpoints: str = ""       # folder of big.pt, where eagle.pt goes (default: checkpoints/)
    fresh: bool = False         # start over, even if eagle.pt holds a run to resume
    speed: bool = False         # then compare with the heads, the distilled draft and EagleRoll

    def __post_init__(self):
        frozen.check_flags(self, ("window", "steps", "batch_size", "save_every"))
        if self.block < 3:
            raise ValueError(f"--block must be at least 3 (a feature, its next token and the "
                             f"one after), not {self.block}")


KIND = frozen.Kind("eagle", "the EAGLE draft is", EagleConfig,
                   lambda: (shifted, eagle_loss))  # as the module holds them when training starts


def eagle_path(folder=None):
    return KIND.path(folder)


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
        return eagle_loss(eagle, features, x, wte, lm_head, ec.noise, ec.ce_weight, generator)
    return frozen.train(KIND, eagle, big, ec, path, loss_of_step, keep={"window": ec.window},
                        clip=1.0, prepare=prepare, log=log, progress=progress)


# The draft a first use trains (load): EagleConfig's defaults for the lesson's big model; for the
# tests' tiny one (presets.SIZES["quick"]) a few steps, as --quick trains its GPTs.
FIRST_USE = {"lesson": EagleConfig(), "quick": EagleConfig(steps=20, batch_size=8, block=32)}


def first_use_config(big):
    return frozen.first_use(big, FIRST_USE)


def check_drafter():
    """A one-line error where the NumPy drafter is not here (the student repository)."""
    if EagleDraft is None:
        raise ValueError("the EAGLE draft's NumPy drafter is not in the student repository (its "
                         "NumPy block would answer exercise 3a); choose another --draft")


def trained(big, folder=None, log=print):
    """The trained draft (an Eagle) for gpt.GPT `big`, trained here on first use, once
    (frozen.load: a file of another big model, or not an EAGLE file, is a one-line error)."""
    def build(state):
        eagle = Eagle(big.c, state["window"])
        eagle.load_state_dict(state["eagle"])
        return eagle.eval()
    return frozen.load(KIND, big, folder, FIRST_USE, train, build, log)


def drafter(eagle, big):
    """The fastest drafter of the trained `eagle` here: the NumPy EagleDraft in the reference
    repository, EagleRoll (torch, the same guesses) in the student's."""
    return (EagleDraft or EagleRoll)(eagle, big)


def load(big, folder=None, log=print):
    """The trained draft for gpt.GPT `big` as an EagleDraft (beyond/eagle_numpy.py), trained
    on first use (trained()); a repository without the NumPy drafter (the student's) is a
    one-line error."""
    check_drafter()
    return EagleDraft(trained(big, folder, log), big)


@torch.no_grad()
def rank_agreement(big, eagle, texts, width):
    """[r]: the fraction of positions of `texts` (W, T) tokens where the big model's own top
    token is the draft's (r + 1)-th guess, from the big model's features and the text (the
    acceptance per rank that sizes a tree, beyond/tree_grow.py)."""
    _, features = final_states(big, texts)                              # (W, T, C)
    wte, lm_head = frozen_weights(big)
    states, tokens, targets = shifted(features, texts)
    guess = F.linear(eagle(states, tokens, wte), lm_head)               # (W, T-1, V)
    want = F.linear(targets, lm_head).argmax(-1, keepdim=True)          # (W, T-1, 1)
    return (guess.topk(width, -1).indices == want).float().mean((0, 1)).tolist()  # (width,)


def agreement(big, eagle, data, windows=64):
    """The fraction of positions of held-out `data` (1-D tokens) where the draft's first guess
    (from the big model's features and the real text) is the big model's own top token."""
    T = big.c.block_size
    starts = torch.linspace(0, len(data) - T - 1, windows).long()
    return rank_agreement(big, eagle, torch.stack([data[s:s + T] for s in starts]), 1)[0]


# ----------------------------------------------------------------------------------------------
# Measured: characters per pass and the speed-up, against the heads and the distilled draft

# The guesses per round measured: the heads stop at 5 (one guess a head); the draft goes on.
KS = (1, 2, 3, 4, 5, 6, 8, 10)


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
    prompts = [torch.tensor([gpt.encode(p)]) for p in corpus.LESSON_PROMPTS]
    for k in KS:
        stats = sd.Stats(k=k)
        for prompt in prompts:
            stats.add(sd.speculative_generate(big, drafter(eagle, big), prompt, 200, k=k)[1])
        print(f"greedy, the lesson's {len(prompts)} prompts x 200 characters, k = {k}: "
              f"{stats.tokens_per_pass:.2f} characters per pass")
    if ec.speed:
        heads = load_heads(big, folder)
        table = {}
        rows = [("EAGLE-style draft", drafter(eagle, big), KS),
                ("Medusa heads", heads, [k for k in KS if k <= heads.n_heads]),
                ("distilled draft", with_backend(presets.load_trained("distilled", folder),
                                                 "numpy"), KS)]
        if EagleDraft is not None:        # the student repository's drafter, the same guesses
            rows.append(("EagleRoll, torch", EagleRoll(eagle, big), (4, 8, 10)))
        for name, draft, ks in rows:
            table.update(compare.greedy_table(big, {name: draft}, ks, prompts))
        print(against_heads(table))


def against_heads(table, eagle="EAGLE-style draft", heads="Medusa heads"):
    """The EAGLE-style draft against the heads, from a compare.greedy_table of both: characters
    per pass (and accepted guesses per pass, without the big model's own token) at each one's
    fastest k, and at each k both ran."""
    def fastest(name):  # (k, stats, speed-up) of its fastest k
        return max(((k, *row) for (n, k), row in table.items() if n == name),
                   key=lambda row: row[2])
    (ke, stats_e, speedup_e), (kh, stats_h, speedup_h) = fastest(eagle), fastest(heads)
    te, th = stats_e.tokens_per_pass, stats_h.tokens_per_pass
    equal = {k: table[eagle, k][0].tokens_per_pass / table[heads, k][0].tokens_per_pass
             for (name, k) in table if name == heads and (eagle, k) in table}
    low, high = min(equal.values()), max(equal.values())
    return (f"each at its fastest k: the {eagle} (k = {ke}) {te:.2f} characters per pass, "
            f"{speedup_e:.2f}x plain decoding; the {heads} (k = {kh}) {th:.2f}, {speedup_h:.2f}x:"
            f" {te / th:.2f}x the characters per pass ({(te - 1) / (th - 1):.2f}x the accepted "
            f"guesses), {speedup_e / speedup_h:.2f}x the speed-up. At equal k "
            f"({', '.join(map(str, sorted(equal)))}): {low:.2f}x"
            + (f" to {high:.2f}x" if high != low else "") + " the characters per pass.")


if __name__ == "__main__":
    sys.exit(cli.run(main))
