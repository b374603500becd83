"""The project's import layers, checked by reading the source with `ast` (never importing it).

Each module has a rank in LAYERS and imports only its own rank or below, so the lesson never
depends on the extras built on it. Project imports sit at the top of a module, where a reader
sees them, and never form a circle; no two top-level folders import each other. Every import
counts, a main guard's too, and a main guard that starts a project module (python -m) is listed.
Tiny fake projects show that each check bites.
"""

import ast
import functools
import re
from collections import namedtuple
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Module name -> rank. A key ending in ".*" covers a package and every module inside it.
LAYERS = {
    # 0: leaf helpers of lessonkit/; they import nothing from the project.
    "lessonkit": 0, "lessonkit.machine": 0, "lessonkit.cli": 0, "lessonkit.corpus": 0,
    "lessonkit.parts": 0, "lessonkit.waiting": 0,
    # 1: the rest of lessonkit/ (NumPy or plain Python, and the checkpoint file): the window rule
    # and the scorer, a run's statistics, the checkpoint file, a results file.
    "lessonkit.scorer": 1, "lessonkit.stats": 1, "lessonkit.checkpoint": 1,
    "lessonkit.results_file": 1,
    # 2: the lesson's NumPy file (the readable forward pass and the acceptance rule) and the
    # torch model with its data and training loop.
    "numpy_speculative": 2, "gpt": 2,
    # 3: the decoding loop, the drafter interface, the formulas.
    "speculative": 3,
    # 4: beyond the lesson: a library of drafters and decoders, the presets and their training.
    "beyond.*": 4,
    # 5: the harness the exercises and studies run in (flags, models, report, stage times,
    # drafters by name, the benchmark, the batch curve, the decoding command line), and the
    # command that trains the presets.
    "harness.*": 5, "train": 5,
    # 6: the exercises and the studies; 7: the classroom, which grades the lesson's files and
    # nothing of the lesson imports; 8: the notebook sources, whose check cells call it.
    "exercises.*": 6, "studies.*": 6, "classroom.*": 7, "notebooks.*": 8,
}

PACKAGES = ("lessonkit", "beyond", "harness", "exercises", "studies", "classroom")  # walked all the way down
SKIP = {"tests", ".venv", "__pycache__"}
# One project import: who imports what, where, and whether it sits inside a function or class.
Edge = namedtuple("Edge", "importer target where nested")


def rank(name):
    """The rank of a module, or None if nobody placed it in LAYERS."""
    for key, value in LAYERS.items():
        if name == key or key.endswith(".*") and (name + ".").startswith(key[:-1]):
            return value
    return None


def find_modules(root):
    """Module name -> file, for every project source file."""
    root = Path(root)
    files = list(root.glob("*.py")) + list(root.glob("notebooks/*.py"))
    for package in PACKAGES:
        files += (root / package).rglob("*.py")
    modules = {}
    for path in files:
        parts = path.relative_to(root).with_suffix("").parts
        if any(part in SKIP or part.startswith(".") for part in parts):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def ancestors(name):
    """The packages above a dotted name: "a.b.c" -> ["a", "a.b"]."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def is_main_guard(node):
    """True for `if __name__ == "__main__":`."""
    test = ast.unparse(node.test) if isinstance(node, ast.If) else ""
    return test in ("__name__ == '__main__'", "'__main__' == __name__")


def import_nodes(tree):
    """Yield (import node, nested) for every import, the main guard's included."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)

    def walk(node, nested):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, nested
            yield from walk(child, nested or isinstance(child, scopes))

    yield from walk(tree, False)


def imported_names(node, importer, is_package, names):
    """The dotted names one import statement brings in, before the packages above them."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = importer if is_package else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = ".".join(part for part in (package, base) if part)
    found = [f"{base}.{alias.name}" for alias in node.names]
    return [name if name in names else base for name in found]


@functools.cache
def parsed(path):
    """A source file's syntax tree, read once a test run (the checks share it)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.cache
def find_edges(root):
    """Every project import in the project, as Edges. The main guard is left out."""
    root = Path(root)
    modules = find_modules(root)
    names = set(modules).union(*(ancestors(name) for name in modules))
    edges = []
    for importer, path in sorted(modules.items()):
        tree = parsed(path)
        is_package = path.name == "__init__.py"
        for node, nested in import_nodes(tree):
            where = f"{path.relative_to(root)}:{node.lineno}"
            for name in imported_names(node, importer, is_package, names):
                # `import a.b` also runs package `a`, unless the importer already lives in it.
                above = [p for p in ancestors(name)
                         if not (importer == p or importer.startswith(p + "."))]
                edges += [Edge(importer, target, where, nested)
                          for target in [name] + above if target in names]
    return tuple(dict.fromkeys(edges))  # `from gpt import a, b` is one edge


