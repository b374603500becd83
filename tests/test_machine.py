"""Threads and busy-machine notes: decoding runs on one torch thread and gives the count back;
a program spinning on a core is noticed; unsteady timings are noticed."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

import speculative as sd
from lessonkit import machine, waiting

ROOT = Path(__file__).resolve().parents[1]


class ThreadSpy(torch.nn.Module):
    """Wraps a GPT and records torch's thread count at every decoding pass."""

    def __init__(self, model):
        super().__init__()
        self.model, self.c, self.seen = model, model.c, []

    def new_cache(self, batch_size=1):
        return self.model.new_cache(batch_size)

    def logits(self, new, cache):  # what a Scorer calls
        self.seen.append(torch.get_num_threads())
        return self.model.logits(new, cache)


def test_decoding_runs_on_one_thread_and_restores_the_count():
    from gpt import GPT
    torch.manual_seed(0)
    target, draft = ThreadSpy(GPT(tiny_config())), ThreadSpy(GPT(tiny_config(n_layer=1)))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        idx = torch.tensor([[1, 2, 3]])
        sd.generate(target, idx, 5)
        sd.speculative_generate(target, draft, idx, 5, k=2)
        assert torch.get_num_threads() == 2, "decoding must give the thread count back"
        assert set(target.seen) == {1} and set(draft.seen) == {1}
        # Negative control: threads=None leaves torch's setting alone, and the spy sees it.
        target.seen.clear()
        sd.generate(target, idx, 3, threads=None)
        assert set(target.seen) == {2}
    finally:
        torch.set_num_threads(before)


def test_threads_restores_after_an_exception():
    before = torch.get_num_threads()
    try:
        with machine.threads(1):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before


@pytest.mark.slow  # seconds: make test
def test_a_spinning_program_makes_the_machine_busy():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let it start
        with machine.Busy() as busy:
            time.sleep(1.0)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy.other_cores > machine.BUSY_CORES, busy.other_cores
    assert "other programs used" in busy.note()


def test_unsteady_timings_are_noticed():
    assert machine.spread([1.0, 1.0, 1.0]) == 0
    assert abs(machine.spread([1.0, 1.5, 2.0]) - 2 / 3) < 1e-12
    quiet = machine.Busy()
    quiet.other_cores = 0.0
    assert quiet.note([0.05]) == ""
    assert "differed by up to 40%" in quiet.note([0.05, 0.4])


# ----------------------------------------------------------------------------------------------
# Honest waiting: durations, the forecast from timed steps, one progress line in a notebook


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_durations_read_as_a_person_says_them_and_never_zero_minutes():
    assert waiting.duration(0.2) == "1 s" and waiting.duration(40) == "40 s"
    assert waiting.duration(190) == "3 min 10 s" and waiting.duration(61) == "1 min"
    assert waiting.duration(3900) == "1 h 5 min"
    assert not [s for s in range(0, 4000, 7) if re.search(r"\b0 (min|s)\b", waiting.duration(s))]


def test_the_forecast_counts_steps_and_evaluations_as_timed():
    # 100 steps of 0.1 s, an evaluation every 25 steps costing 1 s more: 10 s + 4 x 1 s in all.
    clock = Clock()
    pace = waiting.Pace(100, eval_every=25, eval_steps=0.0, skip=3, min_steps=5,
                        min_seconds=0.5, clock=clock)
    forecasts = {}
    for step in range(1, 101):
        clock.now += 0.1
        pace.tick()
        if step % 25 == 0:
            clock.now += 1.0                   # the evaluation after this step
            pace.evaluated()
        forecasts[step] = pace.seconds_left()
    assert forecasts[4] is None                 # too few steps timed to forecast
    assert forecasts[10] == pytest.approx(90 * 0.1 + 4 * 0.0)   # no evaluation timed yet
    assert forecasts[30] == pytest.approx(70 * 0.1 + 3 * 1.0)   # then each costs what it took
    assert forecasts[100] == 0


def test_a_notebook_gets_one_line_updated_in_place(monkeypatch):
    shown, updates = [], []

    class Handle:
        def update(self, data, raw=False):
            updates.append(data["text/plain"])

    import IPython.display
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw=False, display_id=False: shown.append(data) or Handle())
    clock = Clock()
    line = waiting.ProgressLine(100, label="big", notebook=True, every=0.5, clock=clock)
    for step in range(1, 101):
        clock.now += 0.1
        line.update(step, "loss 2.000", left=(100 - step) * 0.1)
    line.close()
    assert len(shown) == 1                            # one output ...
    assert 15 <= len(updates) <= 25                   # ... redrawn every 0.5 s, not every step
    assert "100/100 steps" in updates[-1] and "left" not in updates[-1]


def test_a_machine_held_to_an_older_instruction_set_says_so():
    # The stand-in for a machine without AVX-512 (docs/RESULTS.md, "The models") is named as such
    # wherever its runs are quoted; a machine as it is says nothing of it (the control).
    about = {**machine.describe(), "cpu": "AMD EPYC", "cpu_cores": 2, "torch": "2.13.0+cpu",
             "cpu_flags": ["avx2", "avx512f", "avx512_bf16"], "gpu": None}
    plain = machine.summary({**about, "limited_by": {}})
    assert plain == "AMD EPYC, 2 cores with native bfloat16, torch 2.13.0+cpu"
    held = machine.summary({**about, "vectorised": "AVX2",
                            "limited_by": {"ATEN_CPU_CAPABILITY": "avx2"}})
    assert "held to AVX2 by ATEN_CPU_CAPABILITY" in held


@pytest.mark.slow  # a subprocess
def test_held_to_avx2_training_does_not_take_bfloat16_for_native():
    # With torch held to AVX2, "auto" trains in float32: its bfloat16 kernels are out of reach.
    code = "from beyond import training; print(training.native_bfloat16('cpu'))"
    held = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}, cwd=ROOT)
    assert held.stdout.strip() == "False", held.stderr


def test_only_a_kernel_is_a_notebook(monkeypatch):
    # A program that imported ipykernel (as one that runs notebooks through nbclient does) is no
    # notebook: before, it drew a notebook's progress line for a later training, and failed.
    import ipykernel  # noqa: F401
    import IPython
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert not waiting.in_notebook()
    # control: a shell with a kernel, as inside Jupyter, is one
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": object()})())
    assert waiting.in_notebook()
