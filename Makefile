.PHONY: install lint typecheck test bench

install:
	bash -c '. scripts/lib.sh && make_venv'
	.venv/bin/pip install -q -e '.[test]'

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

typecheck:
	.venv/bin/mypy

test:
	./scripts/test.sh

bench:
	.venv/bin/python -m bench.queue --json
	.venv/bin/python -m bench.leases --json
	.venv/bin/python -m bench.container --json
