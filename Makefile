# The two commands of the README: `make demo` and `make test`.
VENV ?= .venv
PYTEST_ARGS ?=

.PHONY: setup demo test bench clean

setup:
	./scripts/setup.sh

demo: setup
	$(VENV)/bin/harness run mixed --plan flaky-network --users 20 --duration 20s --seed 7

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/python benchmarks/run_all.py

clean:
	rm -rf .harness runs .pytest_cache
