"""The docker runner's settings: the docker-only variables, their defaults and their errors."""

from __future__ import annotations

import pytest

from dispatch.config.settings import Settings
from dispatch.errors import ConfigError
from dispatch.runners.docker import DockerSettings
from dispatch.runners.docker.settings import docker_settings


def test_the_settings_and_their_opt_outs() -> None:
    unset = DockerSettings.from_env({})
    assert (unset.user, unset.read_only, unset.log_max_bytes) == (None, True, 10 * 1024**2)
    assert DockerSettings.from_env({"DISPATCH_CONTAINER_USER": ""}).user == ""  # set: it wins
    assert DockerSettings.from_env({"DISPATCH_CONTAINER_READ_ONLY": "false"}).read_only is False
    sized = DockerSettings.from_env({"DISPATCH_CONTAINER_LOG_SIZE": "20m"})
    assert sized.log_max_bytes == 20 * 1024**2


@pytest.mark.parametrize(
    ("key", "raw", "message"),
    [
        ("DISPATCH_CONTAINER_READ_ONLY", "maybe", "is not one of 1 true yes on"),
        ("DISPATCH_CONTAINER_LOG_SIZE", "lots", "is not a size like 512m, 4g"),
        ("DISPATCH_CONTAINER_LOG_SIZE", "1m", "use 3m or more"),
    ],
)
def test_a_bad_setting_is_one_line(key, raw, message) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        DockerSettings.from_env({key: raw})
    assert str(caught.value).startswith(f"{key}={raw!r}: ") and "\n" not in str(caught.value)


def test_the_daemons_settings_lay_the_image_and_the_job_size_over() -> None:
    daemon = Settings(
        redis_url="redis://x",
        embedded=False,
        image="img:1",
        job_memory=1024**3,
        job_cpus=0.5,
        engine_wait_ms=30_000,
        allowed_roots=("/srv",),
        container_user="",
        container_network="none",
    )
    docker = docker_settings(daemon)
    assert (docker.default_image, docker.default_memory, docker.default_cpus) == (
        "img:1",
        str(1024**3),
        0.5,
    )
    assert (docker.engine_wait_s, docker.allowed_roots, docker.user) == (30.0, ("/srv",), "")
    assert docker.network == "none"
    assert docker_settings(Settings(redis_url="redis://x", embedded=False)).network == (
        "dispatch-jobs"  # the job network dispatch owns, behind the egress proxy
    )
