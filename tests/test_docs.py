"""The README is all a user has: it must stay a short landing page whose links, commands and
quoted code are the repository's own; every document's links point inside the repository;
docs/RESULTS.md is its sections assembled, and each figure the README and LESSON.md quote from
it is a link to the section that holds it."""

import ast
import json
import re
from pathlib import Path

from harness import report

ROOT = Path(__file__).resolve().parents[1]
TEACHERS = ROOT / "classroom" / "TEACHERS.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), TEACHERS]


def read(name):
    return (ROOT / name).read_text()


def flat(text):
    """Text with every run of whitespace (line breaks included) as one space."""
    return " ".join(text.split())


README = read("README.md")
LESSON = read("docs/LESSON.md")
RESULTS = read("docs/RESULTS.md")


def links(text):
    return [t for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
            if not t.startswith(("http://", "https://"))]


def test_links_stay_inside_the_repository():
    for doc in DOCS:
        text = doc.read_text()
        assert "../shared" not in text, f"{doc.name} points outside the repository"
        for target in links(text):
            path = (doc.parent / target).resolve()
            assert path.exists() and ROOT in path.parents, f"{doc.name}: broken link {target}"


def test_the_readme_links_nothing_outside_the_repository():
    assert not re.search(r"\]\((https?:|/|\.\./)", README), \
        "the README links outside the repository"


