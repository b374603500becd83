"""
python -m classroom: the five exercises as assignments.

Student, in the repository a teacher generated:
    python -m classroom check 3          # the checks of exercise 3 (or: make check N=3)
    python -m classroom check 07         # the checks of notebook 07's parts (exercise 6)
    python -m classroom check            # every exercise
    python -m classroom check --part 3b  # one part

Teacher, in this repository (see classroom/TEACHERS.md):
    python -m classroom build ../speculative-class      # the student repository
    python -m classroom grade SUBMISSION --out results.json       # --unsafe: without sandbox
    python -m classroom grade-all SUBMISSIONS/ --csv grades.csv
    python -m classroom gradescope --out autograder.zip
    python -m classroom notebooks [--solved] [--check] [--walk]  # (make notebooks, notebooks-check)
    python -m classroom mutants [--part 3b]       # the checks against every mutant of a solution
"""

import atexit
import csv
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from classroom import build, notebooks, plan, report, runner, sandbox, walk
from classroom.project import ROOT
from lessonkit import cli, parts

try:
    from classroom import mutants      # the teacher's repository only
except ImportError:
    mutants = None

GRADE_TIME = 240   # seconds one submission's checks may take in all (worst case: about 130)
UNSAFE = "grade even where no sandbox is possible (the students' code can read this machine)"


def parser():
    p = cli.Parser(prog="python -m classroom", description=__doc__.split("\n\n")[0].strip())
    sub = p.add_subparsers(dest="command", required=True, parser_class=cli.Parser)
    c = sub.add_parser("check", help="run the public checks on this repository")
    c.add_argument("exercise", nargs="?", default="all",
                   help=f"{parts.NUMBERS}, a notebook's two digits (07), or all (default)")
    c.add_argument("--part", help="one part, e.g. 3b")
    c.add_argument("--strict", action="store_true",
                   help="exit 1 unless every selected check passes (one graded step)")
    c.add_argument("--report-only", action="store_true",
                   help="exit 0 whenever the report was made (CI of a student repository)")
    b = sub.add_parser("build", help="write the student repository and prove it both ways")
    b.add_argument("dest", help="a new folder")
    g = sub.add_parser("grade", help="grade one submission (folder, git repository or zip)")
    g.add_argument("submission", help="the student's folder, bare git repository or zip")
    g.add_argument("--out", default="results.json", help="Gradescope's results.json")
    g.add_argument("--part", help="grade one part only, e.g. 3b (a regrade)")
    g.add_argument("--unsafe", action="store_true", help=UNSAFE)
    a = sub.add_parser("grade-all", help="grade every submission in a folder into one CSV")
    a.add_argument("folder", help="one folder or zip per student")
    a.add_argument("--csv", default="grades.csv", help="one row per student")
    a.add_argument("--unsafe", action="store_true", help=UNSAFE)
    z = sub.add_parser("gradescope", help="write Gradescope's autograder zip")
    z.add_argument("--out", default="autograder.zip", help="the zip to write")
    n = sub.add_parser("notebooks", help="the notebooks (.ipynb) from their sources")
    n.add_argument("--solved", action="store_true",
                   help="the solved version, in solved-notebooks/ (default: the student's own, "
                        "blank your-turn cells, in my-notebooks/)")
    n.add_argument("--out", help="another folder to write them to")
    n.add_argument("--force", action="store_true",
                   help="overwrite student notebooks that exist (your work in them is lost)")
    n.add_argument("--check", action="store_true",
                   help="instead: run every solved notebook on the trained models, print "
                        "each one's time, save HTML copies in results/notebooks; exit 1 if any "
                        "fails")
    n.add_argument("--walk", action="store_true",
                   help="instead: build the student repository, run its notebooks blank (each "
                        "must run to its end and score nothing), then write each your-turn cell "
                        "from the solved notebooks, run them in order on the trained "
                        "models, then make check there; exit 1 unless all pass with every point")
    n.add_argument("--checkpoints", help="with --check or --walk: the trained models in this "
                                         "folder (default: checkpoints/)")
    if mutants is not None:
        m = sub.add_parser("mutants", help="the checks against every mutant of the solutions "
                                           "(the score per part, the survivors listed)")
        m.add_argument("--part", help="one part only, e.g. 3b")
        m.add_argument("--out", default="results/mutants.json", help="the survivors, as JSON")
    return p


def exercise_number(text):
    if text == "all":
        return None
    if not text.isdigit() or int(text) not in parts.EXERCISES:
        raise ValueError(f"no exercise {text!r}; choose {parts.NUMBERS}, a notebook's two "
                         f"digits (07: the parts of notebook 07) or all")
    return int(text)


