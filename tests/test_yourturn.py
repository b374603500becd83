"""The notebooks' your-turn cells (classroom/yourturn.py): a cell saves its functions into the
graded file, never over a function changed there by hand, never as a file that does not compile;
the kernel then uses the file's function everywhere; a cell that needs a part not written yet
ends in one line, and so does a later cell that needs what it would have made, while every
other error stays an error. Whether a repository is a student's is told by the file `classroom
build` writes there, never by a file's content."""

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

from classroom import project, regions, yourturn
from lessonkit import parts

PART = parts.BY_ID["1a"]
STUB = f'''import math


def greedy_verdict(draft_tokens, target_choices):
    """The docstring."""
    raise NotImplementedError({parts.message("greedy_verdict")!r})


def replay(prompt, rounds):
    return list(prompt)
'''
ANSWER = '''def greedy_verdict(draft_tokens, target_choices):
    """The docstring."""
    kept = 0
    while kept < len(draft_tokens) and draft_tokens[kept] == target_choices[kept]:
        kept += 1
    return kept, target_choices[kept]
'''
OTHER = ANSWER.replace("kept = 0", "kept = 0  # a second try")
SOLVED = ANSWER.replace('docstring."""\n', f'docstring."""\n    {regions.BEGIN}\n') + \
    f"    {regions.END}\n"                                  # a solved notebook's cell


@pytest.fixture
def student(tmp_path):
    (tmp_path / PART.file).write_text(STUB)
    (tmp_path / project.STUDENT_MARK).write_text("")     # what build.py marks a student's with
    return tmp_path


def by_content(root=yourturn.ROOT):
    """The old rule, for the controls: the reference's is the file that holds solution regions."""
    return bool(regions.regions((Path(root) / PART.file).read_text()))


def function_in(root, name="greedy_verdict"):
    lines = (root / PART.file).read_text().splitlines(keepends=True)
    return yourturn.FileFunction(lines, name)


def test_a_cell_replaces_the_stub_then_its_own_saves_but_not_a_hand_edit(student):
    assert yourturn.save(PART, {"greedy_verdict": ANSWER}, root=student) == \
        {"greedy_verdict": "saved"}
    saved = function_in(student)
    assert saved.text == ANSWER and saved.saved_here and not saved.stub
    assert "def replay(prompt, rounds):\n    return list(prompt)" in (student / PART.file).read_text()
    assert yourturn.save(PART, {"greedy_verdict": ANSWER}, root=student) == \
        {"greedy_verdict": "unchanged"}
    assert yourturn.save(PART, {"greedy_verdict": OTHER}, root=student) == \
        {"greedy_verdict": "saved"}                 # what a notebook saved may be saved over
    path = student / PART.file
    path.write_text(path.read_text().replace("# a second try", "# by hand, in an editor"))
    assert yourturn.save(PART, {"greedy_verdict": ANSWER}, root=student) == \
        {"greedy_verdict": "kept the file's"}
    assert "by hand, in an editor" in path.read_text()
    # Control: told to replace, the same call overwrites the hand edit, so the rule above is
    # what kept it.
    assert yourturn.save(PART, {"greedy_verdict": ANSWER}, replace=True, root=student) == \
        {"greedy_verdict": "saved"}
    assert "by hand" not in path.read_text()


def test_a_file_that_would_not_compile_is_never_written(student):
    broken = ANSWER.replace("    return kept", "  return kept")    # inconsistent indentation
    with pytest.raises(SyntaxError):
        yourturn.save(PART, {"greedy_verdict": broken}, root=student)
    assert (student / PART.file).read_text() == STUB


def test_the_mark_not_the_content_tells_the_reference_repository(student, tmp_path_factory,
                                                                  monkeypatch):
    reference = tmp_path_factory.mktemp("reference")      # no mark: never written, stub or not
    (reference / PART.file).write_text(STUB)
    assert yourturn.save(PART, {"greedy_verdict": ANSWER}, root=reference) == \
        {"greedy_verdict": "reference"}
    assert (reference / PART.file).read_text() == STUB
    # A student's file with solution markers in it (typed by hand) is still the student's.
    marked = STUB.replace("    return list(prompt)\n",
                          f"    {regions.BEGIN}\n    return list(prompt)\n    {regions.END}\n")
    (student / PART.file).write_text(marked)
    assert yourturn.save(PART, {"greedy_verdict": ANSWER}, root=student) == \
        {"greedy_verdict": "saved"}
    # Control: told by content, the same file would be taken for the reference's.
    (student / PART.file).write_text(marked)
    monkeypatch.setattr(yourturn, "is_reference", by_content)
    assert yourturn.save(PART, {"greedy_verdict": ANSWER}, root=student) == \
        {"greedy_verdict": "reference"}


