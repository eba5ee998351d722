"""The job document and the records dispatch writes, as msgspec structs.

A size follows the grammar and bounds of `dispatch.config.units`; no text may hold a NUL byte
(no container can take one); a local job goes to its host's own queue (`jobs@<host>`), since its
folder is on one machine.

A job is validated twice: by the submitter and again by the daemon that picks it up (it must
not trust what it reads from Redis). `v` is the document's version: a submitter refuses a `v`
it does not know; a daemon that reads a newer `v` defers the job `newer-release` instead of
misreading it, so a fleet can upgrade one host at a time. A document carries the lowest version
that can hold it (`encode_job`): v1, or v2 when an env value is a secret reference
(`{"secret": "<profile>/<name>"}`, resolved on the running host at start: dispatch.secrets), so a
host of a release before references waits for its upgrade rather than refusing the job.

A job may not set the env names the runner owns (`env_name_reserved`): the egress proxy's
variables, which carry the job's own proxy credentials and whose lower-case forms programs read
too, and `DISPATCH_*`, dispatch's own. HOME stays the job's to set: the docker runner documents
that a job's own HOME wins over the tmpfs it mounts (docs/operating/security.md, The
container), and the process runner lets the job's env win over what it inherits.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Literal, cast

import msgspec

from dispatch.config.units import check_cpus, parse_memory
from dispatch.egress.rules import parse_rule
from dispatch.errors import InvalidJob
from dispatch.reasons import ENV_NAME_RESERVED, Outcome

JOB_VERSION = 2  # the newest this build reads
FIRST_VERSION = 1
SECRET_VERSION = 2  # the first version whose env may hold secret references
MAX_JOB_BYTES = 64 * 1024
DEFAULT_ATTEMPTS = 3
DEFAULT_TIMEOUT_MS = 30 * 60 * 1000
MAX_JOB_USD = 1_000_000
MIN_JOB_USD = 0.000001  # one micro-dollar: the spend ledgers count whole ones

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_QUEUE = re.compile(r"jobs(@[A-Za-z0-9][A-Za-z0-9._-]{0,62})?")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROXY_ENV = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"})
# a name both checks above let through, in one match: most jobs' names are, and then neither
# check's sentence needs building (`env_name_reserved` says why one is not)
_FREE_ENV_NAME = re.compile(
    r"(?!DISPATCH_)(?!(?i:HTTPS?_PROXY|NO_PROXY|ALL_PROXY)\Z)[A-Za-z_][A-Za-z0-9_]*", re.ASCII
)
# never starting with "-": the name is put into the resolver's argv, where it must not be an option
_SECRET_REF = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._-]{0,63})/([A-Za-z0-9_][A-Za-z0-9._/:@+=-]{0,255})"
)

Kind = Literal["plain", "local", "forge"]
State = Literal["waiting", "delayed", "active", "completed", "failed", "cancelled"]


class Size(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    memory: str | None = None
    cpus: float | None = None


class WaitFor(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One condition: an instant (`after`, ISO-8601) or a declared check profile."""

    after: str | None = None
    profile: str | None = None


class SecretRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An env value given by reference: `<profile>/<name>`, resolved by a profile of
    secrets.json on the host that runs the job. Only the reference is ever stored."""

    secret: str

    @property
    def profile(self) -> str:
        return self.secret.partition("/")[0]

    @property
    def name(self) -> str:
        return self.secret.partition("/")[2]


def target_text(kind: str, repo: str | None, number: int | None, folder: str | None) -> str:
    """A job's target from its fields (`Job.target`), also for a reader that decodes no more."""
    if kind == "forge":
        return f"{repo}#{number}" if number is not None else str(repo)
    if kind == "local" and folder:
        return os.path.basename(folder.rstrip("/")) or "/"
    return ""


