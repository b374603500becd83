"""The source's own words and interfaces, read with `ast` and `tokenize` (never imported).

No comment or docstring names a file, a command or a module's name that is not there (a file
moves, its old name stays behind in prose: `numpy_gpt.py`, `python benchmark.py`). And the
lesson's files ask an object what it has (hasattr, getattr) only where speculative.py's
protocols cannot say it. No comment or docstring cites a measured figure (a speed-up, a time, a
loss, an agreement): it would go stale with the next run or machine, so it points to the section
of docs/RESULTS.md that holds the figure and says why in words. Tiny fake projects show that
each check bites.
"""

import ast
import importlib.util
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests", ".venv", "__pycache__", ".git"}

# Files of other projects that comments name on purpose: nanoGPT's model and sampling scripts.
ELSEWHERE = {"model.py", "sample.py"}
# Short names the code gives modules (`import speculative as sd`).
ALIASES = {"sd": "speculative", "ns": "numpy_speculative", "np": "numpy", "nn": "torch.nn"}

FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b")
COMMAND = re.compile(r"\bpython3? (?:-m ([\w.]+)|([\w/.-]+\.py))")
NAMED = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)\.([A-Z]\w*)\b")


def sources(root):
    return sorted(p for p in Path(root).rglob("*.py")
                  if not SKIP & set(p.relative_to(root).parts))


def prose(path):
    """(line, text) of every comment and docstring of a source file."""
    text = path.read_text(encoding="utf-8")
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def placeholder(name):
    """NAME, NN_name, X: a part of a name that stands for any (studies.NAME)."""
    return any(re.fullmatch(r"[A-Z]+(_\w+)?", part) for part in re.split(r"[./]", name))


def project_file(root, dotted, near):
    """The file of project module `dotted` (or of the module of that name in a package that
    holds `near`, a folder, or in a package at the top, as the code names it after `from
    lessonkit import scorer`), or None."""
    root = Path(root)
    packages = sorted(p.parent for p in root.glob("*/__init__.py"))
    for base in [root] + [p for p in [near, *near.parents] if root in p.parents] + packages:
        path = base / dotted.replace(".", "/")
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def defines(path, name):
    """Does the module at `path` define or import `name` at its top level?"""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        else:
            continue
        if name in names:
            return True
    return False


def elsewhere(root, module):
    """Is `module` one of another project's (numpy, torch), importable here?"""
    top = module.split(".")[0]
    if project_file(root, top, Path(root)):
        return False
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def stale_references(root):
    """'path:line: what' for each file, command or module.Name that comments and docstrings
    name and that does not exist."""
    root, stale = Path(root), []
    files = sources(root)
    names = {p.name for p in files}
    for path in files:
        where = f"{path.relative_to(root)}"
        for line, text in prose(path):
            for module, script in COMMAND.findall(text):
                if placeholder(module or script):
                    continue
                if script and not (root / script).exists():
                    stale.append(f"{where}:{line}: python {script}")
                if module and not project_file(root, module, root) and \
                        not elsewhere(root, module):
                    stale.append(f"{where}:{line}: python -m {module}")
            for name in FILE.findall(COMMAND.sub("", text)):
                exists = (root / name).exists() or (path.parent / name).exists() or \
                    ("/" not in name and name in names)
                if not exists and name not in ELSEWHERE and not placeholder(name):
                    stale.append(f"{where}:{line}: {name}")
            for module, name in NAMED.findall(text):
                first, _, rest = module.partition(".")
                module = ALIASES.get(first, first) + (f".{rest}" if rest else "")
                if placeholder(name) or elsewhere(root, module):
                    continue
                found = project_file(root, module, path.parent)
                if found is None or not defines(found, name):
                    stale.append(f"{where}:{line}: {module}.{name}")
    return stale


def test_no_comment_or_docstring_names_what_is_not_there():
    stale = "\n".join(stale_references(ROOT))
    assert not stale, f"Comments and docstrings name files, commands or names that are gone:\n" \
                      f"{stale}"


