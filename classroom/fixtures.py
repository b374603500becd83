"""
classroom/fixtures.py: what the checks read of the random tiny models they run on (torch-free).

The models and the values they must produce are made by classroom/making.py in the grader's own
process with torch and gpt.py, then saved for the checks, which run in other processes
(exercise 3's without torch). The expected values come from the torch model directly, never from
a student's file: a syntax error in speculative.py must cost
that file's parts, not the checks of exercise 3. That is why the window rule and the sampling
distribution are written out again below, as independent references (a test keeps the window
rule equal to scorer.window_start).

Each seed gives other weights, other prompts and, for every seed but 0, other shapes; the public
checks use seed 0, the hidden ones the teacher's CLASSROOM_SEED.
"""

import json
from pathlib import Path

import numpy as np

VOCAB = list("abcdefgh")
BLOCK = 16


def window_start(n, block_size):
    """Where the context of token n starts (the rule of scorer.window_start)."""
    if n <= block_size:
        return 0
    keep = max(1, block_size // 2)
    stride = block_size + 1 - keep
    return -(-(n - block_size) // stride) * stride


def warp(logits, temperature=1.0, top_k=None):
    """Probabilities (..., V) after temperature and top-k, as numpy_speculative.warp makes them
    (an independent copy: the student's file may have changed that one)."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(logits.shape[-1])[logits.argmax(-1)]
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = np.sort(logits, -1)[..., -top_k, None]
        logits = np.where(logits < kth, -np.inf, logits)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return probs / probs.sum(-1, keepdims=True)


def load(folder):
    return json.loads((Path(folder) / "cases.json").read_text())
