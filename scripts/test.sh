#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing (a venv with the
# project and its test extra, python3-venv for it, Debian's redis-server and git, the Docker
# engine and the local test image), then lints, type-checks, builds the docs site and runs
# the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v redis-server >/dev/null || apt_install redis-server
command -v git >/dev/null || apt_install git  # the dirty-tree gate asks git
command -v promtool >/dev/null || apt_install prometheus  # promtool checks deploy/prometheus
command -v tmux >/dev/null || apt_install tmux  # tests/e2e/test_top_tmux.py runs dispatch top in it
# the web page's browser tests drive Debian's chromium (tests/support/browser.py); no browser
# build can be downloaded, so Playwright launches this one by its path
command -v chromium >/dev/null || apt_install chromium
command -v systemd-analyze >/dev/null || apt_install systemd  # verifies the rendered units
command -v valgrind >/dev/null || apt_install valgrind  # bench.instructions counts a job's instructions

[ -x .venv/bin/pip ] || make_venv
venv_note
if ! .venv/bin/python -c "import dispatch, pytest, hypothesis, xdist, mkdocs, material, prometheus_client, textual, starlette, uvicorn, playwright, cron_descriptor" 2>/dev/null \
    || [ pyproject.toml -nt .venv/.installed ]; then
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[test]'
    touch .venv/.installed
fi

bash scripts/docker-up.sh

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache --no-logo  # the layers (pyproject.toml [tool.importlinter])
# The docs site, built where it leaves nothing in the tree: a broken link or anchor, or a page
# left out of the nav, fails it (mkdocs.yml). Not --quiet: that hides the warnings --strict
# counts. Its output is shown only when it fails.
site=$(mktemp -d)
docs_out=$(NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site" 2>&1) \
    || { echo "$docs_out" >&2; exit 1; }
rm -rf "$site"
# Most tests wait on real daemons, engines and timers rather than on the CPU, so the suite runs
# in DISPATCH_TEST_WORKERS processes (default 4 on any machine); worksteal keeps the long fault
# tests from piling up on one worker at the end. `-p no:xdist` or `-n 0` as arguments run it
# in one process.
exec .venv/bin/pytest -n "${DISPATCH_TEST_WORKERS:-4}" --dist worksteal "$@"
