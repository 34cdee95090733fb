# The two commands a newcomer needs: `make demo` and `make test`. Both run `make setup` first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup envs demo test test-unit clean

setup: $(VENV)/.installed envs

# The orchestrator's environment: no jax, no torch. Rebuilt when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# Each framework's own environment, reused while its pinned requirements are unchanged.
envs: $(VENV)/.installed
	$(PY) main.py envs

# The main job on the local executor: both frameworks train the MLP on scikit-learn's digits, then collect.
demo: setup
	$(PY) main.py --benchmark digits --use-case 1 --executor local --results-dir results/demo
	$(PY) main.py collect --results-dir results/demo

test: setup
	$(PY) -m pytest

test-unit: $(VENV)/.installed
	$(PY) -m pytest tests/unit

clean:
	rm -rf results/demo slurm_scripts/*.sh
