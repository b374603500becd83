# The two commands of the README: `make lesson` (everything, from nothing) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup lesson train test test-all exercise benchmark clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)                 ## the virtual environment with everything installed

lesson: setup                   ## corpora, the three models, a sample (cached after the first run)
	$(PY) train.py

train: setup
	$(PY) train.py

test: setup                     ## the test suite: offline, a few minutes on 2 cores
	$(PY) -m pytest

benchmark: setup                ## plain vs speculative decoding, tokens/s and speed-ups
	$(PY) benchmark.py

clean:                          ## generated data, checkpoints and results (not the venv)
	rm -rf data/*.txt data/meta.json data/cache checkpoints results