def launches(root):
    """Each program a main guard starts in its own place or beside it (a call's arguments that
    hold "-m", "module" for a project module): edges no import shows."""
    root = Path(root)
    modules = find_modules(root)
    found = []
    for importer, path in sorted(modules.items()):
        tree = parsed(path)
        for guard in (node for node in tree.body if is_main_guard(node)):
            for call in (n for n in ast.walk(guard) if isinstance(n, ast.Call)):
                words = [n.value for arg in call.args for n in ast.walk(arg)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                found += [Edge(importer, target, f"{path.relative_to(root)}:{call.lineno}", False)
                          for flag, target in zip(words, words[1:])
                          if flag == "-m" and target in modules]
    return found


# The one program a lesson file starts: `python speculative.py` is the decoding command line the
# contract names, and it decodes with every drafter beyond/ has, so it lives above the lesson
# (harness/decode.py) and speculative.py's main guard starts it in its own place (os.execve):
# nothing of the lesson imports it. A new launch is a decision: list it here, with its reason.
LAUNCHES = [("speculative", "harness.decode")]


def show(edge):
    return f"  {edge.where}: {edge.importer} -> {edge.target}"


def launched(root):
    return [show(edge) for edge in launches(root)]


def unplaced_modules(root):
    return sorted(name for name in find_modules(root) if rank(name) is None)


def nested_imports(root):
    return [show(edge) for edge in find_edges(root) if edge.nested]


def upward_imports(root):
    ranked = [(edge, rank(edge.importer), rank(edge.target)) for edge in find_edges(root)]
    return [f"{show(edge)}  (rank {low} -> {high})" for edge, low, high in ranked
            if None not in (low, high) and (low < high or low == 0)]


def circles(root):
    """Each group of modules that import one another in a circle (a self-import is a group)."""
    reach = {}
    for edge in find_edges(root):
        if not edge.nested:
            reach.setdefault(edge.importer, set()).add(edge.target)
    for _ in list(reach):  # after n rounds, each set holds every module its key can reach
        reach = {n: seen.union(*(reach.get(t, ()) for t in seen)) for n, seen in reach.items()}
    loops = {n for n in reach if n in reach[n]}
    return sorted({tuple(sorted(m for m in loops if m in reach[n] and n in reach[m]))
                   for n in loops})


def uninstalled_modules(root):
    """Project modules and packages that pyproject.toml's py-modules and packages leave out:
    `pip install -e .` would not make them importable from anywhere (a notebook's folder)."""
    text = (Path(root) / "pyproject.toml").read_text()
    listed = {name for key in ("py-modules", "packages") for name in
              ast.literal_eval(re.search(rf"^{key} = (\[[^]]*\])", text, re.M).group(1))}
    modules = find_modules(root)
    return sorted(name for name, path in modules.items() if not name.startswith("notebooks.")
                  and ("." not in name or path.name == "__init__.py") and name not in listed)


def folder_pairs(root):
    """Each pair of top-level folders that import each other (directly or through others):
    a folder is a layer of its own, used by those above it and using only those below."""
    folder = lambda name: name.split(".")[0] if "." in name or name in PACKAGES else None
    reach = {}
    for edge in find_edges(root):
        low, high = folder(edge.importer), folder(edge.target)
        if low and high and low != high:
            reach.setdefault(low, set()).add(high)
    for _ in list(reach):
        reach = {n: seen.union(*(reach.get(t, ()) for t in seen)) for n, seen in reach.items()}
    return sorted({tuple(sorted((a, b))) for a in reach for b in reach[a]
                   if a != b and a in reach.get(b, ())})


def test_no_two_folders_import_each_other():
    bad = "\n".join(f"  {a} <-> {b}" for a, b in folder_pairs(ROOT))
    assert not bad, f"Top-level folders that import each other:\n{bad}"


def test_every_module_is_installed():
    missing = uninstalled_modules(ROOT)
    assert not missing, f"Add these to py-modules or packages in pyproject.toml: {missing}"


def test_every_module_has_a_layer():
    missing = unplaced_modules(ROOT)
    assert not missing, f"Modules with no layer; add them to LAYERS in {__file__}: {missing}"


def test_no_project_import_inside_a_function_or_class():
    bad = "\n".join(nested_imports(ROOT))
    assert not bad, f"Project imports inside a function or class; move them to the top:\n{bad}"


def test_no_upward_import():
    bad = "\n".join(upward_imports(ROOT))
    assert not bad, f"Imports of a higher layer (or leaf helpers importing the project):\n{bad}"


def test_no_import_circles():
    bad = "\n".join("  " + " <-> ".join(group) for group in circles(ROOT))
    assert not bad, f"Modules that import one another in a circle:\n{bad}"


# Negative controls: tiny fake projects in tmp_path, checked with the same functions.

def fake_project(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


# Each bug a fake project plants, the checker that must report it, and exactly what it reports.
PLANTED = {
    "a circle": ({"beyond/ngram.py": "from beyond import heads\n",
                  "beyond/heads.py": "from . import ngram\n"},
                 "circles", [("beyond.heads", "beyond.ngram")]),
    "an upward import": ({"gpt.py": "import speculative\n", "speculative.py": ""},
                         "upward_imports", ["  gpt.py:1: gpt -> speculative  (rank 2 -> 3)"]),
    "a drafter importing the harness": ({"beyond/__init__.py": "",
                                         "beyond/eagle.py": "from harness import common\n",
                                         "harness/__init__.py": "", "harness/common.py": ""},
                                        "upward_imports",
                                        ["  beyond/eagle.py:1: beyond.eagle -> harness.common  "
                                         "(rank 4 -> 5)",
                                         "  beyond/eagle.py:1: beyond.eagle -> harness  "
                                         "(rank 4 -> 5)"]),
    "an import inside a function": ({"gpt.py": "", "speculative.py": "def f():\n    import gpt\n"},
                                    "nested_imports", ["  speculative.py:2: speculative -> gpt"]),
    "a leaf importing the project": ({"lessonkit/__init__.py": "",
                                      "lessonkit/cli.py": "from lessonkit import machine\n",
                                      "lessonkit/machine.py": ""}, "upward_imports",
                                     ["  lessonkit/cli.py:1: lessonkit.cli -> lessonkit.machine"
                                      "  (rank 0 -> 0)"]),
    "an unplaced module": ({"gpt.py": "", "newcomer.py": ""}, "unplaced_modules", ["newcomer"]),
    "a lesson folder importing the grader": ({"exercises/__init__.py": "",
                                              "exercises/stubs.py": "from classroom import parts\n",
                                              "classroom/__init__.py": "",
                                              "classroom/parts.py": ""}, "upward_imports",
                                             ["  exercises/stubs.py:1: exercises.stubs -> "
                                              "classroom.parts  (rank 6 -> 7)",
                                              "  exercises/stubs.py:1: exercises.stubs -> "
                                              "classroom  (rank 6 -> 7)"]),
    "a lesson file's main-guard import": ({"gpt.py": "if __name__ == '__main__':\n"
                                                     "    import speculative\n",
                                           "speculative.py": ""},
                                          "upward_imports",
                                          ["  gpt.py:2: gpt -> speculative  (rank 2 -> 3)"]),
    "a circle through a main guard": ({"speculative.py": "if __name__ == '__main__':\n"
                                                         "    from harness import decode\n",
                                       "harness/__init__.py": "",
                                       "harness/decode.py": "import speculative\n"},
                                      "circles", [("harness.decode", "speculative")]),
    "two folders that import each other": ({"exercises/__init__.py": "",
                                             "exercises/ex1.py": "from studies import plots\n",
                                             "studies/__init__.py": "",
                                             "studies/plots.py": "import speculative\n",
                                             "studies/run.py": "from exercises import ex1\n",
                                             "speculative.py": ""},
                                            "folder_pairs", [("exercises", "studies")]),
    "a main guard starting a module": ({"gpt.py": "import os, sys\n"
                                                  "if __name__ == '__main__':\n"
                                                  "    os.execv(sys.executable, [sys.executable, "
                                                  "'-m', 'train', *sys.argv[1:]])\n",
                                        "train.py": ""},
                                       "launched", ["  gpt.py:3: gpt -> train"]),
    "a module pip does not install": ({"gpt.py": "", "newcomer.py": "", "beyond/__init__.py": "",
                                       "pyproject.toml": 'py-modules = ["gpt"]\n'
                                                         'packages = ["beyond"]\n'},
                                      "uninstalled_modules", ["newcomer"]),
}


def test_every_program_a_main_guard_starts_is_listed():
    found = launches(ROOT)
    assert [(edge.importer, edge.target) for edge in found] == LAUNCHES, \
        "A main guard starts a project module (-m): list it in LAUNCHES with its reason, or " \
        "import what it needs:\n" + "\n".join(map(show, found))


@pytest.mark.parametrize("bug", PLANTED)
def test_checker_reports_a_planted_bug(tmp_path, bug):
    files, checker, reported = PLANTED[bug]
    assert globals()[checker](fake_project(tmp_path, files)) == reported


def test_checker_allows_a_main_guard_below_and_lazy_third_party(tmp_path):
    root = fake_project(tmp_path, {"speculative.py": "import gpt\n", "lessonkit/cli.py": "",
                                   "lessonkit/__init__.py": "",
                                   "gpt.py": "def plot():\n    import matplotlib\n\n"
                                   "if __name__ == '__main__':\n"
                                   "    from lessonkit import cli\n"})
    assert nested_imports(root) == upward_imports(root) == circles(root) == []
