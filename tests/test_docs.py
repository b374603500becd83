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
