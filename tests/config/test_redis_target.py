"""DISPATCH_REDIS_URL's forms: one server, or a cluster said by a +cluster scheme or by a seed
list; anything else is refused with a reason that never quotes the URL (it may hold a
password)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.config.redis_target import RedisTarget, redis_target
from dispatch.config.settings import from_env
from dispatch.errors import ConfigError


@pytest.mark.parametrize(
    "raw,want",
    [
        ("redis://h:1/0", RedisTarget(("redis://h:1/0",), False)),
        ("unix:///run/r.sock", RedisTarget(("unix:///run/r.sock",), False)),
        ("redis+cluster://h:1", RedisTarget(("redis://h:1",), True)),
        ("rediss+cluster://u:pw@a:1/0?x=1,b:2", RedisTarget(
            ("rediss://u:pw@a:1/0?x=1", "rediss://u:pw@b:2/0?x=1"), True)),
        ("redis://a:1, redis://b:2", RedisTarget(("redis://a:1", "redis://b:2"), True)),
        ("redis://a:1,redis+cluster://b:2", RedisTarget(("redis://a:1", "redis://b:2"), True)),
    ],
)  # fmt: skip
def test_the_forms_it_takes(raw: str, want: RedisTarget) -> None:
    assert redis_target(raw) == want


@pytest.mark.parametrize(
    "raw,reason",
    [
        ("http://h:1", "use redis://, rediss://, unix:// or redis+cluster://"),
        ("redis://a:1,,b:2", "an empty seed between commas"),
        ("unix:///s,b:1", "a cluster is reached over TCP"),
        ("redis+cluster://a:1,rediss://b:2", "every seed must use the first one's scheme"),
        ("redis://u:secret@a:port", "a seed's port is not a number from 1 to 65535: 'a:port'"),
        ("redis://a:1,b:99999", "a seed's port is not a number from 1 to 65535: 'b:99999'"),
        ("redis://:1", "a seed names no host: ':1'"),
    ],
)
def test_a_bad_one_is_refused_in_one_line_that_keeps_the_password_out(
    raw: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        from_env({"DISPATCH_REDIS_URL": raw})
    said = str(refused.value)
    assert said.startswith("DISPATCH_REDIS_URL: ") and reason in said
    assert "secret" not in said and "\n" not in said


@given(st.text(max_size=80))
def test_any_text_is_a_target_or_a_reason(raw: str) -> None:
    try:
        target = redis_target(raw)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert target.urls and all(
        u.split("://")[0] in ("redis", "rediss", "unix") for u in target.urls
    )
    assert target.cluster == (len(target.urls) > 1 or "+cluster://" in raw.split(",")[0])
