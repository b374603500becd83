"""The source's own words and interfaces, read with `ast` and `tokenize` (never imported).

No comment or docstring names a file, a command or a module's name that is not there (a file
moves, its old name stays behind in prose: `numpy_gpt.py`, `python benchmark.py`). And the
lesson's files ask an object what it has (hasattr, getattr) only where speculative.py's
protocols cannot say it. Tiny fake projects show that each check bites.
"""

import ast
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

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


@pytest.mark.slow  # seconds: make test
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
        "harness/decode.py": '"""Run it as python -m harness.decode, beside numpy_speculative.py."""\n',
        "gpt.py": '"""Weights for numpy_gpt.py; time them with `python benchmark.py`."""\n'
                  "# numpy_speculative.Scorer scores (it moved); numpy_speculative.forward stays\n"
                  "# python -m studies.NAME, nanoGPT's model.py, numpy.ndarray: fine\n"})
    assert stale_references(root) == ["gpt.py:2: numpy_speculative.Scorer",
                                      "gpt.py:1: python benchmark.py", "gpt.py:1: numpy_gpt.py"]


def test_a_probe_in_a_lesson_file_is_reported(tmp_path):
    root = fake_project(tmp_path, {"speculative.py": "def f(d):\n    if hasattr(d, 'kept'):\n"
                                                     "        d.kept(1)\n"})
    assert probes(root) == ["speculative.py: hasattr(d, 'kept')"]
