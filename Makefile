# The commands of the README:  `make demo`,  `make test`  and  `make course`.
# Both create .venv on first use (Python >= 3.10 and pip are all that is needed).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# PyTorch is installed first and on its own; pin another build with e.g. `make TORCH=torch==2.6.0 test`.
TORCH ?= torch==2.13.0
export HYPOTHESIS_PROFILE ?= ci

.PHONY: setup demo test course bench clean

setup: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[test,bench,tutorial]"
	touch $@

demo: setup
	$(PY) -m minibass demo

test: setup
	$(PY) -m pytest -q

course: setup   # the learner notebooks (exercise solutions replaced by stubs), opened in JupyterLab
	$(PY) -m minibass.course build tutorial/notebooks
	$(VENV)/bin/jupyter lab tutorial/notebooks

bench: setup   # all four benchmarks; each writes JSON and a plot to bench_results/
	$(PY) -m minibass.bench decode
	$(PY) -m minibass.bench attention
	$(PY) -m minibass.bench speculative
	$(PY) -m minibass.bench peers

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
