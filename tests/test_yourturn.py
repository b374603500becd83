"""The notebooks' your-turn cells (classroom/yourturn.py): a cell saves its functions into the
graded file, never over a function changed there by hand, never as a file that does not compile;
the kernel then uses the file's function everywhere; a cell that needs a part not written yet
ends in one line, and so does a later cell that needs what it would have made, while every
other error stays an error."""

import importlib.util
import sys
import types

import pytest
from IPython.core.interactiveshell import InteractiveShell

from classroom import parts, regions, yourturn

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


@pytest.fixture
def student(tmp_path):
    (tmp_path / PART.file).write_text(STUB)
    return tmp_path


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


def test_the_reference_repository_is_never_written(student):
    path = student / PART.file
    path.write_text(STUB.replace(f"    raise NotImplementedError({parts.message('greedy_verdict')!r})",
                                 f"    {regions.BEGIN}\n    return 0, 0\n    {regions.END}"))
    before = path.read_text()
    assert yourturn.save(PART, {"greedy_verdict": ANSWER}, root=student) == \
        {"greedy_verdict": "reference"}
    assert path.read_text() == before


def test_stubs_are_told_from_answers_wherever_the_region_was():
    solved = yourturn.definitions(ANSWER)["greedy_verdict"][0]
    graded = yourturn.definitions(STUB)["greedy_verdict"][0]
    midway = yourturn.definitions(
        "def f(x):\n    y = x + 1\n    raise NotImplementedError('not started: write f (see its "
        "docstring)')\n    return y\n")["f"][0]
    own = yourturn.definitions("def f(x):\n    raise NotImplementedError('no negative x')\n")["f"][0]
    assert yourturn.is_stub(graded) and yourturn.is_stub(midway)
    assert not yourturn.is_stub(solved) and not yourturn.is_stub(own)


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
    blank = yourturn.definitions(STUB)
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


def test_a_helper_that_lives_only_in_the_notebook_is_named(student, kernel_modules):
    cell = "def helper(x):\n    return x\n\n\n" + ANSWER.replace("kept = 0", "kept = helper(0)")
    said = yourturn.answer("1a", cell, {}, root=student)
    assert "greedy_verdict uses helper, which numpy_speculative.py does not define" in said


@pytest.fixture
def shell():
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
    holders = [(m, k) for m in list(sys.modules.values()) for k, v in list(vars(m).items())
               if v is original and str(getattr(m, "__file__", "")).startswith(str(yourturn.ROOT))]
    yield
    for module, key in holders:
        setattr(module, key, original)


def test_a_part_that_never_finishes_costs_its_check_and_then_stands_aside(shell, capsys,
                                                                        monkeypatch, restored):
    monkeypatch.setattr(yourturn.runner, "TIMEOUT", 1)
    shell.run_cell("def expected_tokens_per_pass(alpha, k):\n    while True:\n        pass")
    assert shell.run_cell('_yourturn.check("2a")').success              # one second, not ever
    out = capsys.readouterr().out
    assert "TIMEOUT" in out and "part 2a did not finish" in out, out
    assert shell.run_cell("import speculative\nspeculative.expected_speedup(0.8, 4, 0.1)").success
    assert "needs part 2a (expected_tokens_per_pass), whose check did not finish" in \
        capsys.readouterr().out


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