@pytest.mark.slow  # the student repository, built and proven: shared with make test's walk
def test_build_marks_the_student_repository_and_only_it(student_build):
    tracked = subprocess.run(["git", "ls-files", project.STUDENT_MARK], cwd=student_build,
                             capture_output=True, text=True, check=True).stdout
    assert tracked.strip() == project.STUDENT_MARK                  # committed, so a clone has it
    assert not yourturn.is_reference(student_build)
    assert yourturn.is_reference() and not (yourturn.ROOT / project.STUDENT_MARK).exists()


def test_stubs_are_told_from_answers_wherever_the_region_was():
    solved = parts.definitions(ANSWER)["greedy_verdict"][0]
    graded = parts.definitions(STUB)["greedy_verdict"][0]
    midway = parts.definitions(
        "def f(x):\n    y = x + 1\n    raise NotImplementedError('not started: write f (see its "
        "docstring)')\n    return y\n")["f"][0]
    own = parts.definitions("def f(x):\n    raise NotImplementedError('no negative x')\n")["f"][0]
    assert parts.is_stub(graded) and parts.is_stub(midway)
    assert not parts.is_stub(solved) and not parts.is_stub(own)


def test_a_stub_names_the_check_by_the_number_its_student_sees():
    # Part one by its exercise (a script of its own); part two by its notebook's two digits:
    # `make check N=7` would check notebook 08's parts, not notebook 07's.
    said = {p.id: parts.message(p.functions[0]).split("make check N=")[1] for p in parts.PARTS}
    assert said["3a"] == "3" and said["5a"] == "5"
    assert (said["6a"], said["7b"], said["8b"]) == ("07", "08", "09")
    assert parts.check_number(parts.BY_ID["6b"], {}) == "6"    # no notebook cell: the exercise


@pytest.fixture
def kernel_modules(student, monkeypatch):
    """The graded module loaded from the student folder, and a project module that imported
    greedy_verdict by name (as speculative.py imports numpy_speculative's)."""
    spec = importlib.util.spec_from_file_location("numpy_speculative", student / PART.file)
    graded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graded)
    user = types.ModuleType("uses_it")
    user.__file__ = str(student / "uses_it.py")
    user.greedy_verdict = graded.greedy_verdict
    monkeypatch.setitem(sys.modules, "numpy_speculative", graded)
    monkeypatch.setitem(sys.modules, "uses_it", user)
    return graded, user


def test_an_answer_is_saved_and_used_everywhere_in_the_kernel(student, kernel_modules):
    graded, user = kernel_modules
    ns = {}
    said = yourturn.answer("1a", ANSWER, ns, root=student)
    assert said.startswith("part 1a: saved greedy_verdict into numpy_speculative.py"), said
    assert graded.greedy_verdict([1, 2], [1, 3, 0]) == (1, 3)
    assert user.greedy_verdict is graded.greedy_verdict is ns["greedy_verdict"]
    assert graded.greedy_verdict.__code__.co_filename == str(student / PART.file)


def test_a_blank_cell_uses_what_the_file_has(student, kernel_modules):
    graded, _ = kernel_modules
    yourturn.save(PART, {"greedy_verdict": ANSWER}, root=student)
    ns = {}
    blank = parts.definitions(STUB)
    first, last = blank["greedy_verdict"][1:]
    cell = "".join(STUB.splitlines(keepends=True)[first - 1:last])
    said = yourturn.answer("1a", cell, ns, root=student)
    assert "blank here; using your greedy_verdict from numpy_speculative.py" in said, said
    assert ns["greedy_verdict"]([5], [5, 6]) == (1, 6)
    assert function_in(student).text == ANSWER                          # nothing overwritten


@pytest.mark.parametrize("cell, said", [
    ("def greedy_verdict(a, b):\n    return (0, b[0]\n", "line 2"),
    ("raise ValueError('at the top of the cell')\n" + ANSWER, "raised ValueError"),
    ("def another(a, b):\n    return 0, b[0]\n", "must define greedy_verdict"),
])
def test_a_broken_cell_costs_one_line_and_saves_nothing(student, kernel_modules, cell, said):
    out = yourturn.answer("1a", cell, {}, root=student)
    assert said in out and "\n" not in out and "Nothing was saved" in out, out
    assert (student / PART.file).read_text() == STUB


