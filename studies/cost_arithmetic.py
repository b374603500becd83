"""
studies/cost_arithmetic.py: what a run costs, from the models' shapes: multiply-adds per
position scored and weights read per pass, totalled over speculative runs against plain
decoding of the same tokens (studies/sampling_costs.py and notebook 6 use it).
"""

from collections import Counter

from lessonkit.scorer import window_start

BYTES = 4                                           # float32 weights

# Scoring one position whose window holds `keys` tokens (the new one included) through a GPT of
# n_layer blocks of width C with vocabulary V takes, in multiply-adds (MACs):
#     per block  3 C^2 (queries, keys, values) + C keys (scores) + C keys (weighted values)
#                + C^2 (attention output) + 8 C^2 (MLP: C -> 4C -> C)  =  12 C^2 + 2 C keys
#     head       C V (the final projection to the vocabulary)
#     total      n_layer (12 C^2 + 2 C keys) + C V;   FLOPs = 2 MACs
# LayerNorms, GELU, softmax and the embedding look-ups (O(C) or O(keys)) are left out. A pass
# reads every weight once: n_layer (12 C^2 + 13 C) (blocks) + 2 C (final LayerNorm) + V C (head,
# tied to the token embedding) parameters, 4 bytes each. The KV cache it reads and the window's
# re-encoding after a jump are the same for plain and speculative decoding: left out too.


def macs_per_position(c, keys):
    """Multiply-adds of one position through a GPT of config c with `keys` tokens in view."""
    C = c.n_embd
    return c.n_layer * (12 * C * C + 2 * C * keys) + C * c.vocab_size


def weights_read(c):
    """Parameters one forward pass of a GPT of config c reads (the position table's one row and
    the token embedding's rows are left out; the head, tied to the embedding, is read whole)."""
    C = c.n_embd
    return c.n_layer * (12 * C * C + 13 * C) + 2 * C + c.vocab_size * C


def parameter_count(c):
    """Every parameter of a gpt.GPT of config c (the head is tied to the token embedding)."""
    return weights_read(c) + c.block_size * c.n_embd


def keys_at(m, block_size):
    """Tokens in view when position m is scored: window_start(m) .. m - 1."""
    return m - window_start(m, block_size)


def draft_costs(draft):
    """(MACs of one guess at position m, parameters one guess reads) for a drafter: a GPT
    (one pass of its own per guess), or the extra heads (one residual block C x C and one
    projection C x V on a state the big model already computed)."""
    if hasattr(draft, "c"):
        c = draft.c
        return (lambda m: macs_per_position(c, keys_at(m, c.block_size))), weights_read(c)
    if hasattr(draft, "fc_w"):
        C, V = draft.fc_w.shape[1], draft.vocab_size
        return (lambda m: C * C + C * V), C * C + C + C * V
    return (lambda m: 0), 0                                          # a table look-up


def run_costs(target_c, draft, runs):
    """Positions, MACs and weights read of speculative runs and of plain decoding writing the
    same tokens. runs: (prompt length, Stats) per prompt; each Stats' trace is replayed: a round
    starting at length n with k_round guesses scores positions n .. n + k_round with the target
    and n .. n + k_round - 1 with the draft, and adds kept + 1 tokens."""
    guess_macs, guess_weights = draft_costs(draft)
    block = target_c.block_size
    out = Counter()
    for prompt_len, stats in runs:
        n = prompt_len
        for proposed, kept, _ in stats.trace:
            k_round = len(proposed)
            out["target_macs"] += sum(macs_per_position(target_c, keys_at(m, block))
                                      for m in range(n, n + k_round + 1))
            out["draft_macs"] += sum(guess_macs(m) for m in range(n, n + k_round))
            n += kept + 1
        out["plain_macs"] += sum(macs_per_position(target_c, keys_at(m, block))
                                 for m in range(prompt_len, n))
        out["new_tokens"] += n - prompt_len
        for key in ("target_positions", "draft_positions", "target_passes", "draft_passes"):
            out[key] += getattr(stats, key)
    new = max(1, out["new_tokens"])
    W = weights_read(target_c)
    plain_bytes = BYTES * W                                          # one pass per token
    spec_bytes = BYTES * (out["target_passes"] * W + out["draft_passes"] * guess_weights) / new
    spec_macs = out["target_macs"] + out["draft_macs"]
    return {**out,
            "wasted_positions": out["target_positions"] - out["new_tokens"],
            "positions_per_token": out["target_positions"] / new,
            "plain_flops_per_token": 2 * out["plain_macs"] / new,
            "spec_flops_per_token": 2 * spec_macs / new,
            "draft_flops_share": out["draft_macs"] / max(1, spec_macs),
            "plain_bytes_per_token": plain_bytes, "spec_bytes_per_token": spec_bytes,
            # What the speed-up would be if time followed only one of them:
            "compute_bound_speedup": out["plain_macs"] / max(1, spec_macs),
            "memory_bound_speedup": plain_bytes / spec_bytes}
