"""
classroom/making.py: the random tiny models every check runs on (the fixtures), and what the
big model itself does with them (its logits, its greedy text, its sampling distribution).

Made in the grader's own process with torch and gpt.py, never from a student's file, once per
seed: other weights, prompts and, at every seed but 0, other shapes. The window rule is written
out again here (a test keeps it equal to lessonkit.scorer.window_start): a student's broken
speculative.py must not break the checks of exercise 3.
"""

import hashlib
import json
import math
from collections import deque
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gpt import GPT, Config, export_npz

VOCAB = list("abcdefgh")
BLOCK = 16


def window_start(n, block_size):
    """Where the context of token n starts (the rule of scorer.window_start)."""
    if n <= block_size:
        return 0
    keep = max(1, block_size // 2)
    stride = block_size + 1 - keep
    return -(-(n - block_size) // stride) * stride


def random_gpt(config, generator):
    """A GPT with weights large enough that its choices are clear (no near-ties)."""
    model = GPT(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(0.4 * torch.randn(p.shape, generator=generator))
    return model


def constant_gpt(config, token):
    """A GPT whose most likely next token is always `token`: everything zero but a bias in the
    final LayerNorm that points at that token's embedding (the head is tied to it)."""
    model = GPT(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        direction = torch.zeros(config.n_embd)
        direction[0] = 1.0
        model.transformer.ln_f.bias.copy_(direction)
        model.transformer.wte.weight[token] = 5 * direction
    return model


def next_logits(model, seq):
    """The model's logits (V,) for the token after seq, from its window."""
    n = len(seq)
    context = torch.tensor([seq[window_start(n, model.c.block_size):]])
    with torch.no_grad():
        return model(context)[0][0, -1]


def greedy(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(next_logits(model, seq).argmax()))
    return seq


def distribution(logits, temperature, top_k=None):
    """softmax(logits / temperature), keeping only the top_k most likely tokens."""
    logits = logits.double() / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k).values[-1]
        logits = torch.where(logits < kth, torch.tensor(-float("inf"), dtype=logits.dtype),
                             logits)
    return torch.softmax(logits, -1)


def first_two(model, prompt, temperature, top_k=None):
    """The exact joint distribution (V, V) of the first two sampled tokens."""
    first = distribution(next_logits(model, prompt), temperature, top_k)
    rows = [first[a] * distribution(next_logits(model, prompt + [a]), temperature, top_k)
            for a in range(len(first))]
    return torch.stack(rows).numpy()


PUBLIC_SHAPE = (2, 2, 16)  # (n_layer, n_head, n_embd) of the big model at the public seed, 0
HIDDEN_SHAPES = [(layers, heads, width) for layers in (1, 2, 3) for heads in (1, 3, 4)
                 for width in (12, 24)]  # wider or deeper, sampling gets too peaked to test


def target_shape(seed):
    """(n_layer, n_head, n_embd) of the big model at `seed`: the public one at seed 0, another at
    every other seed (never 2 heads), so that a forward pass that hard-codes what the public
    checks show fails every hidden seed."""
    return PUBLIC_SHAPE if seed == 0 else HIDDEN_SHAPES[seed % len(HIDDEN_SHAPES)]


def make(folder, seed):
    """Write the fixtures of `seed` into folder; returns folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(torch_seed(seed))
    rng = np.random.default_rng(seed)
    layers, heads, width = target_shape(seed)
    target_config = Config(vocab_size=len(VOCAB), block_size=BLOCK, n_layer=layers,
                           n_head=heads, n_embd=width)
    draft_config = Config(vocab_size=len(VOCAB), block_size=BLOCK, n_layer=1, n_head=2, n_embd=8)
    target, draft = random_gpt(target_config, generator), random_gpt(draft_config, generator)

    cases = []  # greedy: prompt, length, k, the big model's own greedy output
    for length in (5, 2 * BLOCK, 3 * BLOCK):
        prompt = rng.integers(0, len(VOCAB), int(rng.integers(1, 6))).tolist()
        cases.append({"prompt": prompt, "n": length, "k": int(rng.integers(1, 7)),
                      "expected": greedy(target, prompt, length)})
    used = {t for case in cases for t in case["expected"][len(case["prompt"]):]}
    never = min(range(len(VOCAB)), key=lambda t: (t in used, t))  # a token the target avoids
    hopeless = constant_gpt(draft_config, never)

    tokens = rng.integers(0, len(VOCAB), BLOCK).tolist()
    with torch.no_grad():
        logits = {name: model(torch.tensor([tokens]))[0][0].numpy()
                  for name, model in (("target", target), ("draft", draft))}
        with attention_scaled_by_width():      # a common mistake, to name it (checks.py)
            logits |= {f"{name}_width_scaled": model(torch.tensor([tokens]))[0][0].numpy()
                       for name, model in (("target", target), ("draft", draft))}
    prompt = rng.integers(0, len(VOCAB), 3).tolist()
    sampling = {"prompt": prompt,
                "plain": first_two(target, prompt, 1.0).tolist(),
                "top_k": first_two(target, prompt, 0.8, top_k=3).tolist()}
    for name, model in (("target", target), ("draft", draft), ("hopeless", hopeless)):
        export_npz(model, folder / f"{name}.npz", characters=VOCAB)
    np.savez(folder / "logits.npz", tokens=np.array(tokens), **logits)
    (folder / "cases.json").write_text(json.dumps(
        {"seed": seed, "greedy": cases, "never": never, "sampling": sampling}))
    return folder


def torch_seed(seed):
    """torch's seed (64 bits) for a seed of any size: 1000 + seed for the small ones (the public
    seed's fixtures stay those of before), a hash of the others (a 128-bit hidden seed)."""
    if 0 <= seed < 2 ** 62:
        return 1000 + seed
    return int.from_bytes(hashlib.sha256(f"classroom {seed}".encode()).digest()[:8], "little")


class attention_scaled_by_width:
    """While active, gpt.py's attention scales its scores by sqrt(C) (the model's width)
    instead of sqrt(head size): what a forward pass with that mistake computes."""

    def __enter__(self):
        self.real = F.scaled_dot_product_attention

        def wrong(q, k, v, *args, **kwargs):             # q: (B, nh, T, hs)
            return self.real(q, k, v, *args, **kwargs,
                             scale=1 / math.sqrt(q.shape[1] * q.shape[-1]))
        F.scaled_dot_product_attention = wrong

    def __exit__(self, *exc):
        F.scaled_dot_product_attention = self.real


def torch_model(folder, name):
    """The fixture model `name` of folder as a torch GPT (from the .npz that make() wrote)."""
    with np.load(Path(folder) / f"{name}.npz", allow_pickle=False) as f:
        config = json.loads(str(f["meta.config"]))
        state = {k: torch.from_numpy(f[k]) for k in f.files if not k.startswith("meta.")}
    model = GPT(Config(**config)).eval()
    model.load_state_dict(state)
    return model


def mistaken(folder, name, tokens, pieces, mistake):
    """The logits (T, V) of fixture model `name` for tokens fed through one cache in `pieces`
    (a, b), computed with a known mistake, to name it: "from 0", each call's positions start at
    0, not at the cache's length; "no mask", every token attends to all of its call's tokens."""
    model = torch_model(folder, name)                      # a copy of its own, to change
    if mistake == "no mask":
        for block in model.transformer.h:
            block.attn.mask.fill_(True)                    # (the mask a call with a cache uses)
    cache, wpe, rows = model.new_cache(), model.transformer.wpe.weight, []
    with torch.no_grad():
        right = wpe.clone()
        for a, b in pieces:
            if mistake == "from 0":
                wpe[a:b] = right[:b - a]                   # positions a .. b-1 look like 0 ..
            rows.append(model(torch.tensor([tokens[a:b]]), cache=cache)[0][0].numpy())
            wpe.copy_(right)
    return np.concatenate(rows)


class Recorder:
    """The grader's side of the stand-ins (helpers.standin): logits of the torch models for the
    windows a student's code feeds, with every call and token counted per role."""

    def __init__(self, models):
        self.models = models                       # role -> torch GPT
        self.calls = dict.fromkeys(models, 0)
        self.tokens = dict.fromkeys(models, 0)
        self.lengths = {role: deque(maxlen=20) for role in models}  # of the last texts scored
        self._cache = {}

    def reset(self):
        self.calls = dict.fromkeys(self.models, 0)
        self.tokens = dict.fromkeys(self.models, 0)

    def logits(self, role, window, new):
        model = self.models[role]
        seq = list(window) + list(new)
        V, block = model.c.vocab_size, model.c.block_size
        if not new or len(seq) > block or \
                not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < V for t in seq):
            raise ValueError(f"forward takes 1 to {block} token ids in 0..{V - 1} (with the "
                             "cache's)")
        self.calls[role] += 1
        self.tokens[role] += len(new)
        self.lengths[role].append(len(seq))
        key = (id(model), tuple(seq))
        if len(self._cache) > 100_000:            # a worker asking for every window there is
            self._cache.clear()
        if key not in self._cache:
            with torch.no_grad():
                self._cache[key] = model(torch.tensor([seq]))[0][0].numpy()
        return self._cache[key][len(window):]
