# %% [markdown]
# # 6. Timing it properly
#
# Speculative decoding rests on one claim about hardware: a pass of the big model over `k + 1`
# tokens (the last accepted one and `k` guesses) costs about as much as a pass over one. If
# that holds, every kept guess is a pass saved. If it does not, checking eats the gain.
#
# This notebook does two things. First it explains **why** the claim holds on a GPU running a
# large model, with a back-of-envelope estimate of where the time of a pass goes. Then it
# **measures** the claim on your machine, which means timing things that last a fraction of a
# millisecond, where careless timing is easily off by a factor of two. So before the
# measurements come the rules: warm up, take medians, wait for the device, alternate the two
# things you compare, and use one torch thread. Each rule is shown by breaking it once.
#
# Then the measurements: the cost of one pass over 1 to 16 new tokens, the speed-up against
# `k` next to what the formula predicts from the measured costs, and what happens as the batch
# grows and the device fills up. With a GPU, the same measurements run there too.
#
# Reading time: about 30 minutes. You write one function, a timer (the "your turn" cell); the
# cell after it checks your answer the way the course's grader does.

# %%
# Setup. The project's modules come from its environment (`make setup`; `make notebooks` opens
# Jupyter there). The models train on first use: a few minutes, with a progress bar.
import statistics
import subprocess
import sys
import time

import matplotlib.pyplot as plt
import torch

import corpus
import gpt
import machine
import speculative as sd
from beyond import benchmark
from beyond import registry
from beyond import checkpoint
from exercises import common, ex5_gpu

models = common.notebook_models(["big", "distilled"])
target, distilled = models["big"], models["distilled"]
QUICK = common.notebook_args().quick  # tiny models (the test suite): numbers mean little
HAS_GPU = torch.cuda.is_available()
print(f"big model: {target.num_params():,} parameters; distilled draft: "
      f"{distilled.num_params():,}; GPU: {torch.cuda.get_device_name(0) if HAS_GPU else 'none'}")

# %% [markdown]
# ## Why a pass over k + 1 tokens can cost one pass
#
# A forward pass does two kinds of work. It **reads** every weight of the model once from
# memory, and it **computes**: each weight takes part in one multiply and one add per token, so
# about `2 x parameters` floating-point operations (FLOPs) per token. Reading does not depend on
# how many tokens the pass holds; computing grows with them.
#
# Which one sets the time? Divide the work by the speed of the part of the chip that does it.
# The ratio of FLOPs to bytes read is the pass's **arithmetic intensity**. A pass over `t`
# tokens in 16-bit weights does `2 N t` FLOPs for `2 N` bytes: an intensity of `t` FLOPs per
# byte. A chip that computes `F` FLOPs a second and reads `W` bytes a second is kept busy
# computing only when the intensity exceeds `F / W`. Below that, the arithmetic units wait
# for the weights to arrive: the pass is **memory-bound**, and adding tokens adds arithmetic
# that fits into the waiting time.
#
# Here is the estimate with round data-sheet figures for one current data-centre GPU (an
# NVIDIA H100 SXM: about 3.35 TB/s of memory bandwidth, 67 TFLOP/s in 32-bit floats, about
# 990 TFLOP/s in bf16 on its tensor cores). **These are estimates**, not measurements: real
# kernels reach perhaps 60-90% of either peak, and the cache of keys and values adds reading
# that grows with the context.

# %%
BANDWIDTH = 3.35e12                      # bytes per second (estimate: a data sheet's figure)
FLOPS = {"fp32": 67e12, "bf16": 990e12}  # FLOPs per second (the same)
BYTES = {"fp32": 4, "bf16": 2}           # bytes per weight


def pass_estimate(params, tokens, dtype):
    """(seconds to read the weights once, seconds of arithmetic) for one pass over `tokens`."""
    return params * BYTES[dtype] / BANDWIDTH, 2 * params * tokens / FLOPS[dtype]


for name, params, dtype in [("the lesson's big model", target.num_params(), "fp32"),
                            ("a 7-billion-parameter model", 7e9, "bf16")]:
    print(f"{name} ({params:,.0f} parameters, {dtype}):")
    for t in (1, 5, 64, 512):
        read, compute = pass_estimate(params, t, dtype)
        print(f"  t = {t:3}: read {read * 1e6:9.1f} us, compute {compute * 1e6:9.1f} us"
              f" -> {'memory' if read > compute else 'compute'}-bound, about "
              f"{max(read, compute) * 1e6:.1f} us")
for dtype in ("fp32", "bf16"):
    balance = FLOPS[dtype] / BANDWIDTH                   # FLOPs per byte the chip can sustain
    tokens = balance * BYTES[dtype] / 2                  # intensity t * 2 / BYTES reaches it
    print(f"{dtype}: the chip computes {balance:.0f} FLOPs per byte read; a pass stays "
          f"memory-bound up to about {tokens:.0f} tokens")

