"""Settings from the environment: every DISPATCH_* variable, its default and its refusals."""

from __future__ import annotations

import pytest

from dispatch.config.settings import from_env
from dispatch.errors import ConfigError


def test_the_reconcile_runs_every_minute_unless_told_otherwise() -> None:
    assert from_env({}).reconcile_s == 60
    assert from_env({"DISPATCH_RECONCILE_EVERY": "5m"}).reconcile_s == 300


@pytest.mark.parametrize("raw", ["500ms", "0", "soon"])
def test_a_reconcile_period_under_a_second_or_unreadable_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match="DISPATCH_RECONCILE_EVERY"):
        from_env({"DISPATCH_RECONCILE_EVERY": raw})


def test_output_is_kept_two_weeks_unless_told_otherwise() -> None:
    assert from_env({}).output_retention_s == 14 * 86_400
    assert from_env({"DISPATCH_OUTPUT_RETENTION": "36h"}).output_retention_s == 36 * 3600


@pytest.mark.parametrize("raw", ["30s", "0", "forever"])
def test_an_output_retention_under_a_minute_or_unreadable_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match="DISPATCH_OUTPUT_RETENTION"):
        from_env({"DISPATCH_OUTPUT_RETENTION": raw})


def test_the_lease_ttl_is_a_duration_of_at_least_a_second() -> None:
    assert from_env({}).lease_ttl_s == 30.0
    assert from_env({"DISPATCH_LEASE_TTL": "90s"}).lease_ttl_s == 90.0
    assert from_env({"DISPATCH_LEASE_TTL": "1500ms"}).lease_ttl_s == 1.5
    with pytest.raises(ConfigError, match="DISPATCH_LEASE_TTL"):
        from_env({"DISPATCH_LEASE_TTL": "500ms"})
    with pytest.raises(ConfigError, match="DISPATCH_LEASE_TTL"):
        from_env({"DISPATCH_LEASE_TTL": "soon"})


# the variables dispatch reads, each with a value it must refuse
BAD_VALUES = {
    "DISPATCH_REDIS_URL": "localhost:6379",
    "DISPATCH_PREFIX": "a{b}",
    "DISPATCH_HOST": "a b",
    "DISPATCH_CONCURRENCY": "-1",
    "DISPATCH_RUNNER": "podman",
    "DISPATCH_LOCK_MS": "nan",
    "DISPATCH_RENEW_EVERY": "inf",
    "DISPATCH_SWEEP_EVERY": "-1s",
    "DISPATCH_LEASE_TTL": "9" * 400,
    "DISPATCH_MAX_STALLS": "-1",
    "DISPATCH_SHUTDOWN_GRACE": "1e3",
    "DISPATCH_STOP_GRACE": "nan",
    "DISPATCH_ENGINE_WAIT_MAX": "-5m",
    "DISPATCH_RECONCILE_EVERY": "inf",
    "DISPATCH_IMAGE": "busybox\nlatest",
    "DISPATCH_JOB_MEMORY": "0",
    "DISPATCH_JOB_CPUS": "0",
    "DISPATCH_HOST_MEMORY": "1k",
    "DISPATCH_HOST_CPUS": "nan",
    "DISPATCH_ALLOWED_ROOTS": "relative/path",
    "DISPATCH_CONTAINER_USER": "root; rm -rf /",
    "DISPATCH_CONTAINER_NETWORK": "a b",
    "DISPATCH_CONTAINER_READ_ONLY": "maybe",
    "DISPATCH_CONTAINER_PIDS_LIMIT": "lots",
}


@pytest.mark.parametrize(("key", "raw"), BAD_VALUES.items(), ids=BAD_VALUES.keys())
def test_every_variable_refuses_a_bad_value_on_one_line_naming_it(key: str, raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_env({key: raw})
    said = str(caught.value)
    assert key in said and len(said.splitlines()) == 1


def test_job_memory_of_zero_is_refused_and_a_floor_size_accepted() -> None:
    with pytest.raises(ConfigError, match="floor"):
        from_env({"DISPATCH_JOB_MEMORY": "0"})
    assert from_env({"DISPATCH_JOB_MEMORY": "6m"}).job_memory == 6 * 1024**2
    assert from_env({"DISPATCH_HOST_MEMORY": "2t"}).host_memory == 2 * 1024**4


def test_the_docker_variables_are_parsed_with_the_rest() -> None:
    s = from_env(
        {
            "DISPATCH_ALLOWED_ROOTS": "/srv/a::/srv/b",
            "DISPATCH_CONTAINER_USER": "",
            "DISPATCH_CONTAINER_READ_ONLY": "yes",
            "DISPATCH_CONTAINER_PIDS_LIMIT": "64",
        }
    )
    assert s.allowed_roots == ("/srv/a", "/srv/b")
    assert (s.container_user, s.container_read_only, s.container_pids_limit) == ("", True, 64)
    assert from_env({}).container_user is None  # unset: the folder's owner, else nobody
    assert from_env({"DISPATCH_CONTAINER_LOG_SIZE": "5m"}).container_log_size == 5 * 1024**2


def test_a_non_numeric_pids_limit_stops_the_docker_runner_with_one_line() -> None:
    """Regression: the runner read DISPATCH_CONTAINER_PIDS_LIMIT with int() (a traceback)."""
    from dispatch.runners.docker.settings import DockerSettings

    with pytest.raises(ConfigError, match="DISPATCH_CONTAINER_PIDS_LIMIT"):
        DockerSettings.from_env({"DISPATCH_CONTAINER_PIDS_LIMIT": "lots"})
    assert DockerSettings.from_env({"DISPATCH_CONTAINER_PIDS_LIMIT": "64"}).pids_limit == 64
