# Everything a fresh machine needs: `make run` trains the embedded default, `make test` runs the CPU suite.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint format clean

install: $(STAMP)

# torch==2.13.0 is listed in pyproject's dependencies, so it is resolved in the same pip command as the
# rest (installed alone, a dependency would pull a multi-GB CUDA build instead of the local CPU wheel).
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

run: install
	$(PY) -m verl_lite.main_ppo $(ARGS)

test: install
	$(PY) -m pytest -q tests $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check verl_lite tests scripts
	$(PY) -m ruff format --check verl_lite tests scripts

format: install
	$(PY) -m ruff format verl_lite tests scripts
	$(PY) -m ruff check --fix verl_lite tests scripts

clean:
	rm -rf $(VENV) outputs multirun checkpoints
