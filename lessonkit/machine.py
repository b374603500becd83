"""
lessonkit/machine.py: the machine we run on: how many threads torch gets, what its processor is,
whether other programs are busy, and the timers every benchmark and exercise shares.

Decoding and timings run on DECODE_THREADS torch threads (`threads()`), training on every core
unless the machine is busy (`training_threads()`), and `Busy` notes how much CPU other programs
took while we timed: why, in docs/DESIGN.md, "Threads, and a busy machine".
"""

import contextlib
import os
import platform
import statistics
import time
from pathlib import Path

import numpy
import torch
from threadpoolctl import ThreadpoolController

DECODE_THREADS = 1   # torch threads for decoding and timing (see the module docstring)
BUSY_CORES = 0.5     # other programs using more than this many cores make a timing suspect
SPREAD = 0.25        # repeated timings spread wider than this (max - min over median): suspect


@contextlib.contextmanager
def threads(n=DECODE_THREADS):
    """Run the block with n torch threads (None or 0: leave as is); restore the count after."""
    before = torch.get_num_threads()
    if n and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


_blas_limited = False


def single_threaded_blas():
    """Limit NumPy's BLAS to one thread, for the rest of the process: a one-token step is far too
    small to share, and BLAS threads that wake up for it fight with torch's for the cores (a
    NumPy draft step next to a torch target ran several times slower). Every NumPy decoder calls
    it: beyond/fast_numpy.py's model, the heads' and the EAGLE draft's NumPy steps."""
    global _blas_limited
    if not _blas_limited:
        ThreadpoolController().select(internal_api="openblas").limit(limits=1)
        _blas_limited = True


def training_threads():
    """Torch threads for training: every core on a quiet machine, one on a busy one (docs/DESIGN.md,
    "Threads, and a busy machine")."""
    cores = cpu_cores()
    if cores == 1:
        return 1
    with Busy() as busy:
        time.sleep(0.2)
    return 1 if busy.other_cores > BUSY_CORES else cores


def cpu_cores():
    """Cores this process may run on (fewer than os.cpu_count() under a CPU limit)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


# The processor features that change these models' speed: wide vectors, and native bfloat16
# (training's products run in bfloat16 where the processor has it: training.speedups).
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "asimd", "sve")
# Environment variables that hold torch (and the libraries under it) to an older instruction
# set: with ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 and
# --precision float32, a machine with AVX-512 stands in for one without (docs/RESULTS.md,
# "The models").
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def cpu_model():
    """The processor's name and its CPU_FLAGS, from /proc/cpuinfo (Linux) or platform."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine() or "unknown", []
    fields = {k.strip(): v.strip() for k, v in
              (line.split(":", 1) for line in info.splitlines()[:40] if ":" in line)}
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return (fields.get("model name") or fields.get("Hardware") or platform.machine(),
            [f for f in CPU_FLAGS if f in flags])


