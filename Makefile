# Two commands do all set-up on a fresh machine: `make train` and `make test`.
# Both install what they need first (Debian GL libraries, .venv, pinned packages).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export MUJOCO_GL ?= egl

.PHONY: install train sweep eval test test-fast test-compile bench-collector bench-learner bench-learning bench-suite bench-replay bench-soak gpu-wheels gpu-check clean

install: $(STAMP)

$(STAMP): requirements.lock scripts/install_system_deps.sh
	bash scripts/install_system_deps.sh
	python3 -m venv $(VENV)
	# torch first, pinned: the CPU wheel on disk; an unpinned torch pulls a multi-GB CUDA build
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements.lock
	# on an AMD CPU with AVX-512: builds MKL's shim (patches/mkl_amd.py) now, not on a run's first import
	$(PY) -c 'from dreamer.runtime import setup; print(setup() or "MKL: nothing to do on this CPU")'
	touch $(STAMP)

train: install
	@preset=$$($(PY) -c 'import torch; print("" if torch.cuda.is_available() else "experiment=learn_cartpole")'); \
	echo "+ python train.py $$preset $(ARGS)"; \
	$(PY) train.py $$preset $(ARGS)

# A short chunk-size sweep on the CPU preset (a few minutes on 2 cores); the summary table prints last.
sweep: install
	$(PY) train.py -m experiment=quick collector.transition_chunk_size=1,16,64 collector.total_frames=2000 \
		logger.every=100 eval.every=2000 eval.video=false checkpoint.every=0 $(ARGS)

# Evaluate a checkpoint: make eval CKPT=outputs/.../checkpoints [ARGS="eval.episodes=10"]
eval: install
	$(PY) -m dreamer.evaluate checkpoint=$(CKPT) $(ARGS)

# Two pytest workers (pytest-xdist; docs/testing.md has the times): one test's train.py seldom keeps
# both cores busy. Each test file stays on one worker, so its module fixtures run once.
# PYTEST_ARGS="-n 0" runs the tests in one process.
XDIST := -n 2 --dist loadfile

test: install
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest $(XDIST) -m "not slow and not compile" $(PYTEST_ARGS)

test-compile: install   # torch.compile on CPU: ~10 minutes, not part of make test
	$(PY) -m pytest -m compile tests/test_agent.py

bench-collector: install
	$(PY) -m benchmarks.collector $(ARGS)

# scripts/official_venv.sh makes $(OFFICIAL); with it, bench-learner times the official learner too
OFFICIAL ?= /tmp/official
bench-learner: install   # CPU paths (eager vs regional, cold/warm cache; the official's), then replay sampling and the learner
	$(PY) -m benchmarks.cpu_learner $$([ -x $(OFFICIAL)/venv/bin/python ] && echo --official $(OFFICIAL)/venv/bin/python)
	$(PY) -m benchmarks.learner $(ARGS)

bench-learning: install   # 3 seeds side by side: 41 min on 2 cores (measured; 48-53 before MKL's AVX-512 fix)
	$(PY) -m benchmarks.learning --parallel 3 $(ARGS)

bench-suite: install      # experiment=cpu on 7 tasks x 3 seeds, 2 runs at a time, one per core (README, Results)
	$(PY) -m benchmarks.suite $(ARGS)

bench-replay: install     # replay in RAM vs on disk: sampling, checkpoint cost vs replay size, RSS
	$(PY) -m benchmarks.replay $(ARGS)

bench-soak: install       # 20 min of training, memory and processes sampled every 30 s
	$(PY) -m benchmarks.soak $(ARGS)

# The one-shot device check (scripts/gpu_check.sh): on a GPU machine, under 8 minutes, results in
# $$OUT or outputs/gpu_check. ARGS=--dry-run rehearses every step on this CPU with tiny sizes.
gpu-check: $(if $(findstring --dry-run,$(ARGS)),install)
	bash scripts/gpu_check.sh $(ARGS)

# What the device machine lacks (cp312 wheels of requirements-gpu.lock, GL .debs) into .whl/ and .gl/
gpu-wheels: install
	bash scripts/gpu_wheels.sh

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
