"""
beyond/frozen.py: what the drafts that learn from the frozen big model share (the extra heads of
beyond/heads.py, the feature draft of beyond/eagle.py): their training (training.optimise with
AdamW and gpt.learning_rate's cosine to lr / 10, saved atomically every save_every steps with
its settings, the big model's fingerprint and the training code's, so that an interrupted run
resumes to the same weights) and their cache: load() trains a draft on first use, once, and
again when its loss changed; a file of another big model is a one-line error saying how to
retrain it.
"""

import ast
import contextlib
import hashlib
import inspect
import textwrap
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import gpt
from beyond import presets
from beyond.training import optimise
from lessonkit import machine, parts, waiting
from lessonkit.checkpoint import write_atomic

FLAGS = ("save_every", "threads", "checkpoints", "fresh", "speed")  # how to run, not what to learn


@dataclass
class Kind:
    """A kind of draft trained on the frozen big model: its file checkpoints/NAME.pt (format
    specdec-NAME/1, the weights under NAME), its command (python -m beyond.NAME) and its flags."""
    name: str           # heads, eagle
    title: str          # how its lines name it: "the extra heads are", "the EAGLE draft is"
    config: type        # its flags' dataclass: lr, steps, save_every, seed, threads, fresh...
    trained_by: object = tuple  # () -> the functions its training runs that a student writes

    def loss_names(self):
        return " or ".join(f.__name__ for f in self.trained_by())

    def path(self, folder=None):
        return Path(folder or presets.CHECKPOINTS) / f"{self.name}.pt"

    def command(self, folder=None):
        return f"python -m beyond.{self.name}" + presets.folder_option(folder)

    def read(self, path):
        """The file's dictionary, or None if it is not one of this kind (truncated, not ours)."""
        try:
            state = torch.load(path, weights_only=True)
            return state if state.get("format") == f"specdec-{self.name}/1" else None
        except Exception:
            return None


def check_flags(config, counts):
    """The one-line errors the drafts' flags share: each of `counts` at least 1, threads 0 (every
    core) or a count, text greedy or real."""
    for name in counts:
        if getattr(config, name) < 1:
            raise ValueError(f"--{name} must be at least 1, not {getattr(config, name)}")
    if config.threads < 0:
        raise ValueError(f"--threads is 0 (every core, or 1 on a busy machine) or a count, "
                         f"not {config.threads}")
    if config.text not in ("greedy", "real"):
        raise ValueError(f"--text is greedy or real, not {config.text!r}")


def code_fingerprint(function):
    """What a function computes, not where it sits: its source's syntax tree (comments, layout
    and line numbers left out), or, with no source to read, its bytecode."""
    try:
        text = textwrap.dedent(inspect.getsource(function))
        return hashlib.sha256(ast.dump(ast.parse(text)).encode()).digest()
    except (OSError, TypeError, SyntaxError):
        code = function.__code__
        return hashlib.sha256(code.co_code + repr(code.co_names).encode()).digest()


def answer(kind):
    """The fingerprint of the code kind's training runs, as its module holds it now (a notebook's
    your-turn cell replaces a function there)."""
    digest = hashlib.sha256()
    for function in kind.trained_by():
        digest.update(code_fingerprint(function))
    return digest.hexdigest()[:16]


def settings(config, big, kind):
    """What a trained draft depends on: its config but the FLAGS, the big model and the code
    that trains it."""
    return {**{k: v for k, v in asdict(config).items() if k not in FLAGS},
            "target": presets.fingerprint(big), "answer": answer(kind)}


