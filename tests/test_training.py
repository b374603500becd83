"""Training, checkpoints and the lesson's own snippet."""

import errno
import json
import os
import shutil
import signal
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import tiny_config

import gpt
import train
from beyond import presets, training
from beyond.training import Recipe
from gpt import GPT, TrainConfig
from lessonkit import corpus

# threads=1: the last digits of a loss depend on the thread count, and "all cores unless the
# machine is busy" could pick differently for two runs that must be equal.
QUICK = TrainConfig(batch_size=8, eval_every=10, eval_batches=2, warmup_steps=5, threads=1)
RECIPE = Recipe(**vars(QUICK))  # the same, as a preset's recipe: Muon, bfloat16, compile


def fresh_model(seed=0):
    torch.manual_seed(seed)
    return GPT(tiny_config())


def test_a_few_dozen_steps_lower_the_loss():
    model = fresh_model()
    before = gpt.estimate_loss(model, gpt.val_data, QUICK, "cpu")
    gpt.train(model, steps=40, log_every=0, config=QUICK)
    after = gpt.estimate_loss(model, gpt.val_data, QUICK, "cpu")
    assert after < before - 0.5, (before, after)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_training_is_deterministic_and_resumes_exactly(tmp_path, optimizer):
    tc = replace(RECIPE, optimizer=optimizer)
    straight = training.train(fresh_model(), replace(tc, steps=20))
    path = tmp_path / "half.pt"
    # Ctrl-C (SIGINT) at the first evaluation, then continue from the checkpoint it left.
    model = fresh_model()
    with pytest.raises(KeyboardInterrupt):
        training.train(model, replace(tc, steps=20), checkpoint=path,
                       on_eval=lambda step, loss: os.kill(os.getpid(), signal.SIGINT))
    _, state = gpt.load_checkpoint(path)
    assert state["step"] == 10  # Ctrl-C at the evaluation of step 10 finished that step only
    resumed = training.train(fresh_model(seed=99), replace(tc, steps=20), resume=state)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_training_uses_the_thread_count_it_is_given_and_resume_keeps_it(tmp_path):
    seen = []
    path = tmp_path / "m.pt"
    before = torch.get_num_threads()
    # Two steps, then two more: each run evaluates once, at its last step (two threads beside
    # pytest-xdist's other worker on two cores: ten steps each took seconds on a busy machine).
    training.train(fresh_model(), replace(QUICK, threads=2, steps=2), checkpoint=path,
                   on_eval=lambda step, loss: seen.append(torch.get_num_threads()))
    assert seen == [2] and torch.get_num_threads() == before
    _, state = gpt.load_checkpoint(path)
    assert state["threads"] == 2
    # threads=0 means "choose", but a resumed run must keep the count it started with.
    training.train(fresh_model(), replace(QUICK, threads=0, steps=4), resume=state,
                   on_eval=lambda step, loss: seen.append(torch.get_num_threads()))
    assert seen == [2, 2] and torch.get_num_threads() == before


def test_checkpoint_round_trip(tmp_path):
    model = gpt.train(fresh_model(), steps=10, log_every=0, config=QUICK)
    path = tmp_path / "m.pt"
    gpt.save_checkpoint(path, model, step=10, val_loss=model.val_loss)
    loaded, state = gpt.load_checkpoint(path)
    idx = torch.randint(0, model.c.vocab_size, (2, 16))
    assert torch.equal(loaded(idx)[0], model(idx)[0])
    assert loaded.c == model.c and state["vocab"] == gpt.vocab() and state["step"] == 10
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file was renamed away


def test_missing_checkpoint_says_how_to_train(tmp_path):
    with pytest.raises(gpt.CheckpointError, match="train it with: python train.py --preset big"):
        gpt.load_checkpoint(tmp_path / "none.pt", hint="python train.py --preset big")


def test_corrupted_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "m.pt"
    gpt.save_checkpoint(path, fresh_model(), step=0, val_loss=0.0)
    path.write_bytes(path.read_bytes()[:1000])  # truncated, as by a full disk
    with pytest.raises(gpt.CheckpointError, match="not a readable checkpoint"):
        gpt.load_checkpoint(path)


