# Both targets set everything up first (scripts/env.sh: .venv keyed by requirements/stack.txt).
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: env main test bench
env:
	bash scripts/env.sh

# The main job: image classification (every family, timm), one short Mask R-CNN run (mim train), one short
# separation run (SpeechBrain recipe), all on embedded default data.
main: env
	$(PY) scripts/main.py
	$(PY) scripts/main_openmmlab.py
	$(PY) scripts/main_speech.py

test: env
	$(PY) -m pytest $(PYTEST_ARGS)

bench: env
	$(PY) -m benchmarks.ops
