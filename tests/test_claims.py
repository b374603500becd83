"""The notebooks' claims about the trained models (common.claim): asserted on them, as `make
notebooks-check` runs them; on the tiny models of `make test` they must still be True or False,
which the walk evaluates in every notebook. No notebook asserts `... or QUICK` instead."""

import re

import numpy as np
import pytest

from harness import common


@pytest.fixture(params=["trained", "quick"])
def models(request, monkeypatch):
    monkeypatch.setenv("SPECDEC_QUICK", "1" if request.param == "quick" else "")
    return request.param


def test_a_claim_that_holds_passes_on_any_models(models):
    common.claim(True, "holds")
    common.claim(np.float64(2.0) > 1, "a NumPy comparison holds too")


def test_a_claim_that_does_not_hold_fails_on_the_trained_models_alone(models):
    if models == "trained":
        with pytest.raises(AssertionError, match="the draft agrees more"):
            common.claim(False, "the draft agrees more")
    else:
        common.claim(False, "the tiny models' numbers mean little")


def test_a_busy_machine_excuses_a_claim_about_the_clock(models):
    common.claim(False, "faster by the clock", "note: the load average was 3.1")


@pytest.mark.parametrize("value", [np.array([True, False]), 0.7, None, "yes"],
                         ids=["array", "number", "none", "string"])
def test_a_claim_that_is_not_true_or_false_fails_on_any_models(models, value):
    # What make test can catch of a claim on the tiny models: one computed from the wrong thing.
    with pytest.raises(TypeError, match="not True or False"):
        common.claim(value, "ill-formed")


def test_no_notebook_excuses_an_assertion_on_the_tiny_models():
    sources = sorted((common.ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    assert sources
    excused = [f"{path.name}:{number}" for path in sources
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if re.search(r"\bor QUICK\b|\bQUICK or\b", line)]
    assert excused == []
