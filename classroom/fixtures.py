"""
classroom/fixtures.py: the random tiny models every check runs on, and what they must produce.

Made in the grader's own process with torch (imported only here, not by the checks) and gpt.py, then saved for the checks, which run in
other processes (exercise 3's without torch). The expected values are computed here from the
torch model directly, never from a student's file: a syntax error in speculative.py must cost
that file's parts, not the checks of exercise 3. That is why the window rule and the sampling
distribution are written out again below, as independent references (a test keeps the window
rule equal to numpy_speculative.window_start).

Each seed gives other weights, other prompts and, for odd seeds, other shapes; the public
checks use seed 0, the hidden ones the teacher's CLASSROOM_SEED.
"""

import json
from pathlib import Path

import numpy as np

VOCAB = list("abcdefgh")
BLOCK = 16


def window_start(n, block_size):
    """Where the context of token n starts (the rule of numpy_speculative.window_start)."""
    if n <= block_size:
        return 0
    keep = max(1, block_size // 2)
    stride = block_size + 1 - keep
    return -(-(n - block_size) // stride) * stride


def random_gpt(config, generator):
    """A GPT with weights large enough that its choices are clear (no near-ties)."""
    import torch
    from gpt import GPT
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
    import torch
    from gpt import GPT
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
    import torch
    n = len(seq)
    context = torch.tensor([seq[window_start(n, model.c.block_size):]])
    with torch.no_grad():
        return model(context)[0][0, -1]


def greedy(model, prompt, n):
    import torch
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(next_logits(model, seq).argmax()))
    return seq


def distribution(logits, temperature, top_k=None):
    """softmax(logits / temperature), keeping only the top_k most likely tokens."""
    import torch
    logits = logits.double() / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k).values[-1]
        logits = torch.where(logits < kth, torch.tensor(-float("inf"), dtype=logits.dtype),
                             logits)
    return torch.softmax(logits, -1)


def first_two(model, prompt, temperature, top_k=None):
    """The exact joint distribution (V, V) of the first two sampled tokens."""
    import torch
    first = distribution(next_logits(model, prompt), temperature, top_k)
    rows = [first[a] * distribution(next_logits(model, prompt + [a]), temperature, top_k)
            for a in range(len(first))]
    return torch.stack(rows).numpy()


def make(folder, seed):
    """Write the fixtures of `seed` into folder; returns folder."""
    import torch
    from gpt import Config, export_npz
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(1000 + seed)
    rng = np.random.default_rng(seed)
    heads, width = (2, 16) if seed % 2 == 0 else (4, 24)
    target_config = Config(vocab_size=len(VOCAB), block_size=BLOCK, n_layer=2, n_head=heads,
                           n_embd=width)
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


def load(folder):
    return json.loads((Path(folder) / "cases.json").read_text())
