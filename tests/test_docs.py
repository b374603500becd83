"""The README is all a user has: every link in it and in docs/ points inside the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_links_stay_inside_the_repository():
    for doc in DOCS:
        text = doc.read_text()
        assert "../shared" not in text, f"{doc.name} points outside the repository"
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path = (doc.parent / target).resolve()
            assert path.exists() and ROOT in path.parents, f"{doc.name}: broken link {target}"


def test_the_public_api_and_the_lesson_are_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/API.md)" in readme and "(docs/LESSON.md)" in readme


README = (ROOT / "README.md").read_text()
RESULTS = (ROOT / "docs" / "RESULTS.md").read_text()


def test_the_readme_is_a_landing_page():
    lines = README.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/"
    path = next(i for i, line in enumerate(lines) if line.startswith("## The learning path"))
    assert path < 60 and "01_the_idea" in "\n".join(lines[:path + 5])


def test_code_the_readme_quotes_is_the_code_of_the_file_it_names():
    # Each ```python block follows a sentence naming its file, like "(`speculative.py`, ...)";
    # every line of the block must be in that file as it is.
    for before, block in re.findall(r"([^\n]*\n[^\n]*)\n\n```python\n(.*?)```", README, re.S):
        files = re.findall(r"`([\w/]+\.py)`", before)
        assert files, f"name the file this code comes from: {block[:60]!r}"
        source = (ROOT / files[-1]).read_text()
        for line in block.splitlines():
            assert line in source, f"README quotes a line {files[-1]} does not have: {line!r}"


def test_figures_quoted_twice_are_the_same_run():
    # The README's results table repeats rows of the benchmark table in docs/RESULTS.md.
    table = README.split("## What it does here")[1].split("## ")[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and "---" not in r][1:]
    assert len(rows) == 4
    for row in rows:
        k, per_pass, kept, speedup, predicted = [c.strip() for c in row.strip("|").split("|")][1:]
        assert re.search(rf"\| {k} \|[^\n]*\| {re.escape(per_pass)} \| {kept} \|", RESULTS) and \
            re.search(rf"\*?\*?{re.escape(speedup)}\*?\*? \| {re.escape(predicted)} \| "
                      rf"{re.escape(per_pass)} \| {kept} \|", RESULTS), row
    # make lesson's time: the README rounds what RESULTS.md measured
    minutes, seconds = map(int, re.search(r"`make lesson` \| (\d+) min (\d+) s", RESULTS).groups())
    assert f"about {round(minutes + seconds / 60)} minutes from nothing" in README