assert abs(target.num_params() * 4 / 1e6 - 3.3) < 0.1 or QUICK  # the big model: 3.3 MB in fp32
big_read, big_compute = pass_estimate(7e9, 5, "bf16")
assert big_read > 10 * big_compute  # 5 tokens of a 7B model: reading dominates by far
assert max(pass_estimate(7e9, 5, "bf16")) == max(pass_estimate(7e9, 1, "bf16"))
assert max(pass_estimate(7e9, 512, "bf16")) > max(pass_estimate(7e9, 1, "bf16"))

# %% [markdown]
# For the 7B model, reading its 14 GB takes about 4 ms, and the arithmetic of five tokens
# takes about 0.07 ms: checking four guesses costs what writing one token costs. Only around
# 300 tokens in one pass (40 in 32-bit floats) does the arithmetic catch up. That is the
# assumption the lesson's formula makes, a verify cost of 1.
#
# Our big model is another story. Its 3.3 MB would be read in about a microsecond, but a GPU
# pass is a few dozen separate kernels (a matrix product, a LayerNorm, a GELU, ... in each
# layer), and launching one from PyTorch costs several microseconds. So a pass of the lesson's
# model on a GPU should take a few hundred microseconds of **launch overhead**, nearly all of it
# independent of the number of tokens too. Memory-bound or overhead-bound, the extra tokens
# ride along almost free. On a CPU it is different again, as we are about to measure. First,
# how to measure.
#
# ## How to time a few hundred microseconds
#
# ### Rule 1: warm up first
#
# The first calls of anything pay one-time costs: memory is allocated, caches (the CPU's, the
# allocator's) are cold, code paths are taken for the first time; on a GPU, libraries pick
# their kernels and compile some of them. Here is the big model's one-token pass after 64
# cached tokens, timed from its very first one-token call in this notebook
# (`machine.times_of` reads the clock around each call):

# %%
def one_token_pass(model, context=64):
    """A function that runs one cached pass of `model` over 1 new token after `context`."""
    context = min(context, model.c.block_size - 1)
    idx = torch.randint(0, model.c.vocab_size, (1, context + 1),
                        generator=torch.Generator().manual_seed(0))
    cache = model.new_cache(1)
    with torch.inference_mode():
        model(idx[:, :context], cache=cache)

    def step():
        cache.rollback(context)
        with torch.inference_mode():
            model(idx[:, context:], cache=cache)
    return step


step = one_token_pass(target)
times = machine.times_of(step, 40)
naive = statistics.mean(times[:5])    # five calls from the first, averaged
right = statistics.median(times[5:])  # the calls after a warm-up, median
print("first calls (us):", " ".join(f"{t * 1e6:.0f}" for t in times[:8]))
print(f"naive: mean of the first five {naive * 1e6:.0f} us; after warm-up: median "
      f"{right * 1e6:.0f} us ({naive / right:.1f}x)")
assert times[0] > 0.8 * right  # the first call is never meaningfully faster

# %% [markdown]
# The first call is slower than the rest, and the next few are often still settling. How much
# varies: a few tens of percent here on a quiet CPU, several times on a busy one, and on a GPU
# the first calls can take far longer than all the others together. An average that includes
# them overstates the cost of a pass. The fix is cheap: call the function a few times
# untimed, then start timing.
#
# ### Rule 2: the median, not the mean
#
# A shared machine (a laptop with a browser open, a cloud VM) interrupts us now and then: the
# operating system runs another program on our core for a few milliseconds. One such
# interruption in thirty calls of a 0.3 ms pass moves the mean a lot and the median not at
# all. To make the point reproducible, we simulate one interruption, a 20 ms pause in the
# tenth call:

# %%
calls = 0


def interrupted_step():
    global calls
    calls += 1
    step()
    if calls == 10:
        time.sleep(0.02)  # another program took our core for 20 ms


times = machine.times_of(interrupted_step, 31)
print(f"mean {statistics.mean(times) * 1e6:.0f} us, median {statistics.median(times) * 1e6:.0f} us,"
      f" slowest {max(times) * 1e6:.0f} us")
assert statistics.mean(times) - statistics.median(times) > 0.5 * 0.02 / len(times)

# %% [markdown]
# One bad call out of 31 pulled the mean far above the median, and the median did not move.
# Real interruptions (another program, the operating system) do the same to real timings. The
# median ignores them (and `machine.spread` says how far repeated
# timings disagree: past 25%, the timed commands of this project print a note).
#
# ### Rule 3: on a GPU, wait for the device
#
# A CUDA kernel runs **asynchronously**: calling a torch function on a GPU tensor puts the
# work in a queue and returns at once, long before the GPU has finished. A clock read right
# after the call measures the queueing, not the work. Two calls to `torch.cuda.synchronize()`
# fix it: one before starting the clock (so that earlier work does not land in the
# measurement), one before reading it (so that our work is done).
#
# We cannot show this with a real GPU on every machine, so here is a simulated one, the same
# the course's check uses: `launch()` queues 20 ms of work and returns immediately;
# `synchronize()` waits until the queue is empty.

