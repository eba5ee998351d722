#!/usr/bin/env bash
# Start dispatch on this machine with its embedded default: installs what is missing (a venv
# with dispatch, Debian's redis-server, and, as root, the Docker engine and the local image
# the default runner uses), then runs `dispatch up`, which starts its own redis-server with
# AOF persistence in the state dir and stops it on exit. Arguments go to `dispatch up`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v redis-server >/dev/null || apt_install redis-server
if [ ! -x .venv/bin/dispatch ]; then
    [ -x .venv/bin/pip ] || make_venv
    .venv/bin/pip install -q -e .
fi
if [ "${DISPATCH_RUNNER:-docker}" = docker ] && [ "$(id -u)" = 0 ]; then
    bash scripts/docker-up.sh
fi
exec .venv/bin/dispatch up "$@"
