"""The notebooks as built: the generated versions load the your-turn extension and mark each
your-turn cell with its part, the sources stay Python, the student's copies are never
overwritten. Running them: the student's walk (tests/test_walk.py, each notebook once, its
your-turn cells written from the solved versions, on quick models); on the trained models,
`make notebooks-check`."""

import ast
import importlib.util
import re
import subprocess
import sys

import pytest

from classroom import notebooks
from classroom.project import ROOT
from lessonkit import parts

SOURCES = parts.sources()


@pytest.fixture(scope="module")
def built():
    """Every source built as the student's and the solved notebook, once for the tests below
    that only read them (each read parses the modules its your-turn cells quote)."""
    return {(source, version): notebooks.read(source, version)
            for source in SOURCES for version in ("student", "solved")}


def test_the_notebooks_load_the_extension_and_each_your_turn_cell_names_its_part(built):
    for source in SOURCES:
        turns = [header for kind, header, _ in parts.cells(source.read_text())
                 if parts.YOUR_TURN.match(header)]
        for version in ("student", "solved"):
            code = [c.source for c in built[source, version].cells
                    if c.cell_type == "code"]
            assert "%load_ext classroom.yourturn" in code[0].splitlines()
            answers = [c.splitlines()[0] for c in code if c.startswith("%%answer")]
            assert answers == [f"%%answer {parts.part_of_cell(h).id}" for h in turns]


def test_every_your_turn_cell_is_followed_by_its_check_cell():
    for source in SOURCES:
        cells = parts.cells(source.read_text())
        for i, (kind, header, _) in enumerate(cells):
            if parts.YOUR_TURN.match(header):
                following = [body for k, _, body in cells[i + 1:] if k == "code"][:1]
                assert following and re.search(r"^check\(", following[0], re.M), \
                    f"{source.name}: {header} has no check cell after it"


def test_sources_are_python_and_no_notebook_output_is_committed():
    for source in SOURCES:
        ast.parse(source.read_text())
    tracked = subprocess.run(["git", "ls-files", "notebooks"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert not [f for f in tracked if f.endswith(".ipynb")], "commit the .py sources only"
    assert len(SOURCES) == 9, [s.name for s in SOURCES]   # part one: 6; part two: 7 to 9


def test_every_your_turn_cell_imports_the_reference_in_the_source_only(built):
    for source in SOURCES:
        for kind, header, body in parts.cells(source.read_text()):
            turn = parts.YOUR_TURN.match(header)
            if not turn:
                continue
            lines = body.splitlines()
            assert notebooks.SOURCE_ONLY in lines, f"{source.name}: {header}"
            imported = lines[lines.index(notebooks.SOURCE_ONLY) + 1]
            module, names = {".".join(n.split(".")[:-1]) for n in turn.group(1).split()}, \
                [n.split(".")[-1] for n in turn.group(1).split()]
            assert imported == f"from {module.pop()} import {', '.join(names)}", imported
        for version in ("student", "solved"):
            assert not any(notebooks.SOURCE_ONLY in cell.source
                           for cell in built[source, version].cells)


def test_the_build_drops_the_reference_import_and_defines_the_function(built):
    body = f"import math\n{notebooks.SOURCE_ONLY}\nfrom speculative import break_even_alpha"
    assert notebooks.reference_import(body) == "import math"
    solved = built[SOURCES[0], "solved"]
    code = [c.source for c in solved.cells if "def greedy_verdict(" in c.source]
    assert code and "from numpy_speculative import greedy_verdict" not in code[0]


def test_make_notebooks_gives_blank_copies_that_are_never_overwritten(tmp_path):
    written = notebooks.write(tmp_path / "mine")  # the default: the student's own copies
    assert len(written) == len(SOURCES)
    assert all("BEGIN SOLUTION" not in p.read_text() and "not started" in p.read_text()
               for p in written)
    mine = written[0]
    mine.write_text(mine.read_text().replace("Your turn", "My work", 1))
    assert notebooks.write(tmp_path / "mine") == []  # a student's edits are kept ...
    assert notebooks.write(tmp_path / "mine", "solved") == []  # ... even from the solved ones
    assert "My work" in mine.read_text()
    notebooks.write(tmp_path / "mine", overwrite=True)  # ... unless asked
    assert "My work" not in mine.read_text()


def test_the_solved_notebooks_say_so_and_are_rewritten(tmp_path):
    written = notebooks.write(tmp_path, "solved")
    assert all("BEGIN SOLUTION" in p.read_text() and "**Solved version**" in p.read_text()
               for p in written)
    written[0].write_text(written[0].read_text().replace("Setup", "Old setup", 1))
    assert len(notebooks.write(tmp_path, "solved")) == len(SOURCES)
    assert "Old setup" not in written[0].read_text()


@pytest.mark.slow  # seconds: make test
def test_a_kernel_loading_the_extension_does_not_import_nbformat():
    # nbformat's schema checker is slow to import, and every kernel loads classroom.yourturn
    # (as does `make check`, through classroom.notebooks): only building a notebook needs it,
    # and then without the IRI parsers (notebooks.jupyter). Control: building one imports
    # nbformat, so the probe sees an import where there is one.
    def imported(code):
        probe = (f"import sys\n{code}\nprint('nbformat' in sys.modules, "
                 "sys.modules.get('rfc3987_syntax') is not None)")
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              cwd=ROOT, check=True).stdout.split()
    assert imported("import classroom.yourturn, classroom.__main__") == ["False", "False"]
    assert imported("from classroom import notebooks\nfrom lessonkit import parts\n"
                    "notebooks.read(parts.sources()[0])") == ["True", "False"]
    if importlib.util.find_spec("rfc3987_syntax"):      # (make notebooks' packages bring it)
        assert imported("import nbformat") == ["True", "True"]
