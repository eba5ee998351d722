#!/usr/bin/env bash
# Start dispatch on this machine with its embedded default: installs what is missing
# (scripts/install.sh), then runs `dispatch up`, which starts its own redis-server with AOF
# persistence in the state dir and stops it on exit. Arguments go to `dispatch up`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/dispatch up "$@"