# %%
from classroom.checks import FakeGPU

gpu = FakeGPU()
started = time.perf_counter()
gpu.launch()
wrong = time.perf_counter() - started                  # the clock read after the launch
gpu.synchronize()

gpu.launch(), gpu.launch(), gpu.launch()               # earlier work, still queued
started = time.perf_counter()
gpu.launch()
gpu.synchronize()
backlog = time.perf_counter() - started                # no synchronize before the clock

gpu.synchronize()
started = time.perf_counter()
gpu.launch()
gpu.synchronize()
right = time.perf_counter() - started                  # synchronised on both sides
print(f"no synchronisation: {wrong * 1e3:.3f} ms; earlier work in the queue: "
      f"{backlog * 1e3:.0f} ms; synchronised: {right * 1e3:.0f} ms (the work takes 20 ms)")
assert wrong < 0.005 and 0.015 < right < 0.06 and backlog > 0.06

# %% [markdown]
# On a real GPU the same pattern is usually written with **CUDA events**, timestamps that the
# GPU itself records in its queue, between the kernels:
#
# ```python
# start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
# torch.cuda.synchronize()      # nothing earlier in the measurement
# start.record()                # queued: the GPU stamps the time when it gets here
# fn()
# end.record()
# torch.cuda.synchronize()      # wait until the end event has happened
# seconds = start.elapsed_time(end) / 1e3   # elapsed_time is in milliseconds
# ```
#
# The events measure time on the GPU's own clock, without the Python overhead of reading the
# CPU's clock. On a CPU, torch works synchronously and none of this is needed.
#
# ### Rule 4: alternate the two things you compare
#
# A speed-up is a ratio of two timings. If we time plain decoding for a while and then
# speculative decoding, anything that changes the machine's speed in between (another
# program starting, a laptop throttling as it heats up, a cloud neighbour) lands entirely on
# one side. `machine.paired_times(a, b, n)` times `a`, then `b`, then `a` again, and so on,
# and returns the median of the per-pair ratios, so that a drift hits both alike.
#
# A simulation makes the point: `a` takes 2 ms and `b` 1 ms, so `a / b` is 2; halfway through
# the measurement the machine becomes twice as slow.

# %%
calls = 0


def drifting(ms):
    """A function of `ms` milliseconds on a machine that halves its speed after 20 calls."""
    def fn():
        global calls
        calls += 1
        time.sleep(ms / 1e3 * (2 if calls > 20 else 1))
    return fn


a, b = drifting(2), drifting(1)
calls = 0
one_after_the_other = machine.median_time(a, 20) / machine.median_time(b, 20)
calls = 0
_, _, alternating, _ = machine.paired_times(a, b, 20)
print(f"a / b, all of a then all of b: {one_after_the_other:.2f}; alternating: {alternating:.2f}"
      f" (the truth: 2)")
assert one_after_the_other < 1.5 and abs(alternating - 2) < 0.6

# %% [markdown]
# Timed one after the other, `a` and `b` look equally fast; alternated, the ratio is right.
#
# ### Rule 5: one torch thread on a CPU
#
# By default torch uses a thread per core and splits each operation between them. A decoding
# step is a few hundred microseconds of small matrix products, too little to share. Worse,
# when another program occupies a core, our threads wait at every split operation for a
# partner that the operating system has put aside. `machine.py` explains it in its
# docstring, and `python -m beyond.benchmark --threads` (a minute) measures it: the README's table,
# from a 2-core machine, has plain decoding of 200 characters at 69 ms on one thread and
# 310 ms on two when another program keeps one core busy, and a training step at 0.28 s on
# one thread and 2.7 s on two beside another torch program. So every timer in this project runs
# on `machine.DECODE_THREADS`, one thread, and training chooses for itself.
#
# A short version of that measurement: plain decoding of 50 characters on one thread and on
# every core, with the machine quiet and then with programs that keep all cores but one busy
# (started here and stopped after a second or two).

# %%
prompt = torch.tensor([gpt.encode("ROMEO:\n")])
cores = machine.cpu_cores()


def plain_ms(n_threads, chars=20 if QUICK else 50):
    return 1e3 * machine.median_time(lambda: sd.generate(target, prompt, chars, threads=n_threads),
                                     1 if QUICK else 3)


counts = sorted({1, cores})
with machine.Busy() as calm:
    quiet = {n: plain_ms(n) for n in counts}
