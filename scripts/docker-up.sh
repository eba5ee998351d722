#!/usr/bin/env bash
# Bring up what the docker tests need, idempotently; run as root.
#
#   1. Debian's docker.io and busybox-static, installed with apt-get when missing
#      (apt-get update only when an install is needed, and once per test.sh run).
#   2. dockerd started in the background when no engine answers on the socket;
#      waits for it up to DOCKER_UP_TIMEOUT_S (default 60).
#   3. The local test image dispatch-test:latest, built with `docker import` from a
#      busybox-static rootfs: no registry is reachable from these machines, so
#      nothing is ever pulled.
#
# Env: DOCKER_UP_VAR (default /var/lib/dispatch-docker-up: dockerd log and pid),
#      DISPATCH_TEST_IMAGE (default dispatch-test:latest), DOCKER_UP_REBUILD=1 to
#      rebuild the image even when present.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SOCK=/var/run/docker.sock
VAR_DIR=${DOCKER_UP_VAR:-/var/lib/dispatch-docker-up}
IMAGE=${DISPATCH_TEST_IMAGE:-dispatch-test:latest}
TIMEOUT_S=${DOCKER_UP_TIMEOUT_S:-60}
# Prefer Debian's client: it matches the engine we start.
DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=docker

say() { echo "docker-up: $*" >&2; }

need_root() {
    if [ "$(id -u)" != 0 ]; then
        say "must run as root (installs packages, starts dockerd)"
        exit 1
    fi
}

install_packages() {
    local missing=()
    dpkg -s docker.io >/dev/null 2>&1 || missing+=(docker.io)
    dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    apt_install "${missing[@]}"
}

engine_answers() {
    [ -S "$SOCK" ] && timeout 5 "$DOCKER" -H "unix://$SOCK" version >/dev/null 2>&1
}

start_engine() {
    engine_answers && return 0
    mkdir -p "$VAR_DIR"
    say "starting dockerd (log: $VAR_DIR/dockerd.log)"
    # setsid: the engine must outlive this script and the shell that ran it.
    setsid dockerd --host "unix://$SOCK" --pidfile "$VAR_DIR/dockerd.pid" \
        >>"$VAR_DIR/dockerd.log" 2>&1 </dev/null &
    local deadline=$((SECONDS + TIMEOUT_S))
    until engine_answers; do
        if [ $SECONDS -ge $deadline ]; then
            say "dockerd did not answer within ${TIMEOUT_S}s; last log lines:"
            tail -n 20 "$VAR_DIR/dockerd.log" >&2 || true
            exit 1
        fi
        sleep 0.3
    done
    say "engine up: $($DOCKER version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
}

build_image() {
    local old
    old=$($DOCKER image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
    if [ -n "$old" ] && [ "${DOCKER_UP_REBUILD:-0}" != 1 ]; then
        return 0
    fi
    local root
    root=$(mktemp -d)
    ROOTFS_TMP=$root
    mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/proc" "$root/sys" "$root/dev" "$root/work"
    chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    # Every applet busybox knows (sh, true, sleep, dd, head, tail, ...) as a symlink.
    local applet
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    # A non-root user the runner can default to (uid 65534 is 'nobody' on Debian too).
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' \
        >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    say "building $IMAGE from busybox-static"
    tar -C "$root" -c . | $DOCKER import \
        --change 'ENV PATH=/bin' --change 'CMD ["/bin/sh"]' --change 'WORKDIR /work' \
        - "$IMAGE" >/dev/null
    # A rebuild would otherwise leave the previous image dangling.
    if [ -n "$old" ] && [ "$old" != "$($DOCKER image inspect --format '{{.Id}}' "$IMAGE")" ]; then
        $DOCKER image rm "$old" >/dev/null 2>&1 || true
    fi
}

ROOTFS_TMP=""
trap '[ -z "$ROOTFS_TMP" ] || rm -rf "$ROOTFS_TMP"' EXIT

need_root
install_packages
start_engine
build_image
say "ready: $IMAGE on $SOCK"
