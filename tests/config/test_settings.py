"""Settings from the environment: the reconcile period and the fleet lease TTL."""

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