spinners = [subprocess.Popen([sys.executable, "-c", benchmark.SPINNER]) for _ in range(cores - 1)]
try:
    time.sleep(0.5)  # let them start
    with machine.Busy() as busy:
        crowded = {n: plain_ms(n) for n in counts}
finally:
    for p in spinners:
        p.kill()
        p.wait()
for n in counts:
    print(f"{n} torch thread(s): quiet {quiet[n]:6.1f} ms, beside {cores - 1} busy program(s) "
          f"{crowded[n]:6.1f} ms")
print(f"(the busy programs used {busy.other_cores:.1f} of {cores} cores)")
print(calm.note() or "(the machine was quiet for the first two figures)")
# One thread is never much slower for steps this small (unless the "quiet" machine was not).
assert quiet[1] < 2 * quiet[cores] or QUICK or calm.note()

# %% [markdown]
# Here a step is too small for more threads to help much, and on a crowded machine every core's
# thread can cost a lot (how much varies from run to run; on one core there is nothing to
# compare). The timers of this project all take one thread.
#
# ## Your turn: a timer (part 5a)
#
# Put rules 1, 2, 3 and 5 into one function. `timer(device)` returns a function
# `measure(fn, repeats, warmup=3)` that calls `fn` `warmup` times untimed, then times `repeats`
# calls and returns the median seconds of one call. On `"cuda"` it must wait for the GPU
# before starting the clock and before reading it (or use CUDA events); on the CPU it runs on
# one torch thread (`machine.threads()`). The check times functions of known length, counts
# the calls, and runs your timer against the simulated GPU above.

# %% your turn: exercises.ex5_gpu.timer
# source only: the reference answer (the notebooks put its code here instead)
from exercises.ex5_gpu import timer
import statistics, time

import torch

import machine

# %%
from classroom.notebook_checks import check

check("5a", timer=timer)

# %% [markdown]
# From here on the notebook uses the project's own timer, `ex5_gpu.timer`, with
# `machine.pass_time(model, tokens, batch=..., measure=..., repeats=...)`: the median time of
# one pass of `model` over `batch x tokens` new tokens after 64 cached ones.
#
# ## The verify cost on this machine
#
# The cost of one pass of the big model over 1, 2, 4, 8 and 16 new tokens, after 64 cached,
# next to the line it would follow if every token cost a pass of its own:

# %%
measure = ex5_gpu.timer("cpu")
SIZES = [1, 2, 4, 8, 16]
REPEATS = 20 if QUICK else 50


def pass_curve(model, measure, repeats=REPEATS):
    """{t: median seconds of one pass over t new tokens} for t in SIZES."""
    with machine.threads():  # one thread for the untimed set-up too (rule 5)
        return {t: machine.pass_time(model, t, measure=measure, repeats=repeats) for t in SIZES}


def plot_pass_curve(curve, title):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(SIZES, [curve[t] * 1e3 for t in SIZES], "o-", label="measured")
    ax.plot(SIZES, [curve[1] * 1e3 * t for t in SIZES], ":", label="if each token cost a pass")
    ax.set(xlabel="new tokens in one pass", ylabel="ms", xscale="log", yscale="log",
           xticks=SIZES, xticklabels=SIZES, title=title)
    ax.yaxis.set_major_formatter("{x:g}")
    ax.yaxis.set_minor_formatter("{x:g}")
    ax.legend()
    plt.show()


with machine.Busy() as busy:
    cpu_curve = pass_curve(target, measure)
for t, s in cpu_curve.items():
    print(f"{t:2} new tokens: {s * 1e6:6.0f} us = {s / cpu_curve[1]:.2f} one-token passes")
print(busy.note() or "(the machine was quiet while timing)")
plot_pass_curve(cpu_curve, "One pass of the big model over t tokens, CPU")
assert all(s > 0.8 * cpu_curve[1] for s in cpu_curve.values())  # more tokens never cost less
assert cpu_curve[16] < 16 * cpu_curve[1]  # and far less than a pass each

# %% [markdown]
# Between the two extremes: a pass over a few tokens costs more than one token's pass but far
# less than a pass each (see the printout above). Is a CPU pass of this model memory-bound? Its
# weights, 3.3 MB, largely fit in a modern CPU's caches, so reading them is quick. Nor is it
# the arithmetic: assume a single core does 50 GFLOP/s (an estimate; cores with wide vector
# units peak somewhat above that):

# %%
CPU_FLOPS = 50e9  # FLOPs per second, one core (estimate)
arithmetic = 2 * target.num_params() / CPU_FLOPS
print(f"arithmetic of a one-token pass: about {arithmetic * 1e6:.0f} us at 50 GFLOP/s; "
      f"measured: {cpu_curve[1] * 1e6:.0f} us")
