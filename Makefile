# The two commands a newcomer needs: `make demo` and `make test`. Both run `make setup` first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup envs locks demo test test-fast test-unit test-avx2 test-heavy bench mutation gpu-wheels clean

setup: $(VENV)/.installed envs

# uv builds every environment from its lock file; it comes from PyPI, pinned, into the orchestrator's environment.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# The orchestrator's environment: no jax, no torch; exactly the packages of requirements-orchestrator.lock (uv
# removes the rest, pip included), compiled to bytecode (see orchestrator/run/envs.py, RECIPE), then this project
# without dependencies. Rebuilt when the lock changes; a lock
# that no longer matches pyproject.toml is refused with the command that regenerates it.
$(VENV)/.installed: pyproject.toml requirements-orchestrator.lock | $(UV)
	$(PY) -m orchestrator.run.locks check requirements-orchestrator.lock
	$(UV) pip sync --quiet --require-hashes --compile-bytecode --python $(PY) requirements-orchestrator.lock
	$(UV) pip install --quiet --no-deps --python $(PY) -e .
	touch $@

# Regenerate every lock file from its requirements (pyproject.toml, jax_backend/requirements-*.txt,
# torch_backend/requirements.txt) after changing a pin; commit the locks with it.
locks: | $(UV)
	$(PY) -m orchestrator.run.locks write $(UV)

# Each framework's own environment from its lock (or the profile's site interpreter), reused while the lock is unchanged.
envs: $(VENV)/.installed
	$(PY) main.py envs

# The main job on the local executor: both frameworks train the MLP on scikit-learn's digits, then collect.
# Into a results folder of its own beside results/, so that the demo's rows never join a collect of results/.
DEMO_RESULTS := demo-results
demo: setup
	$(PY) main.py --benchmark digits --use-case 1 --executor local --results-dir $(DEMO_RESULTS)
	$(PY) main.py collect --results-dir $(DEMO_RESULTS)

# Our own modules are compiled to bytecode first: where PYTHONDONTWRITEBYTECODE is set (CI machines), every
# process would compile them from source again. Three pytest workers share the two cores: the integration tests
# wait on the local cluster's two one-CPU nodes, and a third worker's tests fill the cores meanwhile (here: 29.5 min
# from a fresh clone with three, 9% idle; 30.8 with two in a working copy, whose setup takes seconds). A file's tests
# run on one worker (--dist loadfile) so that its probes run once; then the tests marked serial, alone. Both halves
# share one local cluster, taken down at the end if this run brought it up, and one JAX compilation cache, removed
# at the end (tests/cluster_run.py). Exit 1 when either half failed. The whole run's time, setup included, is
# recorded for `make bench` (bench/suite_budget.py: at most 30 minutes on Intel Xeon, 45 on AMD EPYC).
PYTEST_WORKERS ?= 3
test:
	@start=$$(date +%s); export JAXTORCH_TEST_RUN="make-test-$$$$"; rc=0; \
	$(MAKE) --no-print-directory setup || exit 1; \
	$(PY) -m compileall -q -j 0 orchestrator bench_contract jax_backend torch_backend tests >/dev/null || rc=1; \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not serial" $(PYTEST_ARGS) || rc=1; \
	$(PY) -m pytest -m serial $(PYTEST_ARGS) || rc=1; \
	$(PY) tests/cluster_run.py end || rc=1; \
	$(PY) -m bench.suite_budget record $$start $$rc; \
	exit $$rc

# The tests marked heavy (pytest -m heavy): a full-size model for many minutes of both cores, left out of
# `make test` (tests/helpers.py, leave_out_heavy_unless_asked). Today: GPT-2 small's sharded peak memory on the
# local cluster, about 15 min.
test-heavy: $(VENV)/.installed
	@$(MAKE) --no-print-directory setup
	$(PY) -m pytest -m heavy $(PYTEST_ARGS)

