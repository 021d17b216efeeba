# The commands of the README: `make demo`, `make test`, `make course`, `make docs` / `make docs-serve`.
# Each creates .venv on first use (Python >= 3.10 and pip are all that is needed).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# PyTorch is installed first and on its own when .venv is set up (on first use, and again whenever pyproject.toml
# changes); pin another build in a new .venv with e.g. `rm -rf .venv && make TORCH=torch==2.11.0 test` (on Linux,
# a torch whose wheels accept Triton >= 3.6).
TORCH ?= torch==2.13.0
# pytest-xdist workers for `make test`: auto = one per core; set a number where a container's CPU limit
# is below the host's core count, 0 for one process.
WORKERS ?= auto
export HYPOTHESIS_PROFILE ?= ci
export NO_MKDOCS_2_WARNING ?= 1

.PHONY: setup demo test course docs docs-serve bench clean

setup: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[test,bench,tutorial,docs]"
	touch $@

demo: setup
	$(PY) -m minibass demo

test: setup   # in parallel, one pytest-xdist worker per core; `make test WORKERS=0` runs it in one process
	$(PY) -m pytest -q -n $(WORKERS)

course: setup   # the learner notebooks (exercise solutions replaced by stubs), opened in JupyterLab
	$(PY) -m minibass.course build tutorial/notebooks
	$(VENV)/bin/jupyter lab tutorial/notebooks

docs: setup   # the site into site/, --strict: a broken link, a missing page or an unresolved API name fails
	MINIBASS_COURSE_FAST=1 MPLBACKEND=Agg $(PY) -m minibass.course execute
	$(PY) -m mkdocs build --strict

docs-serve: docs
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

bench: setup   # all five benchmarks; each writes JSON to bench_results/, all but decode a plot too
	$(PY) -m minibass.bench decode
	$(PY) -m minibass.bench attention
	$(PY) -m minibass.bench speculative
	$(PY) -m minibass.bench peers
	$(PY) -m minibass.bench policies

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site build docs/course/*.ipynb docs/bench tutorial/notebooks
