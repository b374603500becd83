"""
python -m classroom: the five exercises as assignments.

Student, in the repository a teacher generated:
    python -m classroom check 3          # the checks of exercise 3 (or: make check N=3)
    python -m classroom check            # every exercise
    python -m classroom check --part 3b  # one part

Teacher, in this repository (see classroom/TEACHERS.md):
    python -m classroom build ../speculative-class      # the student repository
    python -m classroom grade SUBMISSION --out results.json       # --unsafe: without sandbox
    python -m classroom grade-all SUBMISSIONS/ --csv grades.csv
    python -m classroom gradescope --out autograder.zip
    python -m classroom notebooks [--solved] [--check] [--walk]  # (make notebooks, notebooks-check)
"""

import csv
import json
import os
import sys
import tempfile
from pathlib import Path

from classroom import build, notebooks, parts, runner, sandbox, walk, yourturn
from classroom.submissions import (
    ROOT,
    SubmissionError,
    broken_files,
    private_copy,
    scratch_dir,
    with_blank_files,
    workspace,
)
from lessonkit import cli

GRADE_TIME = 240   # seconds one submission's checks may take in all (worst case: about 130)
UNSAFE = "grade even where no sandbox is possible (the students' code can read this machine)"


def parser():
    p = cli.Parser(prog="python -m classroom", description=__doc__.split("\n\n")[0].strip())
    sub = p.add_subparsers(dest="command", required=True, parser_class=cli.Parser)
    c = sub.add_parser("check", help="run the public checks on this repository")
    c.add_argument("exercise", nargs="?", default="all", help=f"{parts.NUMBERS}, or all (default)")
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
                   help="instead: build the student repository, write each your-turn cell "
                        "from the solved notebooks, run them in order on the trained "
                        "models, then make check there; exit 1 unless all pass with every point")
    n.add_argument("--checkpoints", help="with --check or --walk: the trained models in this "
                                         "folder (default: checkpoints/)")
    return p


def exercise_number(text):
    if text == "all":
        return None
    if not text.isdigit() or int(text) not in parts.EXERCISES:
        raise ValueError(f"no exercise {text!r}; choose {parts.NUMBERS} or all")
    return int(text)


def not_started(part, part_results):
    """One line for a part that no check of could start, each stopped by the part's own stub
    (as the student repository comes; a check skipped on this machine aside): what to write and
    where, the notebook cell and the file; runner.table shows it instead of the part's checks.
    None for any other part (or one with no results here)."""
    outcomes = [o for r in part_results for o in r.outcomes.values() if o["status"] != "skipped"]
    if not outcomes or any(o["status"] != "not started" or yourturn.waiting_for(
            NotImplementedError(o.get("message", ""))) is not part for o in outcomes):
        return None
    try:                                                 # its functions still stubs
        defined = yourturn.definitions(Path(ROOT, part.file).read_text())
        functions = [f for f in part.functions if f in defined and
                     yourturn.is_stub(defined[f][0])]
    except (OSError, SyntaxError, ValueError):
        functions = []
    functions = functions or list(part.functions)
    return (f"not started: write {', '.join(functions)} (part {part.id}) in "
            f"{yourturn.place(part)} or in {part.file}")


def check(args):
    selected = runner.select(exercise_number(args.exercise), args.part)
    if not selected:
        raise ValueError(f"part {args.part} is not in exercise {args.exercise}; "
                         f"choose one of its parts or leave the exercise out")
    results = runner.run_checks(ROOT, selected, [runner.PUBLIC_SEED], grading=False)
    instead = {p.id: not_started(p, [r for r in results if r.check.part == p.id])
               for p in parts.PARTS}
    print(runner.table(results, colour=sys.stdout.isatty() and not os.environ.get("NO_COLOR"),
                       instead=instead))
    if args.report_only:
        return 0
    if args.strict:
        return 0 if all(r.status == "pass" for r in results) else 1
    return 0


