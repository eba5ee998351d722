# Sourced by the scripts here (not run): installing what is missing on Debian.

# apt_install PKG...: as root, `apt-get update` once per run (exported, so a script this one
# runs skips it too), then install without recommends; otherwise say what is missing and stop.
apt_install() {
    if [ "$(id -u)" != 0 ]; then
        echo "$(basename "$0"): missing $*; install it (apt-get install $*) or run as root" >&2
        exit 1
    fi
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -qq
        export APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# make_venv: .venv with pip. Debian ships venv's ensurepip apart (python3-venv); without it
# `python3 -m venv` fails half-way, leaving a .venv with no pip, so callers test for .venv/bin/pip.
make_venv() {
    command -v python3 >/dev/null || apt_install python3
    python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
    python3 -m venv .venv
}