def chosen(exercise, part=None):
    """The checks `make check N=` names: an exercise's (3), a notebook's (two digits, as its
    file name starts: 07 holds exercise 6's parts), or every one (all); then one part of them."""
    if len(exercise) == 2 and exercise.startswith("0") and exercise.isdigit():
        ids = {p for p, (_, notebook) in parts.your_turn_places().items()
               if notebook.startswith(exercise + "_")}
        if not ids:
            raise ValueError(f"no notebook {exercise} has a part to check")
        return [c for c in plan.select(None, part) if c.part in ids]
    return plan.select(exercise_number(exercise), part)


def not_started(part, part_results):
    """One line for a part that no check of could start, each stopped by the part's own stub
    (as the student repository comes; a check skipped on this machine aside): what to write and
    where, the notebook cell and the file; runner.table shows it instead of the part's checks.
    None for any other part (or one with no results here)."""
    outcomes = [o for r in part_results for o in r.outcomes.values() if o["status"] != "skipped"]
    if not outcomes or any(o["status"] != "not started" or parts.waiting_for(
            NotImplementedError(o.get("message", ""))) is not part for o in outcomes):
        return None
    functions = parts.stubbed(part) or list(part.functions)     # its functions still stubs
    return (f"not started: write {', '.join(functions)} (part {part.id}) in "
            f"{parts.place(part)} or in {part.file}")


def check(args):
    selected = chosen(args.exercise, args.part)
    if not selected:
        where = "notebook" if len(args.exercise) == 2 else "exercise"
        raise ValueError(f"part {args.part} is not in {where} {args.exercise}; "
                         f"choose one of its parts or leave the exercise out")
    results = runner.run_checks(sandbox.probe(ROOT, grading=False),
                                {False: ROOT, True: ROOT}, selected, [plan.PUBLIC_SEED])
    instead = {p.id: not_started(p, [r for r in results if r.check.part == p.id])
               for p in parts.PARTS}
    print(report.table(results, colour=sys.stdout.isatty() and not os.environ.get("NO_COLOR"),
                       instead=instead))
    if args.report_only:
        return 0
    if args.strict:
        return 0 if all(r.status == "pass" for r in results) else 1
    return 0


def grade_one(box, submission, part=None, notes=None):
    """All checks (or a part's), public and hidden seeds, on a submission (or the files read
    from one), within GRADE_TIME seconds. notes: a list that gets a line for each strange file
    and for checks the time cap left out."""
    notes = [] if notes is None else notes
    files = runner.read(box, submission, notes) if not isinstance(submission, dict) else \
        submission
    chosen = plan.select(part=part, hidden=True)
    results = runner.grade(box, files, chosen, [plan.PUBLIC_SEED, plan.hidden_seed()],
                           notes, budget=GRADE_TIME)
    cut = sum("grade's time" in o.get("message", "") for r in results
              for o in r.outcomes.values())
    if cut:
        notes.append(f"the grade's time cap ({GRADE_TIME} s) left {cut} check runs out")
    return results


def sandboxed(args):
    """The sandbox, before any work; one line where there is none and --unsafe is not given."""
    scratch = tempfile.mkdtemp(prefix="classroom-site-")
    os.chmod(scratch, 0o711)                # where the jobs' own NumPy may be copied
    atexit.register(shutil.rmtree, scratch, True)
    return sandbox.probe(ROOT, grading=True, unsafe=args.unsafe, scratch=scratch)


def grade(args):
    """One submission into results.json, which is written whatever happens once grading has
    begun: a grade that raises still leaves one, with a top-level output that says why."""
    notes, data = [], {"score": 0, "tests": [], "stdout_visibility": "hidden"}
    try:
        results = grade_one(sandboxed(args), args.submission, args.part, notes)
        print(report.table(results) + "".join(f"\nnote: {report.shown(n)}" for n in notes))
        data = report.gradescope_json(results)
    except BaseException as e:
        notes.append(f"not graded: {e}" if isinstance(e, ValueError) else
                     f"not graded: the grader stopped ({type(e).__name__}: {e}): regrade it")
        raise
    finally:
        if notes:
            data["output"] = "\n".join(report.shown(note) for note in notes)
        Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


COLUMNS = ["student"] + [p.id for p in parts.PARTS] + ["total", "note"]


