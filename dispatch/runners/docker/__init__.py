"""Containers through the Docker Engine HTTP API, spoken by our own small client on httpx.

client   DockerClient: version negotiation, images, containers, events (client.py)
runner   DockerRunner: one job attempt as one hardened container (runner.py)
spec     the container's create body, pure: hardening, limits, labels, env (spec.py)
settings DockerSettings, built once from the daemon's settings (settings.py)
factory  the runner built from the daemon's settings (factory.py)
user     who the container runs as (the folder's owner) and its HOME (user.py)
mounts   the folder's bind, and the check of what the engine mounted (mounts.py)
reaper   reap: at boot, remove this host's containers no live claim owns (reaper.py)
labels   the container name prefix and labels both of those read (labels.py)
errors   the DockerError tree (errors.py), re-exported here as its `__all__` lists it
"""

from __future__ import annotations

from dispatch.runners.docker import errors
from dispatch.runners.docker.client import DEFAULT_HOST, DockerClient, ExitWait, resolve_host
from dispatch.runners.docker.errors import *  # noqa: F403  (the tree, listed once in errors.py)
from dispatch.runners.docker.labels import (
    LABEL_ATTEMPT,
    LABEL_FENCE,
    LABEL_HOST,
    LABEL_JOB,
    NAME_PREFIX,
)
from dispatch.runners.docker.reaper import Reaped, ReapReport, reap
from dispatch.runners.docker.runner import DockerRunner
from dispatch.runners.docker.settings import DockerSettings
from dispatch.runners.docker.spec import container_name

__all__ = [
    "DEFAULT_HOST",
    "LABEL_ATTEMPT",
    "LABEL_FENCE",
    "LABEL_HOST",
    "LABEL_JOB",
    "NAME_PREFIX",
    "DockerClient",
    "DockerRunner",
    "DockerSettings",
    "ExitWait",
    "ReapReport",
    "Reaped",
    "container_name",
    "reap",
    "resolve_host",
    *errors.__all__,
]
