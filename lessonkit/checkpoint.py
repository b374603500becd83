"""
lessonkit/checkpoint.py: one self-describing file per trained model, written atomically, read back with
torch.load(..., weights_only=True).

A checkpoint holds the weights, the model's Config, the vocabulary, the step, the validation
loss, the corpus and the training's settings, optimizers and random state (enough to resume
exactly); beside it, an .npz with the same weights as plain NumPy arrays for exercise 3
(numpy_speculative.load: no pickle, no torch). gpt.train writes both at every evaluation;
gpt.load_checkpoint reads one back. Anything wrong with one is a one-line CheckpointError
saying what and what to do.
"""

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from lessonkit import corpus

FORMAT = "specdec-gpt/1"


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or made for other data; the message says why."""


def save_checkpoint(path, model, *, step, val_loss, train_config=None, optimizers=(),
                    generator=None, corpus_name="shakespeare", extra=None):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"format": FORMAT, "config": asdict(model.c),
             "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
             "vocab": corpus.vocab(), "step": step, "val_loss": float(val_loss), "corpus": corpus_name,
             "train_config": asdict(train_config) if train_config else None,
             "optimizer": [optimizer.state_dict() for optimizer in optimizers],
             "rng": generator.get_state() if generator is not None else None, **(extra or {})}
    # Both files whole on disk before either replaces its old self: a full disk or a failed
    # write leaves the previous pair as it was, and no reader ever sees half a file.
    written = write_whole(path, lambda f: torch.save(state, f))
    try:
        export_npz(model, path.with_suffix(".npz"))
    except BaseException:
        written.unlink()
        raise
    os.replace(written, path)


def write_whole(path, write):
    """write(f) into `path`.tmp, flushed to the disk -> that file, for os.replace onto `path`.
    On any failure the .tmp is removed and a CheckpointError says so in one line."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # renamed only once its bytes are on the disk
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if not isinstance(e, Exception):  # Ctrl-C, exit: not a failure of the disk
            raise
        why = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
        raise CheckpointError(f"could not write {path} ({why}): free some disk space or save "
                              f"elsewhere; the previous {path.name}, if any, is whole") from None
    return tmp


def write_atomic(path, write):
    """write(f) into `path`, whole or not at all (write_whole, then renamed onto it)."""
    os.replace(write_whole(path, write), path)


def export_npz(model, path, characters=None):
    """The weights as plain NumPy arrays (GPT-2 names, torch's layouts) plus the config and the
    vocabulary (`characters`, default: the corpus') as JSON, for numpy_speculative.load: no
    pickle, no torch needed to read them. Written atomically, like the checkpoint."""
    path = Path(path)
    arrays = {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()}
    arrays["meta.config"] = np.array(json.dumps(asdict(model.c)))
    arrays["meta.vocab"] = np.array(json.dumps(corpus.vocab() if characters is None
                                               else characters))
    write_atomic(path, lambda f: np.savez(f, **arrays))
    return path


def load_model(path, build, device="cpu", hint=None):
    """(model, the checkpoint dictionary), the model made by build(state) with the saved
    weights, in eval mode on `device`. hint: the command that makes a missing one."""
    path = Path(path)
    fix = f"train it with: {hint}" if hint else "train one with train.py"
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}; {fix}")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
        model = build(state)
    except Exception as e:  # truncated, not a torch file, or not one of ours
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(e).__name__}); "
                              f"delete it and {fix}") from None
    if state.get("format") != FORMAT or not isinstance(state.get("optimizer"), list):
        raise CheckpointError(f"{path} is a checkpoint of an older format; retrain it: {fix}")
    npz = path.with_suffix(".npz")
    if not npz.exists():   # written beside it with every save (older ones had none)
        raise CheckpointError(f"{npz.name} missing beside {path} (the same weights for NumPy, "
                              f"which exercise 3 reads); {fix}")
    if state["vocab"] != corpus.vocab():
        raise CheckpointError(
            f"{path} was trained with a different vocabulary ({len(state['vocab'])} characters) "
            f"than the corpus in {corpus.DATA_DIR} ({len(corpus.vocab())}); retrain it: {fix}")
    model.load_state_dict(state["model"])
    model.to(device).eval()
    model.val_loss, model.step = state["val_loss"], state["step"]
    return model, state