def paste_solved_then_try_again(root):
    """A solved cell pasted as it is, markers and all, then a second try: what each cell said
    and the file after them."""
    first = yourturn.answer("1a", SOLVED, {}, root=root)
    second = yourturn.answer("1a", OTHER, {}, root=root)
    return first, second, (root / PART.file).read_text()


def test_a_pasted_solved_cell_is_saved_without_its_markers(student, kernel_modules, monkeypatch):
    first, second, text = paste_solved_then_try_again(student)
    assert first.splitlines()[1] == (f"part 1a: left the cell's {regions.BEGIN} / {regions.END} "
                                     "lines out of it (a student's file holds none)"), first
    assert regions.BEGIN not in text and regions.END not in text
    assert second.startswith("part 1a: saved greedy_verdict") and "# a second try" in text
    assert "left the cell's" not in second                      # said only when there were some
    # Control, the old way (markers kept, the repository told by content): the file gets the
    # BEGIN line alone (END is past the function's last statement), and the next cell fails
    # on it with a traceback.
    (student / PART.file).write_text(STUB)
    monkeypatch.setattr(regions, "without_markers", lambda text: text)
    monkeypatch.setattr(yourturn, "is_reference", by_content)
    with pytest.raises(regions.RegionError, match="never closed"):
        paste_solved_then_try_again(student)
    assert regions.BEGIN in (student / PART.file).read_text()


@pytest.mark.parametrize("name, cell", [
    ("helper", "def helper(x):\n    return x\n\n\n" +
     ANSWER.replace("kept = 0", "kept = helper(0)")),
    ("START", "START = 0\n" + ANSWER.replace("kept = 0", "kept = START")),
    ("operator", "import operator\n" + ANSWER.replace("kept = 0", "kept = operator.index(0)")),
], ids=["function", "constant", "import"])
def test_a_cell_whose_function_needs_the_notebook_saves_nothing(student, kernel_modules,
                                                                monkeypatch, name, cell):
    graded, _ = kernel_modules
    said = yourturn.answer("1a", cell, {}, root=student)
    assert said == (f"part 1a: greedy_verdict uses {name}, which numpy_speculative.py does not "
                    "define: put it inside the function (the grader reads the file alone). "
                    "Nothing was saved"), said
    assert (student / PART.file).read_text() == STUB
    # Control: without the refusal it is saved, and the graded file then fails on a NameError
    # (in the notebook's later cells and in make check alike).
    monkeypatch.setattr(yourturn, "undefined_globals", lambda *args: [])
    assert "saved greedy_verdict" in yourturn.answer("1a", cell, {}, root=student)
    with pytest.raises(NameError):
        graded.greedy_verdict([1], [1, 2])


def test_a_helper_inside_the_function_is_saved(student, kernel_modules):
    """Control for the refusal above: the same helper, where the grader finds it."""
    cell = ANSWER.replace("    kept = 0",
                          "    def helper(x):\n        return x\n    kept = helper(0)")
    said = yourturn.answer("1a", cell, {}, root=student)
    assert said.startswith("part 1a: saved greedy_verdict"), said


@pytest.fixture
def shell():
    # IPython imported here, not on top: pytest-xdist collects this file in each worker.
    from IPython.core.interactiveshell import InteractiveShell
    ipython = InteractiveShell.instance()
    yourturn.load_ipython_extension(ipython)
    ipython.user_ns["stub"] = stub
    yield ipython
    yourturn._state["skipped"].clear()


def stub():
    raise NotImplementedError(parts.message("expected_tokens_per_pass"))


def test_a_cell_that_needs_an_unwritten_part_ends_in_one_line(shell, capsys):
    result = shell.run_cell("before = 1\nvalue = stub()\nafter = 2\n")
    assert result.success and shell.user_ns.get("after") is None
    out = capsys.readouterr().out
    assert out.startswith("skipped: this cell needs part 2a (expected_tokens_per_pass)")
    assert "Your turn: expected characters per pass" in out and "02_the_numbers" in out
    # A later cell that needs what the skipped one would have made: one line too ...
    result = shell.run_cell("print(value + 1)")
    assert result.success
    assert "needs value, which a cell above could not make without part 2a" in \
        capsys.readouterr().out
    # ... until a cell makes it.
    shell.run_cell("value = 41")
    result = shell.run_cell("value + 1")
    assert result.success and result.result == 42       # the last expression is still shown


def test_every_other_error_stays_an_error(shell, capsys):
    """Control: the guard hides nothing but unwritten parts."""
    assert not shell.run_cell("1 / 0").success
    assert not shell.run_cell("print(never_defined)").success
    assert not shell.run_cell("raise NotImplementedError('a message of its own')").success


