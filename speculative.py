"""
speculative.py: plain decoding and speculative decoding, side by side.

A big model writes one token per forward pass, and each pass costs about the same whether it
scores one token or five. Speculative decoding lets a cheap draft model guess k tokens, scores
them all in one pass of the big (target) model, keeps the guesses the target agrees with and
replaces the first one it rejects with its own token: 1 to k+1 tokens per target pass, with
exactly the target's output (greedy) or exactly the target's distribution (sampling).

References:
- Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via Speculative Decoding",
  ICML. Algorithm 1 is the acceptance rule below; Table 1 checks our expected speed-ups.
- Chen, Borgeaud, Irving, Lespiau, Sifre, Jumper (2023), "Accelerating Large Language Model
  Decoding with Speculative Sampling", DeepMind.
The two papers use p and q the opposite way round (Leviathan: p target, q draft; Chen: q target,
p draft). This file says `target_probs` and `draft_probs` instead.

The window rule (contexts longer than block_size). Token n (0-based) is predicted from the
tokens [window_start(n), n). The window starts at 0; when it would hold more than block_size
tokens it jumps forward so that only the last block_size // 2 are kept, and those are re-encoded
into a fresh cache. window_start depends on n alone, so plain and speculative decoding change
windows at exactly the same positions and the target scores every token from exactly the same
context; a verification pass that crosses a window change is split there.

Shapes: B batch, T time, V vocabulary, k draft tokens per round.
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

# ----------------------------------------------------------------------------------------------
# Scoring a growing sequence with a KV cache, under the window rule


def window_start(n, block_size):
    """First position of the context from which token n is predicted (see the module docstring)."""
    if n <= block_size:
        return 0
    keep = max(1, block_size // 2)
    stride = block_size + 1 - keep            # how far the window moves at each jump
    return -(-(n - block_size) // stride) * stride  # ceil((n - block_size) / stride) * stride


class CachedScorer:
    """Wraps a GPT and its KV cache; scores positions of a sequence that grows and shrinks.

    score(idx, first) returns logits (B, T - first + 1, V) for idx (B, T): row i is the model's
    prediction for position first + i from the tokens before it. Only tokens not already in the
    cache are fed; cached tokens that no longer match idx (rejected draft tokens) are rolled back.
    This is the draft interface too: anything with `vocab_size` and `score(idx, first)` (and,
    optionally, `reset()`) can draft.
    """

    def __init__(self, model, batch_size=1):
        self.model = model
        self.vocab_size = model.c.vocab_size
        self.block_size = model.c.block_size
        self.cache = model.new_cache(batch_size)
        device = self.cache.k.device if torch.is_tensor(self.cache.k) else "cpu"
        self.fed = torch.zeros(batch_size, self.block_size, dtype=torch.long, device=device)
        self.start = 0   # position of the first cached token
        self.passes = 0  # forward passes made

    def score(self, idx, first):
        T = idx.shape[1]
        assert 1 <= first <= T, f"can only score positions 1..{T}, not from {first}"
        rows, pos = [], first
        while pos <= T:
            start = window_start(pos, self.block_size)
            end = min(T, start + self.block_size)    # the last position this window predicts
            if start != self.start:                  # the window jumped: start a fresh cache
                self.start, self.cache.length = start, 0
            # Keep the cached tokens that still match idx, up to the one before `pos`.
            keep = min(self.cache.length, pos - 1 - start)
            window = idx[:, start:start + keep]
            if keep and not torch.equal(self.fed[:, :keep], window):
                same = (self.fed[:, :keep] == window).all(0).long()
                keep = int(same.cumprod(0).sum())
            self.cache.rollback(keep)
            new = idx[:, start + keep:end]            # (B, t) tokens at positions start+keep..end-1
            self.fed[:, keep:keep + new.shape[1]] = new
            logits, _ = self.model(new, cache=self.cache)  # (B, t, V)
            self.passes += 1
            rows.append(logits[:, pos - 1 - start - keep:])  # predictions for pos..end
            pos = end + 1
        return rows[0] if len(rows) == 1 else torch.cat(rows, 1)


def as_scorer(model, batch_size=1):
    """A fresh scorer for a GPT; anything else with score() is used as it is (after reset())."""
    if hasattr(model, "new_cache"):
        return CachedScorer(model, batch_size)
    if not (hasattr(model, "score") and hasattr(model, "vocab_size")):
        raise TypeError(f"{type(model).__name__} is neither a GPT nor a draft with "
                        f"vocab_size and score(idx, first)")
    if hasattr(model, "reset"):
        model.reset()
    return model


def vocab_size_of(model):
    return model.c.vocab_size if hasattr(model, "c") else model.vocab_size


# ----------------------------------------------------------------------------------------------
# From logits to the distribution we sample from


def warp(logits, temperature=1.0, top_k=None, top_p=None):
    """Logits (..., V) -> probabilities (..., V) after temperature, top-k and top-p, in that order.

    Temperature 0 is greedy: a one-hot at the argmax (ties go to the lowest id).
    """
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), V).to(torch.float64)
    logits = logits.double() / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # the k-th largest logit
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = torch.softmax(logits, -1)
    if top_p is not None and top_p < 1.0:
        # Keep the smallest set of most likely tokens whose probability reaches top_p.
        sorted_probs, order = probs.sort(-1, descending=True, stable=True)
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p, k=1):
    if not (torch.is_tensor(idx) and idx.dim() == 2 and idx.dtype == torch.long):
        raise ValueError("idx must be a (B, T) LongTensor of token ids, "
                         "e.g. torch.tensor([encode(prompt)])")
    if idx.shape[1] < 1:
        raise ValueError("the prompt is empty; give at least one character")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number >= 0, not {max_new_tokens!r}")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k (draft tokens per round) must be a whole number >= 1, not {k!r}")
    if not (isinstance(temperature, (int, float)) and 0 <= temperature < math.inf):
        raise ValueError(f"temperature must be a number >= 0 (0 is greedy), not {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a whole number >= 1 or None, not {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, not {top_p!r}")


class TorchUniform:
    """Uniform numbers in [0, 1) from a torch.Generator, with NumPy's rng.random() interface."""

    def __init__(self, generator=None):
        self.generator = generator

    def random(self):
        return torch.rand((), generator=self.generator, dtype=torch.float64).item()


