"""
studies/figures.py: what studies/render.py and studies/render_studies.py share: reading a results file
(docs/results/NAME.json, checked once), writing a figure (1.60x, 34%, 1,526, a table), reading
one straight from a file by a format string, the provenance line under each table, and the claim
check that stops a sentence the data contradicts. Nothing here knows a document or a study.
"""

import json
import re
import string
from pathlib import Path

from beyond.common import markdown_table
from lessonkit import machine, results_file, waiting

RUNS = Path(__file__).resolve().parents[1] / "docs" / "results"


class RenderError(ValueError):
    """A results file that cannot be rendered from, a marker nobody renders, or a claim in a
    document that its results file contradicts."""


class Runs:
    """The results files of a folder, each read (and checked) once, when a figure needs it."""

    def __init__(self, folder=RUNS):
        self.folder, self.read, self.last = Path(folder), {}, None

    def __getitem__(self, name):
        self.last = name   # the file a failing figure read last: its error names it
        if name not in self.read:
            path = self.folder / f"{name}.json"
            try:
                data = json.loads(path.read_text())
            except OSError:
                raise RenderError(f"{path}: missing; run the command that writes "
                                  f"results/{name}.json and copy it there") from None
            except ValueError as e:
                raise RenderError(f"{path}: not JSON ({e})") from None
            if not isinstance(data, dict) or data.get("format") != results_file.RESULTS_FORMAT:
                raise RenderError(f"{path}: results format {data.get('format') if isinstance(data, dict) else None!r}, "
                                  f"this version reads {results_file.RESULTS_FORMAT}: measure it again")
            if not isinstance(data.get("run"), dict) or "machine" not in data["run"]:
                raise RenderError(f"{path}: no \"run\" (command, machine, date): measure it again")
            self.read[name] = data
        return self.read[name]


def claim(holds, words):
    """Stop the rendering where a document's sentence says `words` and the data says otherwise:
    a re-measured file never leaves a false sentence standing."""
    if not holds:
        raise RenderError(f"the data contradicts the claim {words!r}: rewrite it")


# ----------------------------------------------------------------------------------------------
# How figures are written


def times(x):
    return f"{x:.2f}x"


def percent(x, digits=0):
    return f"{100 * x:.{digits}f}%"


def grouped(x):
    return f"{x:,.0f}"


def span(values, write="{:.2f}".format):
    """The smallest and the largest of values, written: "0.84-1.27x" (one figure if equal)."""
    low, high = write(min(values)), write(max(values))
    return low if low == high else f"{low.rstrip('x%')}-{high}"


class Reader(string.Formatter):
    """Python's format strings over the results files: "{ex3_build[tokens_per_pass]:.2f}" is
    ex3_build.json's tokens_per_pass with two decimals. Formats of its own: seconds as
    waiting.duration writes them ("1 min 20 s") or in whole minutes, a run's machine in words."""
    OWN = {"duration": waiting.duration, "minutes": lambda seconds: str(round(seconds / 60)),
           "machine": machine.summary}

    def format_field(self, value, spec):
        return self.OWN[spec](value) if spec in self.OWN else format(value, spec)


def read(runs, form):
    """A figure read straight from the results files: form is a Reader format string."""
    return Reader().vformat(form, (), runs)


def table(header, rows):
    """A markdown table, as a block between markers holds it (its own last line)."""
    return markdown_table(header, rows) + "\n"


# ----------------------------------------------------------------------------------------------
# Where a figure comes from


WIDEST = re.compile(r"differed by up to (\d+)%")   # machine.Busy.note's words for a spread


def widest_spread(data):
    """The widest spread of repeated timings a results file recorded: every "spread" in it
    (machine.spread) and every Busy note in its "notes"; 0 if none."""
    if isinstance(data, dict):
        own = [data["spread"]] if isinstance(data.get("spread"), (int, float)) else []
        notes = data.get("notes") if isinstance(data.get("notes"), list) else []
        own += [int(m[1]) / 100 for note in notes if isinstance(note, str)
                for m in WIDEST.finditer(note)]
        return max(own + [widest_spread(v) for v in data.values()], default=0.0)
    if isinstance(data, list):
        return max((widest_spread(v) for v in data), default=0.0)
    return 0.0


def busy_words(data):
    """Quiet or busy, as the file says: its run's Busy note; else, for a run whose writer left
    the note empty, the widest spread of repeated timings it recorded, as machine.Busy would."""
    note = data["run"]["busy"]
    if note:
        reason = re.search(r"\((.*)\)", note)   # a Busy note: "... busy (WHY): ..."
        return f"busy ({reason[1] if reason else note})"
    widest = widest_spread({k: v for k, v in data.items() if k != "run"})
    return f"busy (repeated timings differed by up to {widest:.0%})" \
        if widest > machine.SPREAD else "quiet"


def provenance(runs, *names):
    """One line per results file: the command, the machine, the date, quiet or busy, the file."""
    lines = []
    for name in names:
        run = runs[name]["run"]
        lines.append(f"*Measured by `{run['command']}` on {machine.summary(run['machine'])}, "
                     f"{run['date']}, {busy_words(runs[name])} (`docs/results/{name}.json`).*\n")
    return "".join(lines)