# The packages a GPU machine's Python 3.12 lacks, as wheels in .whl/ to copy there with the tree
# (scripts/gpu_common.sh installs them): the versions that ran on the H200 (docs/records/2026-11-26-h200-gpu-check.md).
GPU_WHEELS = opacus==1.6.0 dp-accounting==0.6.0 dm-tree==0.1.10 submitit==1.5.4
gpu-wheels:
	python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d .whl $(GPU_WHEELS)

# The loop for every edit: the unit tests that start no process (tests/conftest.py marks them `fast` and fails one
# that starts a process all the same), within 3 minutes on 2 cores.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -n $(PYTEST_WORKERS) -m fast tests/unit $(PYTEST_ARGS)

test-unit: $(VENV)/.installed
	$(PY) -m pytest tests/unit

# The numeric tests (tests/backends) with every CPU kernel library held to AVX2: oneDNN, MKL, ATen's own kernels
# and XLA pick the code an AVX2-only CPU runs (Intel before Skylake-SP, AMD before Zen 4), not this machine's
# AVX-512 code, so that a tolerance tuned to one CPU's kernels fails here rather than on someone else's machine.
# A fresh Inductor cache: Inductor's on-disk cache does not key on ATEN_CPU_CAPABILITY, and reused kernels compiled
# for AVX-512 gave wrong compiled steps (and SystemErrors) under the AVX2 setting.
test-avx2: $(VENV)/.installed
	@$(MAKE) --no-print-directory setup
	cache=$$(mktemp -d) && trap 'rm -rf "$$cache"' EXIT && TORCHINDUCTOR_CACHE_DIR=$$cache ATEN_CPU_CAPABILITY=avx2 \
	ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 XLA_FLAGS=--xla_cpu_max_isa=AVX2 \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile tests/backends $(PYTEST_ARGS)

# The orchestrator's own speed (issue 8), printed as one table. The submission rows need a Slurm cluster: the
# one in SLURM_CONF, else the local one (`scripts/local_slurm.sh up` is idempotent); without one they say so.
# Every job it submits is held and cancelled at once. Exit 1 when a suite crashed or a row failed. Options:
# make bench BENCH_ARGS="--repeats 3 --only planning"; BENCH_ARGS=--quick runs each suite at its smallest.
# After setup, as demo and test: the overhead and vectorisation probes run in the frameworks' environments.
bench: setup
	@conf="$${SLURM_CONF:-$$(bash scripts/local_slurm.sh up 2>/dev/null | sed -n 's/^export SLURM_CONF=//p')}"; \
	if [ -n "$$conf" ]; then export SLURM_CONF="$$conf"; fi; \
	$(PY) -m bench $(BENCH_ARGS)

# How many mutants of the comparability core the unit tests kill (issue 29: at least 85% of each module's), with
# mutmut in an environment of its own: the orchestrator's lock, mutmut pinned, and not this project installed, so
# that the tests import the mutated copies in mutants/ (scripts/mutation.py; the modules: pyproject.toml's
# [tool.mutmut]). It resumes where an earlier run stopped; `rm -rf mutants` starts afresh.
MUTMUT_VERSION := 3.8.1
MUTATION_VENV := .venv-mutation
$(MUTATION_VENV)/.installed: requirements-orchestrator.lock | $(UV)
	$(UV) venv --quiet --allow-existing --python $(PY) $(MUTATION_VENV)
	$(UV) pip sync --quiet --require-hashes --python $(MUTATION_VENV)/bin/python requirements-orchestrator.lock
	$(UV) pip install --quiet --python $(MUTATION_VENV)/bin/python mutmut==$(MUTMUT_VERSION)
	touch $@

# MODULES="orchestrator/results/verdict.py ...": only these of only_mutate (each of their mutants run again).
mutation: $(MUTATION_VENV)/.installed
	$(MUTATION_VENV)/bin/python scripts/mutation.py $(MODULES)

clean:
	rm -rf $(DEMO_RESULTS) slurm_scripts/*.sh
