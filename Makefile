# The README's two commands: `make lesson` (set-up, models, the five exercises) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
N      ?=

# `make exercise N=9`, `make check N=x`: one line saying what N may be, before any set-up. The
# scripts are part one's five exercises; the checks grade part two's too.
# make check also takes a notebook's two digits: N=07 checks the parts notebook 07 asks for.
SCRIPTS   := 1 2 3 4 5
EXERCISES := $(SCRIPTS) 6 7 8
NOTEBOOK_NUMBERS := 01 02 03 04 05 06 07 08 09
ifneq ($(filter exercise check,$(MAKECMDGOALS)),)
ALLOWED := $(if $(filter check,$(MAKECMDGOALS)),$(EXERCISES) all,$(SCRIPTS))
ifneq ($(filter-out $(ALLOWED) $(if $(filter check,$(MAKECMDGOALS)),$(NOTEBOOK_NUMBERS)),$(N))$(word 2,$(N)),)
$(error no exercise N=$(N): N is one of $(firstword $(ALLOWED)) to $(lastword $(filter-out all,$(ALLOWED))), e.g. make $(firstword $(filter exercise check,$(MAKECMDGOALS))) N=3$(if $(filter check,$(MAKECMDGOALS)),; or a notebook's two digits: N=07))
endif
endif

.PHONY: setup lesson studies train exercise check notebooks notebooks-solved notebooks-check benchmark docs gpu-check test test-fast clean

# The lesson's own dependencies only. Without compiling every installed file (pip's default:
# most of torch's, never imported here), then importing what the lesson imports, which compiles
# just that: the set-up then takes a fraction of pip's default time. (A first optimizer imports
# torch._dynamo, 800 modules: compiled here, not in every process that trains.)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e .
	PYTHONDONTWRITEBYTECODE= $(PY) -c "$$WARM_UP"
	touch $(STAMP)

export WARM_UP := import io, torch, tqdm, nbformat, matplotlib; matplotlib.use("Agg"); \
	import matplotlib.pyplot as plt; plt.figure().savefig(io.BytesIO()); \
	torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])

# An extra of pyproject.toml (test, notebooks, hf) on top, once: the targets that need it.
$(VENV)/.installed-%: $(STAMP)
	$(PY) -m pip install --quiet -e '.[$*]'
	touch $@

setup: $(STAMP)      ## a virtual environment in .venv with what the lesson needs

lesson: setup        ## corpora, every model the exercises and notebooks use (cached), then the five exercises (one line for each still to do), results/report.md
	$(PY) -m exercises

studies: setup $(VENV)/.installed-hf  ## past the lesson: every drafter, transformers, sampling's price list, the batch curve, token trees (python -m studies -h)
	$(PY) -m studies

train: setup         ## only the models (python train.py -h for the flags)
	$(PY) train.py

exercise: setup      ## one exercise: make exercise N=3
	$(PY) -m exercises --only $(or $(N),1)

check: setup         ## the assignments' checks: make check N=3 (an exercise), N=07 (a notebook's parts; all without N)
	$(PY) -m classroom check $(or $(N),all)

notebooks: setup $(VENV)/.installed-notebooks  ## your own notebooks, blank your-turn cells, in my-notebooks/ (never overwritten); opens Jupyter Lab
	$(PY) -m classroom notebooks
	$(VENV)/bin/jupyter lab my-notebooks/

notebooks-solved: setup  ## the solved notebooks, in solved-notebooks/
	$(PY) -m classroom notebooks --solved

notebooks-check: setup $(VENV)/.installed-notebooks  ## the solved notebooks on the trained models, then the student's walk (their own notebooks filled in order, then make check); CHECKPOINTS=DIR for other models
	$(PY) -m classroom notebooks --check $(if $(CHECKPOINTS),--checkpoints $(CHECKPOINTS))
	$(PY) -m classroom notebooks --walk $(if $(CHECKPOINTS),--checkpoints $(CHECKPOINTS))

benchmark: setup     ## plain vs speculative decoding, every setup (a few minutes)
	$(PY) -m harness.benchmark

docs: setup          ## docs/RESULTS.md, assembled from its sections in docs/results/ (TAKE=results: first the lesson's and studies' sections of your full runs)
	$(PY) -m harness.report $(if $(TAKE),--take $(TAKE))

gpu-check: setup     ## on a machine with a GPU: exercise 5 there (a GPU-sized pair, CUDA events, batched decoding), into results/gpu (minutes: it trains a GPU-sized pair first)
	$(PY) -m exercises.ex5_gpu --device cuda --results results/gpu

test: setup $(VENV)/.installed-test  ## the test suite: offline, tiny models (its time: docs/RESULTS.md)
	$(PY) -m pytest

test-fast: setup $(VENV)/.installed-test  ## the unit tests alone, for a change in progress (make test is the whole suite)
	$(PY) -m pytest -m "not slow"

clean:               ## generated corpora, checkpoints and results (keeps .venv)
	rm -rf data/*.txt data/meta.json data/cache checkpoints results
