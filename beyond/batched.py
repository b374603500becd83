"""
beyond/batched.py: plain and speculative decoding of a whole batch at once, every row accepting
its own number of guesses per round ("ragged" acceptance); prompts may differ in length.

    outs = batched.generate(model, [ids_a, ids_b, ...], 100)                    # lists out
    outs, stats = batched.speculative_generate(target, draft, [ids_a, ...], 100, k=4)

How rows of different lengths share a pass: docs/DESIGN.md, "beyond/, module by module".
Shapes: B batch, R rows in a pass, T new tokens, S slots, E slots attended, V, nh, hs.
"""

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

import speculative as sd
from beyond.backends import is_numpy
from gpt import GPT, KVCache
from lessonkit import machine
from lessonkit.scorer import WindowScorer
from speculative import ModelDraft, Sampling, as_drafter


def batchable(model):
    """Can `model` decode many rows in one pass here? gpt.GPT and fast_numpy.NumpyGPT can."""
    return isinstance(model, GPT) or is_numpy(model)


# ----------------------------------------------------------------------------------------------
# The ragged KV cache and the forward pass over rows of different lengths


def ragged_cache(model, batch_size):
    """Storage for the keys and values of B rows, each with its own length and window (the
    scorer keeps which tokens each row holds). v: (n_layer, B, nh, S, hs), S = block_size + 1:
    the last slot takes the padding's keys and values and is never attended to. A NumpyGPT
    keeps its own layout (NumpyGPT.ragged_cache)."""
    if not isinstance(model, GPT):
        return model.ragged_cache(batch_size)
    c, p = model.c, model.lm_head.weight
    shape = (c.n_layer, batch_size, c.n_head, c.block_size + 1, c.n_embd // c.n_head)
    return RaggedCache(torch.zeros(shape, device=p.device, dtype=p.dtype),
                       torch.zeros(shape, device=p.device, dtype=p.dtype))


class RaggedCache(KVCache):
    """gpt.GPT's cache for rows of their own lengths: a pass's `rows`, the slot each new token's
    keys go to (`write` (R, T)) and the slots attended (`E`) are set before it (place); then the
    model's own attention appends through it (KVCache.append's contract)."""

    def place(self, rows, write, E):
        device = self.k.device
        self.r, self.E = torch.from_numpy(rows[:, None]).to(device), E           # (R, 1)
        sel = rows_index(rows)
        self.sel = sel if isinstance(sel, slice) else torch.from_numpy(sel).to(device)
        self.write = torch.from_numpy(write).to(device)                          # (R, T)

    def append(self, layer, k, v):                                  # k, v (R, nh, T, hs)
        self.k[layer][self.r, :, self.write] = k.transpose(1, 2)
        self.v[layer][self.r, :, self.write] = v.transpose(1, 2)
        return self.k[layer][self.sel, :, :self.E], self.v[layer][self.sel, :, :self.E]


def visible(slots, E):
    """(R, T, E): may the new token at slots[r, i] attend to slot j? Only for j <= slots[r, i]:
    not the future, and not a stale entry beyond the row's length."""
    return np.arange(E) <= slots[:, :, None]


def layout(segments, block_size):
    """Rows of a pass -> (rows (R,), tokens (R, T), slots (R, T), write (R, T), E).

    segments: (row, new tokens, first slot) each. slots: where each new token sits (its
    position in its window); write: where its keys go (padding: the spare slot block_size);
    E: the slots any row attends to."""
    R, T = len(segments), max(len(new) for _, new, _ in segments)
    tokens = np.zeros((R, T), np.int64)
    first = np.empty(R, np.int64)
    ends = np.empty(R, np.int64)
    for i, (_, new, slot) in enumerate(segments):
        tokens[i, :len(new)] = new
        first[i], ends[i] = slot, slot + len(new)
    slots = first[:, None] + np.arange(T)                          # (R, T)
    write = np.where(slots < ends[:, None], slots, block_size)     # padding -> the spare slot
    rows = np.array([row for row, _, _ in segments])
    return rows, tokens, np.minimum(slots, block_size - 1), write, int(ends.max())


def rows_index(rows):
    """rows as a slice when they are consecutive (a view, no copy), else as they are."""
    if rows[-1] - rows[0] == len(rows) - 1 and (np.diff(rows) == 1).all():
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def numpy_forward(model, cache, rows, tokens, slots, write, E):
    """fast_numpy.NumpyGPT over rows of different lengths -> logits (R, T, V) (see layout)."""
    return model.forward_rows(cache, rows, rows_index(rows), tokens, slots, write,
                              visible(slots, E))


@torch.inference_mode()
def torch_forward(model, cache, rows, tokens, slots, write, E):
    """gpt.GPT over rows of different lengths, its own forward pass with each token's position
    (its slot), the rows' mask and the ragged cache -> logits (R, T, V) as a NumPy array."""
    device = cache.k.device
    cache.place(rows, write, E)
    logits, _ = model(torch.from_numpy(tokens).to(device), cache=cache,
                      positions=torch.from_numpy(slots).to(device),
                      mask=torch.from_numpy(visible(slots, E)[:, None]).to(device))  # (R,1,T,E)
    return logits.float().cpu().numpy()                                            # (R, T, V)


class BatchScorer(WindowScorer):
    """scorer.WindowScorer for rows that drift apart: the same window rule and rollback, but
    each row keeps its own length in a ragged cache, and a pass runs the per-row forward over
    the rows taking part (score_rows(seqs, {row: first position})). Rows whose window jumps
    are re-encoded in a pass after the others, as there."""

    def __init__(self, model, batch_size):
        super().__init__(model, batch_size)
        self.cache = ragged_cache(model, batch_size)
        self.forward = torch_forward if isinstance(model, GPT) else numpy_forward
        on_cpu = not isinstance(model, GPT) or not model.lm_head.weight.is_cuda
        self.chunk = CHUNK if on_cpu else math.inf
        self.row_passes = [0] * batch_size     # passes each row took part in
        self.encode_seconds = 0.0              # in passes where some row starts its window

    def run(self, segments):
        """One pass over (row, new tokens, first slot) segments: {row: logits (len(new), V)}."""
        logits, started = {}, time.perf_counter()
        for part in chunks(segments, self.chunk):
            out = self.forward(self.model, self.cache, *layout(part, self.block_size))  # (R,T,V)
            for i, (b, new, _) in enumerate(part):
                logits[b] = out[i, :len(new)]
                self.row_passes[b] += 1
        self.passes += 1
        if any(slot == 0 for _, _, slot in segments):  # the prompt, or a window re-encoded
            self.encode_seconds += time.perf_counter() - started
        return logits


# On a CPU a pass over many tokens (prompts, re-encoded windows) runs in chunks of rows of about
# this many tokens, so that its working set stays in the CPU's caches: measured, 16 rows x 64
# tokens took less time a row in calls of 4 rows than in one call. It still counts as one pass.
CHUNK = 256


def chunks(group, tokens):
    """The rows of a pass, in chunks of at most `tokens` new tokens (one row at least)."""
    longest = max(len(new) for _, new, _ in group)
    size = len(group) if tokens == math.inf else max(1, tokens // longest)
    return [group[i:i + size] for i in range(0, len(group), size)]


# ----------------------------------------------------------------------------------------------
# Input checks


def rows_of(prompts, vocab_size, models=()):
    """Prompts ((B, T) LongTensor, or a list of token lists / 1-D tensors) -> B lists of ids,
    after checking that the models' caches for B rows fit in memory (check_memory)."""
    if torch.is_tensor(prompts) and prompts.dim() != 2:
        raise ValueError("prompts are a (B, T) LongTensor or a list of token-id lists")
    if not (torch.is_tensor(prompts) or isinstance(prompts, (list, tuple))) or not len(prompts):
        raise ValueError("give at least one prompt: a (B, T) LongTensor or a list of token lists")
    check_memory(models, len(prompts))
    if torch.is_tensor(prompts):
        prompts = prompts.tolist()
    seqs = []
    for b, p in enumerate(prompts):
        seq = p.tolist() if torch.is_tensor(p) else list(p)
        if torch.is_tensor(p) and p.dim() == 2 and len(seq) == 1:
            seq = seq[0]                               # a (1, T) tensor, as gpt.encode users make
        if not seq:
            raise ValueError(f"prompt {b} is empty; give every row at least one character")
        bad = [t for t in seq if isinstance(t, bool) or not isinstance(t, (int, np.integer))
               or not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt {b} holds {bad[0]!r}, not a token id of the vocabulary "
                             f"(0..{vocab_size - 1}); encode text with gpt.encode")
        seqs.append([int(t) for t in seq])
    return seqs


def cache_bytes(model, batch_size):
    """Bytes of a RaggedCache: B x layers x (block + 1) x C x 2 (keys, values) x 4 (float32)."""
    c = model.c
    item = model.lm_head.weight.element_size() if isinstance(model, GPT) else 4
    return batch_size * c.n_layer * (c.block_size + 1) * c.n_embd * 2 * item


def available_memory(model):
    """Bytes free where the model's cache would live (the GPU's, or the machine's)."""
    if isinstance(model, GPT) and model.lm_head.weight.is_cuda:
        return torch.cuda.mem_get_info(model.lm_head.weight.device)[0]
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f
                        if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return math.inf


def check_memory(models, batch_size):
    """A one-line error, before anything is allocated, when the caches would not fit."""
    for model in models:
        need, free = cache_bytes(model, batch_size), available_memory(model)
        if need > free / 2:  # the other half: activations, weights, everything else
            raise ValueError(f"a batch of {batch_size} rows needs {need / 2**30:.1f} GiB of KV "
                             f"cache, more than half of the {free / 2**30:.1f} GiB free; decode "
                             f"it in smaller batches")


# ----------------------------------------------------------------------------------------------
# Decoding


@dataclass
class BatchStats(sd.Stats):
    """speculative.Stats for a batch (docs/API.md). encode_time: seconds (within draft_time and
    target_time) of the passes that encode rows from their window's start (prompts, jumps)."""
    batch_passes: int = 0
    batch_draft_passes: int = 0
    batch_rounds: int = 0
    encode_time: float = 0.0
    rows: list = field(default_factory=list, repr=False)

    @property
    def tokens_per_batch_pass(self):             # the whole batch's new tokens per shared pass
        return self.new_tokens / self.batch_passes if self.batch_passes else 0.0


def next_tokens(scorer, seqs, rows, sampling):
    """One pass of `scorer` over `rows`: each row's next token, the argmax or a draw from the
    warped distribution (returned too, (R, V), for the acceptance rule)."""
    logits = scorer.score_rows(seqs, {b: len(seqs[b]) for b in rows})
    last = np.stack([logits[b][-1] for b in rows])                                # (R, V)
    if sampling.greedy:
        return last.argmax(-1).tolist(), None
    probs = sampling.warp(last)
    return [sampling.draw(p) for p in probs], probs


def _output(seqs, prompts):
    """A (B, T) tensor when the prompts came as one (all rows grew alike), else lists."""
    if torch.is_tensor(prompts) and prompts.dim() == 2:
        return torch.tensor(seqs, dtype=torch.long, device=prompts.device)
    return seqs


@torch.no_grad()
def generate(model, prompts, max_new_tokens, *, temperature=0.0, top_k=None, top_p=None,
             generator=None, stats=None, threads=machine.DECODE_THREADS):
    """Plain decoding of every row at once, one batched pass per token (speculative.generate's
    arguments). Rows may differ in length; each row's output is plain decoding of it alone."""
    seqs = rows_of(prompts, model.c.vocab_size, [model])
    sd.check_decoding_args(torch.zeros(1, 1, dtype=torch.long), max_new_tokens, temperature,
                            top_k, top_p)                # (the prompts were checked above)
    stats = stats if stats is not None else sd.Stats()
    scorer = BatchScorer(model, len(seqs))
    sampling = Sampling(temperature, top_k, top_p, sd.TorchUniform(generator))
    started = time.perf_counter()
    with machine.threads(threads):
        for _ in range(max_new_tokens):
            tokens, _ = next_tokens(scorer, seqs, range(len(seqs)), sampling)         # (B,)
            for seq, token in zip(seqs, tokens):
                seq.append(token)
        machine.sync(model)
    stats.target_passes += max_new_tokens * len(seqs)        # per row, as for one sequence
    if isinstance(stats, BatchStats):                        # (a window's re-encoding is a
        stats.batch_passes += max_new_tokens                 # cost in time, not a pass)
        stats.encode_time += scorer.encode_seconds
    stats.target_positions += max_new_tokens * len(seqs)
    stats.new_tokens += max_new_tokens * len(seqs)
    stats.target_time += time.perf_counter() - started
    return _output(seqs, prompts)


def batch_draft(draft):
    """The GPT that drafts for the whole batch at once, or None (propose row by row)."""
    if batchable(draft):
        return draft
    if type(draft) is ModelDraft and type(draft.scorer) is WindowScorer and \
            batchable(draft.scorer.model):
        return draft.scorer.model
    return None


@torch.no_grad()
def speculative_generate(target, draft, prompts, max_new_tokens, *, k=4, temperature=0.0,
                         top_k=None, top_p=None, generator=None, threads=machine.DECODE_THREADS):
    """Speculative decoding of every row at once. Returns (outputs, BatchStats): a (B, T+new)
    tensor for a tensor of prompts, else lists (rows may differ in length).

    Each round: the draft guesses up to k tokens per row (one batched pass per position), the
    target checks every row's guesses in one batched pass, each row keeps its own number."""
    model = batch_draft(draft)
    seqs = rows_of(prompts, sd.vocab_size_of(target),
                   [m for m in (target, model) if m is not None and batchable(m)])
    sd.check_decoding_args(torch.zeros(1, 1, dtype=torch.long), max_new_tokens, temperature,
                            top_k, top_p, k)
    sd.check_vocabularies(target, draft)
    drafter = None if model else as_drafter(draft)
    B, rng = len(seqs), sd.TorchUniform(generator)
    if not isinstance(k, int) or not batchable(target) or \
            (drafter is not None and drafter.scorer_for(target) is not None):
        return _row_by_row(target, draft, seqs, prompts, max_new_tokens, k, temperature, top_k,
                           top_p, generator, threads)
    checker, guesser = BatchScorer(target, B), (BatchScorer(model, B) if model else None)
    sampling = Sampling(temperature, top_k, top_p, rng)
    stats = BatchStats(k=k, rows=[sd.Stats(k=k) for _ in seqs])
    goals = [len(s) + max_new_tokens for s in seqs]
    active = [b for b in range(B) if len(seqs[b]) < goals[b]]
    with machine.threads(threads):
        while active:
            started = time.perf_counter()
            n = {b: len(seqs[b]) for b in active}
            k_row = {b: min(k, goals[b] - n[b] - 1) for b in active}  # never propose more
            probs = {b: [] for b in active}
            # 1. The draft guesses: one pass per position for every row still guessing.
            if model:
                for j in range(max(k_row.values())):
                    rows = [b for b in active if k_row[b] > j]
                    tokens, p = next_tokens(guesser, seqs, rows, sampling)
                    for i, (b, token) in enumerate(zip(rows, tokens)):
                        seqs[b].append(token)
                        if p is not None:
                            probs[b].append(p[i])
            else:  # a drafter with no batched path (the n-gram table): row by row
                for b in active:
                    if k_row[b]:
                        tokens, p = drafter.propose(seqs[b], k_row[b], sampling)
                        seqs[b] += tokens
                        probs[b] = [] if p is None else list(p)
            machine.sync(model or target)
            drafted = time.perf_counter()
            # 2. The target checks every row's last accepted token and guesses in ONE pass.
            logits = checker.score_rows(seqs, n)                           # {b: (k_b+1, V)}
            # 3. Each row keeps its own number of guesses and adds the target's token.
            for b in active:
                guesses, row = seqs[b][n[b]:], stats.rows[b]
                kept, token = sampling.verdict(logits[b], guesses, probs[b])
                del seqs[b][n[b] + kept:]
                seqs[b].append(token)
                row.count_round(guesses, kept, token)
                if drafter is not None:
                    drafter.kept(kept)
            machine.sync(target)
            stats.draft_time += drafted - started
            stats.target_time += time.perf_counter() - drafted
            stats.batch_rounds += 1
            active = [b for b in active if len(seqs[b]) < goals[b]]
    for b, row in enumerate(stats.rows):
        row.target_passes = row.rounds          # one check a round, as for one sequence
        row.draft_passes = guesser.row_passes[b] if guesser else row.proposed
        stats.add(row)                          # (a row has no times: those are the batch's)
    stats.batch_passes = stats.batch_rounds     # one shared check a round of the batch
    stats.batch_draft_passes = guesser.passes if guesser else stats.draft_passes
    stats.encode_time = checker.encode_seconds + (guesser.encode_seconds if guesser else 0.0)
    return _output(seqs, prompts), stats


def _row_by_row(target, draft, seqs, prompts, max_new_tokens, k, temperature, top_k, top_p,
                generator, threads):
    """An adaptive k, or a drafter that shares the target's pass (early exit, heads), or a
    target with no batched path: the rows one after another (speculative.decode_row)."""
    schedule = sd.FixedK(k) if isinstance(k, int) else k
    sampling = Sampling(temperature, top_k, top_p, sd.TorchUniform(generator))
    stats = BatchStats(k=schedule.k_max)
    with machine.threads(threads):
        for seq in seqs:
            row = sd.Stats(k=schedule.k_max)
            sd.decode_row(target, draft, seq, max_new_tokens, schedule, sampling, row)
            stats.rows.append(row)
            stats.add(row)
    stats.batch_passes, stats.batch_draft_passes = stats.target_passes, stats.draft_passes
    stats.batch_rounds = stats.rounds                    # (one row at a time: nothing shared)
    return _output(seqs, prompts), stats