def cell(text):
    """A CSV cell as a spreadsheet shows it, never as a formula (OWASP's rule: a leading =, +,
    -, @, tab or carriage return gets a ' before it)."""
    text = str(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def row_names(submissions):
    """{submission: its row's name}: the entry's whole name (dup/ and dup.zip are two rows),
    shown() whole; two names that escape alike get " (2)", " (3)"."""
    names, taken = {}, set()
    for submission in submissions:
        name = report.shown(submission.name, cap=0)
        unique, n = name, 1
        while unique in taken:
            n += 1
            unique = f"{name} ({n})"
        names[submission], taken = unique, taken | {unique}
    return names


def grade_all(args):
    folder = Path(args.folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder of submissions")
    box = sandboxed(args)
    submissions = sorted(p for p in folder.iterdir() if p.is_dir() or p.suffix == ".zip")
    names = row_names(submissions)
    read = {}                  # every submission read first: no graded code can change the next
    for submission in submissions:
        notes = []
        try:
            read[submission] = runner.read(box, submission, notes), notes
        except Exception as e:  # noqa: BLE001 (one broken submission never stops the others)
            read[submission] = e, notes
    with open(args.csv, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, restval="")
        writer.writeheader()
        f.flush()
        for submission in submissions:
            # Each row written as soon as it is known: a submission that stops the grader costs
            # its own row only.
            row = grade_row(box, names[submission], *read[submission])
            writer.writerow({key: cell(value) for key, value in row.items()})
            f.flush()
            said = row["note"] if row["total"] == "" else f"{row['total']} points" + (
                f" ({row['note']})" if row["note"] else "")
            print(f"{row['student']}: {said}")
    print(f"wrote {args.csv} ({len(submissions)} students)")
    return 0


def grade_row(box, student, files, notes):
    """The CSV row of one submission's files (or the error that kept them from being read): a
    part's points in its column, notes in the last; "not graded: why", with blank points (not
    0), when it cannot be graded at all."""
    try:
        if isinstance(files, Exception):
            raise files
        results = grade_one(box, files, notes=notes)
    except Exception as e:  # noqa: BLE001 (one broken submission never stops the others)
        reason = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        return {"student": student, "total": "", "note": f"not graded: {report.shown(reason)}"}
    row = {"student": student, "total": sum(r.score for r in results),
           "note": "; ".join(report.shown(note) for note in notes)}
    for part in parts.PARTS:
        row[part.id] = sum(r.score for r in results if r.check.part == part.id)
    return row


def notebooks_command(args):
    if args.checkpoints and not Path(args.checkpoints).is_dir():
        raise ValueError(f"no folder {args.checkpoints}: train models into it with "
                         f"python train.py --checkpoints {args.checkpoints}")
    if args.check:
        return 1 if notebooks.check(checkpoints=args.checkpoints) else 0
    if args.walk:
        with tempfile.TemporaryDirectory(prefix="student-walk-") as scratch:
            print("building the student repository (about a minute)")
            student = walk.student_repository(scratch)
            blank = shutil.copytree(student, Path(scratch) / "blank", symlinks=True)
            print("the notebooks with nothing written: each runs to its end, scoring nothing")
            failures = [(f"{name} (blank)", why) for name, why in
                        walk.walk(blank, checkpoints=args.checkpoints, fill=False)]
            print("the notebooks filled in order")
            failures += walk.walk(student, checkpoints=args.checkpoints)
        print("the student's walk passed: every notebook clean, every point" if not failures
              else f"the student's walk failed: {'; '.join(f'{n}: {w}' for n, w in failures)}")
        return 1 if failures else 0
    version = "solved" if args.solved else "student"
    folder = Path(args.out or (notebooks.SOLVED_FOLDER if args.solved else
                               notebooks.STUDENT_FOLDER))
    written = notebooks.write(folder, version, overwrite=args.force)
    if written:
        print(f"{len(written)} {version} notebook(s) written to {folder}/"
              + ("" if args.solved else f"; start with {folder / '01_the_idea.ipynb'}"))
    else:
        print(f"the notebooks in {folder}/ exist already: kept, with your work in them "
              "(--force rewrites them)")
    return 0


def main(argv=None):
    args = parser().parse_args(argv)
    if args.command == "check":
        return check(args)
    if args.command == "build":
        build.build(args.dest)
        return 0
    if args.command == "grade":
        return grade(args)
    if args.command == "grade-all":
        return grade_all(args)
    if args.command == "notebooks":
        return notebooks_command(args)
    if args.command == "mutants":
        return mutants.main(args)
    print(f"wrote {build.gradescope_zip(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
