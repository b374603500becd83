"""
beyond/checkpoint.py: where the trained models live and how to load one by name.

    from beyond import checkpoint
    big = checkpoint.load_trained("big")                  # checkpoints/big.pt, in eval mode
    path = checkpoint.checkpoint_path("draft", "my_models")

Loading lives here, apart from training (train.py), so that decoding (beyond/decode.py, the
drafters in beyond/) never imports the trainer and the trainer never imports the decoder's
command line.
A missing checkpoint is a one-line error that gives the command that trains it.
"""

import hashlib
import shlex
from pathlib import Path

import gpt

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"  # the repository's checkpoints/


def checkpoint_path(name, folder=None):
    """Where preset `name` is saved: <folder>/<name>.pt (folder: checkpoints/ by default)."""
    return Path(folder or CHECKPOINTS) / f"{name}.pt"


def train_command(name, folder=None):
    """The command that trains preset `name` into `folder` (for error messages)."""
    command = f"python train.py --preset {name}"
    if folder and Path(folder).resolve() != CHECKPOINTS:
        command += f" --checkpoints {shlex.quote(str(folder))}"
    return command


def load_trained(name, folder=None, device="cpu"):
    """The trained model of preset `name`, or a one-line error saying how to train it."""
    gpt.preset(name)  # an unknown name is a ValueError that lists the presets
    model, _ = gpt.load_checkpoint(checkpoint_path(name, folder), device=device,
                                   hint=train_command(name, folder))
    return model


def fingerprint(model):
    """A short hash of a gpt.GPT's weights: which big model a drafter was made for (heads,
    the table of its own text), so that one made for another is never used by mistake."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().float().numpy().tobytes())
    return digest.hexdigest()[:16]
