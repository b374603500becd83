"""
harness/decode.py: the command line for speculative decoding with the lesson's trained models.

    python -m harness.decode --draft ngram --k 6
    python -m harness.decode --draft distilled --temperature 0.8

It colours each character by where it came from (a kept guess, the correction, the bonus),
prints what the rounds did and, unless --no-compare, times plain against speculative decoding.
The algorithm is speculative.py; this file reads flags, loads and prints (as nanoGPT's sample.py).
"""

import os
import sys
from dataclasses import dataclass

import torch

import gpt
import speculative as sd
from beyond import adaptive as schedules
from beyond import presets
from harness import registry
from harness.registry import check_backend, with_backend
from lessonkit import cli, machine
from lessonkit.stats import origins
from speculative import generate, speculative_generate


@dataclass
class DecodeArgs:
    prompt: str = "ROMEO:\n"    # \n in the prompt means a newline
    max_new_tokens: int = 200   # characters to write
    k: int = 4                  # draft tokens per round (where an adaptive k starts)
    adaptive: str = "off"       # k that adapts: off, heuristic (+2/-1), best, confidence
    temperature: float = 0.0    # sampling temperature (0: greedy)
    top_k: int = 0              # sample from the top_k most likely tokens only (0: off)
    top_p: float = 1.0          # sample from the smallest set with this much mass (1: off)
    seed: int = 0               # seed of the sampling generator
    target: str = "big"         # a preset trained by train.py
    draft: str = "draft"        # drafter: draft, distilled, names, ngram, heads, exitL (L layers)
    target_backend: str = "torch"  # torch, or numpy (beyond/fast_numpy.py: the same model, faster)
    draft_backend: str = "numpy"  # torch, or numpy (the default: a cheaper draft step)
    compare: bool = True        # also time plain decoding on the same prompt
    checkpoints: str = ""       # checkpoint folder (default: checkpoints/)


COLOURS = {"prompt": "1", "accepted": "32", "correction": "33", "bonus": "36"}


def colour_text(pieces, use_colour):
    """pieces: (text, kind) -> one string, each kind in its own colour (ANSI escapes)."""
    if not use_colour:
        return "".join(text for text, _ in pieces)
    return "".join(f"\033[{COLOURS[kind]}m{text}\033[0m" for text, kind in pieces)


def main(argv=None):
    parser = cli.Parser(prog="python speculative.py",   # which starts this (see its main guard)
                        description="Speculative decoding with the lesson's trained models: "
                                    "the output coloured by where each character came from.")
    cli.add_fields(parser, DecodeArgs, title="decoding")
    args = cli.take(DecodeArgs, parser.parse_args(argv))
    prompt = args.prompt.replace("\\n", "\n")
    if not prompt:
        raise ValueError("the prompt is empty; give at least one character (--prompt)")
    idx = torch.tensor([gpt.encode(prompt)])
    sampling = dict(temperature=args.temperature, top_k=args.top_k or None,
                    top_p=None if args.top_p == 1.0 else args.top_p)
    sd.check_decoding_args(idx, args.max_new_tokens, k=args.k, **sampling)
    new_k = schedules.by_name(args.adaptive, args.k)  # a bad name fails before any loading
    presets.preset(args.target)  # an unknown name lists the presets
    registry.check_name(args.draft)
    for backend in (args.target_backend, args.draft_backend):
        check_backend(backend)
    folder = args.checkpoints or None
    target = with_backend(presets.load_trained(args.target, folder), args.target_backend)
    draft = schedules.drafting_for(args.adaptive,
                                   registry.by_name(args.draft, folder, args.draft_backend))

    def plain_run():
        return generate(target, idx, args.max_new_tokens,
                        generator=torch.Generator().manual_seed(args.seed), **sampling)

    def speculative_run():
        return speculative_generate(target, draft, idx, args.max_new_tokens, k=new_k(),
                                    generator=torch.Generator().manual_seed(args.seed), **sampling)
    out, stats = speculative_run()
    use_colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    pieces = [(prompt, "prompt")] + [(gpt.decode([t]), kind) for t, kind in
                                     zip(out[0, idx.shape[1]:].tolist(), origins(stats.trace))]
    print(colour_text(pieces, use_colour))
    if use_colour:
        print(colour_text([("accepted draft token", "accepted"), ("  ", "prompt"),
                           ("target's correction", "correction"), ("  ", "prompt"),
                           ("bonus token (all k accepted)", "bonus")], True))
    print(f"\n{stats.rounds} rounds: {stats.proposed} tokens proposed, {stats.accepted} accepted "
          f"({stats.acceptance_rate:.0%}); per draft position "
          f"{[round(a / max(1, stats.rounds), 2) for a in stats.accepted_per_position]}")
    print(f"{stats.new_tokens} new tokens from {stats.target_passes} target passes (one a round, "
          f"two where a check crosses a window jump): {stats.tokens_per_pass:.2f} tokens per pass "
          f"(at most {stats.k + 1})")
    print(f"time in the draft {stats.draft_time * 1e3:.0f} ms, in the target "
          f"{stats.target_time * 1e3:.0f} ms")
    if args.compare:
        plain = plain_run()
        with machine.Busy() as busy:  # plain and speculative alternately: drift hits both
            plain_s, spec_s, ratio, ratios = machine.paired_times(plain_run, speculative_run, 5)
        print(f"plain decoding {plain_s * 1e3:.0f} ms, speculative {spec_s * 1e3:.0f} ms "
              f"(medians of 5, alternating; target in {args.target_backend}, draft in "
              f"{args.draft_backend}): {ratio:.2f}x")
        note = busy.note([machine.spread(ratios)])
        if note:
            print(note)
        if args.temperature == 0:
            same = torch.equal(plain, out)
            print("identical to plain greedy decoding" if same else
                  "DIFFERENT from plain greedy decoding: please report this as a bug")


if __name__ == "__main__":
    cli.run(main)
