# The two commands a newcomer needs: `make demo` and `make test`. Both run `make setup` first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup envs demo test test-unit bench clean

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

# The orchestrator's own speed (issue 8), printed as one table. The submission rows need a Slurm cluster: the
# one in SLURM_CONF, else the local one (`scripts/local_slurm.sh up` is idempotent); without one they say so.
# Every job it submits is held and cancelled at once. Options: make bench BENCH_ARGS="--repeats 3 --only planning"
bench: $(VENV)/.installed
	@conf="$${SLURM_CONF:-$$(bash scripts/local_slurm.sh up 2>/dev/null | sed -n 's/^export SLURM_CONF=//p')}"; \
	if [ -n "$$conf" ]; then export SLURM_CONF="$$conf"; fi; \
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf results/demo slurm_scripts/*.sh