# The lesson's files, where an interface is to be read, not probed.
LESSON = ("gpt.py", "speculative.py", "numpy_speculative.py", "train.py")


def probes(root):
    """'file: call' for each hasattr() and getattr() in the lesson's files."""
    found = []
    for name in LESSON:
        path = Path(root) / name
        if path.exists():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found += [f"{name}: {ast.unparse(node)}" for node in ast.walk(tree)
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                      and node.func.id in ("hasattr", "getattr")]
    return found


def test_the_lessons_files_probe_only_where_no_class_can_say():
    # gpt.py's module __getattr__ hands out the corpora read on first use (train_data, ...);
    # as_drafter asks for propose() to tell a drafter that forgot to subclass Drafter (one
    # line) from a model. The rest are plain classes.
    assert probes(ROOT) == [
        "gpt.py: getattr(corpus, name)",
        "speculative.py: hasattr(draft, 'propose')",
    ]


# A figure that looks measured: a speed-up (3.5x), a share (54%), a time (4 min, 12 s, 99 ms,
# 128 us), a loss or an agreement (1.673, 0.91).
MEASURED = re.compile(r"\b\d+(?:\.\d+)?x\b|\b\d+(?:\.\d+)?%|\b\d+ min(?: \d+ s)?\b|\b\d+ s\b"
                      r"|\b\d+ ms\b|\b\d+ us\b|\b\d\.\d{2,4}\b")
# Not scanned: the tests (their figures are what they check), the notebooks, the documents and
# their renderer (its examples show the markers' form, around a figure).
FIGURES_SKIP = {"tests", "notebooks", "docs", "__pycache__"}
RENDERER = {"studies/render.py", "studies/render_studies.py", "studies/figures.py"}
# Figures in comments and docstrings that are not measurements: {file: [figure as MEASURED
# matches it]}, each with its reason. Keep it short: reword a comment rather than list it here.
NOT_MEASURED = {
    # duration()'s output, by example
    "lessonkit/machine.py": ["40 s", "3 min 10 s", "5 min", "0 min"],
    # the formula's worked example, alpha = 0.8 and k = 4
    "exercises/ex2_derive.py": ["0.64", "0.512", "0.4096", "3.3616"],
    # the lesson's own figure, quoted as the lesson's
    "exercises/ex3_build.py": ["1.0x"],
    # the formula's break-even alpha at the lesson's costs, the lesson's quote and its grid search
    "exercises/ex4_break.py": ["0.4553", "0.1668", "0.05", "0.45", "0.00", "0.01", "1.00", "0.46",
                               "0.17"],
    # the tolerance the code applies before it says why a measurement is off its prediction
    "exercises/ex5_gpu.py": ["15%"],
    "studies/sampling_costs.py": ["10%"],
    # FakeGPU's queued work: a setting of the fake
    "classroom/helpers.py": ["20 ms"],
}


