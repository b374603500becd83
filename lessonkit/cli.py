"""
lessonkit/cli.py: command lines made from the config dataclasses, and one-line errors instead of tracebacks.

Every flag of train.py, speculative.py, harness/benchmark.py and the exercises comes from a
dataclass field: each default is written once, next to the code that uses it, and its help text
is the comment at the end of the field's line. (tyro, on the package index, does the same; these
two dozen lines spare the project a dependency and its own flag syntax.) A user's mistake (an
unknown character, a missing checkpoint, a bad k) ends the program with one line saying what to
do; set SPECDEC_DEBUG=1 to see the traceback instead.
"""

import argparse
import inspect
import io
import os
import re
import sys
import tokenize
from dataclasses import MISSING, fields, is_dataclass


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