def test_checkpoint_from_another_vocabulary_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "m.pt"
    gpt.save_checkpoint(path, fresh_model(), step=0, val_loss=0.0)
    monkeypatch.setitem(corpus._loaded, "vocab", gpt.vocab() + "#")
    with pytest.raises(gpt.CheckpointError, match="different vocabulary"):
        gpt.load_checkpoint(path)


def test_lesson_snippet_runs():
    # What students' lesson code does, unchanged.
    from gpt import GPT, Config, decode, encode, get_batch, train, val_data  # noqa: F401
    model = train(GPT(Config(n_embd=32, n_layer=1, n_head=2)), steps=5, log_every=0)
    idx = torch.tensor([encode("ROMEO:\n")])
    logits = model(idx)[0]
    assert logits.shape == (1, 7, model.c.vocab_size)
    assert model.c.block_size >= 64
    x, y = get_batch("val")
    assert x.shape == y.shape and len(val_data) > 0
    assert decode(encode("JULIET:\n")) == "JULIET:\n"
    assert train(model, steps=1, log_every=0, source=gpt.names_data) is model


def test_the_progress_shows_the_validation_loss_only_once_it_exists():
    model = GPT(tiny_config())
    watch = presets.Watch("tiny", model, TrainConfig(steps=10, eval_every=5), progress=False,
                        log=lambda *a: None)
    try:
        assert "nan" not in watch.postfix() and "val" not in watch.postfix()
        watch.loss, watch.val = 2.5, float("nan")       # gpt.train's value before evaluating
        assert watch.postfix() == "loss 2.500"
        watch.on_eval(5, 2.25)
        assert watch.postfix() == "loss 2.500  val 2.250"
    finally:
        watch.close()


def test_training_announces_its_time_from_its_own_first_steps():
    said, ticks = [], iter(range(10_000))
    model = GPT(tiny_config())
    tc = TrainConfig(steps=40, eval_every=20, batch_size=4)
    watch = presets.Watch("tiny", model, tc, progress=False, log=said.append,
                        clock=lambda: next(ticks) * 0.5)          # every reading: 0.5 s later
    try:
        model.train()
        for _ in range(20):
            model(torch.zeros(1, 4, dtype=torch.long))
    finally:
        watch.close()
    assert len(said) == 1 and said[0].startswith("tiny: 40 steps, about ")


@pytest.fixture
def notebook_output(monkeypatch):
    """Training as if in a notebook: (the outputs displayed, every update of them)."""
    import IPython.display

    from lessonkit import waiting
    shown, updates = [], []

    class Handle:
        def update(self, data, raw=False):
            updates.append(data["text/plain"])

    monkeypatch.setattr(waiting, "in_notebook", lambda: True)
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw=False, display_id=False: shown.append(data) or Handle())
    return shown, updates


def test_training_in_a_notebook_draws_one_line_and_writes_nothing_to_stderr(
        tmp_path, notebook_output, capsys):
    # What a notebook saw: tqdm's bar on stderr, kept as ~1,800 lines by an executed notebook,
    # with "val=nan" until the first evaluation.
    shown, updates = notebook_output
    corpus.prepare()
    tc = Recipe(steps=20, batch_size=8, eval_every=10, eval_batches=2, warmup_steps=5)
    presets.ensure_trained(replace(presets.preset("draft"), config=tiny_config(), training=tc),
                           folder=tmp_path, progress=True)
    out, err = capsys.readouterr()
    assert len(shown) == 1 and updates and "20/20 steps" in updates[-1]
    assert err == "" and "nan" not in out + "".join(updates)


def test_the_lessons_own_train_call_draws_one_line_in_a_notebook_too(notebook_output, capsys):
    # gpt.train(..., progress=True) called directly, as lesson code does: it had a tqdm bar of
    # its own, on stderr, with "val=nan" until the first evaluation.
    shown, updates = notebook_output
    gpt.train(fresh_model(), steps=12, log_every=0, config=replace(QUICK, eval_every=6),
              progress=True)
    out, err = capsys.readouterr()
    assert len(shown) == 1 and updates and "12/12 steps" in updates[-1]
    assert err == "" and "nan" not in out + "".join(updates)
    assert "val " in updates[-1]  # the validation loss shows once it exists


