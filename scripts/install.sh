#!/usr/bin/env bash
# Install what dispatch needs on this machine, and start nothing: a venv with dispatch,
# Debian's redis-server (the embedded default runs it), and, as root, the Docker engine and
# the local image the default runner uses. `./scripts/up.sh` runs this, then `dispatch up`;
# `dispatch service install` turns the install into a systemd service.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v redis-server >/dev/null || apt_install redis-server
if [ ! -x .venv/bin/dispatch ]; then
    [ -x .venv/bin/pip ] || make_venv
    .venv/bin/pip install -q -e .
fi
venv_note
if [ "${DISPATCH_RUNNER:-docker}" = docker ] && [ "$(id -u)" = 0 ]; then
    bash scripts/docker-up.sh
fi
