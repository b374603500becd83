"""
classroom/helpers.py: what runs beside a student's code, in the worker (or a notebook's kernel):
the pieces of a check that call the student's function many times or patch what it sees
(stand-in models whose logits the grader computes, verify_grid, the simulated GPU of exercise 5,
the EAGLE draft of exercise 7, the trees of exercise 8, references lent to a part). They only
collect; every judgement is the check's, in the grader's process (checks.py), so a submission
that rewrites them changes only what its own code returns.
"""

import importlib
import time
import traceback
from pathlib import Path

import numpy as np

from classroom import wire


def student_frame(tb, root, files):
    """'(file, line N, in function)' of the last traceback frame in a student file (or in a
    notebook cell), or ''."""
    for frame in reversed(traceback.extract_tb(tb)):
        if "ipykernel" in frame.filename or frame.filename.startswith("<ipython-input"):
            return f" (your notebook cell, line {frame.lineno}, in {frame.name})"
        try:
            relative = Path(frame.filename).resolve().relative_to(root)
        except ValueError:
            continue
        if relative.as_posix() in files:
            return f" ({relative.as_posix()}, line {frame.lineno}, in {frame.name})"
    return ""


def describe(error, where=""):
    """An exception in one line: "TypeError: message" and `where` (student_frame())."""
    if isinstance(error, SyntaxError):
        return (f"SyntaxError: {error.msg} ({(error.filename or '?').rsplit('/', 1)[-1]}, "
                f"line {error.lineno})")
    if isinstance(error, wire.StudentError):
        return error.message
    text = f"{type(error).__name__}: {error}".strip()
    return f"{text[:1500]}{where}".strip()


# ----------------------------------------------------------------------------------------------
# Stand-ins: the grader's models, seen through the exercise's own forward()


def instrument(ns):
    """Make ns.forward (and so score(), generate() and the student's code, which call it by
    name) ask a stand-in's `grader_logits` for its logits; other models use the student's own."""
    if getattr(ns.forward, "grader_instrumented", False):
        return
    own = ns.forward

    def forward(model, tokens, cache=None):
        logits_of = getattr(model, "grader_logits", None)
        if logits_of is None:
            return own(model, tokens, cache)
        cache = cache if cache is not None else ns.Cache(model)
        start, T = cache.length, len(tokens)
        if start + T > model.block_size:
            raise ValueError(f"{start + T} tokens do not fit the window of {model.block_size}")
        tokens = [int(t) for t in tokens]
        logits = np.asarray(logits_of([int(t) for t in cache.tokens], tokens))   # (T, V)
        cache.tokens = cache.tokens + tokens
        return logits

    forward.grader_instrumented = True
    ns.forward = forward


def standin(ns, config, vocab, logits_of, memo=False):
    """A Model with config and vocabulary and no weights: its logits come from logits_of(window
    tokens, new tokens) -> (T, V). memo: ask once per window (for checks that count nothing)."""
    instrument(ns)
    model = ns.Model({}, dict(config), list(vocab))
    if memo:
        seen, ask = {}, logits_of

        def logits_of(window, new):
            key = (tuple(window), tuple(new))
            if key not in seen:
                seen[key] = np.asarray(ask(window, new))
            return seen[key]
    model.grader_logits = logits_of
    return model


def sample_many(speculative_sample, target, draft, prompt, n, k, rng, runs, options):
    """The tokens of `runs` runs of speculative_sample(target, draft, prompt, n, k, rng,
    **options), one list each (what came back, if not a list of tokens: its repr)."""
    out = []
    for _ in range(runs):
        tokens = speculative_sample(target, draft, list(prompt), n, k, rng, **options)
        try:
            out.append([int(t) for t in tokens])
        except (TypeError, ValueError):
            return repr(tokens)[:80]
    return out


def first_tokens(verify, target_probs, draft_probs, rng, runs):
    """For `runs` rounds of verify with guesses drawn from draft_probs by rng: (the first guess,
    kept, token) each, as an array (runs, 3), or the repr of a value that is not a pair."""
    out = np.zeros((runs, 3), dtype=np.int64)
    for i in range(runs):
        draft_tokens = [int(rng.choice(len(p), p=p)) for p in draft_probs]
        value = verify(target_probs, draft_probs, draft_tokens, rng)
        if not (isinstance(value, (tuple, list)) and len(value) == 2 and
                all(isinstance(v, (int, np.integer)) for v in value)):
            return repr(value)[:80]
        out[i] = draft_tokens[0], int(value[0]), int(value[1])
    return out


