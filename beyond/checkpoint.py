"""
beyond/checkpoint.py: the lesson's named models (presets), where they live once trained, and
how to load one by name.

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
from training import Recipe

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"  # the repository's checkpoints/


# The lesson's models: the big target, its small draft, and a draft of the same shape that
# learned first names instead of Shakespeare (so it barely ever agrees with the target). And a
# faster-paying draft: one layer as wide as the target (on a CPU a step costs per layer, hardly
# per width) trained to imitate the target's distributions (distillation) rather than the text.
# "train": how a preset trains where it differs from training.Recipe's defaults (AdamW, 1500
# steps). With Muon the big model reaches AdamW's loss in 600 steps, in a third to a half of the
# time, and the distilled draft, imitating it, agrees with it as much as before; the lesson's
# two small drafts keep AdamW, and with it the lesson's figures (docs/RESULTS.md, "Muon").
PRESETS = {
    "big": {"config": {}, "corpus": "shakespeare", "train": {"optimizer": "muon", "steps": 600}},
    "draft": {"config": {"n_embd": 32, "n_layer": 1, "n_head": 2}, "corpus": "shakespeare"},
    "names": {"config": {"n_embd": 32, "n_layer": 1, "n_head": 2}, "corpus": "names"},
    "distilled": {"config": {"n_layer": 1}, "corpus": "shakespeare", "teacher": "big",
                  "train": {"optimizer": "muon"}},
}
# The presets in other sizes, each keeping its role: "quick" for the tests and --quick runs
# (trained in seconds; the big one stays bigger than the drafts), "gpu" for exercise 5 on a GPU.
SIZES = {
    "lesson": {name: p["config"] for name, p in PRESETS.items()},
    "quick": {"big": dict(n_layer=2, n_head=2, n_embd=32, block_size=64),
              "draft": dict(n_layer=1, n_head=2, n_embd=16, block_size=64),
              "names": dict(n_layer=1, n_head=2, n_embd=16, block_size=64),
              "distilled": dict(n_layer=1, n_head=2, n_embd=32, block_size=64)},
    "gpu": {"big": dict(n_layer=8, n_head=8, n_embd=512, block_size=256),
            "draft": dict(n_layer=2, n_head=4, n_embd=256, block_size=256)},
}


def preset(name, size="lesson"):
    """The Config of a named preset, in one of SIZES (the lesson's by default)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return gpt.Config(**SIZES[size][name])


def training(name, **changes):
    """The training.Recipe preset `name` trains with (its own settings, then `changes`)."""
    preset(name)  # an unknown name: a ValueError that lists the presets
    return Recipe(**{**PRESETS[name].get("train", {}), **changes})


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
    preset(name)  # an unknown name is a ValueError that lists the presets
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