assert cpu_curve[1] > 2 * arithmetic or QUICK

# %% [markdown]
# Most of a one-token pass is neither reading nor computing but **overhead**: torch checking
# shapes, choosing a kernel, allocating each intermediate tensor, Python calling one layer
# after another, a few microseconds per operation and a few dozen operations. That cost does
# not grow with the tokens; the arithmetic, which does, is a small part. Hence a verify cost
# between 1 and `k + 1`, nearer 1.
#
# ## The speed-up against k: measured, and the formula
#
# Notebook 2 wrote the formula with the measured verify cost in place of the lesson's 1:
#
#     speed-up = (1 - α^(k+1)) / ((1 - α) (k c + verify cost))
#
# Here we feed it this machine's numbers and set it next to the clock. The draft is the
# distilled one in NumPy (`registry.with_backend(distilled, "numpy")`), whose per-call overhead is
# far below torch's, so its `c` is small; the big model runs in torch. Three things are
# measured separately, each a median: α (greedy agreement on held-out text), `c` (one draft
# step over one target step, `machine.pass_time`) and the verify cost of `k + 1` tokens.
# Then plain and speculative decoding are timed alternately (rule 4), on held-out prompts.

# %%
draft_np = registry.with_backend(distilled, "numpy")
prompts = corpus.held_out_prompts(2 if QUICK else 3, 32)
N_NEW = 40 if QUICK else 100
KS = [1, 2, 3, 4, 5, 6]
alpha = sd.measure_agreement(target, distilled, gpt.val_data, windows=128).greedy_agreement


def k_curve(big, small, c, verify, repeats):
    """Speed-up of greedy speculative decoding over plain decoding for each k in KS: measured
    (alternating, `repeats` pairs) and predicted from alpha, c and verify[k]."""
    plain = [sd.generate(big, p, N_NEW) for p in prompts]
    rows, spreads = {}, []
    for k in KS:
        for p, want in zip(prompts, plain):  # first: the same text as the big model alone
            assert torch.equal(sd.speculative_generate(big, small, p, N_NEW, k=k)[0], want)
        _, _, ratio, ratios = machine.paired_times(
            lambda: [sd.generate(big, p, N_NEW) for p in prompts],
            lambda: [sd.speculative_generate(big, small, p, N_NEW, k=k) for p in prompts],
            repeats)
        spreads.append(machine.spread(ratios))
        rows[k] = {"measured": ratio, "predicted": sd.expected_speedup(alpha, k, c, verify[k]),
                   "lesson": sd.expected_speedup(alpha, k, c)}  # verify cost 1
    return rows, spreads


with machine.Busy() as busy:
    one = machine.pass_time(target, 1, repeats=100)
    c = machine.pass_time(draft_np, 1, repeats=100) / one
    verify = {k: machine.pass_time(target, k + 1, repeats=100) / one for k in KS}
    cpu_k, spreads = k_curve(target, draft_np, c, verify, 3 if QUICK else 5)
print(f"alpha (greedy agreement) {alpha:.3f}; c {c:.3f}")
print(" k  verify cost  measured  predicted  lesson's formula (verify cost 1)")
for k, row in cpu_k.items():
    print(f"{k:2} {verify[k]:11.2f} {row['measured']:8.2f}x {row['predicted']:9.2f}x "
          f"{row['lesson']:9.2f}x")
print(busy.note(spreads) or "(the machine was quiet while timing)")
assert all(v > 0.8 for v in verify.values())
assert all(0.25 < row["measured"] / row["predicted"] < 3 for row in cpu_k.values())


def plot_k_curve(rows, title):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(KS, [rows[k]["measured"] for k in KS], "o-", label="measured")
    ax.plot(KS, [rows[k]["predicted"] for k in KS], "s--", label="formula, measured verify cost")
    ax.plot(KS, [rows[k]["lesson"] for k in KS], ":", label="formula, verify cost 1")
    ax.axhline(1, color="black", lw=0.8)
    ax.set(xlabel="k (guesses per round)", ylabel="speed-up over plain decoding", title=title)
    ax.legend()
    plt.show()


plot_k_curve(cpu_k, "Speculative decoding, distilled draft in NumPy, CPU")

# %% [markdown]
# The lesson's formula (verify cost 1) is the most optimistic curve: it assumes the check is
# free. With the measured verify cost the prediction drops, and it drops more as `k` grows,
# because a longer check costs more here. The measurement usually falls short of even that,
# for reasons notebook 2 measured:
# real misses come in runs, so fewer characters per pass than α predicts, and the loop's own
# Python is not in the formula, and a draft step inside the loop costs more than the same
# step timed alone (the two models evict each other's weights from the CPU's caches). The best
# measured speed-up is printed above; the README's benchmark, over more prompts, measured
# 1.6-1.8x for this draft. With the lesson's small torch draft and no cache, the lesson's own
# run saw no wall-clock gain at all.
#
# The verify cost also moves the break-even point. For `k = 4` the lesson found that a draft
# with `c = 0.2` must agree at least 46% of the time (0.4553 exactly) with a free check; with
# this machine's verify cost, more:

