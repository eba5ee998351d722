.PHONY: help install format lint typecheck test-fast test bench bench-peers compare

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/'

install:  ## a venv with the project and its test tools
	bash -c '. scripts/lib.sh && make_venv'
	.venv/bin/pip install -q -e '.[test]'

format:  ## rewrite the code in the house format
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

lint:  ## ruff and the layering contracts, as CI runs them
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports --no-cache --no-logo

typecheck:  ## mypy: strict on the package and bench, bodies checked in tests
	.venv/bin/mypy

test-fast:  ## the tests that need only Redis: no engine, no daemon processes
	.venv/bin/pytest -q -n 4 -m 'not docker and not e2e and not slow'

test:  ## everything, as CI runs it (installs what is missing)
	./scripts/test.sh

bench:  ## the benchmarks, figures as JSON
	.venv/bin/python -m bench.queue --json
	.venv/bin/python -m bench.pickup --json
	.venv/bin/python -m bench.leases --json
	.venv/bin/python -m bench.container --json
	.venv/bin/python -m bench.budget --json
	.venv/bin/python -m bench.soak --json
	.venv/bin/python -m bench.git_status --json
	.venv/bin/python -m bench.fleet_view --json
	.venv/bin/python -m bench.web_jobs --json
	.venv/bin/python -m bench.web_load --json

# npm ci: exactly the lock. --ignore-scripts: the one install script (msgpackr-extract) only
# builds from source when its prebuilt optional package is missing, and that one is there.
bench-peers:  ## BullMQ, arq and SAQ for bench.compare, in bench/peers/ only (not dispatch's deps)
	npm ci --prefix bench/peers/bullmq --ignore-scripts --no-audit --no-fund
	test -x bench/peers/.venv/bin/pip || (cd bench/peers && bash -c '. ../../scripts/lib.sh && make_venv')
	bench/peers/.venv/bin/pip install -q -r bench/peers/requirements.txt

compare:  ## dispatch against BullMQ, arq and SAQ (make bench-peers first)
	.venv/bin/python -m bench.compare
