#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing (a venv with the
# project and its test extra, python3-venv for it, Debian's redis-server and git, the Docker
# engine and the local test image), then lints, type-checks and runs the whole suite. Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v redis-server >/dev/null || apt_install redis-server
command -v git >/dev/null || apt_install git  # the dirty-tree gate asks git

[ -x .venv/bin/pip ] || make_venv
if ! .venv/bin/python -c "import dispatch, pytest, hypothesis" 2>/dev/null \
    || [ pyproject.toml -nt .venv/.installed ]; then
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[test]'
    touch .venv/.installed
fi

bash scripts/docker-up.sh

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/pytest "$@"
