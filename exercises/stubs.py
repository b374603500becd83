"""
An exercise stopped by a part not written yet, as the student repository has it (its stub
raises NotImplementedError): one line naming the part, the notebook cell and the file where it
is written, and no error. Any other error goes on up, to cli.run's one line and exit status.

Its own module, which the exercise modules import in their main guards only: importing one (the
checks import the graded exercises/ex2_derive.py and exercises/ex5_gpu.py) loads no more.
"""

from harness import report
from lessonkit import cli, parts


def to_do(n, error):
    """One line for exercise n stopped by `error`, when that is a stub of a part not written
    yet: the part, the notebook cell and the file where it is written. None for any other."""
    part = parts.waiting_for(error) if isinstance(error, NotImplementedError) else None
    if part is None:
        return None
    return (f"exercise {n} ({report.TITLES[n]}) is still to do: it needs part {part.id} "
            f"({', '.join(part.functions)}); write it in {parts.place(part)} or in "
            f"{part.file}, then `make check N={parts.check_number(part)}` checks it")


def part_two_to_do():
    """One line for each part of part two (the notebooks' exercises past the five of the lesson)
    not written yet: where to write it, and how to check it by its notebook's number (the number
    its student sees)."""
    places = parts.your_turn_places()                 # {part id: (cell title, notebook)}
    lines = []
    for part in parts.not_written():
        if part.exercise in parts.PART_TWO:
            lines.append(f"part {part.id} ({', '.join(part.functions)}): write it in "
                         f"{parts.place(part, places)}, then "
                         f"`make check N={parts.check_number(part, places)}`")
    return lines


def run(n, main):
    """cli.run(exercise n's main), but a part not written yet ends it with to_do's line (exit
    status 0): its own command line says what `make exercise N=n` says."""
    def guarded(argv=None):
        try:
            return main(argv)
        except NotImplementedError as e:
            line = to_do(n, e)
            if line is None:
                raise
            print(line)
    cli.run(guarded)