# ----------------------------------------------------------------------------------------------
# verify() on a grid of draws


class TooManyDraws(Exception):
    """verify drew more random numbers than the round allows."""


class GridUniforms:
    """An rng whose random() returns preset numbers, to enumerate every outcome of a round."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        if not self.values:
            raise TooManyDraws()
        return self.values.pop(0)


def verify_grid(verify, target_probs, draft_probs, grid):
    """verify(target_probs, draft_probs, [x], GridUniforms([u1, u2])) for every draft token x
    the draft can propose and every u1, u2 in grid: {x: [(kept, token), ...]} in grid order,
    or {"bad": repr} for a value that is not a pair of whole numbers, {"draws": ...} for a
    verify that drew more than two numbers."""
    out = {}
    for x in range(target_probs.shape[1]):
        if draft_probs[0, x] == 0:
            continue
        pairs = []
        for u1 in grid:
            for u2 in grid:
                try:
                    value = verify(target_probs, draft_probs, [x], GridUniforms([u1, u2]))
                except TooManyDraws:
                    return {"draws": True}
                if not (isinstance(value, (tuple, list)) and len(value) == 2 and
                        all(isinstance(v, (int, np.integer)) for v in value)):
                    return {"bad": repr(value)[:80]}
                pairs.append((int(value[0]), int(value[1])))
        out[x] = np.array(pairs, dtype=np.int64)
    return out


# ----------------------------------------------------------------------------------------------
# Exercise 5: a simulated GPU, and a real one


class FakeGPU:
    """torch.cuda on the CPU: work is queued by fn and finishes later, as on a real GPU.

    fn() queues 20 ms of work and returns at once; synchronize() waits for the queue;
    Event.record() marks the queue's end; elapsed_time() needs both events finished. launches
    counts the calls of fn()."""

    WORK = 0.02

    def __init__(self):
        self.busy_until = time.perf_counter()
        self.launches = 0

    def launch(self):
        self.launches += 1
        self.busy_until = max(time.perf_counter(), self.busy_until) + self.WORK

    def synchronize(self, device=None):
        time.sleep(max(0.0, self.busy_until - time.perf_counter()))

    def is_available(self):
        return True

    def Event(self, enable_timing=False):
        gpu = self

        class Event:
            stamp, timing = None, enable_timing

            def record(self, stream=None):
                self.stamp = max(time.perf_counter(), gpu.busy_until)

            def synchronize(self):
                time.sleep(max(0.0, self.stamp - time.perf_counter()))

            def elapsed_time(self, end):
                if not (self.timing and end.timing):
                    raise RuntimeError("Both events must be created with argument "
                                       "'enable_timing=True'.")
                if self.stamp is None or end.stamp is None:
                    raise RuntimeError("elapsed_time on an event that was never recorded")
                if end.stamp > time.perf_counter() + 1e-4:
                    raise RuntimeError("elapsed_time before the end event completed: "
                                       "synchronize first")
                return (end.stamp - self.stamp) * 1e3
        return Event()


GPU_CALLS = ("synchronize", "Event", "is_available")   # what torch.cuda's stand-in answers
EVENT_CALLS = ("record", "synchronize", "elapsed_time")


def use_gpu(gpu):
    """torch.cuda's synchronize, Event and is_available become `gpu`'s (a FakeGPU, or the
    grader's one through the wire); returns the functions they replaced."""
    import torch
    real = {name: getattr(torch.cuda, name) for name in GPU_CALLS}
    torch.cuda.synchronize = lambda device=None: gpu.synchronize()
    torch.cuda.Event = lambda enable_timing=False: gpu.Event(enable_timing)
    torch.cuda.is_available = lambda: True
    return real


def restore_gpu(real):
    import torch
    for name, function in real.items():
        setattr(torch.cuda, name, function)


def time_on_real_gpu(timer):
    """(CUDA events' seconds, timer's seconds) for the same work on a real GPU; None without."""
    import torch
    if not torch.cuda.is_available():
        return None
    x = torch.randn(2048, 2048, device="cuda")

    def work():
        for _ in range(20):
            x @ x
    work()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    work()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3, timer("cuda")(work, 5, warmup=2)


def torch_loss(loss_of, *arrays_and_options):
    """loss_of(tensors..., options...) on float32 tensors made from the NumPy arrays given
    (the others passed as they are): (its value, its gradient with respect to the first
    tensor), or a line that says what is wrong with it."""
    import torch  # this worker has torch (every check of a part that may use it)
    args = [torch.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) else a
            for a in arrays_and_options]
    loss = loss_of(*args)
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        return f"{type(loss).__name__}: {repr(loss)[:60]}"
    if loss.requires_grad:
        loss.backward()
    gradient = args[0].grad
    return float(loss.detach()), (np.zeros(args[0].shape) if gradient is None
                                  else gradient.numpy())


