"""Builds the docker runner from the daemon's settings."""

from __future__ import annotations

from dataclasses import replace

from dispatch.config import Settings
from dispatch.docker.client import DockerClient
from dispatch.docker.runner import DockerRunner, DockerSettings


def docker_settings(settings: Settings) -> DockerSettings:
    return replace(DockerSettings.from_env(), default_image=settings.image)


def docker_runner(settings: Settings) -> DockerRunner:
    ds = docker_settings(settings)
    return DockerRunner(ds, DockerClient(ds.docker_host))
