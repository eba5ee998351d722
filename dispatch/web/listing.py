"""The jobs page's listing: one page of jobs from Redis-side ranges, never a full scan.

Jobs are read group by group: per queue (by name), its running jobs, then the ready, the
delayed (due soonest first) and the ended ones (newest first), each in Redis's own order. A
page starts at a cursor (group, offset), reads ids from there with ZRANGE or LRANGE, keeps
those the filters keep (their fields and documents read in one pipelined round trip) and
stops at `PAGE` kept or `SCAN` looked at; the next page starts where it stopped. A page so
costs the same at a thousand jobs as at a million, and one whose filters keep few jobs says
how many it looked at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from dispatch.cli.filters import hosts_of, targets_of
from dispatch.client import Client, JobView
from dispatch.errors import DispatchError
from dispatch.queue import keys
from dispatch.reasons import lookup

PAGE = 50
SCAN = 1000  # ids looked at per page, at most
CHUNK = 200  # ids read per round trip once a filter has to look further than a page
GROUPS = ("active", "waiting", "delayed", "ended")
ENDED = ("completed", "failed", "cancelled")
STATES = ("active", "waiting", "delayed", *ENDED)
FIELDS = ("state", "reason", "queue", "host", "target", "project", "id", "at")
SCHEDULED = "scheduled"  # the snapshot's word for a delayed job with no defer record: `--after`
SNAPSHOT_ONLY = (SCHEDULED,)
_CURSOR = re.compile(r"(\d{1,6})\.(\d{1,10})")
_TEXT = re.compile(r"[\x20-\x7e]{0,200}")  # a filter's value: printable ASCII, short


class BadQuery(DispatchError):
    """A filter an operator mistyped: a 400 with its reason."""


@dataclass(frozen=True)
class Query:
    state: str = ""
    reason: str = ""
    queue: str = ""
    host: str = ""
    target: str = ""
    project: str = ""
    id: str = ""
    at: tuple[int, int] = (0, 0)  # the cursor: group, offset in it

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Query:
        unknown = sorted(set(params) - set(FIELDS))
        if unknown:
            raise BadQuery(f"unknown filter {unknown[0][:40]!r}: use {', '.join(FIELDS)}")
        found = {name: params.get(name, "") for name in FIELDS}
        for name, value in found.items():
            if not _TEXT.fullmatch(value):
                raise BadQuery(f"filter {name}: printable text of at most 200 characters")
        if found["state"] and found["state"] not in STATES:
            raise BadQuery(f"state {found['state']!r}: use one of {', '.join(STATES)}")
        if found["reason"] and found["reason"] not in SNAPSHOT_ONLY and not lookup(found["reason"]):
            raise BadQuery(f"reason {found['reason']!r} is not one dispatch gives")
        return cls(**{k: v for k, v in found.items() if k != "at"}, at=_cursor(found["at"]))

    def keep(self, v: JobView) -> bool:
        return (
            (not self.state or v.state == self.state)
            and (not self.reason or _reason(v) == self.reason)
            and v.id.startswith(self.id)
            and (not self.host or self.host in hosts_of(v))
            and (not self.target or self.target.casefold() in targets_of(v))
            and (not self.project or v.project == self.project)
        )

    def link(self, at: tuple[int, int] | None = None, **changed: str) -> str:
        """This query as a URL's query string, with `changed` filters and a cursor."""
        values = {name: getattr(self, name) for name in FIELDS if name != "at"} | changed
        if at is not None and at != (0, 0):
            values["at"] = f"{at[0]}.{at[1]}"
        return urlencode({k: v for k, v in values.items() if v})


def _reason(v: JobView) -> str:
    return SCHEDULED if v.state == "delayed" and not v.reason else v.reason


def _cursor(raw: str) -> tuple[int, int]:
    if not raw:
        return (0, 0)
    m = _CURSOR.fullmatch(raw)
    if m is None:
        raise BadQuery(f"cursor {raw[:40]!r}: the page links give it; start again from the first")
    return int(m[1]), int(m[2])


@dataclass
class Page:
    jobs: list[JobView] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)  # group -> jobs in it, queues asked
    looked: int = 0
    next_at: tuple[int, int] | None = None  # None: nothing after this page


async def page(client: Client, q: Query) -> Page:
    names = [n for n in await client.queues() if not q.queue or n == q.queue]
    groups = [(name, g) for name in names for g in _groups(q.state)]
    found = Page(totals=await _totals(client, groups))
    g, offset = q.at
    filtered = q != Query(state=q.state, queue=q.queue, at=q.at)
    while g < len(groups) and len(found.jobs) < PAGE and found.looked < SCAN:
        want = min(CHUNK if filtered else PAGE - len(found.jobs), SCAN - found.looked)
        ids = await _ids(client, *groups[g], offset, want)
        if not ids:
            g, offset = g + 1, 0
            continue
        offset = await _keep(client, q, groups[g][0], ids, offset, found)
    if g < len(groups):
        found.next_at = (g, offset)
    return found


async def _keep(
    client: Client, q: Query, queue: str, ids: list[str], offset: int, found: Page
) -> int:
    """Add the jobs of `ids` the query keeps to `found`, up to a page; the offset after the
    last id looked at. Ids the prefix rules out are never read."""
    wanted = [i for i in ids if i.startswith(q.id)]
    views = await client.views([(queue, i) for i in wanted], targets=True) if wanted else []
    by_id = dict(zip(wanted, views, strict=True))
    for job_id in ids:
        offset += 1
        found.looked += 1
        view = by_id.get(job_id)
        if view is not None and q.keep(view):
            found.jobs.append(view)
            if len(found.jobs) == PAGE:
                break
    return offset


def _groups(state: str) -> tuple[str, ...]:
    if not state:
        return GROUPS
    return ("ended",) if state in ENDED else (state,)


async def _totals(client: Client, groups: list[tuple[str, str]]) -> dict[str, int]:
    async with client.redis.pipeline(transaction=False) as p:
        for name, group in groups:
            k = keys.queue_keys(name, client.prefix)
            if group == "waiting":
                p.llen(k.wait)
            else:
                p.zcard({"active": k.active, "delayed": k.delayed, "ended": k.done}[group])
        counts = await p.execute()
    totals: dict[str, int] = {}
    for (_, group), n in zip(groups, counts, strict=True):
        totals[group] = totals.get(group, 0) + int(n)
    return totals


async def _ids(client: Client, queue: str, group: str, offset: int, n: int) -> list[str]:
    k = keys.queue_keys(queue, client.prefix)
    end = offset + n - 1
    r = client.redis
    raw: Any
    if group == "waiting":
        raw = await r.lrange(k.wait, offset, end)
    elif group == "ended":
        raw = await r.zrevrange(k.done, offset, end)
    else:
        raw = await r.zrange(k.active if group == "active" else k.delayed, offset, end)
    return [i.decode() if isinstance(i, bytes) else str(i) for i in raw]
