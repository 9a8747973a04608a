# Every target sets everything up first (scripts/env.sh: .venv from the hash-locked requirements/lock.txt).
PY := .venv/bin/python
PYTEST_ARGS ?=
# two xdist workers: this project's machine (and CI's) has 2 cores, and most tests run on one thread; worksteal: a
# worker that runs out of tests takes half of the other's queue (xdist's default `load` leaves each worker the tests
# it was sent, and the suite's longest runs come last in collection order)
WORKERS ?= 2
DIST ?= worksteal

.PHONY: env lock main test test-all test-durations bench
env:
	bash scripts/env.sh

# Regenerate requirements/lock.txt and mmcv.txt from requirements/*.in (after editing them; requirements/README.md)
lock: env
	bash scripts/lock.sh

# The main job: image classification (every family, timm), one short Mask R-CNN run (mim train), one short
# separation run (SpeechBrain recipe), all on embedded default data.
main: env
	$(PY) scripts/main.py
	$(PY) scripts/main_openmmlab.py
	$(PY) scripts/main_speech.py

# The suite a contributor runs before every change (and CI, .ci/run): every op, layer, model family, adapter, config
# family and recipe, with the per-model sweeps on one model per family (the rest are marked `exhaustive`).
test: env
	$(PY) -m pytest -n $(WORKERS) --dist $(DIST) --durations=40 -m "not exhaustive" $(PYTEST_ARGS)

# Everything: the sweeps on every registered model too.
test-all: env
	$(PY) -m pytest -n $(WORKERS) --dist $(DIST) --durations=40 $(PYTEST_ARGS)

# Where the last whole-suite run's time went, against the 20-minute budget of `make test`.
test-durations:
	$(PY) scripts/test_durations.py

bench: env
	$(PY) -m benchmarks.ops