# %%
free = sd.break_even_alpha(4, 0.2)
measured_check = sd.break_even_alpha(4, 0.2, verify[4])
print(f"k = 4, c = 0.2: break-even alpha {free:.4f} with a free check, {measured_check:.4f} with "
      f"this machine's verify cost {verify[4]:.2f}")
assert abs(free - 0.4553) < 1e-4
assert measured_check > free or verify[4] <= 1

# %% [markdown]
# ## Batch size: the gain fades as the device fills
#
# A server does not decode one sequence at a time: it batches many users' sequences into one
# pass. A pass over `B` sequences of one token each already holds `B` tokens, and checking
# `k` guesses for each makes it `B x (k + 1)`. With enough tokens in a pass the arithmetic
# finally catches up with the reading (the estimate above: around 40 tokens in fp32, 300 in
# bf16) and the verify cost rises towards `k + 1`: there is no idle capacity left to spend on
# guesses.
#
# The lesson's decoder (`speculative.py`) takes a batch but decodes its rows one after another;
# `beyond/batched.py` decodes a whole batch at once, each row keeping its own number of guesses,
# and `python -m beyond.studies.batch_curve` times it against this prediction (minutes). Here we
# only time passes at each batch size and feed the formula: `c_B` is a draft pass over `B x 1`
# tokens over a target pass over `B x 1`, and the verify cost `B x (k + 1)` over `B x 1`, for
# the lesson's `k = 4`. Both models run in torch here, as both would on a GPU.

# %%
K = 4
BATCHES = [1, 2, 4, 8, 16, 32]


def batch_curve(big, small, measure, repeats, rounds=3):
    """{B: c, verify cost and predicted speed-up at batch size B}, from passes timed at B.

    The whole sweep runs `rounds` times and each figure is the median over rounds: a burst of
    activity on the machine then spoils one round of a figure, not the figure (rule 4)."""
    passes = {"one": (big, 1), "check": (big, K + 1), "draft": (small, 1)}
    times = {(b, name): [] for b in BATCHES for name in passes}
    with machine.threads():  # one thread for the untimed set-up too (rule 5)
        for _ in range(rounds):
            for b in BATCHES:
                for name, (model, tokens) in passes.items():
                    times[b, name].append(machine.pass_time(model, tokens, batch=b,
                                                            measure=measure, repeats=repeats))
    rows = {}
    for b in BATCHES:
        one, check_pass, draft_pass = (statistics.median(times[b, name]) for name in passes)
        c_b, verify_b = draft_pass / one, check_pass / one
        rows[b] = {"pass_s": one, "c": c_b, "verify": verify_b,
                   "predicted": sd.expected_speedup(alpha, K, c_b, verify_b)}
    return rows


def plot_batch_curve(rows, title):
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(BATCHES, [rows[b]["verify"] for b in BATCHES], "o-", label="verify cost")
    ax[0].axhline(K + 1, color="grey", ls=":", label=f"k + 1 = {K + 1}")
    ax[0].set(xlabel="batch size", ylabel="target passes", xscale="log", xticks=BATCHES,
              xticklabels=BATCHES, title=f"Cost of checking {K} guesses per sequence")
    ax[0].legend()
    ax[1].plot(BATCHES, [rows[b]["predicted"] for b in BATCHES], "o-")
    ax[1].axhline(1, color="black", lw=0.8)
    ax[1].set(xlabel="batch size", ylabel="predicted speed-up", xscale="log", xticks=BATCHES,
              xticklabels=BATCHES, title=title)
    plt.show()


with machine.Busy() as busy:
    cpu_batch = batch_curve(target, distilled, measure, 5 if QUICK else 8)
for b, row in cpu_batch.items():
    print(f"batch {b:2}: one-token pass {row['pass_s'] * 1e3:5.2f} ms, verify cost "
          f"{row['verify']:.2f}, c {row['c']:.2f}, predicted speed-up {row['predicted']:.2f}x")
print(busy.note() or "(the machine was quiet while timing)")
plot_batch_curve(cpu_batch, f"Predicted speed-up, k = {K}, alpha {alpha:.2f}, CPU")
assert cpu_batch[32]["verify"] > cpu_batch[1]["verify"] or QUICK
assert cpu_batch[32]["predicted"] < cpu_batch[1]["predicted"] or QUICK