# ----------------------------------------------------------------------------------------------
# Speed-ups (bfloat16 autocast, torch.compile), their fallbacks, and saving whole or not at all


def same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_training_repeats_exactly_given_the_seed_and_the_threads(precision):
    tc = replace(RECIPE, precision=precision)
    first = training.train(fresh_model(), replace(tc, steps=12))
    again = training.train(fresh_model(), replace(tc, steps=12))
    assert same_weights(first, again) and first.val_loss == again.val_loss
    # negative control: another seed draws other batches, and the check sees it
    other = gpt.train(fresh_model(), steps=12, log_every=0, config=replace(tc, seed=7))
    assert not same_weights(first, other)


def test_without_native_bfloat16_auto_trains_in_float32_and_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(training, "native_bfloat16", lambda device: False)
    assert training.speedups(RECIPE, "cpu", width=32)[2] == []  # too narrow to want it: quiet
    monkeypatch.setattr(training, "BFLOAT16_MIN_WIDTH", 32)     # the tiny model here is 32 wide
    notes = []
    auto = training.train(fresh_model(), replace(RECIPE, steps=6), note=notes.append)
    assert len(notes) == 1 and notes[0].startswith("training in float32: cpu has no native "
                                                   "bfloat16"), notes
    float32 = training.train(fresh_model(), replace(RECIPE, precision="float32", steps=6))
    assert same_weights(auto, float32)
    # and float32 is the lesson's own recipe, step for step
    assert same_weights(float32, gpt.train(fresh_model(), steps=6, log_every=0, config=QUICK))
    # negative control: where bfloat16 is native, auto uses it (another model) and says nothing,
    # for models wide enough to gain from it (the tiny one here is not: it stays float32)
    monkeypatch.setattr(training, "native_bfloat16", lambda device: True)
    assert training.speedups(RECIPE, "cpu", width=16) == (None, False, [])
    assert training.speedups(RECIPE, "cpu", width=32) == (torch.bfloat16, False, [])
    notes.clear()
    bfloat16 = training.train(fresh_model(), replace(RECIPE, steps=6), note=notes.append)
    assert notes == [] and not same_weights(bfloat16, float32)


def test_an_unknown_precision_is_a_one_line_error():
    with pytest.raises(ValueError, match="precision must be auto, bfloat16 or float32, not 'fp8'"):
        replace(RECIPE, precision="fp8")


def test_without_a_compiler_compile_is_off_in_one_line_and_trains_the_same_model(monkeypatch):
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(model) or model)
    tc = replace(RECIPE, compile=True)
    # negative control first: with a compiler on PATH, compile is used and nothing is said
    notes = []
    training.train(fresh_model(), replace(tc, steps=2), note=notes.append)
    assert len(compiled) == 1 and notes == []
    monkeypatch.setattr(shutil, "which", lambda name: None)
    compiled.clear()
    model = training.train(fresh_model(), replace(tc, steps=6), note=notes.append)
    assert notes == ["torch.compile is off: no C++ compiler (g++ or clang++) on PATH; "
                     "training without it (the same model)"] and compiled == []
    assert same_weights(model, gpt.train(fresh_model(), steps=6, log_every=0, config=QUICK))


def test_a_compiler_that_fails_is_left_in_one_line_for_the_same_training(monkeypatch):
    def broken(model):
        def forward(*args):
            raise RuntimeError("C++ compile error: Python.h: no such file\n(and 80 more lines)")
        return forward
    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(training, "compiler_missing", lambda device: None)
    notes = []
    model = training.train(fresh_model(), replace(RECIPE, compile=True, steps=6), note=notes.append)
    assert notes == ["torch.compile is off: it failed (RuntimeError: C++ compile error: "
                     "Python.h: no such file); training without it (the same model)"]
    assert same_weights(model, gpt.train(fresh_model(), steps=6, log_every=0, config=QUICK))