def train(kind, draft, big, config, path, loss_of_step, *, keep=None, clip=None, prepare=None,
          log=print, progress=False):
    """Train the nn.Module `draft` of the frozen gpt.GPT `big`: loss_of_step(generator) is one
    step's loss (the generator draws its batches). keep: more entries for the file (what
    rebuilding the draft needs); clip: the gradient norm's limit, if any; prepare(): called once
    before the first step that runs here. Returns the draft in eval mode."""
    wanted = settings(config, big, kind)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=config.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    step, path = 0, Path(path)
    state = kind.read(path) if path.exists() and not config.fresh else None
    if state and state["settings"] == wanted:
        draft.load_state_dict(state[kind.name])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["rng"])
        step = state["step"]
        log(f"{path}: already trained ({step} steps)" if step >= config.steps else
            f"{path}: resuming at step {step} of {config.steps}")
    elif path.exists():
        why = ("--fresh" if config.fresh else
               f"trained with another {kind.loss_names()}" if state and
               state["settings"].get("answer") != wanted["answer"] else
               "other settings" if state else "not readable")
        log(f"{path}: {why}; training anew")

    def save():
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"format": f"specdec-{kind.name}/1", kind.name: draft.state_dict(),
                 **(keep or {}), "settings": wanted, "step": step,
                 "optimizer": optimizer.state_dict(), "rng": generator.get_state()}
        write_atomic(path, lambda f: torch.save(state, f))

    big.eval()
    draft.train()
    if prepare and step < config.steps:
        began = time.time()
        log(f"{kind.name}: first the big model writes the text to learn from")
        prepare()
        log(f"{kind.name}: text written in {waiting.duration(time.time() - began)}; training")
    started, pace, announced = time.time(), waiting.Pace(config.steps, step), False
    line = waiting.ProgressLine(config.steps, step, kind.name) if progress else None
    say = (lambda text: line.write(text, log)) if line else log
    schedule = gpt.TrainConfig(steps=config.steps, lr=config.lr, min_lr=config.lr / 10,
                               warmup_steps=0)                # cosine from lr down to lr / 10

    def after(done, loss):
        nonlocal step, announced
        step = done
        pace.tick()
        left = pace.seconds_left()
        if line and left is not None and not announced:
            announced = True
            say(f"{kind.name}: {config.steps - step} steps more, about "
                f"{waiting.duration(left)} at this machine's current speed")
        if line:
            line.update(step, f"loss {loss.item():.3f}", left)
        if step % config.save_every == 0 or step == config.steps:
            save()
            say(f"step {step:4d} of {config.steps} | loss {loss.item():.4f} | "
                f"{time.time() - started:.0f}s")

    with machine.threads(config.threads or machine.training_threads()), \
            (contextlib.closing(line) if line else contextlib.nullcontext()):
        optimise(draft, [(optimizer, config.lr)], lambda at, _: gpt.learning_rate(at, schedule),
                 lambda: loss_of_step(generator), step, config.steps, clip=clip, after=after)
    return draft.eval()


def first_use(big, configs):
    """configs["quick"] for the tests' tiny big model (presets.SIZES["quick"]), as --quick
    trains its GPTs for a few steps; configs["lesson"] for any other."""
    shape = ("n_layer", "n_head", "n_embd", "block_size")
    quick = presets.preset("big", "quick").config
    return configs["quick" if all(getattr(big.c, s) == getattr(quick, s) for s in shape)
                   else "lesson"]


def load(kind, big, folder, configs, train, build, log=print):
    """The trained draft of `kind` for gpt.GPT `big`: build(state) from its file, or, on first
    use (no file yet, or a first training that was interrupted), train(big, config, path, log=,
    progress=True) here, once, with configs' first_use."""
    path = kind.path(folder)
    for function in kind.trained_by():  # a part not done: its one line now, before any work
        parts.ready(function)
    state = kind.read(path) if path.exists() else None
    if path.exists() and state is None:
        raise ValueError(f"{path} is not a readable {kind.name} checkpoint; retrain with: "
                         f"{kind.command(folder)} --fresh")
    if state is not None and state["settings"]["target"] != presets.fingerprint(big):
        raise ValueError(f"{path} was trained for another big model; retrain with: "
                         f"{kind.command(folder)}")
    changed = state is not None and state["settings"].get("answer") != answer(kind)
    if state is not None and not changed and state["step"] >= state["settings"]["steps"]:
        return build(state)
    config = first_use(big, configs) if state is None else kind.config(
        **{k: v for k, v in state["settings"].items() if k not in ("target", "answer")})
    if not changed:                     # a changed answer: train() says so, once
        log(f"{kind.title} not trained yet: training first, once, into {path} "
            f"({kind.command(folder)} does the same)")
    return train(big, config, path, log=log, progress=True)