class Job(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    forbid_unknown_fields=True,
    omit_defaults=True,
):
    id: str
    v: int = FIRST_VERSION
    queue: str = "jobs"
    kind: Kind = "plain"
    folder: str | None = None
    forge: str | None = None
    repo: str | None = None
    number: int | None = None
    image: str | None = None
    command: list[str] = msgspec.field(default_factory=list)
    env: Mapping[str, str | SecretRef] = msgspec.field(default_factory=dict)
    project: str | None = None
    size: Size | None = None
    provider: str | None = None
    model: str | None = None
    wait_for: list[WaitFor] = msgspec.field(default_factory=list)
    dedup: str | None = None
    trigger: str | None = None  # the trigger that minted the job: part of its wait identity
    parent_job_id: str | None = None
    attempts: int = DEFAULT_ATTEMPTS
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    force: bool = False
    max_cost_usd: float | None = None  # this job's dollar cap, reserved at start
    urgent: bool = False  # may start inside a spend cap's soft-hold band
    egress: list[str] = msgspec.field(default_factory=list)  # narrows the allow-list, never widens

    def target(self) -> str:
        """What the job works on, safe to log fleet-wide: a repo ref or a folder basename."""
        return target_text(self.kind, self.repo, self.number, self.folder)

    def plain_env(self) -> dict[str, str]:
        """The env values given as values (what the document itself holds)."""
        if not self.has_secret_refs():
            return cast("dict[str, str]", dict(self.env))  # no reference: every value is a str
        return {k: v for k, v in self.env.items() if isinstance(v, str)}

    def secret_refs(self) -> dict[str, SecretRef]:
        """The env values given by reference: variable -> reference."""
        if not self.has_secret_refs():
            return {}
        return {k: v for k, v in self.env.items() if isinstance(v, SecretRef)}

    def has_secret_refs(self) -> bool:
        """Whether any env value is given by reference. Asked several times a pickup, so the
        types are compared in C, no dict built (a value decodes as exactly str or SecretRef)."""
        return bool(self.env) and SecretRef in map(type, self.env.values())


class _Head(msgspec.Struct):
    v: int = FIRST_VERSION


_job_decoder = msgspec.json.Decoder(Job)
_head_decoder = msgspec.json.Decoder(_Head)
encoder = msgspec.json.Encoder()


def new_id() -> str:
    """A time-sortable id: 12 hex digits of epoch ms, then 8 random hex digits."""
    return f"{time.time_ns() // 1_000_000:012x}{secrets.token_hex(4)}"


def peek_version(raw: bytes | str) -> int:
    """The document's `v` without trusting the rest of it (0 when unreadable)."""
    try:
        v = _head_decoder.decode(raw).v
    except (msgspec.DecodeError, msgspec.ValidationError):
        return 0
    return v if isinstance(v, int) else 0


def checked_document(job: Job) -> bytes:
    """Encoded, then decoded as a daemon would: a job built in code gets the same checks."""
    try:
        raw = encode_job(job)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidJob(one_line(f"job document: {exc}")) from None
    decode_job(raw)
    return raw


def decode_job(raw: bytes | str) -> Job:
    """Decode and validate a job document; raise InvalidJob with a one-line reason."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_JOB_BYTES:
        raise InvalidJob(f"job document is {size} bytes, over the {MAX_JOB_BYTES}-byte cap")
    try:
        job = _job_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidJob(one_line(f"job document: {exc}")) from None
    # JSON writes a NUL only as the escape \u0000 (a raw NUL byte is malformed): a document
    # without one holds none, and its texts need no scan
    nul_free = b"\\u0000" not in raw if isinstance(raw, bytes) else "\\u0000" not in raw
    validate(job, nul_free)
    return job


def one_line(text: str) -> str:
    """A reason fit for one line of stderr or a record field, whatever the input held."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def encode_job(job: Job) -> bytes:
    """The document, at the lowest version that holds it (a reference needs v2)."""
    if job.v < SECRET_VERSION and job.secret_refs():
        job = msgspec.structs.replace(job, v=SECRET_VERSION)
    raw = encoder.encode(job)
    if len(raw) > MAX_JOB_BYTES:
        raise InvalidJob(f"job document is {len(raw)} bytes, over the {MAX_JOB_BYTES}-byte cap")
    return raw


def validate(job: Job, nul_free: bool = False) -> None:
    for reason in _problems(job, nul_free):
        raise InvalidJob(reason)