def describe():
    """The machine and software a run happened on, for reports and results files."""
    name, flags = cpu_model()
    return {"platform": platform.platform(), "processor": platform.processor() or "unknown",
            "cpu": name, "cpu_flags": flags,
            "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "cpu_cores": cpu_cores(),
            "vectorised": torch.backends.cpu.get_cpu_capability(),   # the kernels torch runs
            "limited_by": {k: os.environ[k] for k in ISA_LIMITS if os.environ.get(k)},
            "decode_threads": DECODE_THREADS,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def summary(about):
    """describe()'s dict in words: "AMD EPYC, 2 cores with native bfloat16, torch X" (native
    bfloat16: AVX512-BF16 or AMX), and the instruction set torch was held to, if it was."""
    bf16 = "with" if {"avx512_bf16", "amx_bf16"} & set(about["cpu_flags"]) else "without"
    gpu = f", {about['gpu']}" if about.get("gpu") else ""
    limited = f" (held to {about['vectorised']} by {', '.join(about['limited_by'])})" \
        if about.get("limited_by") else ""
    return f"{about['cpu']}, {about['cpu_cores']} cores {bf16} native bfloat16{limited}, " \
        f"torch {about['torch']}{gpu}"


# ----------------------------------------------------------------------------------------------
# Is the machine busy?


def _cpu_seconds_all():
    """Seconds of CPU time all programs used so far (busy time summed over cores), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait is busy;
    # steal is time another virtual machine took from ours, which slows us down just the same.
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Busy:
    """Measures how busy other programs kept the machine during a `with` block.

        with machine.Busy() as busy:         # or busy = Busy().start() ... busy.stop()
            ...timings...
        print(busy.note(spreads=[...]))      # "" when the machine was quiet
    """

    def start(self):
        self.started, self.all0, self.own0 = \
            time.perf_counter(), _cpu_seconds_all(), _own_cpu_seconds()
        return self

    def stop(self):
        wall = max(time.perf_counter() - self.started, 1e-9)
        all1 = _cpu_seconds_all()
        if self.all0 is not None and all1 is not None:
            others = (all1 - self.all0) - (_own_cpu_seconds() - self.own0)
            self.other_cores = max(0.0, others / wall)
        elif hasattr(os, "getloadavg"):  # no /proc/stat: the load average, less our own thread
            self.other_cores = max(0.0, os.getloadavg()[0] - 1)
        else:
            self.other_cores = 0.0
        return self

    __enter__ = start

    def __exit__(self, *exc):
        self.stop()

    def note(self, spreads=()):
        """One line saying why the figures may mislead, or "" if nothing suggests so. spreads:
        relative spreads of repeated timings (spread()): a wide one means the machine's speed
        changed while we timed, whatever the cause."""
        reasons = []
        if self.other_cores > BUSY_CORES:
            reasons.append(f"other programs used {self.other_cores:.1f} of {cpu_cores()} cores "
                           f"while timing")
        worst = max(spreads, default=0.0)
        if worst > SPREAD:
            reasons.append(f"repeated timings differed by up to {worst:.0%}")
        return ("note: the machine was busy (" + "; ".join(reasons) + "): the times and "
                "speed-ups above may be off; rerun them on a quiet machine") if reasons else ""


def spread(values):
    """(max - min) / median of repeated timings or ratios: 0 for a perfectly steady machine."""
    values = list(values)
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


# ----------------------------------------------------------------------------------------------
# Timers: the one place that reads the clock for the benchmark, the CLI and the exercises


def median_time(fn, repeats, n_threads=DECODE_THREADS):
    return statistics.median(times_of(fn, repeats, n_threads))


def times_of(fn, repeats, n_threads=DECODE_THREADS):
    times = []
    with threads(n_threads):
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
    return times


def paired_times(plain, speculative, repeats):
    """Time the two alternately, so that a drift in the machine's speed hits both alike: (median
    plain seconds, median speculative seconds, median of the per-pair ratios, the ratios)."""
    pairs = [(times_of(plain, 1)[0], times_of(speculative, 1)[0]) for _ in range(repeats)]
    ratios = [a / b for a, b in pairs]
    return (statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs),
            statistics.median(ratios), ratios)


class Timed:
    """A function whose calls are timed, after waiting for the GPU if `gpu`: `seconds` in all,
    take() the seconds since the last take(). Speculative decoding times its drafter's guesses
    and the target's checks so, from outside the loop."""

    def __init__(self, function, gpu=False):
        self.function, self.gpu = function, gpu
        self.seconds = self.pending = 0.0

    def __call__(self, *args):
        started = time.perf_counter()
        out = self.function(*args)
        if self.gpu:
            torch.cuda.synchronize()
        self.pending += time.perf_counter() - started
        return out

    def take(self):
        seconds, self.pending = self.pending, 0.0
        self.seconds += seconds
        return seconds


def sync(model):
    """Wait for `model`'s GPU, so that a timing read now is real (a no-op on the CPU)."""
    if on_gpu(model):
        torch.cuda.synchronize()


def on_gpu(model):
    p = next(model.parameters(), None) if hasattr(model, "parameters") else None
    return p is not None and p.is_cuda


def pass_time(model, tokens, *, batch=1, repeats=300, measure=None, context=64,
              n_threads=DECODE_THREADS):
    """Median seconds of one cached forward pass of a gpt.GPT or beyond.fast_numpy.NumpyGPT
    over batch x tokens new tokens, after `context` cached ones (the cache rolled back each
    time). measure(fn, repeats) -> median seconds; by default the wall clock on n_threads torch
    threads (exercise 5 passes its own timer, which on a GPU waits for the device)."""
    context = min(context, model.c.block_size - tokens)
    idx = torch.randint(0, model.c.vocab_size, (batch, context + tokens),
                        generator=torch.Generator().manual_seed(0))
    cache = model.new_cache(batch)
    if hasattr(model, "logits"):                    # NumPy: no torch on the timed path
        idx, forward = idx.numpy(), model.logits
    else:
        idx = idx.to(next(model.parameters()).device)

        def forward(ids, cache):
            with torch.inference_mode():
                return model(ids, cache=cache)
    with threads(n_threads):                          # the untimed set-up pass too
        forward(idx[:, :context], cache)

    def one_pass():
        cache.rollback(context)
        forward(idx[:, context:], cache)
    return (measure or (lambda fn, n: median_time(fn, n, n_threads)))(one_pass, repeats)


def resolve_device(device="auto"):
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but torch sees no CUDA GPU; "
                         "use --device cpu")
    return device
