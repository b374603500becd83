"""Threads and busy-machine notes: decoding runs on one torch thread and gives the count back;
a program spinning on a core is noticed; unsteady timings are noticed."""

import subprocess
import sys
import time

import torch

import machine
import speculative as sd
from conftest import tiny_config


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
