"""
lessonkit/machine.py: the machine we run on: how many threads torch gets, whether other programs are busy,
the timers every benchmark and exercise shares, and honest waiting (forecasts, one progress line).

Decoding and timings run on DECODE_THREADS torch threads (`threads()`), training on every core
unless the machine is busy (`training_threads()`), and `Busy` notes how much CPU other programs
took while we timed: why, in docs/DESIGN.md, "Threads, and a busy machine".
"""

import contextlib
import json
import os
import platform
import signal
import statistics
import sys
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


# A results file: {"format": RESULTS_FORMAT, "run": where its figures come from, ...the figures}.
# The documents' figures are rendered from such files (studies/render.py); a new format number
# tells the renderer that an old file no longer holds what it reads.
RESULTS_FORMAT = 1
STARTED = time.time()   # about when this process started: a run's seconds in its results file


def command_line():
    """This process's command line as typed: `python -m beyond.benchmark --k 4`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = ["-m", spec.name.removesuffix(".__main__")] if spec else \
        [os.path.relpath(sys.argv[0])] if sys.argv[0] else []
    return " ".join(["python", *program, *sys.argv[1:]])


def write_results(path, figures, busy="", command=None):
    """figures (a dict) as a results file at `path`, with where they come from: the command
    line (this process's, unless `command` names the one a user runs, as the suite's `make
    test`), the date (UTC), the seconds since the process started, the machine and a Busy note
    ("" when quiet). Written whole (a reader never sees half of it); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    run = {"command": command or command_line(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "seconds": round(time.time() - STARTED, 1), "machine": describe(), "busy": busy}
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"format": RESULTS_FORMAT, "run": run, **figures}, indent=2,
                                    default=float) + "\n")
    os.replace(temporary, path)
    return path


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


class StopOnInterrupt:
    """The first Ctrl-C asks the training loop to stop after the current step (so the weights
    and optimizer are never saved half-updated); a second one stops at once."""

    def __init__(self):
        self.asked = False
        try:
            self.previous = signal.signal(signal.SIGINT, self._ask)
        except ValueError:  # not the main thread: leave Ctrl-C alone
            self.previous = None

    def _ask(self, signum, frame):
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True

    def restore(self):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


# ----------------------------------------------------------------------------------------------
# Honest waiting: a forecast from this machine's measured speed, and one progress line