def _problems(job: Job, nul_free: bool = False) -> list[str]:
    problems: list[str] = []
    if not FIRST_VERSION <= job.v <= JOB_VERSION:
        known = f"{FIRST_VERSION} to {JOB_VERSION}"
        problems.append(f"job version {job.v} is not known to this build (knows {known})")
    if not _ID.fullmatch(job.id):
        problems.append("id must be 1-128 of A-Z a-z 0-9 . _ - and start with a letter or digit")
    if job.queue != "jobs" and not _QUEUE.fullmatch(job.queue):
        problems.append("queue must be 'jobs' or 'jobs@<host>'")
    if job.kind != "plain" or job.folder or job.repo:
        problems += _kind_problems(job)
    if not 1 <= job.attempts <= 100:
        problems.append("attempts must be between 1 and 100")
    if not 1_000 <= job.timeout_ms <= 7 * 24 * 3_600_000:
        problems.append("timeout must be between 1 second and 7 days")
    # the common job has no size or waitFor: skip their checks without building lists
    if job.size is not None:
        problems += _size_problems(job.size)
    if job.wait_for or job.trigger is not None:
        problems += _wait_problems(job)
    if job.egress:
        problems += _egress_problems(job.egress)
    return problems + cost_problems(job.max_cost_usd) + _text_problems(job, nul_free)


def _egress_problems(hosts: list[str]) -> list[str]:
    problems = []
    for text in hosts[:101]:
        try:
            parse_rule(text)
        except ValueError as exc:
            problems.append(f"egress: {exc}")
    if len(hosts) > 100:
        problems.append("egress: at most 100 hosts")
    return problems


def _text_problems(job: Job, nul_free: bool) -> list[str]:
    problems = []
    # most jobs have no env, or names all free: no comprehension to build
    if job.env and not all(map(_FREE_ENV_NAME.fullmatch, job.env)):
        problems += _env_name_problems(job.env)
    problems += [
        f"env {k}: secret reference {v.secret!r} is not <profile>/<name>"
        for k, v in job.secret_refs().items()  # none built for a job with no reference
        if not _SECRET_REF.fullmatch(v.secret)
    ]
    if not nul_free and _has_nul(job):
        problems.append("a NUL byte cannot be passed to a container (command, env or names)")
    return problems


def _env_name_problems(env: Mapping[str, str | SecretRef]) -> list[str]:
    problems = [
        f"env name {k!r} is not a valid variable name" for k in env if not _ENV_NAME.fullmatch(k)
    ]
    return problems + [
        f"{ENV_NAME_RESERVED}: env {k} is the runner's to set: {why}"
        for k in env
        if (why := env_name_reserved(k))
    ]


def env_name_reserved(name: str) -> str:
    """Why a job may not set `name` ("" when it may)."""
    if name.upper() in _PROXY_ENV:
        return "the proxy variables point the job at its egress proxy"
    if name.startswith("DISPATCH_"):
        return "DISPATCH_* names are dispatch's own"
    return ""


def cost_problems(usd: float | None) -> list[str]:
    # a finite amount above 0: a job that may spend nothing, or an unbounded amount, is no cap
    if usd is None or (math.isfinite(usd) and MIN_JOB_USD <= usd <= MAX_JOB_USD):
        return []
    if math.isfinite(usd) and 0 < usd < MIN_JOB_USD:  # it would reserve $0: no cap at all
        return [f"maxCostUsd must be at least {MIN_JOB_USD:f} (a micro-dollar, the ledgers' unit)"]
    return [f"maxCostUsd must be above 0 and at most {MAX_JOB_USD:.0f}"]


def _has_nul(job: Job) -> bool:
    """Whether any free-form text holds NUL (the patterned fields cannot): the engine would
    refuse it at create, an infrastructure failure that spends attempts."""
    texts = [job.forge, job.image, job.project, job.provider, job.model, job.dedup]
    texts += [job.parent_job_id, *job.command, *job.plain_env().values()]
    texts += [t for w in job.wait_for for t in (w.after, w.profile)]
    return "\0" in "".join(filter(None, texts))  # one scan in C: this runs at every pickup


def _kind_problems(job: Job) -> list[str]:
    if job.kind == "local":
        if not job.folder or not os.path.isabs(job.folder) or "\0" in job.folder:
            return ["a local job needs an absolute folder"]
        if "@" not in job.queue:  # every host reads the shared queue; the folder is on one
            return ["a local job goes to its host's own queue, jobs@<host>, not the shared one"]
    elif job.kind == "forge":
        if not job.repo or not _REPO.fullmatch(job.repo):
            return ["a forge job needs repo as owner/name"]
        if job.number is not None and job.number < 1:
            return ["number must be a positive integer"]
    elif job.folder or job.repo:
        return ["folder or repo given but kind is plain; use kind local or forge"]
    return []


