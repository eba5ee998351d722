"""Builds the docker runner from the daemon's settings."""

from __future__ import annotations

from dataclasses import replace

from dispatch.config.settings import Settings
from dispatch.runners.docker.client import DockerClient
from dispatch.runners.docker.runner import DockerRunner, DockerSettings, EgressEnv


def docker_settings(settings: Settings) -> DockerSettings:
    """The docker-only variables, with the image and default job size the daemon parsed."""
    return replace(
        DockerSettings.from_env(),
        default_image=settings.image,
        default_memory=str(settings.job_memory),  # bytes: parse_memory reads a plain count
        default_cpus=settings.job_cpus,
        engine_wait_s=settings.engine_wait_ms / 1000,
    )


def docker_runner(settings: Settings, egress_env: EgressEnv | None = None) -> DockerRunner:
    return DockerRunner(docker_settings(settings), DockerClient(), egress_env=egress_env)
