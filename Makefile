# The README's two commands: `make lesson` (everything, from nothing) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
N      ?=

.PHONY: setup lesson train exercise check notebooks notebooks-solved notebooks-check benchmark gpu-check test clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)      ## a virtual environment in .venv with everything installed

lesson: setup        ## corpora, models (cached), all five exercises, results/report.md
	$(PY) -m exercises

train: setup         ## only the models (python train.py -h for the flags)
	$(PY) train.py

exercise: setup      ## one exercise: make exercise N=3
	$(PY) -m exercises --only $(or $(N),1)

check: setup         ## the assignments' checks: make check N=3 (all exercises without N)
	$(PY) -m classroom check $(or $(N),all)

notebooks: setup     ## your own notebooks, blank your-turn cells, in my-notebooks/ (never overwritten); opens Jupyter Lab
	$(PY) -m classroom notebooks
	$(VENV)/bin/jupyter lab my-notebooks/

notebooks-solved: setup  ## the solved notebooks, in solved-notebooks/
	$(PY) -m classroom notebooks --solved

notebooks-check: setup  ## run the six solved notebooks on the trained models: each one's time; fails on any error
	$(PY) -m classroom notebooks --check

benchmark: setup     ## plain vs speculative decoding, every setup (a few minutes)
	$(PY) -m beyond.benchmark

gpu-check: setup     ## on a machine with a GPU: exercise 5 there (a GPU-sized pair, CUDA events, batched decoding), into results/gpu (about 5 minutes)
	$(PY) -m exercises.ex5_gpu --device cuda --results results/gpu

test: setup          ## the test suite: offline, tiny models, about three minutes on 2 cores
	$(PY) -m pytest

clean:               ## generated corpora, checkpoints and results (keeps .venv)
	rm -rf data/*.txt data/meta.json data/cache checkpoints results