# ----------------------------------------------------------------------------------------------
# Exercise 7: the EAGLE draft, with the grader's weights


def eagle_draft(weights, n_head, window):
    """beyond.eagle.Eagle as the student's file defines it, holding the grader's weights
    ({state_dict name: float32 array}; n_embd is read from them), in eval mode."""
    import torch
    eagle_module, gpt = importlib.import_module("beyond.eagle"), importlib.import_module("gpt")
    C = int(weights["fc.bias"].shape[0])
    config = gpt.Config(block_size=8, vocab_size=1, n_layer=1, n_head=n_head, n_embd=C)
    eagle = eagle_module.Eagle(config, window)
    eagle.load_state_dict({name: torch.tensor(value) for name, value in weights.items()})
    return eagle.eval()


def tensors_back(value, count, what):
    """`count` tensors from a tuple or list as NumPy arrays, or a line that says what came back."""
    import torch
    if not (isinstance(value, (tuple, list)) and len(value) == count and
            all(isinstance(v, torch.Tensor) for v in value)):
        return f"{what}: got {type(value).__name__}: {repr(value)[:60]}"
    return [v.detach().cpu().numpy() for v in value]


def eagle_shift(shifted, features, idx):
    """shifted(features, idx) on tensors made from the arrays: its three tensors as arrays."""
    import torch
    return tensors_back(shifted(torch.tensor(features), torch.tensor(idx)), 3,
                        "shifted returns the tuple (states, tokens, targets) of tensors")


def eagle_rollout(eagle_roll, weights, n_head, window, features, seq, wte, lm_head, k):
    """eagle_roll(the draft, features, seq, wte, lm_head, k) on float32 tensors, without
    gradients: (guesses, logits (k, V)) as a list and an array, or a line that says what is
    wrong with what it returned."""
    import torch
    eagle = eagle_draft(weights, n_head, window)
    with torch.no_grad():
        out = eagle_roll(eagle, torch.tensor(features), [int(t) for t in seq],
                         torch.tensor(wte), torch.tensor(lm_head), k)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        return f"eagle_roll returns (guesses, logits): got {type(out).__name__}: {repr(out)[:60]}"
    guesses, logits = out
    if not isinstance(logits, torch.Tensor):
        return f"the logits are a torch tensor (k, V): got {type(logits).__name__}"
    try:
        guesses = [int(g) for g in guesses]
    except (TypeError, ValueError):
        return f"the guesses are a list of ints: got {repr(guesses)[:60]}"
    return guesses, logits.detach().float().cpu().numpy()


def eagle_loss_value(eagle_loss, weights, n_head, window, features, idx, wte, lm_head, noise,
                     ce_weight, seed):
    """eagle_loss(the draft, ...) on float32 tensors, with a torch generator seeded `seed`:
    (its value, {weight name: its gradient}), or a line that says what is wrong with it."""
    import torch
    eagle = eagle_draft(weights, n_head, window)
    loss = eagle_loss(eagle, torch.tensor(features), torch.tensor(idx), torch.tensor(wte),
                      torch.tensor(lm_head), noise=noise, ce_weight=ce_weight,
                      generator=torch.Generator().manual_seed(seed))
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        return f"{type(loss).__name__}: {repr(loss)[:60]}"
    if loss.requires_grad:
        loss.backward()
    return float(loss.detach()), {
        name: np.zeros(tuple(p.shape)) if p.grad is None else p.grad.numpy()
        for name, p in eagle.named_parameters()}


# ----------------------------------------------------------------------------------------------
# Exercise 8: trees, made here from plain data


