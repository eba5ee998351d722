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

# debian_python: whether Debian's python3 is there and 3.11 or newer (the one make_venv prefers)
debian_python() {
    /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

# make_venv: .venv with pip, on $DISPATCH_PYTHON, else on Debian's python3 when it is 3.11 or
# newer, else on the python3 first on PATH. Debian builds its interpreter with profile-guided and
# link-time optimization: the daemon's pickup costs 12% less CPU on it than on a plain source
# build, such as the one pyenv makes by default and puts first on PATH (bench/RESULTS.md).
# Debian ships venv's ensurepip apart (python3-venv); without it `python3 -m venv` fails
# half-way, leaving a .venv with no pip, so callers test for .venv/bin/pip.
make_venv() {
    local py=${DISPATCH_PYTHON:-/usr/bin/python3}
    if [ -z "${DISPATCH_PYTHON:-}" ] && ! debian_python; then
        command -v python3 >/dev/null || apt_install python3
        py=python3
    fi
    "$py" -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
    "$py" -m venv .venv
}

# venv_note: a .venv that exists is kept, even one made on another python3 (before make_venv
# preferred Debian's): say what remaking it would bring, and how. Silent under DISPATCH_PYTHON.
venv_note() {
    [ -z "${DISPATCH_PYTHON:-}" ] && [ -f .venv/pyvenv.cfg ] && debian_python || return 0
    local home
    home=$(sed -n 's/^home = //p' .venv/pyvenv.cfg)
    [ -n "$home" ] && [ "$(readlink -f "$home")" != /usr/bin ] || return 0
    echo "note: .venv runs on $home/python3;" \
        "remove .venv and run this again to make it on Debian's /usr/bin/python3" \
        "(about 12% less CPU a job)" >&2
}