def full_disk(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def half_then_full(obj, f):
    f.write(b"PK\x03\x04 half a file")  # what a full disk leaves: a beginning
    full_disk()


@pytest.mark.parametrize("failing", ["checkpoint", "npz"])
def test_a_failed_save_leaves_the_previous_files_whole_and_nothing_half_written(
        tmp_path, monkeypatch, failing):
    path = tmp_path / "m.pt"
    gpt.save_checkpoint(path, fresh_model(0), step=1, val_loss=2.0)
    before = path.read_bytes(), path.with_suffix(".npz").read_bytes()
    if failing == "checkpoint":
        monkeypatch.setattr(torch, "save", half_then_full)
    else:
        monkeypatch.setattr(np, "savez", lambda f, **arrays: half_then_full(None, f))
    with pytest.raises(gpt.CheckpointError) as caught:
        gpt.save_checkpoint(path, fresh_model(1), step=2, val_loss=1.0)
    name = "m.pt" if failing == "checkpoint" else "m.npz"
    assert str(caught.value) == (f"could not write {tmp_path / name} (No space left on device): "
                                 f"free some disk space or save elsewhere; the previous {name}, "
                                 f"if any, is whole")
    assert (path.read_bytes(), path.with_suffix(".npz").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz", "m.pt"]  # no .tmp left
    assert gpt.load_checkpoint(path)[1]["step"] == 1
    # negative control: once the disk has room, the same save replaces both files
    monkeypatch.undo()
    gpt.save_checkpoint(path, fresh_model(1), step=2, val_loss=1.0)
    assert gpt.load_checkpoint(path)[1]["step"] == 2 and path.with_suffix(".npz").read_bytes() \
        != before[1]


def test_a_full_disk_while_training_is_one_line_and_the_last_save_an_error(tmp_path,
                                                                            monkeypatch):
    path, real_save, notes = tmp_path / "m.pt", torch.save, []

    def full_at_step_10(state, f):
        (full_disk if state["step"] == 10 else real_save)(state, f)
    monkeypatch.setattr(torch, "save", full_at_step_10)
    training.train(fresh_model(), replace(QUICK, steps=20), checkpoint=path, note=notes.append)
    assert len(notes) == 1 and notes[0].startswith(f"step 10: could not write {path} (No space")
    assert notes[0].endswith("; training goes on")
    assert gpt.load_checkpoint(path)[1]["step"] == 20
    # the last save failing is an error, not a model quietly lost; the step-20 file stays
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(gpt.CheckpointError, match="No space left on device"):
        training.train(fresh_model(), replace(QUICK, steps=10), checkpoint=path)
    assert gpt.load_checkpoint(path)[1]["step"] == 20


def test_a_resumed_run_keeps_the_precision_it_started_in(tmp_path, monkeypatch):
    tc = replace(RECIPE, precision="bfloat16")
    straight = training.train(fresh_model(), replace(tc, steps=20))
    path = tmp_path / "m.pt"
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C at step 10, as above
        training.train(fresh_model(), replace(tc, steps=20), checkpoint=path,
                       on_eval=lambda step, loss: os.kill(os.getpid(), signal.SIGINT))
    _, state = gpt.load_checkpoint(path)
    assert state["precision"] == "bfloat16"
    monkeypatch.setattr(training, "native_bfloat16", lambda device: False)  # auto: float32
    resumed = training.train(fresh_model(), replace(RECIPE, steps=20), resume=state)
    assert same_weights(straight, resumed)
    # negative control: resuming in float32 gives another model
    other = training.train(fresh_model(), replace(RECIPE, precision="float32", steps=20),
                           resume=state)
    assert not same_weights(straight, other)


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_the_training_study_prices_each_lever_and_climbs_the_ladder(tmp_path):
    # python -m studies.training: every lever asked for is priced, the first is the
    # 1.00x baseline; each rung trains, is recorded with its curve, and its time to the target
    # is its steps to the target times its step's price; a lever that is not in the table is a
    # one-line error.
    from studies import training as study
    path = tmp_path / "training.json"
    results = study.main(["--quick", "--levers", "preset,batch 10", "--rungs", "2",
                          "--steps", "2", "--time_steps", "1", "--repeats", "1", "--threads", "1",
                          "--no-preset", "--json", str(path)])
    prices = results["levers"]
    assert list(prices) == ["preset", "batch 10"] and prices["preset"]["ratio"] == 1.0
    assert [r["rung"] for r in results["ladder"]] == [name for name, _ in study.LADDER[:2]]
    assert len(results["tried"]) == len(study.TRIED) and results["preset"] is None
    for record in results["ladder"] + results["tried"]:   # fewer steps: never more than asked
        assert record["curve"][-1] == [2, record["final"]] and record["steps"] == 2
        assert record["seconds_to_target"] is None   # two steps never reach 1.70
    assert json.loads(path.read_text())["ladder"][1]["changes"] == study.LADDER[1][1]
    # the price of a record that reached the target: its steps times its lever's price
    record = {"priced_as": "batch 10", "reached_at": 300}
    study.price([record], prices)
    assert record["seconds_to_target"] == pytest.approx(300 * prices["batch 10"]["ms"] / 1e3)
    with pytest.raises(ValueError, match="unknown lever 'nope'"):
        study.main(["--levers", "preset,nope", "--rungs", "0"])


def test_a_compiled_levers_first_step_starts_from_an_empty_compiler_cache(monkeypatch):
    # The study prices torch.compile's first step as a machine that never compiled the model
    # pays it: torch's cache on disk points at a new, empty folder while it times, and back
    # after. (A cache left by an earlier run priced that step at 7.5 s instead of 32 s held to
    # AVX2.) Both ways: where the variable was set, and where it was not.
    from pathlib import Path

    from studies import training as study
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/a/warm/cache")
    with study.cold_compiler_cache():
        cold = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        assert cold.is_dir() and not any(cold.iterdir())
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/a/warm/cache" and not cold.exists()
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    with study.cold_compiler_cache():
        assert Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).is_dir()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ


@pytest.mark.slow  # the big model under torch's FLOP counter: not in make test-fast
def test_a_steps_counted_arithmetic_is_what_torchs_flop_counter_counts():
    # The training study's FLOP a step (studies/training.py, step_flops), set against
    # the machine's peak in docs/RESULTS.md, against torch's own count of one forward and
    # backward of the big model: within 1% (the counter knows every matrix product; the study
    # leaves out nothing but element-wise work); Muon's share, against the counter's count of
    # its Newton-Schulz iterations on every matrix it updates, exactly. Control: the forward
    # alone (what a count without the backward gives) is far off.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from studies import training as study
    tc = replace(presets.preset("big").training, batch_size=2)
    model = GPT(presets.preset("big").config)
    x = torch.randint(0, model.c.vocab_size, (tc.batch_size, model.c.block_size))
    # attention as plain matrix products: the counter does not see into the fused CPU kernel
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as forward_and_backward:
        _, loss = model(x, x)
        loss.backward()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as forward_only, \
            torch.no_grad():
        model(x, x)
    adamw = study.step_flops(replace(tc, optimizer="adamw"), model.c)
    assert adamw == pytest.approx(forward_and_backward.get_total_flops(), rel=0.01)
    assert adamw != pytest.approx(forward_only.get_total_flops(), rel=0.5)
    muon = study.step_flops(tc, model.c)
    hidden = next(o for o, _ in training.optimizers(tc, model, torch.device("cpu"))
                  if isinstance(o, training.Muon))
    with FlopCounterMode(display=False) as orthogonalising:
        for p in hidden.param_groups[0]["params"]:
            training.orthogonalise(torch.randn(p.shape), steps=tc.newton_schulz)
    assert muon - adamw == orthogonalising.get_total_flops()


# ----------------------------------------------------------------------------------------------
# Muon: the optimizer of the blocks' matrices


def test_orthogonalise_pushes_every_singular_value_near_one():
    g = torch.Generator().manual_seed(0)
    for rows, columns in [(384, 128), (128, 512), (128, 128)]:   # the big model's matrices
        short = min(rows, columns)
        u, _ = torch.linalg.qr(torch.randn(rows, short, generator=g))
        v, _ = torch.linalg.qr(torch.randn(columns, short, generator=g))
        spread = torch.logspace(-1, 1, short)                # singular values 0.1 to 10
        matrix = u @ torch.diag(spread) @ v.T
        # an odd polynomial of the matrix keeps its singular vectors: U^T O V is diagonal
        core = u.T @ training.orthogonalise(matrix) @ v                     # (short, short)
        singular = core.diagonal()
        assert 0.6 < singular.min() and singular.max() < 1.25, (rows, columns, singular)
        assert (core - torch.diag(singular)).abs().max() < 1e-4
    # negative control: one iteration leaves the small directions small, and the check sees it
    assert torch.linalg.svdvals(training.orthogonalise(matrix, steps=1)).min() < 0.6


@pytest.mark.parametrize("steps", [1, 3])
def test_muon_steps_as_torchs_muon_does(steps):
    """training.Muon against torch.optim.Muon, the reference (which orthogonalises in bfloat16, so
    the two agree to bfloat16's precision, not exactly)."""
    def run(optimizer_of, **kwargs):
        g = torch.Generator().manual_seed(1)
        weight = torch.nn.Parameter(torch.randn(384, 128, generator=g) * 0.02)  # like c_attn
        optimizer = optimizer_of([weight], lr=0.02, weight_decay=0.1, momentum=0.95, **kwargs)
        for _ in range(steps):
            weight.grad = torch.randn(weight.shape, generator=g)
            optimizer.step()
        return weight.detach() - torch.randn(384, 128, generator=torch.Generator().manual_seed(1)) * 0.02

    ours, torchs = run(training.Muon), run(torch.optim.Muon)
    assert torch.allclose(ours, torchs, atol=0.02 * 0.02 * steps, rtol=0.05)
    # negative controls: without Nesterov's look ahead, or without the rate scaled by the shape
    if steps > 1:
        assert not torch.allclose(ours, run(torch.optim.Muon, nesterov=False),
                                  atol=0.02 * 0.02 * steps, rtol=0.05)
    assert not torch.allclose(ours, run(torch.optim.Muon, adjust_lr_fn="match_rms_adamw"),
                              atol=0.02 * 0.02 * steps, rtol=0.05)


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest():
    model = fresh_model()
    (adamw, _), (muon, peak) = training.optimizers(replace(RECIPE, optimizer="muon"), model, "cpu")
    assert peak == RECIPE.muon_lr
    hidden = {id(p) for p in muon.param_groups[0]["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in hidden) == (p.dim() == 2 and name.startswith("transformer.h.")), name
    assert sum(len(g["params"]) for g in adamw.param_groups) + len(hidden) == \
        len(list(model.parameters()))
    only_adamw = training.optimizers(RECIPE, model, "cpu")    # the default
    assert len(only_adamw) == 1 and isinstance(only_adamw[0][0], torch.optim.AdamW)


def test_an_unknown_optimizer_is_a_one_line_error():
    with pytest.raises(ValueError, match="optimizer must be muon or adamw, not 'sgd'"):
        replace(RECIPE, optimizer="sgd")


def test_resuming_with_another_optimizer_is_a_one_line_error(tmp_path):
    path = tmp_path / "m.pt"
    training.train(fresh_model(), replace(QUICK, steps=10), checkpoint=path)
    _, state = gpt.load_checkpoint(path)
    muon = replace(RECIPE, optimizer="muon")
    with pytest.raises(gpt.CheckpointError, match="another optimizer than AdamW and Muon"):
        training.train(fresh_model(), replace(muon, steps=20), resume=state)
    # control: with the optimizer it was trained with, it resumes
    training.train(fresh_model(), replace(QUICK, steps=20), resume=state)


def test_a_checkpoint_of_an_older_format_is_a_one_line_retrain_it(tmp_path):
    # Saved before Muon existed: one AdamW state, not a list. No branch reads it any more.
    path = tmp_path / "m.pt"
    training.train(fresh_model(), replace(QUICK, steps=10), checkpoint=path)
    gpt.load_checkpoint(path)                       # control: today's format loads
    state = torch.load(path, weights_only=True)
    state["optimizer"] = state["optimizer"][0]
    torch.save(state, path)
    with pytest.raises(gpt.CheckpointError, match="is a checkpoint of an older format; retrain "
                                                  "it: train one with train.py"):
        gpt.load_checkpoint(path)
    # and one without the .npz beside it (the NumPy exercise reads that): the message says so
    training.train(fresh_model(), replace(QUICK, steps=10), checkpoint=path)
    path.with_suffix(".npz").unlink()
    with pytest.raises(gpt.CheckpointError, match=r"m\.npz missing beside .*m\.pt .*; train "
                                                  "one with train.py"):
        gpt.load_checkpoint(path)


def test_every_training_setting_but_threads_and_compile_makes_another_training():
    # presets.settings decides whether a checkpoint is reused: with no special case, a change
    # of any of the recipe's fields retrains, but the thread count and compiling, which change
    # the last digits of the losses only. (A special case for AdamW, as there was, fails here.)
    corpus.prepare()
    draft = presets.preset("draft")
    other = {"steps": 7, "batch_size": 3, "lr": 1e-3, "min_lr": 1e-5, "warmup_steps": 2,
             "weight_decay": 0.0, "grad_clip": 0.5, "eval_every": 9, "eval_batches": 3,
             "seed": 7, "threads": 2, "optimizer": "muon", "muon_lr": 0.01,
             "precision": "float32", "compile": True, "schedule": "wsd", "decay_fraction": 0.5,
             "init": "zero", "newton_schulz": 3}
    assert set(other) == set(vars(draft.training))          # every field is tried
    for name, value in other.items():
        changed = replace(draft, training=replace(draft.training, **{name: value}))
        same = presets.settings(changed) == presets.settings(draft)
        assert same == (name in ("threads", "compile")), name


def test_each_preset_trains_with_its_own_settings_and_a_flag_overrides_one(tmp_path, monkeypatch):
    # The big model trains with Muon, the drafts with AdamW (presets.PRESETS).
    # A train.py flag changes only itself: with TrainConfig's defaults behind every flag, as
    # before, `--steps 4` trained the big model with AdamW (the first assert fails).
    tiny = ["--n_layer", "1", "--n_head", "2", "--n_embd", "16", "--block_size", "16"]
    own = {"optimizer": "muon", "steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 1,
           "warmup_steps": 1, "threads": 1}
    monkeypatch.setitem(presets.PRESETS, "draft", {**presets.PRESETS["draft"], "train": own})
    corpus.prepare()

    def trained(*flags):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        train.main(["--preset", "draft", "--checkpoints", str(folder), "--quiet", "--sample", "0",
                    *tiny, *flags])
        state = gpt.load_checkpoint(folder / "draft.pt")[1]
        return state["settings"]["train"]["optimizer"], state["step"]
    assert trained("--steps", "4") == ("muon", 4)
    assert trained() == ("muon", 6)
    assert trained("--optimizer", "adamw") == ("adamw", 6)   # control: the flag wins
    # and the exercises' and notebooks' way in, ensure_trained of the preset: its own settings
    presets.ensure_trained(presets.preset("draft", config=vars(tiny_config())),
                           folder=tmp_path / "e", progress=False, log=lambda *a: None)
    state = gpt.load_checkpoint(tmp_path / "e" / "draft.pt")[1]
    assert state["settings"]["train"]["optimizer"] == "muon" and state["step"] == 6


# ----------------------------------------------------------------------------------------------
# The speedrun's levers (studies/training.py measures them; beyond/presets.py keeps the winners)


def test_the_wsd_schedule_warms_up_holds_then_falls_in_a_straight_line_to_the_floor():
    tc = Recipe(steps=100, warmup_steps=10, lr=1e-2, min_lr=1e-3, muon_lr=0.05, schedule="wsd",
                decay_fraction=0.4)
    rates = [training.rate(tc, step) for step in range(100)]
    assert rates[0] == pytest.approx(1e-3) and rates[9] == pytest.approx(1e-2)   # warm-up
    assert rates[10:60] == [pytest.approx(1e-2)] * 50                             # held
    falls = np.diff(rates[60:])
    assert np.all(falls < 0) and np.allclose(falls, falls[0])                     # a straight line
    assert rates[99] == pytest.approx(1e-3 + 9e-3 / 40)                           # near the floor
    assert training.rate(tc, 60, tc.muon_lr) == pytest.approx(0.05)
    assert training.rate(tc, 100, tc.muon_lr) == pytest.approx(5e-3)
    # negative control: the lesson's cosine never holds its peak
    cosine = replace(tc, schedule="cosine")
    assert training.rate(cosine, 40) < 1e-2
    assert training.rate(cosine, 40) == gpt.learning_rate(40, cosine)


def test_initialisations_zero_and_teacher():
    torch.manual_seed(0)
    gpt2 = Recipe().initialise(GPT(tiny_config()))
    assert all(b.mlp.c_proj.weight.abs().sum() > 0 for b in gpt2.transformer.h)   # control
    zero = Recipe(init="zero").initialise(GPT(tiny_config()))
    for block in zero.transformer.h:
        assert not block.attn.c_proj.weight.any() and not block.mlp.c_proj.weight.any()
    # a one-layer student of a two-layer teacher of its width: the teacher's first block, its
    # embeddings and final norm; its own weights nowhere
    teacher, student = fresh_model(1), GPT(tiny_config(n_layer=1))
    Recipe(init="teacher").initialise(student, teacher)
    theirs = teacher.state_dict()
    assert all(torch.equal(w, theirs[name]) for name, w in student.state_dict().items())
    with pytest.raises(ValueError, match="shares no weight shape"):
        Recipe(init="teacher").initialise(GPT(tiny_config(n_embd=48, n_layer=1, n_head=2,
                                                          vocab_size=7, block_size=8)), teacher)
    with pytest.raises(ValueError, match="needs a teacher"):
        Recipe(init="teacher").initialise(student)


@pytest.mark.parametrize("changes, message", [
    ({"lr": 0.0}, "lr must be above 0"), ({"muon_lr": -1.0}, "muon_lr must be above 0"),
    ({"batch_size": 0}, "batch_size must be above 0"), ({"schedule": "linear"}, "schedule must be"),
    ({"init": "xavier"}, "init must be gpt2, zero or teacher"),
    ({"decay_fraction": 0.0}, "decay_fraction must be in"), ({"newton_schulz": 0}, "newton_schulz"),
    ({"min_lr": 1.0}, "min_lr must be in"), ({"precision": "fp8"}, "precision must be")])
def test_a_recipe_that_cannot_train_is_a_one_line_error_before_any_step(changes, message):
    with pytest.raises(ValueError, match=message):
        Recipe(**changes)


def test_newton_schulz_iterations_reach_muon():
    tc = Recipe(optimizer="muon", newton_schulz=3)
    muon = training.optimizers(tc, fresh_model(), "cpu")[1][0]
    assert {group["newton_schulz"] for group in muon.param_groups} == {3}


def test_a_field_added_later_at_its_old_behaviour_keeps_old_checkpoints_the_same_training():
    # presets.LATER_FIELDS at their old values are left out of settings (a model trained before
    # they existed is not retrained); away from it, each one is recorded (control).
    corpus.prepare()
    draft = presets.preset("draft")
    recorded = presets.settings(draft)["train"]
    assert not set(presets.LATER_FIELDS) & set(recorded)
    assert all(getattr(draft.training, name) == old for name, old in presets.LATER_FIELDS.items())
    zero = replace(draft, training=replace(draft.training, init="zero"))
    assert presets.settings(zero)["train"]["init"] == "zero"
