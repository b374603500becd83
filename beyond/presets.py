"""
beyond/presets.py: the lesson's named models, each one Preset (its shape, corpus, teacher and
training) in three sizes; where each lives once trained; the cache that trains one when missing.

    big = presets.load_trained("big")                      # checkpoints/big.pt, in eval mode
    presets.ensure_trained(presets.preset("draft", "quick"), folder="/tmp/models")

train.py, the exercises and the notebooks train what is missing; decoding only loads (a missing
checkpoint is a one-line error that gives the command that trains it).
"""

import hashlib
import math
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import gpt
from beyond import training
from beyond.training import Recipe, speedups
from gpt import GPT, Config
from lessonkit import corpus, machine, waiting

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"  # the repository's checkpoints/

# The lesson's models: the big target, its small draft, and a draft of the same shape that
# learned first names instead of Shakespeare (so it barely ever agrees with the target). And a
# faster-paying draft: one layer as wide as the target (on a CPU a step costs per layer, hardly
# per width) trained to imitate the target's distributions (distillation) rather than the text.
# "train": where a preset differs from training.Recipe's defaults (the lesson's AdamW, cosine,
# 1500 steps): the big model takes the speedrun's levers (docs/RESULTS.md, "The models"), the
# distilled draft starts from its teacher; the lesson's two small drafts keep the lesson's recipe.
DRAFT = {"n_embd": 32, "n_layer": 1, "n_head": 2}
SPEEDRUN = {"optimizer": "muon", "schedule": "wsd", "min_lr": 0.0, "lr": 8e-3, "muon_lr": 0.04,
            "init": "zero", "warmup_steps": 20}
PRESETS = {
    "big": {"config": {}, "train": {**SPEEDRUN, "steps": 550}},
    "draft": {"config": DRAFT},
    "names": {"config": DRAFT, "corpus": "names"},
    "distilled": {"config": {"n_layer": 1}, "teacher": "big",
                  "train": {"optimizer": "muon", "init": "teacher", "steps": 600}},
}
# The presets in other sizes, each keeping its role (corpus, teacher), every preset of a size
# trained alike: "quick" for the tests and --quick runs (trained in seconds; the big one stays
# bigger than the drafts), "gpu" for exercise 5 on a GPU.
SIZES = {
    "quick": {"train": {"steps": 60, "batch_size": 8, "eval_every": 30, "eval_batches": 2,
                        "warmup_steps": 5},
              "big": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64},
              "draft": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 64},
              "names": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 64},
              "distilled": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 64}},
    "gpu": {"train": {"steps": 2000, "batch_size": 64, "lr": 1e-3, "min_lr": 1e-4,
                      "warmup_steps": 100},
            "big": {"n_layer": 8, "n_head": 8, "n_embd": 512, "block_size": 256},
            "draft": {"n_layer": 2, "n_head": 4, "n_embd": 256, "block_size": 256}},
}


@dataclass
class Preset:
    """A named model: everything ensure_trained needs to train it (made by preset())."""
    name: str
    size: str              # lesson, or one of SIZES
    config: Config         # the model's shape
    training: Recipe       # how it trains
    corpus: str = "shakespeare"
    teacher: str = None    # distillation: the preset of the same size it imitates


def preset(name, size="lesson", config=None, training=None):
    """Preset `name` in `size`: the tables above, then `config` and `training` (changes of
    Config's and Recipe's fields: train.py's flags). Unknown names are one-line errors."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    if size != "lesson" and name not in SIZES.get(size, {}):
        raise ValueError(f"no {size!r} size of preset {name!r}; sizes: lesson, "
                         + ", ".join(s for s in SIZES if name in SIZES[s]))
    own = PRESETS[name]
    shape, train = (own["config"], own.get("train", {})) if size == "lesson" else \
        (SIZES[size][name], SIZES[size]["train"])
    return Preset(name, size, Config(**{**shape, **(config or {})}),
                  Recipe(**{**train, **(training or {})}), own.get("corpus", "shakespeare"),
                  own.get("teacher"))


def checkpoint_path(name, folder=None):
    """Where preset `name` is saved: <folder>/<name>.pt (folder: checkpoints/ by default)."""
    return Path(folder or CHECKPOINTS) / f"{name}.pt"


def folder_option(folder):
    """A command's --checkpoints flag for `folder` ("" for checkpoints/)."""
    if folder and Path(folder).resolve() != CHECKPOINTS:
        return f" --checkpoints {shlex.quote(str(folder))}"
    return ""


