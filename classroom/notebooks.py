"""
classroom/notebooks.py: the notebooks, from readable sources (notebooks/NN_name.py, "percent"
layout), in a student and a solved version. A your-turn cell (`# %% your turn: module.function`)
imports the reference answer when run as a source; the build puts the named functions there from
the reference code, and the student version replaces each solution region as regions.py does.
The format and the cells' behaviour: docs/DESIGN.md, "The notebooks".

    python -m classroom notebooks            # my-notebooks/: the student's own (make notebooks)
    python -m classroom notebooks --solved   # solved-notebooks/ (make notebooks-solved)
    python -m classroom notebooks --check    # run the solved ones on the trained models
                                             # (make notebooks-check), HTML in results/notebooks
"""

import ast
import importlib
import os
import sys
import time
from pathlib import Path

from classroom import regions
from classroom.project import ROOT
from lessonkit import parts

STUDENT_FOLDER = ROOT / "my-notebooks"       # never overwritten: it holds the student's work
SOLVED_FOLDER = ROOT / "solved-notebooks"    # regenerated each time
EXTENSION = ("# your-turn cells save your answers into the files the grader reads\n"
             "%load_ext classroom.yourturn")
SOURCE_ONLY = "# source only: the reference answer (the notebooks put its code here instead)"
SOLVED_BANNER = ("**Solved version**: every your-turn cell below holds the reference answer. "
                 "Your own blank copy: `make notebooks` (in `my-notebooks/`).")
VERSIONS = ("student", "solved", "source")


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


def reference_import(body):
    """A your-turn cell's source body without its source-only import of the reference."""
    lines = body.splitlines()
    if SOURCE_ONLY not in lines:
        return body
    at = lines.index(SOURCE_ONLY)
    return "\n".join(lines[:at] + lines[at + 2:]).strip("\n")


def jupyter(name):
    """The module `name` (nbformat, nbclient, nbconvert), imported where it is used: every kernel
    loads classroom.yourturn, which reads the sources only, and `make check` needs none of them.
    jsonschema (under nbformat) imports rfc3987_syntax where it is installed (jupyter-events asks
    for it), which builds 38 parsers as it is imported: 2.6 s a process here, for an IRI format
    no notebook schema uses (python-jsonschema/jsonschema#1428). Left out of this process."""
    sys.modules.setdefault("rfc3987_syntax", None)
    return importlib.import_module(name)


def read(path, version="student", root=ROOT):
    """The notebook of source `path`: the student version (blank your-turn cells), the solved
    one, or the source as it is (your-turn cells import the reference)."""
    nbformat = jupyter("nbformat")
    if version not in VERSIONS:
        raise ValueError(f"no notebook version {version!r}; choose one of {VERSIONS}")
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    for kind, header, body in parts.cells(Path(path).read_text()):
        if kind == "markdown":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in body.splitlines())
            notebook.cells.append(nbformat.v4.new_markdown_cell(text))
            if version == "solved" and len(notebook.cells) == 1:
                notebook.cells.append(nbformat.v4.new_markdown_cell(SOLVED_BANNER))
            continue
        turn = parts.YOUR_TURN.match(header)
        if version != "source" and not any(c.cell_type == "code" for c in notebook.cells):
            body = EXTENSION + "\n" + body
        if turn and version != "source":
            names = turn.group(1).split()
            pieces = [function_source(".".join(n.split(".")[:-1]), n.split(".")[-1], root)
                      for n in names]
            body = reference_import(body)
            body = (body + "\n\n" if body else "") + "\n\n\n".join(pieces)
            if version == "student":
                body = regions.student_version(body, parts.your_turn_message)
            body = f"%%answer {parts.part_of_cell(header).id}\n" + body
        notebook.cells.append(nbformat.v4.new_code_cell(body))
    return notebook


def write(folder=None, version="student", root=ROOT, overwrite=False):
    """Write every notebook as .ipynb into folder (by default my-notebooks/ for the student
    version, solved-notebooks/ for the solved one). A student notebook that exists is kept
    unless overwrite: it may hold the student's work. A solved one is rewritten, but never over
    a file that is not a solved notebook."""
    nbformat = jupyter("nbformat")
    folder = Path(folder or (SOLVED_FOLDER if version == "solved" else STUDENT_FOLDER))
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for source in parts.sources(root / "notebooks"):
        path = folder / source.with_suffix(".ipynb").name
        if path.exists() and not overwrite and \
                (version != "solved" or SOLVED_BANNER not in path.read_text()):
            continue
        nbformat.write(read(source, version, root), path)
        written.append(path)
    return written


def execute(notebook, cwd=parts.NOTEBOOKS, timeout=600, env=None):
    """Run a notebook top to bottom in a fresh kernel; raise on the first error."""
    NotebookClient = jupyter("nbclient").NotebookClient
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


def check(folder=ROOT / "results" / "notebooks", root=ROOT, log=print, budget_s=120,
          checkpoints=None):
    """Run every solved notebook on the trained models (the real ones: SPECDEC_QUICK is
    ignored; checkpoints: another folder of them, models trained with another seed, say), save
    an HTML copy of each, print the seconds each took. Returns the names of the notebooks that
    failed; every claim a notebook makes is an assertion, so a claim that does not hold on the
    trained models is a failure here."""
    CellExecutionError = jupyter("nbclient.exceptions").CellExecutionError
    HTMLExporter = jupyter("nbconvert").HTMLExporter
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    failed = []
    for source in parts.sources(root / "notebooks"):
        notebook, started = read(source, "solved", root), time.perf_counter()
        try:
            execute(notebook, env={"SPECDEC_QUICK": "", "SPECDEC_CHECKPOINTS":
                                   str(Path(checkpoints).resolve()) if checkpoints else ""})
            verdict = "passed"
        except CellExecutionError as e:
            lines = [line for line in str(e).splitlines() if line.strip()]
            verdict = "FAILED: " + (lines[-1] if lines else "an error")
            failed.append(source.stem)
        seconds = time.perf_counter() - started
        over = f" (over the {budget_s} s budget of a quiet 2-core machine)" if seconds > budget_s \
            else ""
        page, _ = HTMLExporter().from_notebook_node(notebook)
        (folder / source.with_suffix(".html").name).write_text(page)
        log(f"{source.stem:32} {seconds:4.0f} s  {verdict}{over}")
    total = len(parts.sources(root / "notebooks"))
    log(f"{len(failed)} of {total} notebooks failed; HTML copies in {folder}" if failed
        else f"every notebook passed on the trained models; HTML in {folder}")
    return failed
