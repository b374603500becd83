"""
lessonkit/cli.py: command lines made from the config dataclasses, and one-line errors instead of tracebacks.

Every flag of train.py, speculative.py, beyond/benchmark.py and the exercises comes from a
dataclass field: each default is written once, next to the code that uses it, and its help text
is the comment at the end of the field's line. (tyro, on the package index, does the same; these
two dozen lines spare the project a dependency and its own flag syntax.) A user's mistake (an
unknown character, a missing checkpoint, a bad k) ends the program with one line saying what to
do; set SPECDEC_DEBUG=1 to see the traceback instead.
"""

import argparse
import inspect
import io
import math
import os
import re
import sys
import tokenize
from dataclasses import MISSING, fields, is_dataclass

import torch


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag gets one line instead of the usage block."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} -h)\n")


def field_comments(cls):
    """{field name: the comment at the end of its line} for dataclass `cls` and its bases."""
    comments = {}
    for klass in reversed(cls.__mro__):  # a subclass's comment wins over its base's
        if not is_dataclass(klass):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            field_line = re.match(r"\s+(\w+)\s*:", tok.line)
            if tok.type == tokenize.COMMENT and field_line:
                comments[field_line.group(1)] = tok.string.lstrip("#").strip()
    return comments


def add_fields(parser, cls, help=None, override_defaults=None, title=None):
    """Add a --name flag for every field of dataclass `cls`, explained by its comment."""
    group = parser.add_argument_group(title or cls.__name__)
    help = {**field_comments(cls), **(help or {})}
    override_defaults = override_defaults or {}
    for f in fields(cls):
        default = override_defaults.get(f.name, f.default if f.default is not MISSING else None)
        kind = type(f.default) if f.default not in (MISSING, None) else str
        text = help.get(f.name, "")
        if kind is bool:
            group.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction,
                               default=default, help=text)
        else:
            shown = "" if "default" in text or default is None else \
                " (default: %(default)r)" if kind is str else " (default: %(default)s)"
            group.add_argument(f"--{f.name}", type=kind, default=default,
                               metavar=kind.__name__.upper(), help=f"{text}{shown}".strip())
    return group


def given(cls, args):
    """{field: value} of the parsed flags that name fields of dataclass `cls` and were given."""
    return {f.name: getattr(args, f.name) for f in fields(cls)
            if getattr(args, f.name, None) is not None}


def take(cls, args, **changes):
    """Build dataclass `cls` from the parsed flags that name its fields (None: keep default)."""
    return cls(**{**given(cls, args), **changes})


# ValueError: a bad value, a missing checkpoint (gpt.CheckpointError), an unbuildable corpus
# (corpus.CorpusError); OSError: a folder that cannot be written, a file that is not there.
USER_ERRORS = (ValueError, NotImplementedError, OSError)


def run(main, argv=None):
    """Call main(argv); turn user errors and Ctrl-C into one line on stderr and an exit code."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
    except USER_ERRORS as e:
        if os.environ.get("SPECDEC_DEBUG"):
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


# ----------------------------------------------------------------------------------------------
# The one-line errors of decoding's arguments (speculative.py, beyond/batched.py)


def check_decoding_args(idx, max_new_tokens, temperature, top_k=None, top_p=None, k=1,
                        lenience=1.0):
    """A one-line ValueError for a bad argument of decoding (k may be an adaptive schedule)."""
    if not (torch.is_tensor(idx) and idx.dim() == 2 and idx.dtype == torch.long):
        raise ValueError("idx must be a (B, T) LongTensor of token ids, "
                         "e.g. torch.tensor([encode(prompt)])")
    if idx.shape[1] < 1:
        raise ValueError("the prompt is empty; give at least one character")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number >= 0, not {max_new_tokens!r}")
    if not hasattr(k, "update") and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ValueError(f"k (draft tokens per round) must be a whole number >= 1, not {k!r}")
    if not (isinstance(temperature, (int, float)) and 0 <= temperature < math.inf):
        raise ValueError(f"temperature must be a number >= 0 (0 is greedy), not {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a whole number >= 1 or None, not {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, not {top_p!r}")
    if not (isinstance(lenience, (int, float)) and 0 < lenience <= 1):
        raise ValueError(f"lenience must be in (0, 1] (1 is the exact rule), not {lenience!r}")


def vocab_size_of(model):
    """A GPT's vocabulary size, or a drafter's vocab_size (None if it does not say)."""
    return model.c.vocab_size if hasattr(model, "c") else getattr(model, "vocab_size", None)


def check_vocabularies(target, draft):
    theirs, ours = vocab_size_of(target), vocab_size_of(draft)
    if None not in (theirs, ours) and theirs != ours:
        raise ValueError(f"the draft's vocabulary ({ours} tokens) differs from the target's "
                         f"({theirs}); both must be trained on the same vocabulary")
