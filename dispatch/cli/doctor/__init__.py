"""`dispatch doctor`: is this host fit to run the daemon? One line per check.

    redis            reachable (the URL's host and port only: never its password)
    redis-topology   standalone, or a Redis Cluster: its primaries, replicas per primary and
                     slots served; a slot no primary serves, or a primary that does not answer
                     or says its cluster is not ok, is a failure (queue/topology.py)
    redis-slot       on a cluster, the slot and node of each queue of this host and of the
                     spend ledgers' tag
    redis-version    Redis >= 7.0 or Valkey >= 7.2 (the scripts need `#!lua` and its flags)
    maxmemory-policy anything but `noeviction` is a warning: the server could evict queue keys
    scripts          every Lua script loads; names the folder they came from (wheel or checkout)
    docker           the engine answers; its version and the API version we negotiated
    image            the default job image is present (jobs never pull)
    config           every watched config file is valid and of this release's version
                     (missing files are fine); one line per broken or newer file
    wait-profile     each declared wait profile's command exists and is executable
    allowed-roots    a warning when the docker runner may mount no folder (no
                     DISPATCH_ALLOWED_ROOTS): every local job would be refused
    spend-caps       warnings only: a scoped-limits row no job can match, a dollar window
                     smaller than the default per-job cap, dollar caps without maxCostUsd
    job-network ...  the job network, its proxy and firewall, Redis out of a job's reach
                     (egress.py)
    secret           one line per profile of secrets.json: its command is an executable on
                     the resolver's PATH, or its file is private to this user (chmod 600,
                     owned by whoever runs the doctor: run it as the daemon's user) and JSON
    clocks           a warning names each live daemon's host (and this one) whose clock is
                     more than 2 s off Redis's TIME (dispatch/fleet/skew.py)
    stop-not-taken   a warning per run whose stop did not take (its daemon's heartbeat says
                     so): the job, its container, since when, and `dispatch cancel --kill`
    triggers         this host's trigger fingerprint against every live daemon's: a daemon
                     whose fingerprint differs from a peer's mints nothing (a failure); a
                     trigger the stall guard disabled is a warning; no line for a host
                     without triggers that agrees with its peers

The checks and `Check`, one line of the report, are in checks.py; the egress lines, which
build on it, in egress.py. This file runs them in order.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from dispatch.cli.doctor.checks import (
    config_checks,
    failed,
    fleet_checks,
    profile_checks,
    render,
    roots_check,
    run_checks,
    trigger_checks,
)
from dispatch.cli.doctor.egress import egress_checks
from dispatch.config.settings import Settings


def report(settings: Settings, out: TextIO | None = None) -> int:
    """Run every check, print one line each; 1 when any failed (the CLI's exit code)."""
    checks = asyncio.run(run_checks(settings))
    checks += config_checks(settings.config_dir)
    checks += profile_checks(settings.config_dir)
    checks += roots_check(settings)
    if not failed(checks):  # a throwaway container needs the engine and the image
        checks += asyncio.run(egress_checks(settings))
    checks += asyncio.run(fleet_checks(settings))
    checks += asyncio.run(trigger_checks(settings))
    for check in checks:
        print(render(check), file=out or sys.stdout)
    return 1 if failed(checks) else 0