# ----------------------------------------------------------------------------------------------
# The acceptance rule, in NumPy (Leviathan et al. 2023, Algorithm 1)


def accept_probability(target_prob, draft_prob):
    """min(1, target/draft) for the proposed token; a token the draft gave 0 is accepted if the
    target gives it anything (the ratio is infinite), rejected if the target gives it 0 too."""
    if draft_prob <= 0:
        return 1.0 if target_prob > 0 else 0.0
    return min(1.0, target_prob / draft_prob)


def residual(target_probs, draft_probs):
    """norm(max(0, target - draft)): where the correction after a rejection is drawn from.
    It is all zero only when target == draft, and then no rejection can happen; we fall back to
    the target so that rounding can never leave us with nothing to draw from."""
    leftover = np.maximum(target_probs - draft_probs, 0.0)
    total = leftover.sum()
    return leftover / total if total > 0 else target_probs / target_probs.sum()


def sample(probs, rng):
    """One token from probs (V,) by inverse transform sampling with one rng.random()."""
    cdf = np.cumsum(probs)
    return min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(probs) - 1)


def verify(target_probs, draft_probs, draft_tokens, rng):
    """One round of speculative sampling.

    target_probs (k+1, V): the target's distributions for the k draft positions and one more;
    draft_probs (k, V): the draft's distributions that proposed draft_tokens (k,);
    rng: anything with .random() -> uniform [0, 1) (numpy.random.Generator, TorchUniform).
    Returns (n_accepted, next_token): how many draft tokens are kept, and the token the target
    adds after them (the correction of the first rejected one, or a bonus token if all passed).
    """
    for i, token in enumerate(draft_tokens):
        # 1. Keep draft token i with probability min(1, target/draft).
        if rng.random() < accept_probability(target_probs[i, token], draft_probs[i, token]):
            continue
        # 2. Rejected: the target writes its own token, from what the draft under-proposed.
        return i, sample(residual(target_probs[i], draft_probs[i]), rng)
    # 3. All k kept: the target's distribution after them gives one more token for free.
    return len(draft_tokens), sample(target_probs[len(draft_tokens)], rng)


# ----------------------------------------------------------------------------------------------
# Decoding