# %% [markdown]
# As the batch grows, the one-token pass gets busier and the check of five tokens per
# sequence costs more of them: the predicted speed-up falls (it need not fall smoothly: c and
# the verify cost are noisy at large batches). On a CPU the
# slide starts early, because the overhead that made extra tokens cheap is paid once per pass
# and is soon a small part of a large pass. This is why speculative decoding is a tool for
# latency (one user, or few, waiting for their text) more than for throughput.
#
# ## On a GPU
#
# With a CUDA GPU (torch sees one: `torch.cuda.is_available()`), the next cell repeats the
# three measurements there, timed with `ex5_gpu.timer("cuda")` (CUDA events after
# synchronising):
#
# 1. the lesson's pair, moved to the GPU: the pass curve, the speed-up against `k` (both
#    models in torch on the GPU) and the batch curve;
# 2. an untrained model large enough to be memory-bound on the GPU (8 layers, 2048 or 4096
#    wide: 0.4 or 1.6 billion parameters, by the GPU's memory), with a 1-layer draft a
#    quarter as wide: the pass curve and the batch curve (timing does not depend on the
#    weights; the predictions use the trained pair's α).
#
# Without a GPU it prints what would differ.

# %%
import copy

if HAS_GPU:
    gpu_measure = ex5_gpu.timer("cuda")
    big_gpu = copy.deepcopy(target).to("cuda")
    small_gpu = copy.deepcopy(distilled).to("cuda")
    with machine.Busy() as busy:
        gpu_curve = pass_curve(big_gpu, gpu_measure)
        one = gpu_curve[1]
        gpu_c = machine.pass_time(small_gpu, 1, measure=gpu_measure, repeats=REPEATS) / one
        gpu_verify = {k: machine.pass_time(big_gpu, k + 1, measure=gpu_measure,
                                           repeats=REPEATS) / one for k in KS}
        gpu_k, gpu_spreads = k_curve(big_gpu, small_gpu, gpu_c, gpu_verify, 3)
        gpu_batch = batch_curve(big_gpu, small_gpu, gpu_measure, 10)
    print(f"{torch.cuda.get_device_name(0)}, the lesson's models: c {gpu_c:.2f}")
    for t, s in gpu_curve.items():
        print(f"  {t:2} new tokens: {s * 1e6:6.0f} us = {s / gpu_curve[1]:.2f} one-token passes")
    for k, row in gpu_k.items():
        print(f"  k = {k}: verify cost {gpu_verify[k]:.2f}, measured {row['measured']:.2f}x, "
              f"predicted {row['predicted']:.2f}x")
    print(busy.note(gpu_spreads) or "(the machine was quiet while timing)")
    plot_pass_curve(gpu_curve, "The lesson's big model, GPU")
    plot_k_curve(gpu_k, "Speculative decoding, both models on the GPU")
    plot_batch_curve(gpu_batch, "Predicted speed-up, the lesson's pair, GPU")
    assert all(s > 0.8 * gpu_curve[1] for s in gpu_curve.values())

    width = 4096 if torch.cuda.get_device_properties(0).total_memory > 30 * 2 ** 30 else 2048
    with torch.device("cuda"):
        wide = gpt.GPT(gpt.Config(n_layer=8, n_head=32, n_embd=width, block_size=128)).eval()
        wide_draft = gpt.GPT(gpt.Config(n_layer=1, n_head=8, n_embd=width // 4,
                                        block_size=128)).eval()
    read, compute = pass_estimate(wide.num_params(), 1, "fp32")
    with machine.Busy() as busy:
        wide_curve = pass_curve(wide, gpu_measure)
        wide_batch = batch_curve(wide, wide_draft, gpu_measure, 10)
    print(f"an 8 x {width} model, {wide.num_params() / 1e9:.2f} billion parameters (fp32): "
          f"reading its weights at an H100's bandwidth would take about {read * 1e3:.1f} ms")
    for t, s in wide_curve.items():
        print(f"  {t:2} new tokens: {s * 1e3:6.2f} ms = {s / wide_curve[1]:.2f} one-token passes")
    for b, row in wide_batch.items():
        print(f"  batch {b:2}: verify cost {row['verify']:.2f}, c {row['c']:.2f}, predicted "
              f"speed-up {row['predicted']:.2f}x")
    print(busy.note() or "(the machine was quiet while timing)")
    plot_pass_curve(wide_curve, f"An 8 x {width} model, GPU")
    plot_batch_curve(wide_batch, f"Predicted speed-up, 8 x {width} target, GPU")
    assert all(s > 0.8 * wide_curve[1] for s in wide_curve.values())
    del wide, wide_draft, big_gpu, small_gpu
    torch.cuda.empty_cache()