def train_command(name, folder=None):
    """The command that trains preset `name` into `folder` (for error messages)."""
    return f"python train.py --preset {name}" + folder_option(folder)


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


# ----------------------------------------------------------------------------------------------
# The checkpoint cache


# Recipe's fields added after models were trained, at the value that was the only behaviour
# before: left out of settings(), so that a model trained before they existed is still the same
# training (not retrained for nothing).
LATER_FIELDS = {"schedule": "cosine", "decay_fraction": 0.4, "init": "gpt2", "newton_schulz": 5}


def settings(p):
    """What makes two trainings the same: model shape, training settings, and the data itself.
    Not the thread count nor compiling: they change the last digits of the losses, not what is
    trained. (The precision does change it, a little: it stays.)"""
    training = {k: v for k, v in asdict(p.training).items() if k not in ("threads", "compile")
                and not (k in LATER_FIELDS and v == LATER_FIELDS[k])}
    return {"config": asdict(p.config.fill_vocab()), "train": training, "corpus": p.corpus,
            "data_sha256": corpus.loaded()["meta"][p.corpus]["sha256"]}


def ensure_trained(p, *, folder=None, device="auto", fresh=False, resume=False, progress=True,
                   log=print, runs=None):
    """Train Preset p unless <folder>/<name>.pt already holds it; return the path. An
    interrupted run continues where it stopped; resume continues a finished one to p's steps;
    fresh starts over. A teacher (distillation) is trained first if it is missing. runs: a list
    that gets a record (training_record) of each model trained here, for a results file."""
    tc, path, wanted = p.training, checkpoint_path(p.name, folder), settings(p)
    teacher = None
    if p.teacher:  # distillation: the teacher as it is, trained with its own settings if missing
        teacher_path = checkpoint_path(p.teacher, folder)
        if not teacher_path.exists():
            ensure_trained(preset(p.teacher, p.size), folder=folder, device=device,
                           progress=progress, log=log, runs=runs)
        teacher, teacher_state = gpt.load_checkpoint(teacher_path,
                                                    device=machine.resolve_device(device))
        wanted["teacher"] = teacher_state.get("settings")  # a new teacher means a new student
    state = None
    if path.exists() and not fresh:
        try:
            _, state = gpt.load_checkpoint(path)
        except gpt.CheckpointError as e:
            log(f"{path}: {e}; training again")
    config = p.config
    if state is not None:
        same = state.get("settings") == wanted
        if same and state["step"] >= tc.steps and not resume:
            log(f"{path}: already trained ({state['step']} steps, validation loss "
                f"{state['val_loss']:.3f}); skipping")
            return path
        if resume or (same and state["step"] < tc.steps):
            if resume and not same:
                config = Config(**state["config"])
                wanted = {**state["settings"], "train": wanted["train"]}
            if state["step"] >= tc.steps:
                log(f"{path}: already at step {state['step']} of {tc.steps}; nothing to resume")
                return path
            log(f"{path}: resuming at step {state['step']} of {tc.steps}")
        else:
            backup = path.with_name(path.stem + ".prev.pt")
            path.replace(backup)
            log(f"{path}: trained with other settings; kept it as {backup.name}, training anew")
            state = None
    torch.manual_seed(tc.seed)
    model = tc.initialise(GPT(config), teacher)   # a resumed run's weights replace these
    autocast = speedups(tc, machine.resolve_device(device), width=config.n_embd)[0]
    log(f"training {p.name}: {model.num_params() / 1e6:.2f}M parameters, {tc.steps} steps "
        f"of {tc.batch_size} x {config.block_size} characters from {p.corpus}"
        + (f", imitating {p.teacher}" if p.teacher else "")
        + (", Muon for the blocks' matrices" if tc.optimizer == "muon" else "")
        + (", matrix products in bfloat16" if autocast else ""))
    watch = Watch(p.name, model, tc, state["step"] if state else 0, progress=progress, log=log,
                  val=state["val_loss"] if state else None)
    try:
        # Without a bar of its own (gpt.train's would show "val=nan" and flood notebooks), and
        # with the evaluations' lines only where Watch does not write them (see on_eval).
        training.train(model, tc, None if p.corpus == "shakespeare" else corpus.names_data,
                       corpus_name=p.corpus, teacher=teacher, device=device, checkpoint=path,
                       resume=state, on_eval=watch.on_eval,
                       extra={"settings": wanted, "preset": p.name},
                       log_every=0 if progress else tc.eval_every, note=watch.say)
    finally:
        watch.close()
    log(f"{path}: validation loss {model.val_loss:.3f} after {model.step} steps "
        f"(took {waiting.duration(watch.elapsed())})")
    if runs is not None:
        runs.append(training_record(p, model, watch.elapsed(), autocast, first=watch.first))
    return path


