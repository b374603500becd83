"""
train.py: train the lesson's models from the command line, with a checkpoint cache.

    python train.py                       # every preset: big, draft, names, distilled
    python train.py --preset draft        # one preset
    python train.py --preset big --optimizer adamw --steps 1500   # the lesson's own recipe
    python train.py -h                    # every flag, from gpt.Config and training.Recipe

Each preset trains with its own settings (beyond/checkpoint.py: the big model with Muon for 600
steps, the drafts with AdamW for 1500); a flag given here overrides them.
Checkpoints go to checkpoints/<preset>.pt. Rerunning skips a model already trained with the same
settings on the same data; an interrupted run (Ctrl-C leaves a usable checkpoint) continues
where it stopped; --resume continues a finished one to a new --steps; --fresh starts over.
Training is deterministic given --seed and --threads (on the same machine and device).
"""

import argparse
import math
import sys
import time
from dataclasses import asdict, fields

import torch

import cli
import corpus
import gpt
import machine
from beyond.checkpoint import CHECKPOINTS, PRESETS, checkpoint_path, load_trained, preset, training
from gpt import GPT, Config
from training import Recipe, speedups
from speculative import generate


def source_for(corpus_name):
    return None if corpus_name == "shakespeare" else gpt.names_data


def settings(config, tc, corpus_name):
    """What makes two trainings the same: model shape, training settings, and the data itself."""
    data_sha = corpus.loaded()["meta"][corpus_name]["sha256"]
    # Not the thread count nor compiling: they change the last digits of the losses, not what
    # is trained. (The precision does change it, a little: it stays.)
    training = {k: v for k, v in asdict(tc).items() if k not in ("threads", "compile")}
    if tc.optimizer == "adamw":  # the same training as before the choice existed: still cached
        training = {k: v for k, v in training.items() if k not in ("optimizer", "muon_lr")}
    return {"config": asdict(config), "train": training,
            "corpus": corpus_name, "data_sha256": data_sha}


# An evaluation batch is a forward pass without the backward one: about a third of a training
# step. The forecast counts an evaluation so until it has timed one.
EVAL_BATCH_STEPS = 1 / 3


class Watch:
    """Follows gpt.train from outside: a progress line with the loss and, once there is one, the
    validation loss; and one announcement of how long the training will take, forecast from its
    first steps timed on this machine (machine.Pace), evaluations included.

    gpt.train calls the model once per training step, in training mode (its evaluations run in
    eval mode), so a forward hook on the model sees every step and its loss, and on_eval every
    evaluation. (Distillation computes its loss outside the model: its line shows val alone.)
    """

    def __init__(self, name, model, tc, done=0, *, progress=True, log=print, val=None,
                 clock=time.perf_counter):
        self.name, self.tc, self.log, self.clock = name, tc, log, clock
        self.started = clock()
        self.first, self.step, self.loss, self.val = done, done, None, val
        self.pace = machine.Pace(tc.steps, done, eval_every=tc.eval_every,
                                 eval_steps=tc.eval_batches * EVAL_BATCH_STEPS, clock=clock)
        self.announced = False
        self.line = machine.ProgressLine(tc.steps, done, name) if progress else None
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
                     f"{machine.duration(self.elapsed() + left)} at this machine's current speed")
        if self.line:
            self.line.update(self.step, self.postfix(), left)

    def on_eval(self, step, val_loss):
        self.pace.evaluated()
        self.val = val_loss
        if self.line and not self.line.notebook:  # a notebook keeps to its one line
            self.line.write(f"step {step:5d} | {self.postfix()} | "
                            f"{machine.duration(self.elapsed())}", self.log)

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


