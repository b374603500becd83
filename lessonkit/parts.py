"""
lessonkit/parts.py: what each assignment asks for, where its solution lives, its points, and
which of its functions a repository still holds as stubs.

The course's exercises (five in part one, more in part two), each cut into parts. A part names
the functions whose bodies the student writes (solution regions in the reference code), the
file they live in and the notebook cell where they are written; the grader (classroom/) checks
them, the exercises and notebooks name a part still to do. Minutes are what a student who
followed the lesson needs.
"""

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


@dataclass(frozen=True)
class Part:
    id: str                  # "3b"
    exercise: int
    title: str
    file: str                # the student's file, relative to the repository root
    functions: tuple         # whose bodies are solution regions
    points: int
    minutes: int


EXERCISES = {1: "explain", 2: "derive", 3: "build", 4: "break", 5: "GPU timing",
             6: "drafts without a second model",
             7: "a draft that reads the big model's features", 8: "trees of guesses"}
PART_TWO = (6, 7, 8)  # no script of their own: a student meets them as notebooks 07 to 09

PARTS = [
    Part("1a", 1, "mark a greedy round: kept guesses and the big model's token",
         "numpy_speculative.py", ("greedy_verdict",), 3, 10),
    Part("1b", 1, "replay recorded rounds into the text they write",
         "numpy_speculative.py", ("replay",), 2, 10),
    Part("2a", 2, "expected tokens per pass", "speculative.py", ("expected_tokens_per_pass",),
         3, 15),
    Part("2b", 2, "simulate the accept/reject process", "exercises/ex2_derive.py", ("simulate",),
         3, 20),
    Part("2c", 2, "expected wall-clock speed-up", "speculative.py", ("expected_speedup",), 2, 10),
    Part("3a", 3, "the GPT forward pass in NumPy", "numpy_speculative.py",
         ("layer_norm", "attention", "mlp", "forward"), 6, 60),
    Part("3b", 3, "greedy speculative decoding in NumPy", "numpy_speculative.py",
         ("speculative_greedy",), 6, 60),
    Part("3c", 3, "stretch: the sampling acceptance rule and speculative sampling",
         "numpy_speculative.py", ("verify", "speculative_sample"), 6, 60),
    Part("4a", 4, "alpha and greedy agreement from two models' logits", "speculative.py",
         ("agreement_of",), 3, 20),
    Part("4b", 4, "the break-even acceptance rate", "speculative.py", ("break_even_alpha",), 3, 20),
    Part("5a", 5, "a timer with warm-up and GPU synchronisation", "exercises/ex5_gpu.py",
         ("timer",), 4, 30),
    # Part two of the course
    Part("6a", 6, "prompt lookup: propose what followed the same tokens earlier",
         "beyond/ngram.py", ("prompt_lookup",), 3, 20),
    Part("6b", 6, "Medusa heads: their training targets and their guesses", "beyond/heads.py",
         ("heads_loss", "head_logits"), 4, 30),
    Part("7a", 7, "EAGLE: the draft's training loss, with the one-position shift done right",
         "beyond/eagle.py", ("shifted", "eagle_loss"), 4, 30),
    Part("7b", 7, "EAGLE: roll the feature draft forward k steps through the big model's head",
         "beyond/eagle.py", ("eagle_roll",), 4, 30),
    Part("8a", 8, "the tree attention mask and the nodes' positions", "beyond/tree.py",
         ("tree_mask", "tree_positions"), 3, 25),
    Part("8b", 8, "verify a tree: greedy, and sampled with the multi-candidate rule",
         "beyond/tree_sampling.py", ("greedy_walk", "sample_walk"), 6, 45),
]
BY_ID = {p.id: p for p in PARTS}
NUMBERS = f"1 to {max(EXERCISES)}"  # the exercises' numbers, as the messages say them
STUDENT_FILES = sorted({p.file for p in PARTS})
NUMPY_ONLY = ("numpy_speculative.py", "beyond/tree_sampling.py")   # built with NumPy alone
# Graded by hand with the rubrics in TEACHERS.md: the written explanation (exercise 1) and the
# GPU measurements (exercise 5).
BY_HAND = {1: ("written explanation: the idea, the junior/senior picture and where it breaks", 5),
           5: ("GPU report: timings on a GPU and what they show", 4)}


def part_of(function):
    for part in PARTS:
        if function in part.functions:
            return part
    return None


def message(function):
    """The NotImplementedError message that replaces the solution of `function`."""
    part = part_of(function)
    if part is None:
        return f"write {function} (see its docstring)"
    return (f"Exercise {part.exercise}, part {part.id}: write {function} (see its docstring); "
            f"check it with: make check N={check_number(part)}")


# ----------------------------------------------------------------------------------------------
# Stubs: a part's functions before the student writes them

STUB_MESSAGES = (re.compile(r"^Exercise \d, part (\w+): write (\w+)"),
                 re.compile(r"^not started: write (\w+)"))


def your_turn_message(function):
    """The NotImplementedError message of `function` in a student notebook's your-turn cell."""
    return (f"not started: write {function} (see its docstring), then run the check cell "
            "below")