def _size_problems(size: Size) -> list[str]:
    """The one grammar and bounds of dispatch.config.units: no job runs without limits."""
    try:
        if size.memory is not None:
            parse_memory(size.memory)
        if size.cpus is not None:
            check_cpus(size.cpus)
    except ValueError as exc:
        return [f"size: {exc}"]
    return []


def _wait_problems(job: Job) -> list[str]:
    problems = [p for p in map(_wait_problem, job.wait_for) if p]
    if job.trigger is not None and not _ID.fullmatch(job.trigger):
        problems.append("trigger must be 1-128 of A-Z a-z 0-9 . _ -")
    return problems


def _wait_problem(w: WaitFor) -> str:
    if (w.after is None) == (w.profile is None):
        return "each waitFor needs exactly one of after or profile"
    if w.after is not None and instant_ms(w.after) is None:
        return f"waitFor after {w.after!r} is not an ISO-8601 instant with an offset (Z, +01:00)"
    if w.profile is not None and not _ID.fullmatch(w.profile):
        return "a waitFor profile name is 1-128 of A-Z a-z 0-9 . _ -"
    return ""


def instant_ms(text: str) -> int | None:
    """Epoch ms of an ISO-8601 instant that names its offset; None for anything else."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return None if moment.tzinfo is None else int(moment.timestamp() * 1000)


class Result(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A finished job's final word, kept with the queue until retention drops it."""

    state: State
    outcome: Outcome
    reason: str = ""
    sentence: str = ""  # a refusal's reason in plain words, as the refusing gate put it
    exit_code: int | None = None
    host: str = ""
    ended_at: str = ""


class DeferRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Why a job waits: the reason from the catalog, until when, and who holds what it needs."""

    reason: str
    until: str
    at: str
    host: str = ""
    project: str | None = None
    holder: str | None = None
    detail: str = ""
    attempt: int = 0
    since: str = ""  # first deferral for this same reason, kept by the finishing script


class AtStart(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The host as a run found it when admitted (`dispatch capacity`): its running jobs with
    this one, its slots, and the memory (bytes) and CPUs promised against its job budget."""

    running: int
    slots: int
    memory: int = 0
    memory_limit: int = 0
    cpus: float = 0.0
    cpus_limit: float = 0.0


class RunRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One attempt's story. Targets are repo refs or folder basenames, never full paths."""

    id: str
    attempt: int
    host: str
    queue: str
    outcome: Outcome
    reason: str = ""
    sentence: str = ""  # a refusal's reason in plain words, as the refusing gate put it
    exit_code: int | None = None
    queued_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    project: str | None = None
    target: str = ""
    slot_ms: int = 0
    prior_slot_ms: int = 0
    size: Size | None = None
    image: str | None = None
    container: str | None = None
    output: str | None = None
    output_lost: bool = False  # the output stops short: the disk failed while it was written
    kill: str | None = None
    claim: str = ""  # the lock token of the claim that wrote it; "" from releases before it
    degraded: tuple[str, ...] = ()  # fleet leases held without Redis's word (failed open)
    budget_reserved: bool = False  # the run was charged to spend caps (not refunded)
    cost_usd: float | None = None  # charged: the reported cost, else the reserved cap
    tokens: int | None = None  # as the job reported them (input + output)
    admitted_at: str | None = None  # when every gate had let it through, just before the start
    at_start: AtStart | None = None
    memory: int | None = None  # the size it ran with, bytes (its own, its project's or default)

    @property
    def run_id(self) -> str:
        return f"{self.id}#{self.attempt}"


def iso(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds."""
    if ms is None:
        return None
    last = _last
    if ms == last.ms:  # a run's start, end and result often share their millisecond
        return last.text
    seconds = ms // 1000
    second = _SECONDS.get(seconds)
    if second is None:  # records stamp instants of a few seconds: format each second once
        if len(_SECONDS) >= 64:
            _SECONDS.clear()
        second = _SECONDS[seconds] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    text = second + _MILLIS[ms - seconds * 1000]
    last.ms, last.text = ms, text
    return text


class _Last:
    """The instant `iso` formatted last (one loop per process: no lock needed). An instance:
    setting a class's attributes would invalidate the interpreter's caches for it."""

    __slots__ = ("ms", "text")

    def __init__(self) -> None:
        self.ms: int | None = None
        self.text = ""


_last = _Last()


_SECONDS: dict[int, str] = {}
_MILLIS = [f".{n:03d}Z" for n in range(1000)]  # a format spec per call cost a third of iso
