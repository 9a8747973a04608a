# Both targets set everything up first (scripts/env.sh: .venv keyed by requirements/stack.txt).
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: env main test bench
env:
	bash scripts/env.sh

main: env
	$(PY) scripts/main.py

test: env
	$(PY) -m pytest $(PYTEST_ARGS)

bench: env
	$(PY) -m benchmarks.ops
