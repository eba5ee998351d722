"""A trigger of triggers.json, checked and compiled: its schedule, jitter, window, job and names.

Names a minted job carries, so any host computes the same ones:

    job id   `<trigger id>.<occurrence, UTC, YYYYmmddTHHMMSS>Z` (a manual run:
             `<trigger id>.run.<new id>`), within the job-id alphabet (a trigger id is at
             most 100 characters of it)
    dedup    `trigger:<trigger id>:<occurrence ms>` (`trigger:<id>:run:<ms>` for a manual run);
             `origin` reads a job's trigger and occurrence back from it (`dispatch why`)
    sig      a digest of everything but `enabled`: a change drops the pending occurrences
    jitter   a fixed offset in [0, bound] drawn from a digest of the trigger id alone

The fingerprint a host publishes with its heartbeat is a digest of every trigger (sorted by id)
and of the transitions 2020-2040 of every time zone they name (`schedule.zone_digest`).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from dispatch.config.schemas import Trigger
from dispatch.config.units import parse_duration_ms
from dispatch.errors import InvalidJob
from dispatch.model import decode_job, new_id
from dispatch.triggers.schedule import BadSchedule, Schedule, zone_digest

MAX_ID = 100
MAX_WINDOW_MS = 7 * 86_400_000  # catch-up reaches back at most a week
MAX_JITTER_MS = 86_400_000
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_DEDUP = re.compile(r"trigger:([A-Za-z0-9][A-Za-z0-9._-]*):(run:)?(\d{1,15})")
_SET_BY_TRIGGER = ("id", "dedup")
_encode = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True)
class Compiled:
    trigger: Trigger
    schedule: Schedule
    jitter_ms: int
    window_ms: int
    sig: str

    @property
    def id(self) -> str:
        return self.trigger.id

    @property
    def queue(self) -> str:
        queue = self.trigger.job.get("queue")
        return queue if isinstance(queue, str) else "jobs"

    def due(self, at_ms: int) -> int:
        return at_ms + self.jitter_ms

    def job(self, job_id: str, dedup: str) -> bytes:
        """The job document for one minting, checked as `submit --json` checks it."""
        doc = {**self.trigger.job, "id": job_id, "dedup": dedup}
        raw = msgspec.json.encode(doc)
        decode_job(raw)
        return raw


@dataclass(frozen=True)
class Origin:
    """What a minted job says of where it came from."""

    trigger: str
    at_ms: int  # the occurrence, or the instant of a manual run
    manual: bool


def compile_trigger(t: Trigger) -> Compiled:
    """Raise ValueError (BadSchedule, InvalidJob's message) with a one-line reason."""
    if not _ID.fullmatch(t.id):
        raise ValueError(f"id must be 1-{MAX_ID} of A-Z a-z 0-9 . _ -, a letter or digit first")
    schedule = Schedule.of(t.cron, t.tz)
    jitter = _bounded("jitter", t.jitter, MAX_JITTER_MS)
    window = _bounded("catchupWindow", t.catchup_window, MAX_WINDOW_MS)
    c = Compiled(t, schedule, jitter_offset(t.id, jitter), window, signature(t))
    set_here = [name for name in _SET_BY_TRIGGER if name in t.job]
    if set_here:
        raise ValueError(f"job: {set_here[0]} is set by the trigger; leave it out")
    try:
        c.job(occurrence_id(t.id, 0), dedup_of(t.id, 0))
    except InvalidJob as exc:
        raise ValueError(str(exc)) from None
    return c


def _bounded(name: str, text: str, most_ms: int) -> int:
    try:
        value = parse_duration_ms(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if value > most_ms:
        raise ValueError(f"{name}: {text} is over the bound of {most_ms // 3_600_000}h")
    return value


def file_problems(triggers: Sequence[Trigger]) -> list[str]:
    """Why a triggers.json is broken: the first problem of each bad trigger, and duplicates."""
    problems = []
    seen: set[str] = set()
    for i, t in enumerate(triggers):
        if t.id in seen:
            problems.append(f"triggers[{i}]: id {t.id!r} appears twice")
        seen.add(t.id)
        try:
            compile_trigger(t)
        except (ValueError, BadSchedule) as exc:
            problems.append(f"triggers[{i}] ({t.id}): {exc}")
    return problems


def compile_all(triggers: Sequence[Trigger]) -> list[Compiled]:
    """A good file's triggers (the watcher refused any other)."""
    return [compile_trigger(t) for t in triggers]


def jitter_offset(trigger_id: str, bound_ms: int) -> int:
    if bound_ms <= 0:
        return 0
    digest = hashlib.sha256(b"jitter\0" + trigger_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % (bound_ms + 1)


def signature(t: Trigger) -> str:
    body = {k: v for k, v in msgspec.to_builtins(t).items() if k != "enabled"}
    return hashlib.sha256(_encode.encode(body)).hexdigest()[:12]


def fingerprint(triggers: Sequence[Trigger]) -> str:
    """The digest a host publishes: equal on two hosts when they would mint the same jobs."""
    h = hashlib.sha256()
    for t in sorted(triggers, key=lambda t: t.id):
        h.update(_encode.encode(msgspec.to_builtins(t)) + b"\n")
    for name in sorted({t.tz for t in triggers}):
        h.update(f"{name}={_zone_or_name(name)}\n".encode())
    return h.hexdigest()[:16]


def _zone_or_name(name: str) -> str:
    try:
        return zone_digest(name)
    except BadSchedule:
        return "?"


def occurrence_id(trigger_id: str, at_ms: int) -> str:
    return f"{trigger_id}.{time.strftime('%Y%m%dT%H%M%S', time.gmtime(at_ms // 1000))}Z"


def manual_id(trigger_id: str) -> str:
    return f"{trigger_id}.run.{new_id()}"


def dedup_of(trigger_id: str, at_ms: int, *, manual: bool = False) -> str:
    return f"trigger:{trigger_id}:{'run:' if manual else ''}{at_ms}"


def origin(document: Any) -> Origin | None:
    """The trigger and occurrence a job document names in its dedup key; None for any other."""
    try:
        dedup = msgspec.json.decode(document).get("dedup") if document else None
    except (msgspec.DecodeError, AttributeError):
        return None
    return dedup_origin(dedup if isinstance(dedup, str) else None)


def dedup_origin(dedup: str | None) -> Origin | None:
    found = _DEDUP.fullmatch(dedup) if dedup else None
    if found is None:
        return None
    return Origin(found.group(1), int(found.group(3)), bool(found.group(2)))
