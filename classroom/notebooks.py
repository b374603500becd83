"""
classroom/notebooks.py: the notebooks, from readable sources, in a solved and a student version.

A notebook's source is a plain Python file, notebooks/NN_name.py, in the "percent" layout that
Jupytext and VS Code also read: `# %%` starts a code cell, `# %% [markdown]` a text cell whose
lines start with "# ". Diffs stay readable and no output is ever committed. A code cell that
starts with

    # %% your turn: numpy_speculative.greedy_verdict

is a "your turn" cell: the build puts the named functions there, copied from the reference
code (solution regions included), so a solution still lives once. The solved notebook keeps
them; the student notebook replaces each region with a NotImplementedError, the same way and
with the same tool as the classroom assignments (regions.py). The check cell after it runs that
part's classroom checks (notebook_checks.py).

    python -m classroom notebooks                 # notebooks/*.ipynb, solved (make notebooks)
    python -m classroom notebooks --student --out DIR
    python -m classroom notebooks --html DIR      # run the solved ones and save HTML copies
"""

import ast
import re
from pathlib import Path

import nbformat

from classroom import regions
from classroom.submissions import ROOT

NOTEBOOKS = ROOT / "notebooks"
YOUR_TURN = re.compile(r"^# %% your turn: (.+)$")


def sources(folder=NOTEBOOKS):
    return sorted(Path(folder).glob("[0-9][0-9]_*.py"))


def function_source(module, name, root=ROOT):
    """The source of function `name` in module `module` (a dotted name), from its file."""
    path = Path(root, *module.split(".")).with_suffix(".py")
    text = path.read_text()
    lines = text.splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            end = node.end_lineno  # then the indented comments after the last statement
            while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
                end += 1
            return "\n".join(lines[node.lineno - 1:end]).rstrip()
    raise ValueError(f"{path.name} has no function {name}")


def your_turn_message(function):
    return f"your turn: write {function} (see its docstring), then run the check cell below"


def cells(text):
    """[(kind, header, body)] of a percent-format source."""
    found, kind, header, lines = [], None, "", []
    for line in text.splitlines():
        if line.startswith("# %%"):
            if kind is not None:
                found.append((kind, header, "\n".join(lines).strip("\n")))
            kind = "markdown" if "[markdown]" in line else "code"
            header, lines = line, []
        elif kind is not None:
            lines.append(line)
    if kind is not None:
        found.append((kind, header, "\n".join(lines).strip("\n")))
    return found


def read(path, student=False, root=ROOT):
    """The notebook of source `path`: solved, or the student version."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    for kind, header, body in cells(Path(path).read_text()):
        if kind == "markdown":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in body.splitlines())
            notebook.cells.append(nbformat.v4.new_markdown_cell(text))
            continue
        turn = YOUR_TURN.match(header)
        if turn:
            names = turn.group(1).split()
            pieces = [function_source(".".join(n.split(".")[:-1]), n.split(".")[-1], root)
                      for n in names]
            body = (body + "\n\n" if body else "") + "\n\n\n".join(pieces)
            if student:
                body = regions.student_version(body, your_turn_message)
        notebook.cells.append(nbformat.v4.new_code_cell(body))
    return notebook


def write(folder, student=False, root=ROOT, overwrite=False):
    """Write every notebook as .ipynb into folder. An existing one is kept unless overwrite:
    it may hold a student's work."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sources(root / "notebooks"):
        path = folder / source.with_suffix(".ipynb").name
        if path.exists() and not overwrite:
            continue
        nbformat.write(read(source, student, root), path)
        written.append(path)
    return written


def execute(notebook, cwd=NOTEBOOKS, timeout=600, env=None):
    """Run a notebook top to bottom in a fresh kernel; raise on the first error."""
    import os

    from nbclient import NotebookClient
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return notebook


def html(folder, root=ROOT, log=print):
    """Run every solved notebook (the trained models) and save an HTML copy of each."""
    from nbconvert import HTMLExporter
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for source in sources(root / "notebooks"):
        log(f"running {source.name} ...")
        notebook = execute(read(source, root=root))
        page, _ = HTMLExporter().from_notebook_node(notebook)
        target = folder / source.with_suffix(".html").name
        target.write_text(page)
        log(f"wrote {target}")
