"""
classroom/report.py: what a grade says: each check's result at each seed, the table a student
reads and Gradescope's results.json. Everything a student wrote is escaped and cut before it is
shown (shown()), and what a hidden seed's run said stays out of visible feedback.
"""

from dataclasses import dataclass, field

from classroom import checks
from lessonkit import parts

PUBLIC_SEED = checks.PUBLIC_SEED


@dataclass
class Result:
    check: checks.Check
    outcomes: dict = field(default_factory=dict)   # seed -> the outcome

    @property
    def status(self):
        statuses = [o["status"] for o in self.outcomes.values()]
        for status in ("not started", "missing", "error", "timeout", "crashed", "fail",
                       "skipped"):
            if status in statuses:
                return status
        return "pass"

    @property
    def score(self):
        return self.check.points if self.status == "pass" else 0

    def lines(self, reveal_hidden=True):
        """What went wrong, in a few lines; reveal_hidden=False: what a hidden seed's run said
        stays out (it may quote the hidden inputs), only that it failed."""
        for seed, o in sorted(self.outcomes.items(), key=lambda item: item[0] != PUBLIC_SEED):
            if o["status"] == "pass":
                continue
            which = "" if seed == PUBLIC_SEED else " (hidden seed)"
            if seed != PUBLIC_SEED and not reveal_hidden:
                return [f"{o['status']} on the hidden seed (what it said is shown after the "
                        "grades are published)"]
            if o["status"] == "fail":
                out = [f"expected{which}: {shown(o['expected'])}", f"got: {shown(o['got'])}"]
                return out + ([f"hint: {shown(o['hint'], HINT)}"] if o.get("hint") else [])
            return [shown(o.get("message", o["status"])) + which]
        return []


HINT = 2000     # characters of a hint shown: the checks' own words, never cut in practice


def escaped(text):
    """text as one line of printable characters: a newline as \\n, every other control or
    format character as Python writes it in a string (\\x1b, \\u202e), so that nothing a
    student writes can move the cursor, hide, colour or forge a line of the report."""
    return "".join(ch if ch.isprintable() or ch == " " else
                   ch.encode("unicode_escape").decode("ascii") for ch in text)


def shown(value, cap=None):
    """What the grader prints of a text that may be the student's: escaped(), cut at `cap`
    characters (checks.SHOWN by default; 0: whole) with how long it was."""
    cap = checks.SHOWN if cap is None else cap
    text = escaped(value if isinstance(value, str) else str(value))
    if not cap or len(text) <= cap:
        return text
    return f"{text[:cap]}... ({len(text):,} characters in all)"


def table(results, colour=False, instead=None):
    """The report a student reads: one line per check with points, a few lines per failure.
    instead: {part id: one line} shown in place of that part's checks (a part not started)."""
    marks = {"pass": ("pass", "32"), "fail": ("FAIL", "31"), "error": ("ERROR", "31"),
             "timeout": ("TIMEOUT", "31"), "crashed": ("CRASHED", "31"),
             "not started": ("not started", "33"), "missing": ("MISSING", "31"),
             "skipped": ("skipped", "2")}
    lines, by_part = [], {}
    for r in results:
        by_part.setdefault(r.check.part, []).append(r)
    exercise = None
    for part_id, part_results in by_part.items():
        part = parts.BY_ID[part_id]
        if part.exercise != exercise:
            exercise = part.exercise
            lines.append(f"\nExercise {exercise}: {parts.EXERCISES[exercise]}")
        score = sum(r.score for r in part_results)
        total = sum(r.check.points for r in part_results)
        lines.append(f"  {part.id}  {part.title:<62} {score:>2}/{total}")
        if (instead or {}).get(part_id):
            line = instead[part_id]
            lines.append(f"      \033[33m{line}\033[0m" if colour else f"      {line}")
            continue
        for r in part_results:
            word, code = marks[r.status]
            mark = f"\033[{code}m{word:<11}\033[0m" if colour else f"{word:<11}"
            hidden = " (hidden)" if r.check.hidden else ""
            lines.append(f"      {mark} {(r.check.name + hidden):<56} {r.score:>2}/{r.check.points}")
            lines += [f"                  {line}" for line in r.lines()]
    score, total = sum(r.score for r in results), sum(r.check.points for r in results)
    lines.append(f"\ntotal {score}/{total} points"
                 + ("" if not results else f" ({100 * score / total:.0f}%)"))
    return "\n".join(lines)


def gradescope_json(results):
    """Gradescope's results.json: one test per check (the parts graded by hand are questions
    of their own there)."""
    tests = []
    for r in results:
        part = parts.BY_ID[r.check.part]
        tests.append({"name": f"{part.id} {r.check.name}", "score": r.score,
                      "max_score": r.check.points,
                      "output": "\n".join(r.lines(reveal_hidden=r.check.hidden)) or "passed",
                      "visibility": "after_published" if r.check.hidden else "visible"})
    return {"score": sum(r.score for r in results), "tests": tests,
            "stdout_visibility": "hidden"}   # the grader's log may quote hidden inputs

