"""The CLI's blocking connection (queue/resp.py) against real servers: replies in order, error
replies in place, a password and a database from the URL, one line when Redis is away, and
every target it leaves to redis-py (TLS, URL options, a cluster said or asked) said so."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from dispatch.errors import RedisUnreachable
from dispatch.queue.resp import ReplyError, Resp, Unsupported
from tests.support.redis_server import free_port, own_redis_server, sync_client


@pytest.fixture(scope="module")
def private_url() -> Iterator[str]:
    """A server of this module's own: it is given a password."""
    with own_redis_server() as url:
        yield url


def test_replies_come_in_order_and_an_error_reply_in_its_place(redis_url: str) -> None:
    if "," in redis_url:
        pytest.skip("a cluster's seed list is left to redis-py (tested below)")
    with Resp.open(redis_url, 5) as conn:
        replies = conn.pipeline([("PING",), ("INCRBY", "resp-test-no-number", "x"), ("ECHO", 7)])
        assert replies[0] == b"PONG" and replies[2] == b"7"
        assert isinstance(replies[1], ReplyError) and "\n" not in str(replies[1])
        with pytest.raises(ReplyError, match=r"^redis: ERR"):
            conn.call("INCRBY", "resp-test-no-number", "x")


def test_the_urls_password_and_database_are_used(private_url: str) -> None:
    admin = sync_client(private_url)
    host = urlsplit(private_url).netloc
    try:
        admin.config_set("requirepass", "s3cr:t")
        for url in (f"redis://:s3cr%3At@{host}/3", f"redis://default:s3cr%3At@{host}/3"):
            with Resp.open(url, 5) as conn:
                conn.call("SET", "resp-db", url)
        authed = sync_client(f"redis://:s3cr%3At@{host}/3")
        assert authed.get("resp-db") == f"redis://default:s3cr%3At@{host}/3".encode()
        with pytest.raises(ReplyError) as refused:
            Resp.open(f"redis://:wrong@{host}/0", 5)
        assert "s3cr" not in str(refused.value) and "wrong" not in str(refused.value)
        authed.config_set("requirepass", "")
        authed.close()
    finally:
        admin.close()


def test_a_redis_away_is_one_line_naming_where() -> None:
    port = free_port()
    with pytest.raises(RedisUnreachable) as away:
        Resp.open(f"redis://:pw@127.0.0.1:{port}/0", 5)
    assert str(away.value) == f"redis at 127.0.0.1:{port}: Connection refused"


def test_what_it_leaves_to_redis_py_is_said(cluster_url: str) -> None:
    first = cluster_url.split(",")[0]
    for url in (
        "rediss://127.0.0.1:6379/0",
        "redis://127.0.0.1:6379/0?socket_timeout=3",
        "redis+cluster://127.0.0.1:6379",
        cluster_url,  # a seed list
        first,  # a plain URL of a node of a cluster: asked, in the first round trip
    ):
        with pytest.raises(Unsupported):
            Resp.open(url, 5)