class PlainTree:
    """A tree as the walks read beyond/tree_grow.Tree (tokens, parents, draft_probs, depths,
    children(), path_to()), made here: the walks are graded on the grader's trees, whatever the
    student's copy of tree_grow.py holds. shape: another PlainTree of the same parents, whose
    children and depths this one shares (trees by the thousand)."""

    def __init__(self, tokens, parents, draft_probs=None, shape=None):
        self.tokens, self.parents = [int(t) for t in tokens], [int(p) for p in parents]
        self.draft_probs = list(draft_probs) if draft_probs is not None else \
            [None] * len(self.parents)
        if shape is None:
            self.depths, self._children = [0] * len(self.parents), {}
            for a in range(1, len(self.parents)):
                self.depths[a] = self.depths[self.parents[a]] + 1
                self._children.setdefault(self.parents[a], []).append(a)
        else:
            self.depths, self._children = shape.depths, shape._children

    def children(self, node):
        return list(self._children.get(node, []))

    def path_to(self, node):
        path = []
        while node > 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def a_walk(value):
    """(path, token) as plain ints from a walk's return value, or None if it is not one."""
    try:
        path, token = value
        path = [int(a) for a in path]
        if isinstance(token, (bool, float)) or int(token) != token:
            return None
        return path, int(token)
    except (TypeError, ValueError):
        return None


def greedy_walks(greedy_walk, cases):
    """greedy_walk(tree, choices) on each case (tokens, parents, choices): [(path, token)], or
    the repr of a value that is not a pair (a list of nodes, a token)."""
    out = []
    for tokens, parents, choices in cases:
        value = greedy_walk(PlainTree(tokens, parents), [int(c) for c in choices])
        walk = a_walk(value)
        if walk is None:
            if isinstance(value, (tuple, list)) and len(value) == 2 and value[1] is None:
                return f"no token: {repr(value)[:60]}"
            return repr(value)[:80]
        out.append(walk)
    return out


def draw_rows(probs, rng):
    """One token from each row of probs (runs, V), rows summing to 1, one rng.random() each."""
    index = (np.cumsum(probs, 1) <= rng.random(len(probs))[:, None]).sum(1)
    past = index >= probs.shape[1]                      # a total rounded a hair below 1
    index[past] = probs.shape[1] - 1 - np.argmax(probs[past, ::-1] > 0, 1)
    return index


def sample_walks(sample_walk, parents, root_target, targets, root_draft, drafts, rng, runs):
    """`runs` rounds of sample_walk, each on a fresh tree of this shape (parents): the children
    of a node are drawn one after another from its draft distribution less the siblings drawn
    before them (root_draft for the root's; drafts[d - 1, x] (V,) for those of a node of depth d
    and token x), each with the distribution it was drawn from; the target after that node is
    targets[d - 1, x] (root_target after the root). Returns (the trees' tokens (runs, N + 1),
    the kept paths (runs, N), padded with -1, the tokens the target added (runs,)), or the repr
    of a value that is not a walk's (path, token)."""
    shape = PlainTree([0] * len(parents), parents)
    N, V = len(parents) - 1, len(root_target)
    trees = np.zeros((runs, N + 1), dtype=np.int64)
    drawn_from = np.zeros((runs, N + 1, V))
    target_rows = np.zeros((runs, N + 1, V))
    target_rows[:, 0] = root_target
    left = {}
    for a in range(1, N + 1):                           # every tree at once, node by node
        parent, depth = parents[a], shape.depths[a]
        if parent not in left:
            left[parent] = np.tile(root_draft, (runs, 1)) if parent == 0 else \
                np.array(drafts[shape.depths[parent] - 1, trees[:, parent]], dtype=float)
        drawn_from[:, a] = left[parent] / left[parent].sum(1, keepdims=True)
        trees[:, a] = draw_rows(drawn_from[:, a], rng)
        left[parent][np.arange(runs), trees[:, a]] = 0.0
        target_rows[:, a] = targets[depth - 1, trees[:, a]]
    paths = np.full((runs, N), -1, dtype=np.int64)
    added = np.zeros(runs, dtype=np.int64)
    for run in range(runs):
        tree = PlainTree(trees[run], parents, [None] + list(drawn_from[run, 1:]), shape)
        value = sample_walk(tree, target_rows[run], rng)
        walk = a_walk(value)
        if walk is None or len(walk[0]) > N:
            return repr(value)[:80]
        added[run] = walk[1]
        paths[run, :len(walk[0])] = walk[0]
    return trees, paths, added


# ----------------------------------------------------------------------------------------------
# Other parts' functions: the grader's reference


def use_references(modules, references):
    """references: {(home module, function): callable}. Replace each function by the callable in
    its home module and wherever one of `modules` bound it by name (from x import f)."""
    for (home, name), function in references.items():
        module = modules.get(home)
        original = getattr(module, name, None) if module is not None else None
        if original is None:
            continue

        def stand_in(*args, _function=function, **kwargs):
            return _function(*args, **kwargs)
        stand_in.__name__ = name
        for other in modules.values():
            for attribute, value in list(vars(other).items()):
                if value is original:
                    setattr(other, attribute, stand_in)