def ensure_trained(name, tc=None, config=None, *, folder=None, device="auto", fresh=False,
                   resume=False, progress=True, log=print):
    """Train preset `name` unless checkpoints/<name>.pt already holds it; return the path.

    config / tc override the preset's model shape and its training settings (checkpoint.training).
    """
    config = (config or preset(name)).fill_vocab()
    tc = tc or (training(name) if name in PRESETS else Recipe())
    corpus_name = PRESETS[name]["corpus"] if name in PRESETS else "shakespeare"
    path = checkpoint_path(name, folder)
    wanted = settings(config, tc, corpus_name)
    teacher = None
    teacher_name = PRESETS.get(name, {}).get("teacher")
    if teacher_name:  # distillation: the teacher as it is, trained with defaults if missing
        if not checkpoint_path(teacher_name, folder).exists():
            ensure_trained(teacher_name, folder=folder, device=device, progress=progress, log=log)
        teacher, teacher_state = gpt.load_checkpoint(checkpoint_path(teacher_name, folder),
                                                    device=machine.resolve_device(device))
        wanted["teacher"] = teacher_state.get("settings")  # a new teacher means a new student
    state = None
    if path.exists() and not fresh:
        try:
            _, state = gpt.load_checkpoint(path)
        except gpt.CheckpointError as e:
            log(f"{path}: {e}; training again")
    if state is not None:
        same = state.get("settings") == wanted
        if same and state["step"] >= tc.steps and not resume:
            log(f"{path}: already trained ({state['step']} steps, validation loss "
                f"{state['val_loss']:.3f}); skipping")
            if not path.with_suffix(".npz").exists():  # trained before .npz exports existed
                gpt.export_npz(gpt.load_checkpoint(path)[0], path.with_suffix(".npz"))
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
    model = GPT(config)
    autocast = speedups(tc, machine.resolve_device(device), width=config.n_embd)[0]
    log(f"training {name}: {model.num_params() / 1e6:.2f}M parameters, {tc.steps} steps "
        f"of {tc.batch_size} x {config.block_size} characters from {corpus_name}"
        + (f", imitating {teacher_name}" if teacher_name else "")
        + (", Muon for the blocks' matrices" if tc.optimizer == "muon" else "")
        + (", matrix products in bfloat16" if autocast else ""))
    watch = Watch(name, model, tc, state["step"] if state else 0, progress=progress, log=log,
                  val=state["val_loss"] if state else None)
    try:
        # Without a bar of its own (gpt.train's would show "val=nan" and flood notebooks), and
        # with the evaluations' lines only where Watch does not write them (see on_eval).
        gpt.train(model, tc.steps, log_every=0 if progress else tc.eval_every,
                  source=source_for(corpus_name), config=tc, device=device, checkpoint=path,
                  resume=state, progress=False, on_eval=watch.on_eval, corpus_name=corpus_name,
                  extra={"settings": wanted, "preset": name}, teacher=teacher, note=watch.say)
    finally:
        watch.close()
    log(f"{path}: validation loss {model.val_loss:.3f} after {model.step} steps "
        f"(took {machine.duration(watch.elapsed())})")
    return path


def training_help():
    """-h for the training flags: each field's comment, Recipe's default and the presets'
    own settings where they differ."""
    own = {name: p["train"] for name, p in PRESETS.items() if "train" in p}
    comments = cli.field_comments(Recipe)
    return {f.name: f"{comments.get(f.name, '')} (default: {f.default!r}"
            + "".join(f"; {name}: {t[f.name]!r}" for name, t in own.items() if f.name in t) + ")"
            for f in fields(Recipe)}


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0],
                                     epilog="\n".join(__doc__.split("\n")[2:10]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", nargs="+", default=list(PRESETS),
                        metavar="NAME", help=f"what to train: {', '.join(PRESETS)} "
                        f"(default: all)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="where to train (auto: a CUDA GPU if torch sees one)")
    parser.add_argument("--checkpoints", default=str(CHECKPOINTS), help="checkpoint folder")
    parser.add_argument("--resume", action="store_true",
                        help="continue the saved model to --steps, even a finished one")
    parser.add_argument("--fresh", action="store_true", help="ignore saved checkpoints")
    parser.add_argument("--sample", type=int, default=300, metavar="N",
                        help="characters of sample text from the big model at the end (0: none)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    cli.add_fields(parser, Config, override_defaults={f.name: None for f in fields(Config)},
                   title="model shape (default: the preset's)")
    cli.add_fields(parser, Recipe, title="training (default: the preset's own settings)",
                   help=training_help(), override_defaults={f.name: None for f in fields(Recipe)})
    args = parser.parse_args(argv)
    unknown = [p for p in args.preset if p not in PRESETS]
    if unknown:
        raise ValueError(f"unknown preset {unknown[0]!r}; choose from: {', '.join(PRESETS)}")
    if args.resume and args.fresh:
        raise ValueError("--resume and --fresh contradict each other; pick one")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be at least 1, not {args.steps}")
    if args.threads is not None and args.threads < 0:
        raise ValueError(f"--threads is 0 (every core, or 1 on a busy machine) or a count, "
                         f"not {args.threads}")
    # each preset's own training settings, changed by the flags given; a bad --optimizer or
    # --precision is one line here, before any work
    tcs = {name: training(name, **cli.given(Recipe, args)) for name in args.preset}
    for tc in tcs.values():
        speedups(tc, machine.resolve_device(args.device))
    corpus.prepare()
    for name in args.preset:
        config = cli.take(Config, args, **{k: v for k, v in PRESETS[name]["config"].items()
                                          if getattr(args, k) is None})
        try:
            ensure_trained(name, tcs[name], config, folder=args.checkpoints,
                           device=args.device, fresh=args.fresh, resume=args.resume,
                           progress=not args.quiet)
        except KeyboardInterrupt:
            sys.exit(f"\ninterrupted; {checkpoint_path(name, args.checkpoints)} holds the "
                     f"model so far: run the same command to continue")
    if args.sample and "big" in args.preset:
        model = load_trained("big", args.checkpoints)
        prompt = "ROMEO:\n"
        idx = generate(model, torch.tensor([gpt.encode(prompt)]), args.sample, temperature=0.8,
                       generator=torch.Generator().manual_seed(tcs["big"].seed))
        print(f"\n--- a sample from the big model (temperature 0.8) ---\n{gpt.decode(idx[0])}")


if __name__ == "__main__":
    cli.run(main)