def teachers_only():
    """classroom/project.py's TEACHERS_ONLY: what the student repository leaves out."""
    tree = ast.parse(read("classroom/project.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TEACHERS_ONLY":
            return ast.literal_eval(node.value)
    raise AssertionError("classroom/project.py has no TEACHERS_ONLY")


def test_documents_the_student_repository_keeps_link_nothing_it_leaves_out():
    left_out = teachers_only()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        relative = doc.relative_to(ROOT).as_posix()
        if relative.startswith(left_out):
            continue
        for target in links(doc.read_text()):
            path = (doc.parent / target).resolve().relative_to(ROOT).as_posix()
            assert not path.startswith(left_out), \
                f"{relative} links {target}, which the student repository leaves out: " \
                "quote it as `code`"


def test_the_public_api_and_the_lesson_are_linked_from_the_readme():
    assert "(docs/API.md)" in README and "(docs/LESSON.md)" in README
    assert "from gpt import GPT, Config, train, encode, decode, get_batch," in README


def test_the_readme_is_a_landing_page():
    lines = README.splitlines()
    path = next(i for i, line in enumerate(lines) if line.startswith("## The learning path"))
    assert path < 60, "the learning path must start within the README's first 60 lines"
    top = "\n".join(lines[:path])
    assert "make lesson" in top and "make test" in top and "make notebooks" in top
    assert "my-notebooks/01_the_idea.ipynb" in top, "say which notebook to open first"


def table_after(text, heading):
    """The first table after heading: one list of cells per row, the header first."""
    section = text.split(heading, 1)[1]
    rows = re.search(r"^(\|.*\n)+", section, re.M).group(0).splitlines()
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows if "---" not in r]


def learning_path_rows():
    return table_after(README, "## The learning path")[1:]


def test_the_learning_path_is_the_notebooks_in_order_with_their_own_reading_times_and_parts():
    from lessonkit.parts import PARTS
    part_of = {f"{p.file[:-3].replace('/', '.')}.{f}": p.id for p in PARTS for f in p.functions}
    rows = learning_path_rows()
    sources = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    assert [r[1].strip("`") for r in rows] == [s.stem for s in sources]
    for row, source in zip(rows, sources):
        text = source.read_text()
        minutes = re.search(r"Reading time: about (\d+) minutes", text).group(1)
        assert row[-1] == f"{minutes} min", f"{source.stem}: the notebook says {minutes} minutes"
        turns = re.findall(r"^# %% your turn: (.+)$", text, re.M)
        parts = sorted({part_of[f] for cell in turns for f in cell.split()})
        assert sorted(re.findall(r"\b[1-9][a-c]\b", row[3])) == parts, \
            f"{source.stem}: its your-turn cells are parts {parts}"


def test_every_make_command_in_the_documents_is_a_target():
    targets = set(re.findall(r"^([\w-]+):", read("Makefile"), re.M))
    for doc in DOCS:
        text = doc.read_text()
        for target in re.findall(r"`make ([a-z][\w-]*)|^make ([a-z][\w-]*)", text, re.M):
            target = "".join(target)
            assert target in targets, f"{doc.name}: `make {target}` is not in the Makefile"


def find_lines(source, piece, start):
    for at in range(start, len(source) - len(piece) + 1):
        if source[at:at + len(piece)] == piece:
            return at
    return None


def test_code_the_readme_quotes_is_the_code_of_the_file_it_names():
    # Each ```python block follows a sentence naming its file, like "(`speculative.py`, ...)";
    # its lines are that file's lines, whole and in order; a line "..." marks lines left out.
    blocks = list(re.finditer(r"^```python\n(.*?)^```", README, re.S | re.M))
    assert len(blocks) >= 3, "the README quotes the round, the greedy verdict and the rule"
    for block in blocks:
        before = "\n".join(README[:block.start()].rstrip("\n").splitlines()[-3:])
        files = re.findall(r"`([\w/]+\.py)`", before)
        assert files, f"name the file this code comes from: {block.group(1)[:60]!r}"
        source = read(files[-1]).splitlines()
        pieces, start = [[]], 0
        for line in block.group(1).splitlines():
            if line.strip() == "...":
                pieces.append([])
            else:
                pieces[-1].append(line)
        for piece in filter(None, pieces):
            at = find_lines(source, piece, start)
            assert at is not None, f"README quotes lines {files[-1]} does not have, in this " \
                                   f"order: {piece[0]!r} ..."
            start = at + len(piece)


def test_the_teachers_points_are_the_graders():
    from lessonkit.parts import PARTS
    text = TEACHERS.read_text()
    for p in PARTS:
        row = re.search(rf"^\| {p.id} \|.*\| `{re.escape(p.file)}` \| (\d+) \| (\d+) min \|$",
                        text, re.M)
        assert row and (int(row[1]), int(row[2])) == (p.points, p.minutes), \
            f"TEACHERS.md, part {p.id}: {p.points} points, {p.minutes} min in lessonkit/parts.py"
    total = sum(p.points for p in PARTS)
    assert f"{total} in a student's own `make check`" in flat(text)
    assert f"`make check` here scores {total}/{total}" in flat(text)


def test_formula_figures_in_the_documents_are_the_codes():
    # API.md and LESSON.md both quote the break-even alphas; LESSON.md the tokens per pass.
    import speculative as sd
    low, high = f"{sd.break_even_alpha(4, 0.2):.4f}", f"{sd.break_even_alpha(4, 0.05):.4f}"
    api, lesson = flat(read("docs/API.md")), flat(LESSON)
    assert f"k = 4: {low} at c = 0.2, {high} at c = 0.05" in api
    assert f"α = {low} when c = 0.2 and α = {high} when c = 0.05" in lesson
    assert f"= {sd.expected_tokens_per_pass(0.8, 4):.4f}" in lesson


def test_setup_installs_the_lesson_alone_and_each_extra_comes_with_its_target():
    # make setup (make lesson's) installs pyproject's own dependencies, no extra; make test,
    # make notebooks and make studies each install their extra once (a stamp file per extra).
    # The bug this catches: set-up installing the test or notebook tools again (`.[dev]`), or
    # a target that needs an extra not installing it.
    import tomllib
    project = tomllib.loads(read("pyproject.toml"))["project"]
    extras = project["optional-dependencies"]
    makefile = read("Makefile")
    setup = re.search(r"^\$\(STAMP\):.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "install" in setup and "-e ." in setup and "[" not in setup, setup
    lesson_tools = " ".join(project["dependencies"])
    for tool in ("pytest", "jupyter", "transformers", "selenium"):
        assert tool not in lesson_tools, f"{tool} is not the lesson's: put it in an extra"
    needs = {"test": "test", "notebooks": "notebooks", "notebooks-check": "notebooks",
             "studies": "hf"}
    for target, extra in needs.items():
        line = re.search(rf"^{target}:(.*)$", makefile, re.M).group(1)
        assert f".installed-{extra}" in line.split("##")[0], f"make {target} installs [{extra}]"
        assert extra in extras
    assert "pytest" in " ".join(extras["test"]) and "jupyter" in " ".join(extras["notebooks"])
    assert set(extras["dev"][0].split("[")[1].rstrip("]").split(",")) == {"test", "notebooks",
                                                                           "hf"}


def sections(markdown):
    """{anchor: text} of each "## " section of a Markdown document."""
    parts = re.split(r"(?m)^(?=## )", markdown)[1:]
    return {report.anchor(part.splitlines()[0][3:]): part for part in parts}


def quotes(document):
    """(figure, anchor) for each figure a document links to a RESULTS.md section, inline
    ([1.81x](docs/RESULTS.md#the-benchmark)) or by reference ([1.81x][benchmark], with a line
    [benchmark]: docs/RESULTS.md#the-benchmark); the anchor is None for an undefined reference."""
    target = r"(?:docs/)?RESULTS\.md(#[\w-]+)?"
    defined = dict(re.findall(rf"(?m)^\[([\w-]+)\]: {target}\s*$", document))
    figure = r"\[([^\]]*\d[^\]]*)\]"
    inline = re.findall(rf"{figure}\({target}\)", document)
    return inline + [(text, defined.get(name)) for text, name in
                     re.findall(rf"{figure}\[([\w-]+)\]", document)]


def misquoted(document, results):
    """Each figure `document` quotes that the RESULTS.md section it links to does not hold."""
    found = sections(results)
    return [f"{text} -> {anchor}" for text, anchor in quotes(document)
            if anchor not in found or flat(text) not in flat(found[anchor])]


def test_results_is_its_sections_assembled():
    # Edited in docs/results/NAME.md, assembled by make docs: a section edited in RESULTS.md
    # alone, a section file left out of report.RESULTS_SECTIONS, or one listed and missing fails.
    folder = ROOT / "docs" / "results"
    assert {path.stem for path in folder.glob("*.md")} == set(report.RESULTS_SECTIONS)
    assert RESULTS == report.results_document(folder), "RESULTS.md differs: run make docs"


def test_each_figure_the_readme_and_lesson_quote_is_in_the_results_section_it_links():
    for name, document in [("README.md", README), ("docs/LESSON.md", LESSON)]:
        assert len(quotes(document)) >= 5, f"{name} quotes its figures as links"
        assert misquoted(document, RESULTS) == [], f"{name}: figures not where they link"


def test_a_quoted_figure_its_section_lacks_is_reported():
    # The negative control of the test above, on planted quotes.
    document = ("[1.81x](docs/RESULTS.md#the-benchmark) [9.99x](docs/RESULTS.md#the-benchmark) "
                "[1.81x](RESULTS.md#no-such-section) [1.81x][bench] [1.81x][nowhere]\n\n"
                "[bench]: docs/RESULTS.md#the-models\n")
    assert misquoted(document, RESULTS) == ["9.99x -> #the-benchmark",
                                            "1.81x -> #no-such-section", "1.81x -> #the-models",
                                            "1.81x -> None"]


def test_speed_ups_the_readme_and_lesson_state_are_quoted_from_results():
    # A measured speed-up (two decimals and an x) written into the prose without its link
    # would go stale unseen; the lesson's own round figures ("about 1.0x") are not measured.
    for name, document in [("README.md", README), ("docs/LESSON.md", LESSON)]:
        unlinked = re.sub(r"\[[^\]]*\](\([^)]*\)|\[[\w-]+\])", "", document)
        assert re.findall(r"\b\d+\.\d\dx\b", unlinked) == [], name


def test_make_docs_takes_the_sections_full_runs_wrote(tmp_path):
    # make docs --take results: the lesson's summary and a study's section of a full run become
    # their RESULTS.md sections, under the headings RESULTS.md links to; a --quick run's is not
    # taken (its control: the trees section below).
    sections = tmp_path / "results" / "sections"
    sections.mkdir(parents=True)
    machine = json.loads(read("docs/results/ex3_build.json"))["run"]["machine"]
    run = {"command": "python -m studies", "date": "2026-12-07 01:00 UTC", "machine": machine,
           "busy": ""}
    saved = {"ex3": read("docs/results/ex3_build.json"), "ex4": read("docs/results/ex4_break.json")}
    for name, numbers in saved.items():
        (sections / f"{name}.json").write_text(json.dumps(
            {"quick": False, "run": run, "numbers": json.loads(numbers), "markdown": ""}))
    for name, quick in [("drafters", False), ("trees", True)]:
        (sections / f"{name}.json").write_text(json.dumps(
            {"quick": quick, "run": run,
             "markdown": f"the {name} study's own words\n\n![its figure]({name}.png)"}))
    docs = tmp_path / "docs"
    docs.mkdir()
    assert report.take(tmp_path / "results", docs, log=lambda *a: None) == ["drafters", "lesson"]
    drafters = (docs / "drafters.md").read_text()
    assert "the drafters study's own words" in drafters and "2026-12-07 01:00 UTC" in drafters
    # its figure stays in results/ (not committed): named, not linked from docs/
    assert "![" not in drafters and "`results/drafters.png`" in drafters
    for name in ["drafters", "lesson"]:
        assert (docs / f"{name}.md").read_text().splitlines()[0] in RESULTS.splitlines()
    assert "| proposals accepted | about a quarter |  | 26% |" in (docs / "lesson.md").read_text()