def grade_one(submission, part=None, notes=None):
    """All checks (or a part's), public and hidden seeds, on a submission, within GRADE_TIME
    seconds: (results, missing files). notes: a list that gets a line for each strange file
    (submissions.private_copy) and for checks the time cap left out."""
    seeds, chosen = [runner.PUBLIC_SEED, runner.hidden_seed()], runner.select(part=part,
                                                                            hidden=True)
    notes = [] if notes is None else notes
    with scratch_dir() as scratch:
        root, missing = workspace(submission, scratch, notes=notes)
        broken = broken_files(root)
        if not broken:
            results = runner.run_checks(root, chosen, seeds, missing=missing, budget=GRADE_TIME)
        else:
            # A file that does not compile costs its own parts; the other parts run with a
            # blank copy of it in its place (their files may import it).
            own = [c for c in chosen if parts.BY_ID[c.part].file in broken]
            others = [c for c in chosen if c not in own]
            stand_in = with_blank_files(root, broken, Path(scratch) / "stand-in")
            results = runner.run_checks(root, own, seeds, missing=missing,
                                        budget=GRADE_TIME // 2) + \
                runner.run_checks(stand_in, others, seeds, missing=missing,
                                  budget=GRADE_TIME // 2)
    cut = sum("grade's time" in o.get("message", "") for r in results
              for o in r.outcomes.values())
    if cut:
        notes.append(f"the grade's time cap ({GRADE_TIME} s) left {cut} check runs out")
    order = {c.name: i for i, c in enumerate(chosen)}
    return sorted(results, key=lambda r: order[r.check.name]), missing


def refuse_without_sandbox(args):
    """One line, before any work, where no sandbox is possible and --unsafe is not given."""
    if args.unsafe:
        sandbox.allow_unsafe()
    with tempfile.TemporaryDirectory(prefix="classroom-probe-") as scratch:
        sandbox.isolation(scratch, grading=True)


def grade(args):
    """One submission into results.json, which is written whatever happens once grading has
    begun: a grade that raises still leaves one, with what it knew and a top-level output that
    says what went wrong (then the error goes on, for its one line and exit status)."""
    refuse_without_sandbox(args)
    notes, data = [], {"score": 0, "tests": [], "stdout_visibility": "hidden"}
    try:
        results, missing = grade_one(args.submission, args.part, notes)
        print(runner.table(results) + "".join(f"\nnote: {runner.shown(n)}" for n in notes))
        data = runner.gradescope_json(results)
    except BaseException as e:
        notes.append(f"not graded: {e}" if isinstance(e, SubmissionError) else
                     f"not graded: the grader stopped ({type(e).__name__}: {e}): regrade it")
        raise
    finally:
        if notes:
            data["output"] = "\n".join(runner.shown(note) for note in notes)
        Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


COLUMNS = ["student"] + [p.id for p in parts.PARTS] + ["total", "note"]


def row_names(submissions):
    """{submission: its row's name}: the entry's whole name (dup/ and dup.zip are two rows,
    "dup" and "dup.zip"), shown() whole; two names that escape alike get " (2)", " (3)"."""
    names, taken = {}, set()
    for submission in submissions:
        name = runner.shown(submission.name, cap=0)
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
    refuse_without_sandbox(args)
    submissions = sorted(p for p in folder.iterdir() if p.is_dir() or p.suffix == ".zip")
    names = row_names(submissions)
    with tempfile.TemporaryDirectory(prefix="classroom-submissions-") as private, \
            open(args.csv, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, restval="")
        writer.writeheader()
        f.flush()
        # Every submission copied first (its student files only), into a folder of the
        # grader's alone: what a graded submission's code does cannot change the next one's.
        copies = {}
        for i, submission in enumerate(submissions):
            notes = []
            try:
                copies[submission] = private_copy(submission, Path(private) / str(i), notes), \
                    notes
            except Exception as e:  # noqa: BLE001 (one broken submission never stops the others)
                copies[submission] = e, notes
        for submission in submissions:
            # Each row is written as soon as it is known: a submission that stops the grader
            # costs its own row only.
            row = grade_row(names[submission], *copies[submission])
            writer.writerow(row)
            f.flush()
            said = row["note"] if row["total"] == "" else f"{row['total']} points" + (
                f" ({row['note']})" if row["note"] else "")
            print(f"{row['student']}: {said}")
    print(f"wrote {args.csv} ({len(submissions)} students)")
    return 0


def grade_row(student, copy, notes):
    """The CSV row of one student's private copy (or of the error that kept it from being
    made): a part's points in its column, notes shown() in the last; "not graded: why", with
    blank points (not 0), when it cannot be graded at all."""
    try:
        if isinstance(copy, Exception):
            raise copy
        results, _ = grade_one(copy, notes=notes)
    except Exception as e:  # noqa: BLE001 (one broken submission never stops the others)
        reason = str(e) if isinstance(e, SubmissionError) else f"{type(e).__name__}: {e}"
        return {"student": student, "total": "", "note": f"not graded: {runner.shown(reason)}"}
    row = {"student": student, "total": sum(r.score for r in results),
           "note": "; ".join(runner.shown(note) for note in notes)}
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
            print("building the student repository (about 30 s)")
            student = walk.student_repository(scratch)
            failures = walk.walk(student, checkpoints=args.checkpoints)
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
    print(f"wrote {build.gradescope_zip(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
