"""
classroom/parts.py: what each assignment asks for, where its solution lives, and its points.

The course's exercises (five in part one, more in part two), each cut into parts. A part names the functions whose bodies the
student writes (solution regions in the reference code) and the file they live in; its checks
(checks.py) share its points. Minutes are what a student who followed the lesson needs.
"""

from dataclasses import dataclass


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

PARTS = [
    Part("1a", 1, "mark a greedy round: kept guesses and the big model's token",
         "numpy_speculative.py", ("greedy_verdict",), 3, 10),
    Part("1b", 1, "replay recorded rounds into the text they write",
         "numpy_speculative.py", ("replay",), 2, 10),
    Part("2a", 2, "expected tokens per pass", "speculative.py", ("expected_tokens_per_pass",), 3, 15),
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
            f"check it with: make check N={part.exercise}")
