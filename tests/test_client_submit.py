"""Malformed submissions are refused with a one-line `InvalidJob` and write nothing to Redis.

"Nothing" is checked by a DUMP of every key under the test's prefix (the queue's keys and the
fleet's queue registry alike), before and after the submission.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import msgspec
import pytest
import redis as sync_redis
from hypothesis import given, settings
from redis.asyncio import Redis

from dispatch.client import Client
from dispatch.errors import InvalidJob
from dispatch.model import JOB_VERSION, MAX_JOB_BYTES, Job, decode_job
from dispatch.queue.keys import queue_keys
from tests.support.documents import BAD_DOCS, documents

pytestmark = pytest.mark.anyio

VALID = Job(id="job-1", command=["true"])


async def snapshot(redis, prefix: str) -> dict[bytes, bytes]:
    keys = sorted(await redis.keys(f"*{prefix}*"))
    return {key: await redis.dump(key) for key in keys}


@pytest.fixture
def client(redis, prefix) -> Client:
    return Client(redis, prefix, host="test-host")


async def submit_document(client: Client, raw: bytes | str, **options) -> str:
    """What `dispatch submit --json FILE` does: decode, then submit."""
    return (await client.submit(decode_job(raw), **options)).id


async def assert_refused_writing_nothing(client: Client, submission) -> InvalidJob:
    await client.submit(Job(id="existing"))  # a queue that already holds something
    before = await snapshot(client.redis, client.prefix)
    with pytest.raises(InvalidJob) as caught:
        await submission
    assert len(str(caught.value).splitlines()) == 1, caught.value
    assert await snapshot(client.redis, client.prefix) == before
    return caught.value


@pytest.mark.parametrize("raw", BAD_DOCS.values(), ids=BAD_DOCS.keys())
async def test_bad_document_writes_nothing(client: Client, raw: bytes) -> None:
    await assert_refused_writing_nothing(client, submit_document(client, raw))


BAD_JOBS = {
    "empty id": {"id": ""},
    "id with slash": {"id": "a/b"},
    "id with brace": {"id": "a}b"},
    "newer version": {"v": JOB_VERSION + 1},
    "unknown queue": {"queue": "elsewhere"},
    "relative folder": {"kind": "local", "folder": "rel/dir"},
    "bad repo": {"kind": "forge", "repo": "no-slash"},
    "bad env name": {"env": {"NOT-OK": "1"}},
    "attempts zero": {"attempts": 0},
    "timeout too short": {"timeout_ms": 10},
    "oversize": {"command": ["x" * MAX_JOB_BYTES]},
    "cap under a micro-dollar": {"max_cost_usd": 4e-7},  # was reserved as $0
}


@pytest.mark.parametrize("fields", BAD_JOBS.values(), ids=BAD_JOBS.keys())
async def test_invalid_job_from_code_writes_nothing(client: Client, fields) -> None:
    job = msgspec.structs.replace(VALID, **fields)
    await assert_refused_writing_nothing(client, client.submit(job))


@pytest.mark.parametrize(
    "options",
    [{"due_ms": -1}, {"delay_ms": -1}, {"dedup_window_ms": -1}, {"delay_ms": 1.5}],
    ids=["due", "delay", "negative window", "float"],
)
async def test_bad_submit_options_write_nothing(client: Client, options) -> None:
    await assert_refused_writing_nothing(client, client.submit(VALID, **options))


@pytest.mark.parametrize(
    "fields",
    [{"id": 5}, {"attempts": "3"}, {"env": {"A": 1}}, {"command": "make test"}],
    ids=["id int", "attempts text", "env value int", "command text"],
)
async def test_wrongly_typed_job_from_code_writes_nothing(client: Client, fields) -> None:
    await assert_refused_writing_nothing(client, client.submit(Job(**{"id": "job-1", **fields})))


async def test_valid_document_is_stored_as_given(client: Client) -> None:
    raw = json.dumps({"id": "job-2", "command": ["make"], "env": {"CI": "1"}})
    assert await submit_document(client, raw) == "job-2"
    stored = await client.redis.hget(client.queue("jobs").keys.data, "job-2")
    assert stored is not None
    assert decode_job(stored) == decode_job(raw)


# -- the wide input space: each document is refused writing nothing, or enqueued once --------


def submit_sync(redis_url: str, prefix: str, raw: str) -> str:
    async def go() -> str:
        redis = Redis.from_url(redis_url)
        try:
            return await submit_document(Client(redis, prefix, host="test-host"), raw)
        finally:
            await redis.aclose()

    return asyncio.run(go())


@settings(max_examples=60, deadline=None)
@given(document=documents)
def test_any_document_is_refused_writing_nothing_or_enqueued(redis_url, document) -> None:
    prefix = f"h{uuid.uuid4().hex[:10]}"
    raw = json.dumps(document)
    with sync_redis.Redis.from_url(redis_url) as redis:
        try:
            job_id = submit_sync(redis_url, prefix, raw)
        except InvalidJob as exc:
            assert len(str(exc).splitlines()) == 1, exc
            assert redis.keys(f"*{prefix}*") == []
            return
        job = decode_job(raw)
        data_key = queue_keys(job.queue, prefix).data
        assert job_id == job.id
        assert decode_job(redis.hget(data_key, job_id)) == job
        redis.delete(*redis.keys(f"*{prefix}*"))