def training_record(p, model, seconds, autocast=None, first=0):
    """What one training run did, for a results file: the preset, its shape and recipe, the
    steps run here (from `first`), the validation loss, the seconds, the precision."""
    tc = p.training
    return {"preset": p.name, "size": p.size, "parameters": model.num_params(),
            "n_layer": model.c.n_layer, "n_embd": model.c.n_embd, "corpus": p.corpus,
            "teacher": p.teacher, "optimizer": tc.optimizer, "steps": model.step,
            "steps_here": model.step - first, "batch_size": tc.batch_size,
            "block_size": model.c.block_size, "val_loss": model.val_loss, "seconds": seconds,
            "precision": "bfloat16" if autocast is not None else "float32",
            "finished": time.time()}


# An evaluation batch is a forward pass without the backward one: about a third of a training
# step. The forecast counts an evaluation so until it has timed one.
EVAL_BATCH_STEPS = 1 / 3


class Watch:
    """Follows the training from outside: a progress line with the loss and, once there is one,
    the validation loss; and one announcement of how long it will take, forecast from its first
    steps timed here (waiting.Pace), evaluations included. The model runs once per step in
    training mode (evaluations in eval mode), so a forward hook sees every step and its loss,
    and on_eval every evaluation. (Distillation's loss is not the model's: its line shows val.)
    """

    def __init__(self, name, model, tc, done=0, *, progress=True, log=print, val=None,
                 clock=time.perf_counter):
        self.name, self.tc, self.log, self.clock = name, tc, log, clock
        self.started = clock()
        self.first, self.step, self.loss, self.val = done, done, None, val
        self.pace = waiting.Pace(tc.steps, done, eval_every=tc.eval_every,
                                 eval_steps=tc.eval_batches * EVAL_BATCH_STEPS, clock=clock)
        self.announced = False
        self.line = waiting.ProgressLine(tc.steps, done, name) if progress else None
        self.hook = model.register_forward_hook(self.on_forward)

    def on_forward(self, model, inputs, output):
        if not model.training:  # a batch of an evaluation
            return
        self.step += 1
        self.pace.tick()
        if output[1] is not None:
            self.loss = output[1].item()
        left = self.pace.seconds_left()
        if left is not None and not self.announced:
            self.announced = True
            self.say(f"{self.name}: {self.tc.steps - self.first} steps, about "
                     f"{waiting.duration(self.elapsed() + left)} at this machine's current speed")
        if self.line:
            self.line.update(self.step, self.postfix(), left)

    def on_eval(self, step, val_loss):
        self.pace.evaluated()
        self.val = val_loss
        if self.line and not self.line.notebook:  # a notebook keeps to its one line
            self.line.write(f"step {step:5d} | {self.postfix()} | "
                            f"{waiting.duration(self.elapsed())}", self.log)

    def postfix(self):
        """The losses so far: the validation loss only once there is one (never "val nan")."""
        parts = [] if self.loss is None else [f"loss {self.loss:.3f}"]
        if self.val is not None and not math.isnan(self.val):
            parts.append(f"val {self.val:.3f}")
        return "  ".join(parts)

    def say(self, text):
        if self.line:
            self.line.write(text, self.log)
        else:
            self.log(text)

    def elapsed(self):
        return self.clock() - self.started

    def close(self):
        self.hook.remove()
        if self.line:
            self.line.close()
