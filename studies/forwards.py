"""
studies/forwards.py: the project's forward passes timed against each other, so that each
one past the lesson's two earns its place (`python -m studies.forwards`, under a minute).

Beside gpt.GPT and numpy_speculative.forward, beyond/fast_numpy.py's NumpyGPT stays while it is
at least KEEP times as fast as the readable NumPy forward (its one-token path while that beats
its block path), and beyond/batched.py's per-row forwards while the one-row paths are faster on
one row. Each figure: one pass over T new tokens after 64 cached, the median of `repeats`, in
microseconds, one thread, untrained weights (only the shapes matter).
"""

import os
import tempfile
from dataclasses import dataclass

import numpy as np

import gpt
import numpy_speculative as ns
from beyond import batched, presets
from harness import common
from beyond.fast_numpy import NumpyGPT
from lessonkit import cli, machine

KEEP = 1.5  # the fast NumPy forward stays while it is at least this much faster


@dataclass
class ForwardArgs:
    preset: str = "big"       # the shape to time (a preset of beyond/presets.py)
    size: str = "lesson"      # its size: lesson, quick (the tests') or gpu
    tokens: str = "1,2,3,5,9"  # new tokens per pass (T)
    repeats: int = 300        # timed passes per figure (the median is kept)


def passes(model, tokens, repeats, context=64):
    """{name: median seconds of one pass over `tokens` new tokens after `context` cached}."""
    fast, ids = NumpyGPT(model), np.random.default_rng(0).integers(0, model.c.vocab_size, 96)
    context = min(context, model.c.block_size - tokens)
    old, new = ids[:context].tolist(), ids[context:context + tokens].tolist()
    path = os.path.join(tempfile.mkdtemp(), "model.npz")
    readable = ns.load(gpt.export_npz(model, path, characters=["?"] * model.c.vocab_size))
    cache = ns.Cache(readable)
    ns.forward(readable, old, cache)

    def readable_pass():
        ns.forward(readable, new, cache)
        cache.forget_from(context)

    def one_row(model):                    # what one-row decoding takes: the model's own cache
        kv = model.new_cache(1)
        model.logits(np.array([old]), kv)

        def run():
            kv.rollback(context)
            model.logits(np.array([new]), kv)
        return run

    def ragged(model):                     # beyond/batched.py's per-row forward, on one row
        scorer = batched.BatchScorer(model, 1)
        scorer.run([(0, old, 0)])
        return lambda: scorer.run([(0, new, context)])

    block = fast.forward_block
    timed = {"readable NumPy": readable_pass, "fast NumPy": one_row(fast),
             "its block path": lambda: block(np.array([new]), context, fast.new_cache(1)),
             "ragged NumPy": ragged(fast), "torch": one_row(model), "ragged torch": ragged(model)}
    return {name: machine.median_time(fn, repeats) for name, fn in timed.items()}


def main(argv=None):
    """The forward passes timed against each other (see the module docstring)."""
    parser = cli.Parser(description=main.__doc__)
    cli.add_fields(parser, ForwardArgs, title="forwards")
    args = cli.take(ForwardArgs, parser.parse_args(argv))
    model = gpt.GPT(presets.preset(args.preset, args.size).config).eval()
    rows = {t: passes(model, t, args.repeats) for t in common.whole_numbers(args.tokens, "tokens")}
    names = list(next(iter(rows.values())))
    print(f"{args.preset}'s shape: one pass over T new tokens after 64 cached, median us")
    print("   T  " + "".join(f"{name:>16}" for name in names) + "  readable / fast")
    for t, row in rows.items():
        print(f"{t:4d}  " + "".join(f"{row[n] * 1e6:16.0f}" for n in names) +
              f"  {row['readable NumPy'] / row['fast NumPy']:13.2f}x")
    slowest = min(row["readable NumPy"] / row["fast NumPy"] for row in rows.values())
    print(f"the fast NumPy forward is at least {slowest:.2f}x the readable one: "
          f"{'it stays' if slowest >= KEEP else 'fold it into the readable one'} "
          f"(the rule: {KEEP}x)")
    return rows


if __name__ == "__main__":
    cli.run(main)
