"""What a submission is (issue 42): regular files of one name, reached through real folders only,
in a folder, a zip or a git repository alike, read in the sandbox (classroom/intake.py); and
what the grader prints of a student's text. Each attack's control is the rule before issue 42
(a root found with is_dir(), which follows links), under which the attack took the reference's
files."""

import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from graders import ROOT, box
from graders import reference_submission as copy_project

from classroom import intake, report, runner
from classroom.__main__ import row_names
from lessonkit import parts

pytestmark = pytest.mark.slow  # read in the sandbox: not in make test-fast


def taken(submission, tmp_path):
    """(the student files the grader took, its notes)."""
    notes = []
    return sorted(runner.read(box(), submission, notes)), notes


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
    subprocess.run(["git", "-C", str(bare), "repack", "-adq"], check=True)   # packed objects
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


def test_a_zip_bomb_is_never_extracted(tmp_path, monkeypatch):
    # A zip of the student files, 400 MB of zeros beside them and a 100 MB numpy_speculative.py
    # in another copy: only the student files are read, each 2 MB at most; a zip of too many
    # entries is not read at all. The control: the zip declares over 500 MB.
    bomb = tmp_path / "bomb.zip"
    zeros = bytes(1 << 20)
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        for name in parts.STUDENT_FILES:
            z.write(ROOT / name, f"alice/{name}")
        with z.open("alice/data/zeros.bin", "w", force_zip64=True) as f:
            for _ in range(400):
                f.write(zeros)
        with z.open("bob/numpy_speculative.py", "w", force_zip64=True) as f:
            for _ in range(100):
                f.write(zeros)
    with zipfile.ZipFile(bomb) as z:
        assert sum(i.file_size for i in z.infolist()) > 500e6 > 100 * bomb.stat().st_size
    files, notes = taken(bomb, tmp_path)
    assert files == parts.STUDENT_FILES and notes == []
    lone = tmp_path / "lone.zip"                          # only the too large student file
    with zipfile.ZipFile(bomb) as z, zipfile.ZipFile(lone, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("numpy_speculative.py", z.read("bob/numpy_speculative.py"))
    files, notes = taken(lone, tmp_path)
    assert files == [] and "numpy_speculative.py is larger than 2 MB: counted as missing" in \
        notes, notes
    monkeypatch.setattr(intake, "MAX_ENTRIES", 4)       # the rule itself, in this process
    with pytest.raises(intake.Unreadable, match="entries in the zip"):
        intake.from_zip(bomb)


def test_a_zip_with_an_extra_folder_level_is_found(tmp_path):
    inner = copy_project(tmp_path / "alice" / "speculative-class-alice")
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in inner.rglob("*"):
            z.write(f, f.relative_to(tmp_path))
    files, notes = taken(archive, tmp_path)
    assert files == parts.STUDENT_FILES and notes == []


FORGED = "oops\n\x1b[32mpass\x1b[0m        everything  6/6\n\ntotal 44/44 points\x1b[8m"


def test_a_students_text_cannot_forge_lines_of_the_report():
    shown = report.shown(FORGED)
    assert "\n" not in shown and "\x1b" not in shown and "\\n" in shown and "\\x1b" in shown
    assert all(ch.isprintable() for ch in shown)
    assert len(report.shown("x" * 10_000)) < 400                      # capped, and says so
    # the control: the raw text would print a line of its own that reads like the total
    assert any(line.startswith("total 44/44") for line in FORGED.splitlines())


def test_grade_all_rows_have_unique_names(tmp_path):
    (tmp_path / "dup").mkdir()
    (tmp_path / "dup.zip").write_bytes(b"")
    (tmp_path / "a\x1bb").mkdir()
    names = row_names(sorted(tmp_path.iterdir()))
    assert sorted(names.values()) == sorted({*names.values()})
    assert {"dup", "dup.zip"} <= set(names.values()) and "a\\x1bb" in names.values()