def test_a_claim_that_fails_says_what_was_measured(shell):
    shell.run_cell("agreement = {'draft': 0.61, 'names': 0.04}\nQUICK = False")
    result = shell.run_cell("assert agreement['draft'] > 0.7 and len(agreement) == 2 or QUICK")
    assert not result.success
    message = str(result.error_in_exec)
    assert message.startswith("agreement['draft'] > 0.7 and len(agreement) == 2 or QUICK")
    assert "agreement['draft'] = 0.61" in message and "QUICK = False" in message, message
    assert "len" not in message.split("measured:")[1]                    # calls are not shown
    result = shell.run_cell("assert 1 > 2, 'its own message'")
    assert str(result.error_in_exec) == "its own message"                 # kept as written


def test_what_a_skipped_cell_half_made_is_not_used(shell, capsys):
    shell.run_cell("runs = {}\nfor name in ['a', 'b']:\n    runs[name] = [stub()]")
    assert "runs" not in shell.user_ns                      # taken out, not left half made
    assert shell.run_cell("len(runs['a'])").success
    assert "needs runs" in capsys.readouterr().out


@pytest.fixture
def restored():
    """Every project module's name for speculative.expected_tokens_per_pass, put back after."""
    import speculative
    original = speculative.expected_tokens_per_pass
    ours = [m for m in list(sys.modules.values())      # (an entry may be None: notebooks.jupyter)
            if str(getattr(m, "__file__", "")).startswith(str(yourturn.ROOT))]
    holders = [(m, k) for m in ours for k, v in list(vars(m).items()) if v is original]
    yield
    for module, key in holders:
        setattr(module, key, original)


@pytest.mark.slow  # seconds: make test
def test_a_part_that_never_finishes_costs_its_check_and_then_stands_aside(shell, capsys,
                                                                        monkeypatch, restored):
    monkeypatch.setattr(yourturn, "KERNEL_TIMEOUT", 1)
    shell.run_cell("def expected_tokens_per_pass(alpha, k):\n    while True:\n        pass")
    assert shell.run_cell('_yourturn.check("2a")').success              # one second, not ever
    out = capsys.readouterr().out
    assert "TIMEOUT" in out and "part 2a did not finish" in out, out
    assert shell.run_cell("import speculative\nspeculative.expected_speedup(0.8, 4, 0.1)").success
    assert "needs part 2a (expected_tokens_per_pass), whose check did not finish" in \
        capsys.readouterr().out


def test_a_part_that_fails_its_check_stands_aside_until_its_cell_runs_again(shell, capsys,
                                                                          restored):
    """So that nothing trains on a wrong answer (a draft's loss, say): the cells that need the
    part skip in one line, whether they call it through a module or by the name its cell
    defined. Control: a part that passes stays."""
    import speculative
    right = speculative.expected_tokens_per_pass
    shell.run_cell("def expected_tokens_per_pass(alpha, k):\n    return k")      # wrong
    assert shell.run_cell('_yourturn.check("2a")').success
    assert "part 2a fails its check" in capsys.readouterr().out
    assert shell.run_cell("import speculative\nspeculative.expected_speedup(0.8, 4, 0.1)").success
    assert "needs part 2a (expected_tokens_per_pass), whose check fails" in \
        capsys.readouterr().out
    assert shell.run_cell("expected_tokens_per_pass(0.8, 4)").success     # by the cell's name
    assert "needs part 2a (expected_tokens_per_pass), whose check fails" in \
        capsys.readouterr().out
    shell.user_ns["expected_tokens_per_pass"] = right                      # the right one
    assert shell.run_cell('_yourturn.check("2a")').success
    assert "fails its check" not in capsys.readouterr().out


def test_a_claim_that_does_not_hold_is_one_line_and_stops_the_cell(shell):
    result = shell.run_cell("x = 3\nassert x > 4\ny = 1")
    assert not result.success and "y" not in shell.user_ns
    assert result.error_in_exec._render_traceback_() == [
        "claim does not hold: x > 4, measured: x = 3"]


def test_a_file_without_the_function_or_that_does_not_compile_costs_one_line(student,
                                                                             kernel_modules):
    path = student / PART.file
    path.write_text(STUB.replace("def greedy_verdict(", "def renamed("))
    said = yourturn.answer("1a", ANSWER, {}, root=student)
    assert "has no function greedy_verdict any more" in said and "\n" not in said, said
    path.write_text(STUB + "\ndef broken(:\n")
    said = yourturn.answer("1a", ANSWER, {}, root=student)
    assert "does not compile (line" in said and "\n" not in said, said
    assert path.read_text() == STUB + "\ndef broken(:\n"
