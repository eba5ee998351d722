"""Builds the docker runner from the daemon's settings."""

from __future__ import annotations

from dispatch.config.settings import Settings
from dispatch.runners.docker.client import DockerClient
from dispatch.runners.docker.runner import DockerRunner, EgressEnv
from dispatch.runners.docker.settings import docker_settings


def docker_runner(settings: Settings, egress_env: EgressEnv | None = None) -> DockerRunner:
    return DockerRunner(docker_settings(settings), DockerClient(), egress_env=egress_env)
