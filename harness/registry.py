"""
harness/registry.py: every drafter and both backends by name, for the command lines.

    draft = registry.by_name("ngram-big")            # what --draft ngram-big decodes with
    big = registry.with_backend(presets.load_trained("big"), "numpy")

The drafters subclass speculative.Drafter, one file each (a trained GPT preset, ngram.py,
early_exit.py, heads.py, eagle.py); adaptive.py adapts k for any of them.
"""

from beyond import presets
from beyond.backends import check_backend, with_backend  # noqa: F401 (the tools' names)
from beyond.eagle import check_drafter as check_eagle
from beyond.eagle import load as load_eagle
from beyond.early_exit import EarlyExit
from beyond.heads import load as load_heads
from beyond.ngram import NGramDraft, PromptLookup
from lessonkit import corpus

# What --draft accepts (exitL: any L).
NAMES = ("draft", "distilled", "names", "lookup", "ngram", "ngram-big", "exit2", "heads",
         "eagle")


def check_name(name):
    """A one-line error unless `name` is a drafter by_name knows."""
    if name not in NAMES and not (name.startswith("exit") and name[4:].isdigit()):
        raise ValueError(f"unknown draft {name!r}; choose one of: {', '.join(NAMES)} "
                         f"(exitL: the big model's first L layers)")


def by_name(name, folder=None, backend="numpy"):
    """The drafter a command line names: a trained GPT preset, "ngram" (the training text's
    table), "lookup" (prompt lookup alone), "ngram-big" (the table of the big model's own text), "heads", "eagle", or "exitL"
    (the big model's own first L layers)."""
    check_name(name)
    if name == "lookup":  # prompt lookup alone: no table, no model
        return PromptLookup(len(corpus.vocab()))
    if name == "ngram":
        return NGramDraft.trained(folder, prompt_lookup=True)
    if name == "ngram-big":  # the table of the big model's own greedy text
        return NGramDraft.of_target(presets.load_trained("big", folder), folder)
    if name == "heads":  # evaluated in NumPy, reading the state the big model's pass computed
        return load_heads(presets.load_trained("big", folder), folder)
    if name == "eagle":  # one layer over the big model's features, evaluated in NumPy (the
        check_eagle()    # reference's beyond/eagle_numpy.py: a one-line error where it is not)
        return load_eagle(presets.load_trained("big", folder), folder)
    if name.startswith("exit"):  # shares the big model's KV cache when the big model checks
        return EarlyExit(with_backend(presets.load_trained("big", folder), backend),
                         int(name[4:]))
    return with_backend(presets.load_trained(name, folder), backend)
