"""
classroom/yourturn.py: the notebooks' your-turn cells, in one place with the graded files. A
notebook loads it as an IPython extension (`%load_ext classroom.yourturn`): a cell that starts
with `%%answer 1b` saves its functions into the file the grader reads (never over a function
changed there since: `--replace` does it); `check("1b")` runs that part's checks as `make check`
does; every other cell runs guarded, ending in one line where it calls a part not written yet.
In the project's own repository nothing is written: the cell's functions stand in for the
reference in the kernel. How and why: docs/DESIGN.md, "The notebooks".
"""

import ast
import builtins
import copy
import dis
import hashlib
import importlib
import os
import re
import signal
import sys
from pathlib import Path

from classroom import checks, expected, plan, regions, report, runner, sandbox, wire
from classroom.project import ROOT, is_student_repository
from lessonkit import parts

MARKER = re.compile(r"^# part (\w+), saved from a notebook \(([0-9a-f]{8})\)")
_state = {"skipped": {}}                 # name -> the part a skipped cell waited for
# A check run in the kernel (the project's own repository) runs in this one process, beside
# Jupyter and whatever else the machine runs, not in a worker of its own: more time than a
# worker's, so that an honest check on a busy machine never reads as an endless loop.
KERNEL_TIMEOUT = 3 * runner.TIMEOUT


def marker(part_id, text):
    digest = hashlib.sha256(text.rstrip("\n").encode()).hexdigest()[:8]
    return f"# part {part_id}, saved from a notebook ({digest}): edit it here or in the notebook"


def module_of(part):
    return part.file[:-len(".py")].replace("/", ".")


class FileFunction:
    """One function of a graded file as it is on the disk: its text, whether it is the stub, and
    whether it is what a notebook saved there (its marker's hash matches)."""

    def __init__(self, lines, name):
        text = "".join(lines)
        node, first, last = parts.definitions(text)[name]
        above = lines[first - 2] if first >= 2 else ""
        self.first = first - 1 if MARKER.match(above) else first   # 1-based, marker included
        self.last = last
        self.text = "".join(lines[first - 1:last])
        self.stub = parts.is_stub(node)
        mark = MARKER.match(above)
        self.saved_here = bool(mark) and marker(mark.group(1), self.text) == above.rstrip("\n")


def save(part, wanted, replace=False, root=ROOT):
    """Write each function of `wanted` ({name: its text from the cell}) into the part's file.

    Returns {name: what happened}: "saved", "unchanged", "kept the file's" (it was changed
    there since a notebook saved it) or "reference" (the reference repository: never written).
    Nothing is written unless the whole new file compiles."""
    if is_reference(root):
        return {name: "reference" for name in wanted}
    path = Path(root, part.file)
    original = path.read_text()
    lines = original.splitlines(keepends=True)
    outcome, edits = {}, []
    for name, text in wanted.items():
        current = FileFunction(lines, name)
        if current.text.rstrip("\n") == text.rstrip("\n"):
            outcome[name] = "unchanged"
        elif current.stub or current.saved_here or replace:
            edits.append((current.first, current.last, marker(part.id, text) + "\n" + text))
            outcome[name] = "saved"
        else:
            outcome[name] = "kept the file's"
    for first, last, new in sorted(edits, reverse=True):
        lines[first - 1:last] = [new]
    updated = "".join(lines)
    if updated != original:
        compile(updated, str(path), "exec")   # a file that does not compile is never written
        temporary = path.with_name(f".{path.name}.saving")
        temporary.write_text(updated)
        os.chmod(temporary, path.stat().st_mode)
        os.replace(temporary, path)
    return outcome


def load_from_file(part, names, root=ROOT):
    """Define each function in the kernel's module from the file on the disk (as the grader and
    a fresh kernel see it) and put it wherever the old one was: in every project module that
    imported it, and in the notebook. Returns {name: the function}."""
    module = importlib.import_module(module_of(part))
    path = Path(root, part.file)
    lines = path.read_text().splitlines(keepends=True)
    loaded = {}
    for name in names:
        function = FileFunction(lines, name)
        tree = ast.parse("".join(lines[function.first - 1:function.last]))
        ast.increment_lineno(tree, function.first - 1)   # tracebacks show the file's lines
        old = module.__dict__.get(name)
        exec(compile(tree, str(path), "exec"), module.__dict__)
        loaded[name] = module.__dict__[name]
        module.__dict__[name] = old
        replace_everywhere(module, name, loaded[name], root)
    return loaded