def is_stub(node):
    """A function still holding the stub that stands for its solution: a `raise
    NotImplementedError("Exercise N, part ...")` (the graded file's) or `("not started: ...")`
    (the notebook's), wherever the solution region was in its body."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Raise) and isinstance(inner.exc, ast.Call) and \
                isinstance(inner.exc.func, ast.Name) and \
                inner.exc.func.id == "NotImplementedError" and inner.exc.args and \
                isinstance(inner.exc.args[0], ast.Constant) and \
                any(p.match(str(inner.exc.args[0].value)) for p in STUB_MESSAGES):
            return True
    return False


def definitions(text):
    """{name: (node, first line, last line)} of the top-level functions in text (1-based lines,
    decorators included)."""
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found[node.name] = (node, first, node.end_lineno)
    return found


def stubbed(part, root=ROOT):
    """The functions of `part` that still hold their stub in the file the grader reads ([] where
    the file cannot be read or parsed: nothing can be told of it)."""
    try:
        defined = definitions((Path(root) / part.file).read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    return [name for name in part.functions if name in defined and is_stub(defined[name][0])]


def not_written(root=ROOT):
    """The parts with a function that still holds its stub."""
    return [part for part in PARTS if stubbed(part, root)]


class Stalled(NotImplementedError):
    """What a part's functions raise in the notebook once its check failed or ran out of time
    (an endless loop, likely), so that later cells (one that trains a draft with a wrong loss,
    say) skip it in one line instead of running on it; running the part's cell again brings the
    functions back."""

    def __init__(self, part, timed_out):
        super().__init__(f"part {part.id} " + ("did not finish in its check" if timed_out
                                               else "fails its check"))
        self.part, self.timed_out = part, timed_out


class StandIn:
    """What stands for a part's function in a notebook once its check failed (or ran out of
    time): calling it raises Stalled. A trainer asks ready() first, so nothing starts for it."""

    def __init__(self, part, name, timed_out):
        self.part, self.__name__, self.timed_out = part, name, timed_out

    def __call__(self, *args, **kwargs):
        raise Stalled(self.part, self.timed_out)


def ready(function):
    """Raise now what `function` would raise when first called, if it stands for a part not done:
    a stub still in its file (NotImplementedError, the part's message) or a StandIn (Stalled).
    A trainer calls it before its first step, so a part not done costs one line, not a start."""
    if isinstance(function, StandIn):
        function()
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return
    if is_stub(node):
        raise NotImplementedError(message(function.__name__))


def waiting_for(error):
    """The part whose stub raised `error`, or None."""
    if isinstance(error, Stalled):
        return error.part
    if not isinstance(error, NotImplementedError) or not error.args:
        return None
    for pattern in STUB_MESSAGES:
        match = pattern.match(str(error.args[0]))
        if match:
            return BY_ID.get(match.group(1)) or part_of(match.group(1))
    return None


# ----------------------------------------------------------------------------------------------
# Where a part is written: its notebook's your-turn cell

YOUR_TURN = re.compile(r"^# %% your turn: (.+)$")   # a notebook source's your-turn cell header
HEADING = re.compile(r"^## (.+)$", re.M)


def sources(folder=NOTEBOOKS):
    """The notebooks' sources (notebooks/NN_name.py, classroom/notebooks.py's format), in order."""
    return sorted(Path(folder).glob("[0-9][0-9]_*.py"))


def cells(text):
    """[(kind, header, body)] of a percent-format source."""
    found, kind, header, lines = [], None, "", []
    for line in text.splitlines():
        if line.startswith("# %%"):
            if kind is not None:
                found.append((kind, header, "\n".join(lines).strip("\n")))
            kind = "markdown" if "[markdown]" in line else "code"
            header, lines = line, []
        elif kind is not None:
            lines.append(line)
    if kind is not None:
        found.append((kind, header, "\n".join(lines).strip("\n")))
    return found


def part_of_cell(header):
    """The part whose functions a your-turn cell's header names (one part a cell)."""
    names = [n.split(".")[-1] for n in YOUR_TURN.match(header).group(1).split()]
    found = {part_of(n) for n in names}
    if len(found) != 1 or None in found:
        raise ValueError(f"{header!r}: a your-turn cell names the functions of one part")
    return found.pop()


def your_turn_places(folder=NOTEBOOKS):
    """{part id: (the heading above its your-turn cell, the notebook's name)}."""
    places = {}
    for source in sources(folder):
        heading = None
        for kind, header, body in cells(source.read_text()):
            if kind == "markdown":
                found = HEADING.findall("\n".join(line[2:] for line in body.splitlines()))
                heading = found[-1] if found else heading
            elif YOUR_TURN.match(header):
                places[part_of_cell(header).id] = (heading, source.stem)
    return places


def place(part, places=None):
    """Where a part is written: "the cell 'Your turn: ...' of notebook 01_the_idea" (places:
    your_turn_places(), read once by a caller that asks for several parts)."""
    title, notebook = (places or your_turn_places()).get(part.id, (None, None))
    if title is None:
        return f"{part.file} (make check N={check_number(part, places)})"
    return f"the cell \"{title}\" of notebook {notebook}"


def check_number(part, places=None):
    """What `make check N=` takes for a part, as its student meets it: a lesson exercise's number
    (1 to 5); for part two, met as notebooks 07 to 09 only, its notebook's two digits."""
    if part.exercise not in PART_TWO:
        return str(part.exercise)
    _, notebook = (your_turn_places() if places is None else places).get(part.id, (None, None))
    return notebook[:2] if notebook else str(part.exercise)
