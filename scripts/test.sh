#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing (a venv with the
# project and its test extra, Debian's redis-server, the Docker engine and the local test
# image), then lints, type-checks and runs the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
    if [ "$(id -u)" != 0 ]; then
        echo "test.sh: missing $*; install it (apt-get install $*) or run as root" >&2
        exit 1
    fi
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v redis-server >/dev/null || apt_install redis-server
command -v git >/dev/null || apt_install git  # the dirty-tree gate asks git

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
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