def replace_everywhere(module, name, new, root=ROOT):
    """module.name becomes `new`, and so does every project module's name for the old one."""
    old = getattr(module, name, None)
    setattr(module, name, new)
    for other in list(sys.modules.values()):
        if old is not None and str(getattr(other, "__file__", "") or "").startswith(
                str(Path(root).resolve())):
            for key, value in list(vars(other).items()):
                if value is old:
                    setattr(other, key, new)


def is_reference(root=ROOT):
    """The project's own repository, not a student's: build.py marks the student's."""
    return not is_student_repository(root)


def undefined_globals(function, namespace=None):
    """The global names a function reads that `namespace` (its own module's by default) does not
    define (a helper or an import that lives only in the notebook, say)."""
    names, codes = set(), [function.__code__]
    while codes:
        code = codes.pop()
        names |= {i.argval for i in dis.get_instructions(code)
                  if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        codes += [c for c in code.co_consts if hasattr(c, "co_code")]
    namespace = function.__globals__ if namespace is None else namespace
    return sorted(n for n in names if n not in namespace and not hasattr(builtins, n))


def answer(part_id, cell, user_ns, replace=False, root=ROOT):
    """What `%%answer` does with a cell; returns the line it prints."""
    part = parts.BY_ID[part_id]
    where = f"part {part.id}"
    try:
        code = compile(cell, f"<your turn {part.id}>", "exec")
    except SyntaxError as e:
        return (f"{where}: line {e.lineno}: {e.msg}. Nothing was saved or checked: fix the "
                "cell and run it again")
    try:
        exec(code, user_ns)
    except Exception as e:  # the student's top-level code: one line, the notebook goes on
        return f"{where}: the cell raised {type(e).__name__}: {e}. Nothing was saved"
    # Markers pasted from a solved cell would make the saved file look like the reference's
    # (to plan.references and to anyone reading it): they go (after exec, so that an error's
    # line number is the cell's own).
    bare = regions.without_markers(cell)
    dropped, cell = bare != cell, bare
    defined = parts.definitions(cell)
    absent = [name for name in part.functions if name not in defined]
    if absent:
        return f"{where}: the cell must define {', '.join(absent)}. Nothing was saved"
    cell_lines = cell.splitlines(keepends=True)
    written = {name: "".join(cell_lines[first - 1:last]).rstrip("\n") + "\n"
               for name, (node, first, last) in defined.items()
               if name in part.functions and not parts.is_stub(node)}
    if is_reference(root):
        # The project's own files hold the reference answers: the cell's functions stand in
        # for them in this kernel only, and check() grades them here.
        if not written:
            return f"{where}: not started: write {', '.join(part.functions)} in the cell above"
        module = importlib.import_module(module_of(part))
        for name in written:
            replace_everywhere(module, name, user_ns[name], root)
        return (f"{where}: the project's own repository, whose files hold the reference answers: "
                f"your {', '.join(written)} is used and checked in this notebook only (in a "
                "student repository it is saved into its file)")
    try:
        # A function that reads a name its file does not define fails in the grader, which
        # reads the file alone. Refusing is simpler and safer than copying the notebook's
        # definitions into the file: a re-run would have to find and replace them, one could
        # shadow a name the file defines, and a value may come from the notebook's state.
        module = importlib.import_module(module_of(part))
        unknown = [f"{name} uses {', '.join(missing)}" for name in written
                   if (missing := undefined_globals(user_ns[name], vars(module)))]
        if unknown:
            return (f"{where}: {'; '.join(unknown)}, which {part.file} does not define: put it "
                    "inside the function (the grader reads the file alone). Nothing was saved")
        outcome = save(part, written, replace, root) if written else {}
        loaded = load_from_file(part, part.functions, root)
    except KeyError as e:
        return (f"{where}: {part.file} has no function {e.args[0]} any more: put its stub "
                f"back (git checkout {part.file} brings back the whole file). Nothing was saved")
    except SyntaxError as e:
        return (f"{where}: {part.file} does not compile (line {e.lineno}: {e.msg}), with this "
                "cell or as it is on the disk. Nothing was saved: fix the file")
    user_ns.update(loaded)
    lines = []
    done = [name for name, how in outcome.items() if how in ("saved", "unchanged")]
    if done:
        lines.append(f"{where}: saved {', '.join(done)} into {part.file} (the check below and "
                     "make check grade it there)")
        if dropped:
            lines.append(f"{where}: left the cell's {regions.BEGIN} / {regions.END} lines out "
                         "of it (a student's file holds none)")
    kept = [name for name, how in outcome.items() if how == "kept the file's"]
    if kept:
        lines.append(f"{where}: {part.file}'s {', '.join(kept)} was changed in the file since "
                     "a notebook saved it: kept the file's, which the notebook now uses; to "
                     f"save this cell's over it, start the cell with %%answer {part.id} --replace")
    blank = [name for name in part.functions if name not in written]
    from_file = [name for name in blank if not parts.is_stub(parts.definitions(
        Path(root, part.file).read_text())[name][0])]
    if from_file:
        lines.append(f"{where}: blank here; using your {', '.join(from_file)} from {part.file}")
    if len(from_file) < len(blank):
        lines.append(f"{where}: not started: write "
                     f"{', '.join(n for n in blank if n not in from_file)} in the cell above, "
                     "then run it again")
    return "\n".join(lines)


def within(seconds, run):
    """run() with a time limit (the main thread's alarm clock, as a notebook's cells run): the
    check's own wire.Timeout, which a check passes on, as it does a worker's."""
    def alarm(signum, frame):
        raise wire.Timeout
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return run()
    except wire.Timeout:
        return {"status": "timeout", "message": f"did not finish within {seconds} s (an endless "
                "loop? a round that adds no token?)"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check(part_id, root=ROOT):
    """Run the public checks of a part on its saved file, as `make check` does, and print the
    table (nothing is returned, so that a notebook shows the table alone). In the project's own
    repository the checks run here, on the notebook's functions (its files hold the reference),
    each within KERNEL_TIMEOUT. A part whose check ran out of time stands aside in
    this kernel until its cell runs again (Stalled), as does one whose check failed."""
    from IPython import get_ipython
    part, notebook = parts.BY_ID[part_id], get_ipython().user_ns if get_ipython() else {}
    if is_reference(root):
        functions = {name: notebook[name] for p in parts.PARTS for name in p.functions
                     if callable(notebook.get(name))}
        results = []
        for c in plan.select(part=part_id):
            result = report.Result(c)
            context = checks.LocalContext(plan.PUBLIC_SEED, plan.fixtures(plan.PUBLIC_SEED),
                                          expected.source(), functions)
            result.outcomes[plan.PUBLIC_SEED] = within(KERNEL_TIMEOUT, lambda: checks.run_check(
                c, context))
            results.append(result)
    else:
        results = runner.run_checks(sandbox.probe(root, grading=False), {False: root, True: root},
                                    plan.select(part=part_id), [plan.PUBLIC_SEED])
    print(report.table(results).strip())
    timed_out = any(r.status == "timeout" for r in results)
    if timed_out or any(r.status in ("missing", "error", "crashed", "fail") for r in results):
        module = importlib.import_module(module_of(part))
        for name in part.functions:
            stand_in = parts.StandIn(part, name, timed_out)
            replace_everywhere(module, name, stand_in, root)
            if name in notebook:             # a cell that calls it by name skips too
                notebook[name] = stand_in
        print(f"part {part.id} {'did not finish' if timed_out else 'fails its check'}: until "
              "you fix it and run its cell again, the cells below that need it are skipped")


# Cells that need a part not written yet ------------------------------------------------------


def bound_names(tree):
    """The names a cell binds at its top level (not those inside its functions and classes)."""
    names, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                             ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        todo += list(ast.iter_child_nodes(node))
    return names


def skipped(error, names, namespace):
    """Called when a guarded cell raised: True (after one line) when it waited for a part. The
    names the cell binds are then taken out of the notebook's namespace, half made as they may
    be, so that a later cell that needs one is skipped too (one line), not misled."""
    part = parts.waiting_for(error)
    if part is not None:
        state = ("not written yet: write" if not isinstance(error, parts.Stalled) else
                 "whose check did not finish (an endless loop?): fix" if error.timed_out else
                 "whose check fails (its table above says why): fix")
        print(f"skipped: this cell needs part {part.id} ({', '.join(part.functions)}), {state} "
              f"it in {parts.place(part)}")
    elif isinstance(error, NameError) and getattr(error, "name", None) in _state["skipped"]:
        part = _state["skipped"][error.name]
        print(f"skipped: this cell needs {error.name}, which a cell above could not make "
              f"without part {part.id}")
    else:
        return False
    for name in names:
        _state["skipped"][name] = part
        namespace.pop(name, None)
    return True


def ran(names):
    for name in names:
        _state["skipped"].pop(name, None)


class Claim(AssertionError):
    """A notebook's own claim that does not hold: Jupyter shows its one line, no traceback (the
    cell still fails, so that Run All stops there)."""

    def _render_traceback_(self):
        return [f"claim does not hold: {self}"]


def measured(test, values):
    """An assert's message: the claim and the values it was measured with."""
    shown = []
    for source, value in values:
        text = f"{value:.4g}" if isinstance(value, float) else repr(value)
        shown.append(f"{source} = {text if len(text) < 80 else text[:77] + '...'}")
    return f"{test}, measured: {'; '.join(shown)}" if shown else test


def watched(test):
    """The names, attributes and subscripts a claim reads (not what it calls), outermost
    first, each once."""
    found, todo = {}, [test]
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Call):
            todo += node.args + [k.value for k in node.keywords]
            if isinstance(node.func, ast.Attribute):
                todo.append(node.func.value)
            continue
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and \
                not (isinstance(node, ast.Name) and hasattr(builtins, node.id)):
            found.setdefault(ast.unparse(node), node)
            if isinstance(node, ast.Subscript):
                todo.append(node.slice)
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.append(node.generators[0].iter)   # read where the claim is; the rest inside
            continue
        if isinstance(node, ast.Lambda):
            continue
        todo += list(ast.iter_child_nodes(node))
    return found


class Guard(ast.NodeTransformer):
    """Wraps a cell so that a call of a part not written yet ends it with one line: the body
    runs in `try:`, its last expression's value is shown after it, as IPython would. And an
    `assert` without a message gets one: the claim and the values it read (evaluated only when
    it fails), so that a claim that does not hold for these models says what was measured, in
    one line (Claim), with no traceback."""

    def visit_Assert(self, node):
        if node.msg is None:
            values = ast.List([ast.Tuple([ast.Constant(source), copy.deepcopy(expression)],
                                         ast.Load())
                               for source, expression in watched(node.test).items()], ast.Load())
            node.msg = ast.Call(ast.Attribute(ast.Name("_yourturn", ast.Load()), "measured",
                                              ast.Load()),
                                [ast.Constant(ast.unparse(node.test)), values], [])
        claim = ast.Call(ast.Attribute(ast.Name("_yourturn", ast.Load()), "Claim", ast.Load()),
                         [node.msg], [])
        return ast.copy_location(ast.If(test=ast.UnaryOp(ast.Not(), node.test),
                                        body=[ast.Raise(exc=claim)], orelse=[]), node)

    def visit_Module(self, tree):
        if not tree.body:
            return tree
        self.generic_visit(tree)
        names = sorted(bound_names(tree))
        body, shown = list(tree.body), []
        if isinstance(body[-1], ast.Expr):
            body[-1] = ast.Assign(targets=[ast.Name("_yourturn_value", ast.Store())],
                                  value=body[-1].value)
            shown = [ast.Expr(ast.Name("_yourturn_value", ast.Load()))]
        names_list = ast.List([ast.Constant(n) for n in names], ast.Load())
        call = lambda f, *args: ast.Expr(ast.Call(ast.Attribute(  # noqa: E731
            ast.Name("_yourturn", ast.Load()), f, ast.Load()), list(args), []))
        handler = ast.ExceptHandler(
            type=ast.Name("Exception", ast.Load()), name="_yourturn_error",
            body=[ast.If(test=ast.UnaryOp(ast.Not(), ast.Call(ast.Attribute(
                ast.Name("_yourturn", ast.Load()), "skipped", ast.Load()),
                [ast.Name("_yourturn_error", ast.Load()), names_list,
                 ast.Call(ast.Name("globals", ast.Load()), [], [])], [])),
                body=[ast.Raise()], orelse=[])])
        guarded = [ast.Assign(targets=[ast.Name("_yourturn_value", ast.Store())],
                              value=ast.Constant(None)),
                   ast.Try(body=body + [call("ran", names_list)], handlers=[handler], orelse=[],
                           finalbody=[])] + shown
        return ast.fix_missing_locations(ast.Module(body=guarded, type_ignores=[]))


def load_ipython_extension(ipython):
    """`%load_ext classroom.yourturn`: the %%answer magic and the guard on every cell."""
    def answer_magic(line, cell):
        words = line.split()
        if not words or words[0] not in parts.BY_ID:
            print(f"%%answer needs a part: one of {', '.join(parts.BY_ID)}")
            return
        print(answer(words[0], cell, ipython.user_ns, replace="--replace" in words[1:]))

    ipython.register_magic_function(answer_magic, "cell", "answer")
    ipython.user_ns["_yourturn"] = sys.modules[__name__]
    if not any(isinstance(t, Guard) for t in ipython.ast_transformers):
        ipython.ast_transformers.append(Guard())
