"""What a submission is (issue 42): regular files of one name, reached through real folders only,
in a folder, a zip or a git repository alike; and what the grader prints of a student's text.
Each attack's control is the rule before issue 42 (a root found with is_dir(), which follows
links), under which the attack took the reference's files."""

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from classroom import parts, runner
from classroom.__main__ import row_names
from classroom.submissions import ROOT, copy_project, private_copy


def taken(submission, tmp_path):
    """(the student files private_copy took, its notes)."""
    notes = []
    dest = private_copy(submission, tmp_path / "copy", notes)
    return sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()), notes


@pytest.fixture
def course(tmp_path):
    """A copy of the reference, where a student's link could point."""
    return copy_project(tmp_path / "course")


def test_a_folder_that_is_one_link_to_the_course_takes_nothing(course, tmp_path):
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "mine").symlink_to(course)
    files, notes = taken(submission, tmp_path)
    assert files == [] and any("mine" in note for note in notes), notes
    # the control: a root found through the link, as before, held every reference file
    old = max([submission, *submission.glob("*")],
              key=lambda d: sum((d / f).exists() for f in parts.STUDENT_FILES))
    assert old == submission / "mine" and all((old / f).is_file() for f in parts.STUDENT_FILES)


def test_grade_all_a_folder_holding_only_a_link_to_a_classmate(tmp_path):
    alice = copy_project(tmp_path / "class" / "alice")
    bob = tmp_path / "class" / "bob"
    bob.mkdir()
    (bob / "x").symlink_to(Path("..") / "alice")
    files, notes = taken(bob, tmp_path)
    assert files == [] and notes, notes
    assert all((alice / f).is_file() for f in parts.STUDENT_FILES)       # alice's were there


@pytest.mark.parametrize("what", ["symbolic link", "hard link", "fifo"])
def test_a_student_file_that_is_not_a_regular_file_is_a_note(what, course, tmp_path):
    submission = copy_project(tmp_path / "submission")
    target = submission / "speculative.py"
    target.unlink()
    if what == "symbolic link":
        target.symlink_to(course / "speculative.py")
    elif what == "hard link":
        os.link(course / "speculative.py", target)
    else:
        os.mkfifo(target)
    files, notes = taken(submission, tmp_path)
    assert "speculative.py" not in files and any("speculative.py" in n for n in notes), notes
    assert "numpy_speculative.py" in files             # the regular files are still taken


def test_a_committed_link_in_a_git_submission_is_a_note(course, tmp_path):
    work = copy_project(tmp_path / "work")
    (work / "speculative.py").unlink()
    (work / "speculative.py").symlink_to(course / "speculative.py")
    git = ["git", "-c", "user.name=s", "-c", "user.email=s@x", "-C", str(work)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "mine"], check=True)
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    files, notes = taken(bare, tmp_path)
    assert "speculative.py" not in files and any("speculative.py" in n for n in notes), notes
    assert "numpy_speculative.py" in files
    # the control: a checkout (what the grader did before) follows the link to the course
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(bare), str(clone)], check=True)
    assert "BEGIN SOLUTION" in (clone / "speculative.py").read_text()


def test_a_link_in_a_zip_is_a_note(tmp_path):
    path = tmp_path / "s.zip"
    with zipfile.ZipFile(path, "w") as z:             # a student file that is a link
        for name in parts.STUDENT_FILES:
            if name == "speculative.py":
                entry = zipfile.ZipInfo(name)
                entry.external_attr = (0o120777 << 16)
                z.writestr(entry, str(ROOT / "speculative.py"))
            else:
                z.writestr(name, (ROOT / name).read_text())
    files, notes = taken(path, tmp_path)
    assert "speculative.py" not in files and any("speculative.py" in n for n in notes), notes


FORGED = "oops\n\x1b[32mpass\x1b[0m        everything  6/6\n\ntotal 44/44 points\x1b[8m"


def test_a_students_text_cannot_forge_lines_of_the_report():
    shown = runner.shown(FORGED)
    assert "\n" not in shown and "\x1b" not in shown and "\\n" in shown and "\\x1b" in shown
    assert all(ch.isprintable() for ch in shown)
    assert len(runner.shown("x" * 10_000)) < 400                      # capped, and says so
    # the control: the raw text would print a line of its own that reads like the total
    assert any(line.startswith("total 44/44") for line in FORGED.splitlines())


def test_grade_all_rows_have_unique_names(tmp_path):
    (tmp_path / "dup").mkdir()
    (tmp_path / "dup.zip").write_bytes(b"")
    (tmp_path / "a\x1bb").mkdir()
    names = row_names(sorted(tmp_path.iterdir()))
    assert sorted(names.values()) == sorted({*names.values()})
    assert {"dup", "dup.zip"} <= set(names.values()) and "a\\x1bb" in names.values()