def duration(seconds):
    """Seconds as a person says them: "40 s", "3 min 10 s", "1 h 5 min" (never "0 min").
    A forecast's last digits are noise, so minutes keep tens of seconds, and hours minutes."""
    seconds = max(1, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 600:
        minutes, rest = divmod(round(seconds / 10) * 10, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


class Pace:
    """How long the rest of a loop of like steps will take, from the steps timed so far.

        pace = Pace(steps=1500, eval_every=250, eval_steps=5)
        each step:         pace.tick()          (at the same point of every step)
        after evaluating:  pace.evaluated()     (that step's interval also held an evaluation)
        pace.seconds_left()                     None until enough steps were timed

    The first `skip` steps are not timed (they allocate memory and run slow); the forecast waits
    for `min_steps` steps and `min_seconds` of timing, so that one hiccup does not make it (with
    less, a quiet run of the big model was once forecast to take far longer than it did). An
    evaluation runs every `eval_every` steps and at the last one: until one is timed, it is
    guessed to cost `eval_steps` steps. The clock is an argument so that tests can drive it.
    """

    def __init__(self, steps, done=0, *, eval_every=0, eval_steps=0.0, skip=3, min_steps=5,
                 min_seconds=5.0, clock=time.perf_counter):
        self.steps, self.done = steps, done
        self.eval_every, self.eval_steps = eval_every, eval_steps
        self.skip, self.min_steps, self.min_seconds = skip, min_steps, min_seconds
        self.clock = clock
        self.ticks, self.last, self.evaluating = 0, None, False
        self.step_seconds, self.timed_steps = 0.0, 0   # the ordinary steps timed
        self.eval_seconds = None                        # one evaluation, once timed

    def tick(self):
        now = self.clock()
        if self.last is not None and self.ticks > self.skip:
            interval = now - self.last
            if not self.evaluating:
                self.step_seconds += interval
                self.timed_steps += 1
            elif self.timed_steps:  # the evaluation is what the interval took beyond a step
                self.eval_seconds = max(0.0, interval - self.seconds_per_step())
        self.ticks, self.last, self.evaluating = self.ticks + 1, now, False
        self.done += 1

    def evaluated(self):   # the interval that ends at the next tick() held an evaluation
        self.evaluating = True

    def seconds_per_step(self):
        return self.step_seconds / self.timed_steps

    def evaluations_left(self):
        """Evaluations still to run: at each multiple of eval_every and at the last step."""
        if not self.eval_every:
            return 0
        first = max(1, self.done + 1 if self.evaluating else self.done)  # this step's, if due
        if first > self.steps:
            return 0
        every = self.eval_every
        return self.steps // every - (first - 1) // every + (self.steps % every != 0)

    def seconds_left(self):
        """The forecast in seconds, or None while too few steps were timed to make one."""
        if self.timed_steps < self.min_steps or self.step_seconds < self.min_seconds:
            return None
        per_step = self.seconds_per_step()
        per_eval = self.eval_steps * per_step if self.eval_seconds is None else self.eval_seconds
        return max(0, self.steps - self.done) * per_step + self.evaluations_left() * per_eval


def in_notebook():
    """Are we inside a Jupyter kernel (rather than a terminal, or a program that only imported
    ipykernel, as one that runs notebooks through nbclient does)?"""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None and not sys.stderr.isatty()


class ProgressLine:
    """One line saying how far a loop has come, redrawn in place.

        line = ProgressLine(total=1500, initial=0, label="big")
        line.update(step, f"loss {loss:.3f}", left=seconds)        # left: a forecast, or None
        line.write("a line of its own")                            # printed above the line
        line.close()

    In a terminal it is tqdm's bar (on stderr). In a Jupyter notebook it is one output updated
    in place (IPython's display_id), at most every `every` seconds: tqdm there writes to stderr,
    and an executed or exported notebook keeps every redraw, some 1,800 lines per model.
    """

    WIDTH = 20  # characters of the notebook line's bar

    def __init__(self, total, initial=0, label="", *, notebook=None, every=0.5,
                 clock=time.monotonic):
        self.total, self.n, self.label, self.text, self.left = total, initial, label, "", None
        self.notebook = in_notebook() if notebook is None else notebook
        self.every, self.clock = every, clock
        self.started = self.shown = clock()
        if self.notebook:
            from IPython.display import display
            self.handle = display({"text/plain": self.render()}, raw=True, display_id=True)
        else:
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, desc=label or None, unit="step",
                            dynamic_ncols=True, file=sys.stderr)

    def update(self, n, text="", left=None):
        """n steps done of total; text after the bar; left: the seconds still to wait, if known
        (a terminal shows tqdm's own guess instead)."""
        self.n, self.text, self.left = n, text, left
        if not self.notebook:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(n - self.bar.n)
        elif self.clock() - self.shown >= self.every:
            self._show()

    def write(self, text, log=print):
        """log(text) as a line of its own (in a terminal, above tqdm's bar rather than into it)."""
        with contextlib.nullcontext() if self.notebook else self.bar.external_write_mode():
            log(text)

    def close(self):
        if self.notebook:
            self.left = None  # done: the last redraw says how long it took
            self._show()
        else:
            self.bar.close()

    def _show(self):
        self.shown = self.clock()
        self.handle.update({"text/plain": self.render()}, raw=True)

    def render(self):
        filled = round(self.WIDTH * self.n / max(1, self.total))
        parts = [f"{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] "
                 f"{self.n}/{self.total} steps".lstrip()] + ([self.text] if self.text else [])
        took = duration(self.clock() - self.started)
        parts.append(f"{took}, about {duration(self.left)} left" if self.left is not None
                     else took)
        return " | ".join(parts)