else:
    print("No CUDA GPU here: every figure above is the CPU's. On a GPU:")
    print(" - the pass curve should stay nearly flat up to dozens of tokens (memory-bound for "
          "a big model, launch-bound for ours), so the verify cost should be close to 1;")
    print(" - c should follow kernel counts more than parameter counts: a 1-layer draft next to "
          "a 4-layer target should cost a quarter of a pass or more (embedding and head included);")
    print(" - the batch curve should start flat and rise only once batch x (k + 1) tokens make "
          "the arithmetic catch up with the reading;")
    print(" - timings need synchronisation (rule 3): without it they measure kernel launches.")

lesson_draft = gpt.GPT(checkpoint.preset("draft"))  # untrained: only its size matters here
print(f"parameters against the big model's: distilled draft "
      f"{distilled.num_params() / target.num_params():.0%}, the lesson's draft "
      f"{lesson_draft.num_params() / target.num_params():.1%}; c on this CPU: distilled in "
      f"NumPy {c:.2f}, in torch {cpu_batch[1]['c']:.2f}")
assert 0.2 < distilled.num_params() / target.num_params() < 0.35 or QUICK
assert lesson_draft.num_params() / target.num_params() < 0.03 or QUICK
assert c < cpu_batch[1]["c"] or QUICK

# %% [markdown]
# ## What speculation wastes, and what it saves
#
# Every guess the big model checks costs it a position, kept or not: `Stats.target_positions`
# counts them. From the models' shapes, `beyond/studies/cost_arithmetic.py` turns a run into
# arithmetic (multiply-adds per position: n_layer (12 C^2 + 2 C keys) + C V) and weights read
# (every pass reads every weight once). Speculation does more arithmetic per character and
# reads the weights fewer times: a device whose passes are bound by reading wins, a device
# bound by arithmetic, or by overhead like this CPU, barely does.

# %%
from beyond.studies import cost_arithmetic

prompt = torch.tensor([gpt.encode("ROMEO:\n")])
_, run = sd.speculative_generate(target, draft_np, prompt, 100, k=4)
spent = cost_arithmetic.run_costs(target.c, draft_np, [(prompt.shape[1], run)])
print(f"{run.target_positions} positions scored by the big model for {run.new_tokens} characters "
      f"({spent['wasted_positions']} thrown away)")
print(f"arithmetic per character: {spent['spec_flops_per_token'] / 1e6:.2f} MFLOP speculative, "
      f"{spent['plain_flops_per_token'] / 1e6:.2f} plain "
      f"(a compute-bound device: {spent['compute_bound_speedup']:.2f}x)")
print(f"weights read per character: {spent['spec_bytes_per_token'] / 1e6:.2f} MB speculative, "
      f"{spent['plain_bytes_per_token'] / 1e6:.2f} plain "
      f"(a memory-bound device: {spent['memory_bound_speedup']:.2f}x)")
assert run.target_positions == run.new_tokens + spent["wasted_positions"]
assert spent["compute_bound_speedup"] < 1 < spent["memory_bound_speedup"] or QUICK

# %% [markdown]
# What to look for on a GPU. The lesson's small model should be bound by launching kernels
# there, so its pass curve should be nearly flat, like a memory-bound model's: a verify cost
# close to 1, as the lesson assumes. But the same overhead makes the draft expensive: a draft
# pass launches kernels too, so expect `c` to follow the number of layers (1 against 4, about
# a quarter) rather than the number of parameters (about a quarter as well, by chance, for the
# distilled draft; the lesson's 1 x 32 draft has about 2% of the big model's parameters but
# would still cost about a quarter of its pass). On this CPU the draft in NumPy had a much
# smaller `c` than the same draft in torch; on a GPU the draft's launches are what limit the
# gain, and a larger `k` stops paying sooner.
#
# The large untrained model is where the lesson's picture should hold fully: reading its
# weights takes longer than launching its kernels, so a pass over 16 tokens should cost little
# more than a pass over one, and the verify cost should stay low for the first batch sizes
# before the arithmetic catches up and the predicted gain fades. Exercise 5
# (`python -m exercises.ex5_gpu`) does the same with a larger pair it trains on the GPU first,
# and times real decoding there.
#
# ## What to remember
#
# - A pass reads every weight once whatever it holds; when reading (or launching kernels)
#   dominates, checking `k + 1` tokens costs about one pass. Arithmetic intensity, FLOPs per
#   byte, says when: below the chip's own ratio the extra tokens are free.
# - On a CPU with tiny models a pass is mostly per-operation overhead, and a 5-token check
#   costs more than one one-token pass but far less than five (1.4-1.7 where this course was
#   written). Feed the formula the measured verify cost, not 1.
# - Timing rules: warm up; take medians; on a GPU synchronise before starting and before
#   reading the clock (or use CUDA events); alternate the two things compared; one torch thread
#   for small work on a CPU; and report when the machine was busy.
# - As the batch grows, the device fills, the verify cost climbs towards `k + 1` and the gain
#   fades: speculation buys latency on an underused device.
