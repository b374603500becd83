"""
train.py: train the lesson's models from the command line, with a checkpoint cache.

    python train.py                       # every preset: big, draft, names, distilled
    python train.py --preset draft        # one preset
    python train.py --preset big --optimizer adamw --steps 1500 --schedule cosine --init gpt2 \
        --lr 4e-3 --min_lr 4e-4 --warmup_steps 50 # the lesson's own recipe (gpt.TrainConfig)
    python train.py -h                    # every flag, from gpt.Config and training.Recipe

Each preset trains with its own settings (beyond/presets.py: the big model with Muon and the
speedrun's schedule, the drafts with AdamW for 1500 steps); a flag given here overrides them.
Checkpoints go to checkpoints/<preset>.pt. Rerunning skips a model already trained with the same
settings on the same data; an interrupted run (Ctrl-C leaves a usable checkpoint) continues
where it stopped; --resume continues a finished one to a new --steps; --fresh starts over.
Training is deterministic given --seed and --threads (on the same machine and device).
"""

import argparse
import sys
from dataclasses import fields
from pathlib import Path

import torch

import gpt
from beyond import presets
from beyond.presets import CHECKPOINTS, PRESETS, checkpoint_path
from beyond.training import Recipe
from gpt import Config
from lessonkit import cli, corpus, machine, results_file
from speculative import generate


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
    parser.add_argument("--results", default="results", metavar="DIR",
                        help="where train.json goes: each model trained, its steps, loss, "
                        "seconds and the machine")
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
    # each preset's own settings, changed by the flags given; a bad --optimizer or --precision
    # is one line here, before any work
    chosen = [presets.preset(name, config=cli.given(Config, args),
                             training=cli.given(Recipe, args)) for name in args.preset]
    machine.resolve_device(args.device)
    corpus.prepare()
    runs = []
    with machine.Busy() as busy:   # other programs' load while we trained, for the results file
        for p in chosen:
            try:
                presets.ensure_trained(p, folder=args.checkpoints, device=args.device,
                                       fresh=args.fresh, resume=args.resume,
                                       progress=not args.quiet, runs=runs)
            except KeyboardInterrupt:
                sys.exit(f"\ninterrupted; {checkpoint_path(p.name, args.checkpoints)} holds the "
                         f"model so far: run the same command to continue")
    if runs:
        path = results_file.write_results(Path(args.results) / "train.json", {"models": runs},
                                     busy=busy.note())
        print(f"wrote {path}")
    big = [p for p in chosen if p.name == "big"]
    if args.sample and big:
        model = presets.load_trained("big", args.checkpoints)
        prompt = "ROMEO:\n"
        idx = generate(model, torch.tensor([gpt.encode(prompt)]), args.sample, temperature=0.8,
                       generator=torch.Generator().manual_seed(big[0].training.seed))
        print(f"\n--- a sample from the big model (temperature 0.8) ---\n{gpt.decode(idx[0])}")


if __name__ == "__main__":
    cli.run(main)