@dataclass
class Stats:
    """What a decoding run did. The bonus token and corrections are not counted as accepted.

    target_passes   forward passes of the target (one per round, two if a round crosses a
                    window jump); plain decoding makes one per token
    draft_passes    forward passes of the draft (one per proposed token)
    rounds          propose-then-verify rounds
    proposed        draft tokens proposed; accepted: how many of them were kept
    accepted_per_position[i]  rounds in which draft token i was kept
    new_tokens      tokens generated; draft_time / target_time: seconds in each model
    trace           one (proposed tokens, n_accepted, target's token) tuple per round
    """
    k: int = 0
    target_passes: int = 0
    draft_passes: int = 0
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    accepted_per_position: list = field(default_factory=list)
    new_tokens: int = 0
    draft_time: float = 0.0
    target_time: float = 0.0
    trace: list = field(default_factory=list, repr=False)

    @property
    def acceptance_rate(self):
        """Fraction of proposed draft tokens the target kept."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_pass(self):
        """New tokens per target forward pass: 1 for plain decoding, up to k+1 here."""
        return self.new_tokens / self.target_passes if self.target_passes else 0.0

    def add(self, other):
        for name in ("target_passes", "draft_passes", "rounds", "proposed", "accepted",
                     "new_tokens", "draft_time", "target_time"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.accepted_per_position = [a + b for a, b in zip(
            self.accepted_per_position or [0] * len(other.accepted_per_position),
            other.accepted_per_position)]
        self.trace += other.trace


def _sync(model):
    """Wait for the GPU so that timings are real (a no-op on the CPU)."""
    p = next(model.parameters(), None) if hasattr(model, "parameters") else None
    if p is not None and p.is_cuda:
        torch.cuda.synchronize(p.device)


@torch.no_grad()
def generate(model, idx, max_new_tokens, *, temperature=0.0, top_k=None, top_p=None,
             generator=None, stats=None):
    """Plain decoding with a KV cache: one forward pass per new token. Returns idx (B, T+new).

    Temperature 0 is greedy (argmax); otherwise tokens are sampled from warp(...). Pass a Stats
    to `stats` to have it counted.
    """
    check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p)
    stats = stats if stats is not None else Stats()
    scorer = as_scorer(model, idx.shape[0])
    started = time.perf_counter()
    for _ in range(max_new_tokens):
        logits = scorer.score(idx, idx.shape[1])[:, -1]     # (B, V)
        if temperature == 0:
            token = logits.argmax(-1, keepdim=True)          # (B, 1)
        else:
            probs = warp(logits, temperature, top_k, top_p)
            token = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        idx = torch.cat([idx, token.to(idx.device)], dim=1)  # (B, T+1)
        stats.target_passes += 1
    _sync(model)
    stats.new_tokens += max_new_tokens
    stats.target_time += time.perf_counter() - started
    return idx


@torch.no_grad()
def speculative_generate(target, draft, idx, max_new_tokens, *, k=4, temperature=0.0,
                         top_k=None, top_p=None, generator=None):
    """Speculative decoding. Returns (idx (B, T+new), Stats).

    At temperature 0 the tokens equal generate(target, ...) exactly; with sampling each output
    has exactly the distribution generate(target, ...) samples from. Rows of a batch are decoded
    one after another (each accepts a different number of tokens per round).
    """
    check_decoding_args(idx, max_new_tokens, temperature, top_k, top_p, k)
    if vocab_size_of(target) != vocab_size_of(draft):
        raise ValueError(f"the draft's vocabulary ({vocab_size_of(draft)} tokens) differs from "
                         f"the target's ({vocab_size_of(target)}); both must be trained on the "
                         f"same vocabulary")
    stats = Stats(k=k, accepted_per_position=[0] * k)
    rows = []
    for row in idx:
        out, row_stats = _speculative_row(target, draft, row[None], max_new_tokens, k,
                                          temperature, top_k, top_p, generator)
        rows.append(out)
        stats.add(row_stats)
    return torch.cat(rows, 0), stats


def _speculative_row(target, draft, idx, max_new_tokens, k, temperature, top_k, top_p,
                     generator):
    stats = Stats(k=k, accepted_per_position=[0] * k)
    target_scorer, draft_scorer = as_scorer(target), as_scorer(draft)
    rng = TorchUniform(generator)
    goal = idx.shape[1] + max_new_tokens
    while idx.shape[1] < goal:
        n = idx.shape[1]
        k_round = min(k, goal - n - 1)  # never propose tokens we would not keep
        # 1. The draft proposes k_round tokens, one forward pass each.
        started = time.perf_counter()
        seq, draft_tokens, draft_probs = idx, [], []
        for _ in range(k_round):
            logits = draft_scorer.score(seq, seq.shape[1])[0, -1]           # (V,)
            if temperature == 0:
                token = int(logits.argmax())
            else:
                probs = warp(logits, temperature, top_k, top_p)             # (V,)
                token = int(torch.multinomial(probs, 1, generator=generator))
                draft_probs.append(probs)
            draft_tokens.append(token)
            seq = torch.cat([seq, torch.tensor([[token]], device=seq.device)], dim=1)
        _sync(draft)
        # 2. The target scores the last accepted token and all proposals in one pass.
        drafted = time.perf_counter()
        passes_before = getattr(target_scorer, "passes", 0)
        target_logits = target_scorer.score(seq, n)[0]                     # (k_round+1, V)
        # 3. Keep the proposals the target agrees with, and add the target's own next token.
        if temperature == 0:
            choices = target_logits.argmax(-1).tolist()                    # (k_round+1,)
            n_accepted = 0
            while n_accepted < k_round and draft_tokens[n_accepted] == choices[n_accepted]:
                n_accepted += 1
            next_token = choices[n_accepted]
        else:
            target_probs = warp(target_logits, temperature, top_k, top_p).cpu().numpy()
            draft_array = (torch.stack(draft_probs).cpu().numpy() if draft_probs
                           else np.zeros((0, target_probs.shape[1])))
            n_accepted, next_token = verify(target_probs, draft_array, draft_tokens, rng)
        _sync(target)
        idx = torch.cat([seq[:, :n + n_accepted],
                         torch.tensor([[next_token]], device=seq.device)], dim=1)
        # Count what happened.
        stats.draft_time += drafted - started
        stats.target_time += time.perf_counter() - drafted
        stats.rounds += 1
        stats.draft_passes += k_round
        stats.target_passes += max(1, getattr(target_scorer, "passes", 1) - passes_before)
        stats.proposed += k_round
        stats.accepted += n_accepted
        for i in range(n_accepted):
            stats.accepted_per_position[i] += 1
        stats.new_tokens += n_accepted + 1
        stats.trace.append((draft_tokens, n_accepted, next_token))
    return idx, stats


# ----------------------------------------------------------------------------------------------
# Acceptance measured on held-out text


@dataclass
class Agreement:
    alpha: float             # mean over positions of sum_x min(target(x), draft(x))
    greedy_agreement: float  # fraction of positions where both argmaxes are equal
    positions: int


@torch.no_grad()
def measure_agreement(target, draft, data, *, windows=64, window=None, temperature=1.0,
                      top_k=None, top_p=None):
    """alpha and greedy agreement of draft with target on `data` (a 1-D LongTensor).

    Both models read the same `windows` evenly spaced windows of `data`; every position of every
    window counts. alpha is measured on the distributions decoding would sample from
    (temperature, top-k, top-p applied to both), so at temperature 1 it is the lesson's
    sum_x min(p(x), q(x)); greedy agreement is alpha at temperature 0.
    """
    sizes = [m.c.block_size for m in (target, draft) if hasattr(m, "c")]
    window = window or min(sizes or [64])
    if len(data) < window + 1:
        raise ValueError(f"need at least {window + 1} tokens of data, got {len(data)}")
    starts = torch.linspace(0, len(data) - window - 1, windows).long()
    x = torch.stack([data[s:s + window] for s in starts])                  # (W, T)
    logits = []
    for model in (target, draft):
        if hasattr(model, "c"):  # a GPT (torch or NumPy): all positions in one pass
            device = next(model.parameters()).device if hasattr(model, "parameters") else "cpu"
            logits.append(model(x.to(device))[0].cpu())                    # (W, T, V)
        else:
            model = as_scorer(model)
            logits.append(torch.stack([model.score(row[None], 1)[0] for row in x]))
    target_logits, draft_logits = logits
    target_probs = warp(target_logits, temperature, top_k, top_p)
    draft_probs = warp(draft_logits, temperature, top_k, top_p)
    alpha = torch.minimum(target_probs, draft_probs).sum(-1).mean().item()
    agree = (target_logits.argmax(-1) == draft_logits.argmax(-1)).double().mean().item()
    return Agreement(alpha=alpha, greedy_agreement=agree, positions=x.numel())


def alpha(target, draft, data, **kwargs):
    """Measured alpha: the mean over positions of sum_x min(p(x), q(x)) on held-out `data`."""
    return measure_agreement(target, draft, data, **kwargs).alpha


# ----------------------------------------------------------------------------------------------
# The lesson's formulas (Leviathan et al. 2023, section 3)


def expected_tokens_per_pass(alpha, k):
    """1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha): tokens per target pass when
    each draft token is accepted with probability alpha, independently."""
    if alpha == 1:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_speedup(alpha, k, c, verify_cost=1.0):
    """Wall-clock speed-up over plain decoding: tokens per pass over the cost of a round, k draft
    steps at c each plus one verification pass (verify_cost target steps; 1 in the lesson)."""
    return expected_tokens_per_pass(alpha, k) / (k * c + verify_cost)


def break_even_alpha(k, c, verify_cost=1.0):
    """The alpha above which speculation beats plain decoding (nan if none below 1 does)."""
    if expected_speedup(1.0, k, c, verify_cost) <= 1:
        return math.nan
    low, high = 0.0, 1.0  # expected_speedup grows with alpha: bisect
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if expected_speedup(mid, k, c, verify_cost) < 1 else (low, mid)
    return (low + high) / 2


def best_k(alpha, c, verify_cost=1.0, k_max=32):
    """The k from 1 to k_max with the highest expected speed-up."""
    return max(range(1, k_max + 1), key=lambda k: expected_speedup(alpha, k, c, verify_cost))