def figures(root):
    """(file, line, figure) for each figure MEASURED finds in a comment or a triple-quoted
    string (docstrings; not f-strings, whose text is output) of the project's .py files, and in
    the Makefile's comments and its targets' help (after ##)."""
    root, found = Path(root), []
    makefile = Path(root) / "Makefile"
    for number, line in enumerate(makefile.read_text().splitlines() if makefile.exists() else [],
                                  1):
        prose = line[line.index("#"):] if "#" in line else ""
        found += [("Makefile", number, match[0]) for match in MEASURED.finditer(prose)]
    for path in sorted(Path(root).rglob("*.py")):
        parts = path.relative_to(root).parts
        if FIGURES_SKIP & set(parts) or path.relative_to(root).as_posix() in RENDERER or \
                any(p.startswith(".") or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        where, text = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            prefix = re.match(r"[A-Za-z]*", token.string)[0].lower()
            prose = token.type == tokenize.COMMENT or token.type == tokenize.STRING and \
                "f" not in prefix and token.string[len(prefix):].startswith(('"""', "'''"))
            for match in MEASURED.finditer(token.string if prose else ""):
                line = token.start[0] + token.string.count("\n", 0, match.start())
                found.append((where, line, match[0]))
    return found


def measured_figures(root, allowed=NOT_MEASURED):
    """'file:line: figure' for each figure that `allowed` does not list for its file."""
    return [f"{where}:{line}: {figure}" for where, line, figure in figures(root)
            if figure not in allowed.get(where, ())]


def test_no_measured_figure_in_code_comments():
    found = "\n".join(measured_figures(ROOT))
    assert not found, "Comments and docstrings cite measured figures: point to the section of " \
                      "docs/RESULTS.md that holds each, say why in words (a setting or a " \
                      f"formula's example: NOT_MEASURED, with its reason):\n{found}"


def test_every_figure_listed_as_not_measured_is_still_there():
    there = {(where, figure) for where, _, figure in figures(ROOT)}
    gone = [f"{where}: {figure}" for where, listed in NOT_MEASURED.items() for figure in listed
            if (where, figure) not in there]
    assert not gone, "NOT_MEASURED lists figures no longer in the source (remove them):\n" + \
                     "\n".join(gone)


# Negative controls: tiny fake projects, checked with the same functions.

def fake_project(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_stale_file_command_or_name_is_reported(tmp_path):
    root = fake_project(tmp_path, {
        "numpy_speculative.py": "def forward():\n    pass\n",
        "beyond/__init__.py": "",
        "beyond/decode.py": '"""Run it as python -m beyond.decode, beside numpy_speculative.py."""\n',
        "gpt.py": '"""Weights for numpy_gpt.py; time them with `python benchmark.py`."""\n'
                  "# numpy_speculative.Scorer scores (it moved); numpy_speculative.forward stays\n"
                  "# python -m studies.NAME, nanoGPT's model.py, numpy.ndarray: fine\n"})
    assert stale_references(root) == ["gpt.py:2: numpy_speculative.Scorer",
                                      "gpt.py:1: python benchmark.py", "gpt.py:1: numpy_gpt.py"]


def test_a_probe_in_a_lesson_file_is_reported(tmp_path):
    root = fake_project(tmp_path, {"speculative.py": "def f(d):\n    if hasattr(d, 'kept'):\n"
                                                     "        d.kept(1)\n"})
    assert probes(root) == ["speculative.py: hasattr(d, 'kept')"]


def test_a_measured_figure_in_a_comment_or_docstring_is_reported(tmp_path):
    root = fake_project(tmp_path, {
        "speculative.py": '"""The distilled draft gives 3.5x (docs/RESULTS.md, "The models")."""\n'
                          "K = 4  # a step takes 99 ms here; k = 4 is a setting\n"
                          "NOTE = f'''{0.25:.0%} is output, not prose'''\n"
                          "SPEED = '3.5x'  # a plain string: not prose\n",
        "lessonkit/machine.py": '"""duration(): "40 s"; but the big model\'s loss, 1.923, was measured."""\n',
        "tests/test_x.py": "# 2.5x: the tests are not scanned\n",
        "studies/render.py": "# 1.673: nor the documents\n",
        "Makefile": "# set-up: 31 s from nothing\nlesson:  ## the lesson (about 5 min)\n"
                    "\tpython -m exercises --steps 1500\n"})
    assert measured_figures(root, {"lessonkit/machine.py": ["40 s"]}) == [
        "Makefile:1: 31 s", "Makefile:2: 5 min", "lessonkit/machine.py:1: 1.923",
        "speculative.py:1: 3.5x", "speculative.py:2: 99 ms"]
    assert measured_figures(root, {}) == [
        "Makefile:1: 31 s", "Makefile:2: 5 min", "lessonkit/machine.py:1: 40 s", "lessonkit/machine.py:1: 1.923",
        "speculative.py:1: 3.5x", "speculative.py:2: 99 ms"]
