# The two commands of the README: `make demo` and `make test`.
VENV ?= .venv
# Six workers on two cores: most tests wait (servers starting, fixed-length chaos runs),
# so the waits overlap; loadgroup keeps the tests of one shared session fixture on one
# worker (tests/conftest.py). Measured from a fresh clone, 2026-12-03: 4 workers 519 s of
# pytest, 6 workers 431 s (both cores about 80 % busy); WORKERS="-n 0" runs everything
# in one process; PYTEST_ARGS adds to it (a marker, -k, a path) without losing the workers.
WORKERS ?= -n 6 --dist loadgroup
PYTEST_ARGS ?=

.PHONY: setup demo lint test bench clean

setup:
	./scripts/setup.sh

demo: setup
	$(VENV)/bin/harness run mixed --plan flaky-network --users 20 --duration 20s --seed 7

# Static checks first: ruff (lint and import order) and mypy, strict on harness/ and
# target_app/ (pyproject.toml); a finding fails the test command like a failing test.
lint: setup
	$(VENV)/bin/ruff check harness target_app tests benchmarks examples
	$(VENV)/bin/mypy

# pytest caches the test modules it rewrites (its asserts) as bytecode, unless the
# environment sets PYTHONDONTWRITEBYTECODE (this machine's does, CI's most likely too):
# then each worker rewrote all of them again, 7.9 s of CPU per collection against 1.8 s.
test: lint
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/python -m pytest $(WORKERS) $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/python benchmarks/run_all.py

clean:
	rm -rf .harness runs .pytest_cache
