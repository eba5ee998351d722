"""Every reason dispatch records, in one catalogue: its token, its kind, where it comes from,
what it means in plain words and, for a job that waits, when it is looked at again.

A token is what Redis and the records store. Tokens are plain strings and never change once
released, so records written by any release stay readable. Kinds:

    defer     the job waits in `delayed` and spends no attempt (`dispatch why` says why)
    refusal   the job ends `failed`, outcome `policy`, and is not retried
    outcome   how a run ended: a run record's `outcome`
    abort     why a running job was stopped, then recorded as the run's reason
    infra     something around the job failed, not the job itself

Each reason is declared once, below, by the statement that names its constant. A deferral's
re-check delay is declared with it (`delay_ms`, read with `delay_ms(token)`), as is the delay
after which an abort that is a fault hands its claim back: the delays differ per gate, so a
waiting job's reason can be told from its due time. Where the delay is not one fixed figure
(a backoff, a window's end), `timing` says how it is found; the gate computes it.

Some tokens carry a value: `exit_code(n)` (`exit-<n>`), `killed_by(n)` (`signal-<n>`), and
`with_error(CREATE_FAILED, exc)` (`create-failed: <the engine's message>`, scrubbed of
credential shapes: dispatch.secrets.patterns). `lookup` finds the entry for any stored token,
those included, and None for a token from a newer release.

`python -m dispatch.reasons --markdown` prints the table of gates, reasons and re-check delays
that docs/operating/waiting.md shows (`--write FILE` puts it between FILE's `reasons:begin` and
`reasons:end` markers); `STAGES` orders it as a pickup meets the gates.

Nothing else spells a token: `tests/test_reasons.py` fails on a string literal equal to one.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeVar

Kind = Literal["defer", "refusal", "outcome", "abort", "infra"]
Outcome = Literal["completed", "policy", "failed", "infra", "cancelled"]
_O = TypeVar("_O", bound=Outcome)


@dataclass(frozen=True, slots=True)
class Reason:
    token: str
    kind: Kind
    source: str  # the gate or component that gives it
    sentence: str  # in plain words, for an operator
    delay_ms: int | None = None  # its re-check: a fixed delay, the first of a backoff, or a floor
    max_delay_ms: int | None = None  # where that backoff stops
    timing: str = ""  # how the re-check is timed when not by one fixed delay ({delay}, {max})

    def __str__(self) -> str:
        return self.token


_DECLARED: list[Reason] = []  # in the order declared; frozen into ENTRIES below


def _declare(reason: Reason) -> str:
    _DECLARED.append(reason)
    return reason.token


def _outcome(token: _O, sentence: str) -> _O:
    _DECLARED.append(Reason(token, "outcome", "run record", sentence))
    return token


def _defer(
    token: str,
    source: str,
    sentence: str,
    delay_ms: int | None = None,
    *,
    max_delay_ms: int | None = None,
    timing: str = "",
) -> str:
    return _declare(Reason(token, "defer", source, sentence, delay_ms, max_delay_ms, timing))


def _refusal(token: str, source: str, sentence: str) -> str:
    return _declare(Reason(token, "refusal", source, sentence))


def _abort(token: str, source: str, sentence: str, hand_back_ms: int | None = None) -> str:
    return _declare(Reason(token, "abort", source, sentence, hand_back_ms))


def _infra(token: str, source: str, sentence: str) -> str:
    return _declare(Reason(token, "infra", source, sentence))


_SCOPE_DELAY_MS = 5_000  # every reason of the scope gate
_WAIT_FLOOR_MS = 11_000  # the floor of a wait-throttled re-check, and a wait-aborted one's delay

# -- outcomes -------------------------------------------------------------------------------
COMPLETED: Final = _outcome("completed", "the job ran and exited 0")
POLICY: Final = _outcome(
    "policy", "a rule said no: a gate or the job itself refused it; not retried"
)
FAILED: Final = _outcome(
    "failed", "the job failed for good: it ran out of time, or dispatch hit a bug"
)
INFRA: Final = _outcome("infra", "something around the job failed; retried while attempts remain")
CANCELLED: Final = _outcome("cancelled", "an operator cancelled the job")

# -- deferrals ------------------------------------------------------------------------------
NEWER_RELEASE: Final = _defer(
    "newer-release",
    "head",
    "a config file or the job itself was written by a newer release of dispatch; "
    "upgrade this host or set the file back",
    10 * 60_000,
)
PAUSE_WINDOW: Final = _defer(
    "pause-window",
    "pause window",
    "a pause window covers the job until its end",
    timing="at the window chain's end",
)
SIZE_NEVER_FITS: Final = _defer(
    "size-never-fits",
    "size",
    "the job is larger than this host's job budget; another host may fit it",
    60_000,
)
HOST_SLOT: Final = _defer(
    "host-slot", "host slot", "every slot of this host (DISPATCH_CONCURRENCY) is busy", 3_000
)
SCOPE_FOLDER: Final = _defer(
    "scope-folder",
    "scope",
    "another job is working in the same folder, or in one above or inside it",
    _SCOPE_DELAY_MS,
)
CHAINED: Final = _defer(
    "chained", "scope", "the job waits for its parent's folder", _SCOPE_DELAY_MS
)
SCOPE_REPO: Final = _defer(
    "scope-repo", "scope", "the repo's limit of concurrent jobs is reached", _SCOPE_DELAY_MS
)
SCOPE_PROJECT: Final = _defer(
    "scope-project", "scope", "the project's limit of concurrent jobs is reached", _SCOPE_DELAY_MS
)
ENDPOINT: Final = _defer(
    "endpoint", "endpoint", "every slot of an endpoint serving the job's model is busy", 7_000
)
SECRET_ELSEWHERE_DELAY_MS = 10_000
SECRET_PROFILE_ELSEWHERE: Final = _defer(
    "secret-profile-elsewhere",
    "secret profiles",
    "an env value of the job refers to a secret profile this host does not declare, and a "
    "live host that does (its heartbeat says so) may take it; with none, it is looked at once "
    "more 30 s later, then refused secret-profile-unknown",
    SECRET_ELSEWHERE_DELAY_MS,
)
HOST_BUDGET: Final = _defer(
    "host-budget",
    "host budget",
    "the running jobs leave too little memory or CPU of this host's job budget",
    30_000,
)
# 2 s, doubling with each faulted pickup in a row, at most 16 s (none of 2, 4, 8, 16 is another
# reason's delay). Short: Redis is usually back within seconds.
REDIS_UNAVAILABLE: Final = _defer(
    "redis-unavailable",
    "processor",
    "Redis failed a call while the job's gates were checked (an error reply such as READONLY "
    "or OOM, no answer in time, or no connection); every hold was given back, and it is "
    "looked at again soon, spending no attempt",
    2_000,
    max_delay_ms=16_000,
    timing="{delay}, doubling to {max} while pickups keep meeting faults",
)
RETRY: Final = _defer(
    "retry",
    "processor",
    "an infrastructure failure ended the last attempt; it runs again",
    timing="the retry backoff, doubling with each attempt",
)
# The first re-check; then about half the time waited so far, at most the cap (engine_wait.py).
ENGINE_UNAVAILABLE: Final = _defer(
    "engine-unavailable",
    "processor",
    "the Docker engine could not be reached, so the job never started; it waits, spending "
    "no attempt, and after DISPATCH_ENGINE_WAIT_MAX it is retried as an infrastructure failure",
    2_000,
    max_delay_ms=60_000,
    timing="{delay}, backing off to {max}",
)
# Past the lane's finish retries (0.5 s) and a keep's first retry (1 s).
OUTCOME_WAIT: Final = _defer(
    "outcome-wait",
    "settled record",
    "the job's previous claim stalled; before running it again, dispatch waits a moment for "
    "that run's outcome, which a host cut off from Redis delivers once it answers",
    3_000,
)
EGRESS_UNAVAILABLE: Final = _defer(
    "egress-unavailable",
    "egress",
    "the job network, its firewall rules or the egress proxy is not in place on this host, "
    "and a job never runs unprotected; it waits, spending no attempt (dispatch doctor says "
    "what is missing)",
    4_000,  # the egress guard looks again every 5 s
)
SOFT_HOLD: Final = _defer(
    "soft-hold",
    "spend caps",
    "a spend cap's soft-hold band (softHoldPct) is reached; the job waits until that "
    "window turns, unless it is urgent (submit --urgent)",
    timing="until the window turns",
)
WAIT_AFTER: Final = _defer(
    "wait-after",
    "wait-for",
    "the job waits for its `after` instant",
    timing="at the `after` instant",
)
WAIT_SUPERSEDE: Final = _defer(
    "wait-supersede",
    "wait-for",
    "another job with the same dedup key holds the wait, and whether it is still alive could "
    "not be read; asked again soon",
    15_000,
)
WAIT_THROTTLED: Final = _defer(
    "wait-throttled",
    "wait-for",
    "every wait check slot (DISPATCH_WAIT_CHECK_SLOTS, DISPATCH_WAIT_FLEET_CHECKS) was busy, "
    "so the job's checks could not run yet",
    _WAIT_FLOOR_MS,
    timing="a quarter of the check interval, at least {delay}",
)
WAIT_HOLD: Final = _defer(
    "wait-hold",
    "wait-for",
    "a wait check answered not yet (or could not tell)",
    timing="the check interval (DISPATCH_WAIT_INTERVAL), backing off",
)
WAIT_ABORTED: Final = _defer(
    "wait-aborted",
    "wait-for",
    "a wait check was cut short (shutdown, cancel or a lost claim); nothing was counted",
    _WAIT_FLOOR_MS,
)

# -- refusals -------------------------------------------------------------------------------
INVALID_JOB: Final = _refusal(
    "invalid-job", "processor", "the job document in Redis is not a valid job"
)
ENV_NAME_RESERVED: Final = _refusal(
    "env-name-reserved",
    "processor",
    "the job sets an env name the runner owns: HTTP_PROXY, HTTPS_PROXY, NO_PROXY or ALL_PROXY "
    "(in any case), or one starting DISPATCH_; dispatch submit refuses it, and a document that "
    "reached Redis some other way is refused invalid-job at pickup, saying this",
)
PROJECT_SIZE_INVALID: Final = _refusal(
    "project-size-invalid", "size", "the memory or cpus of the job's project row is not valid"
)
JOB_SIZE_INVALID: Final = _refusal(
    "job-size-invalid",
    "size",
    "the job's memory or CPUs lie outside dispatch's bounds (6m to 1t, 0.01 to 512 CPUs), "
    "and no container is made without both limits",
)
JOB_SIZE_EXCEEDS_HOST: Final = _refusal(
    "job-size-exceeds-host",
    "size",
    "the job is larger than this host's job budget, and no other host may take it",
)
JOB_SIZE_EXCEEDS_SHARE: Final = _refusal(
    "job-size-exceeds-share",
    "size",
    "the job is larger than its project's share of this host's job budget",
)
SETTINGS_OVERLAY_INVALID: Final = _refusal(
    "settings-overlay-invalid",
    "settings overlay",
    "settings.json is not valid, and the job is not run on settings nobody meant",
)
DIRTY_TREE: Final = _refusal(
    "dirty-tree",
    "dirty tree",
    "the job's folder has uncommitted changes, or git could not tell; "
    "commit or stash them, or submit with --force",
)
REPO_UNREADABLE: Final = _refusal(
    "repo-unreadable",
    "dirty tree",
    "the git repository around the job's folder cannot be checked safely: it reaches "
    "outside DISPATCH_ALLOWED_ROOTS (its .git file, alternates, a symlink) or a file git "
    "needs cannot be read; repair it, or submit with --force",
)
JOB_REFUSED: Final = _refusal(
    "job-refused", "runner", "the job exited 2: it refused the work itself"
)
IMAGE_MISSING: Final = _refusal(
    "image-missing",
    "runner",
    "no image was named, or it is not on this host (dispatch never pulls images)",
)
FOLDER_NOT_ALLOWED: Final = _refusal(
    "folder-not-allowed",
    "runner",
    "the job's folder is not a folder under DISPATCH_ALLOWED_ROOTS",
)
JOB_USER_ROOT: Final = _refusal(
    "job-user-root",
    "job user",
    "the job's folder belongs to root, and a local job runs as its folder's owner, never as "
    "root unasked; chown the folder to the user the job should run as, or set "
    "DISPATCH_CONTAINER_USER",
)
MOUNT_MISMATCH: Final = _refusal(
    "mount-mismatch",
    "runner",
    "the engine mounted something other than the job's checked folder, so the container was "
    "killed at once; someone changed the path or the engine's mounts",
)
SECRET_PROFILE_UNKNOWN: Final = _refusal(
    "secret-profile-unknown",
    "secret profiles",
    "an env value of the job refers to a secret profile that secrets.json on this host does "
    "not declare, and no live host does (looked at twice, 30 s apart; on a host queue, at "
    "once); declare it or fix the reference",
)
TRIGGER_OVERLAP: Final = _refusal(
    "trigger-overlap",
    "trigger overlap",
    "the trigger's previous job was still waiting or running at this occurrence, and the "
    "trigger says overlap skip: this occurrence is skipped",
)
TRIGGER_MISSED: Final = _refusal(
    "trigger-missed",
    "trigger catch-up",
    "no daemon was minting when this occurrence came (downtime), and the trigger's catch-up "
    "policy does not run it late: it was cancelled before it started",
)
NO_COMMAND: Final = _refusal("no-command", "runner", "the job has no command to run")
COMMAND_NOT_FOUND: Final = _refusal(
    "command-not-found", "runner", "the job's command could not be found or started"
)
OVER_BUDGET: Final = _refusal(
    "over-budget",
    "spend caps",
    "the fleet's run cap (the * row of scoped-limits.json) for the day, week or month is "
    "reached; nothing was counted",
)
SCOPE_CAP: Final = _refusal(
    "scope-cap",
    "spend caps",
    "the run cap of the job's repo, folder, project or model for the day, week or month is "
    "reached; nothing was counted",
)
DOLLAR_CAP: Final = _refusal(
    "dollar-cap",
    "spend caps",
    "a dollar cap for the day, week or month has no room for the job's maxCostUsd; "
    "nothing was counted",
)
DAILY_TOKEN_CAP: Final = _refusal(
    "daily-token-cap",
    "spend caps",
    "the day's tokens of a ledger are already at its dailyTokens cap; nothing was counted",
)
WAIT_SUPERSEDED: Final = _refusal(
    "wait-superseded",
    "wait-for",
    "another job with the same dedup key already waits, or already finished waiting, on "
    "the same conditions",
)
WAIT_UNREADABLE: Final = _refusal(
    "wait-unreadable",
    "wait-for",
    "a waitFor condition this release cannot read (written by a newer one?), or one that "
    "cannot be asked for this job",
)
WAIT_PROFILE_UNKNOWN: Final = _refusal(
    "wait-profile-unknown",
    "wait-for",
    "a waitFor profile is not declared in wait-profiles.json",
)
WAIT_AFTER_BEYOND_MAX: Final = _refusal(
    "wait-after-beyond-max",
    "wait-for",
    "the job's `after` instant is further out than DISPATCH_WAIT_AFTER_MAX",
)
WAIT_REFUSED: Final = _refusal(
    "wait-refused", "wait-for", "a wait check answered that its condition will never clear"
)
WAIT_UNANSWERABLE: Final = _refusal(
    "wait-unanswerable",
    "wait-for",
    "a wait check could not tell DISPATCH_WAIT_MAX_FAULTS times in a row",
)
WAIT_EXPIRED: Final = _refusal(
    "wait-expired",
    "wait-for",
    "the job waited DISPATCH_WAIT_MAX, or was checked DISPATCH_WAIT_MAX_CHECKS times, "
    "without its conditions clearing",
)

# -- aborts: a fault's delay is the one after which its claim is handed back ----------------
OPERATOR_CANCEL: Final = _abort(
    "operator-cancel", "operator", "an operator cancelled the job (dispatch cancel)"
)
JOB_TIMEOUT: Final = _abort(
    "job-timeout",
    "processor",
    "the job ran past its timeout and was stopped; not retried, it would time out again",
)
LOCK_LOST: Final = _abort(
    "lock-lost",
    "lock keeper",
    "this host lost the job's lock, or could not renew it in time, so the run was stopped "
    "before another host could take the job; it goes back, spending no attempt",
    0,
)
LEASE_LOST: Final = _abort(
    "lease-lost",
    "fleet lease",
    "a fleet lease the job held lapsed; the run was stopped and goes back, spending no attempt",
    1_500,
)
SHUTDOWN: Final = _abort(
    "shutdown",
    "worker",
    "its host shut down before the job ended; it waits for a pickup, spending no attempt",
    1_000,
)

# -- infrastructure -------------------------------------------------------------------------
NOT_STARTED: Final = _infra(
    "not-started", "runner", "the job never started, and the runner did not say why"
)
ABORTED_BEFORE_START: Final = _infra(
    "aborted-before-start", "runner", "the run was stopped before it started"
)
ABORT_UNCONFIRMED: Final = _infra(
    "abort-unconfirmed",
    "processor",
    "(records of older releases) the run did not confirm it stopped after an abort",
)
EXIT_UNKNOWN: Final = _infra(
    "exit-unknown",
    "runner",
    "the job started, then its exit could not be read (the engine or process went missing)",
)
OOM: Final = _infra("oom", "runner", "the job ran out of memory and was killed")
STOP_TIMEOUT: Final = _infra(
    "stop-timeout", "runner", "the job did not stop within its grace and was killed"
)
SIGKILLED: Final = _infra(
    "sigkill", "runner", "something other than dispatch killed the job (SIGKILL)"
)
DOCKER_UNAVAILABLE: Final = _infra(
    "docker-unavailable", "docker runner", "the Docker engine did not answer"
)
DOCKER_ERROR: Final = _infra(
    "docker-error", "docker runner", "the Docker engine failed while the job ran"
)
CREATE_FAILED: Final = _infra(
    "create-failed", "docker runner", "the Docker engine could not create the container"
)
START_FAILED: Final = _infra(
    "start-failed", "docker runner", "the Docker engine could not start the container"
)
ENGINE_RESTARTED: Final = _infra(
    "engine-restarted",
    "docker runner",
    "the Docker engine went away while the job ran and its container did not outlive it "
    "(no live-restore), or its exit could not be told from the engine's shutdown",
)
SECRET_UNRESOLVED: Final = _infra(
    "secret-unresolved",
    "secret resolver",
    "a secret the job refers to could not be resolved at start (the profile's command "
    "failed, timed out or printed nothing; the file is missing, not private or lacks the "
    "name); the job never started and is retried while attempts remain",
)
STALLED: Final = _infra(
    "stalled",
    "worker",
    "the job's host stopped renewing its lock too many times; it is not picked up again",
)
INTERNAL_ERROR: Final = _infra(
    "internal-error",
    "processor",
    "dispatch hit a bug handling the job; it failed for good, with the error recorded",
)

ENTRIES: Final[tuple[Reason, ...]] = tuple(_DECLARED)
CATALOGUE: Final[Mapping[str, Reason]] = {entry.token: entry for entry in ENTRIES}

_EXIT = "exit"
_SIGNAL = "signal"
_ERROR_CAP = 300  # an engine's message can be long; a record field should not be

# The two tokens that carry a number, catalogued by their form.
EXIT_N: Final = Reason(
    f"{_EXIT}-<code>",
    "infra",
    "runner",
    "the job exited neither 0 nor 2: an infrastructure failure, retried while attempts remain",
)
SIGNAL_N: Final = Reason(
    f"{_SIGNAL}-<number>", "infra", "process runner", "a signal killed the job"
)
_FAMILIES: Final[Mapping[str, Reason]] = {_EXIT: EXIT_N, _SIGNAL: SIGNAL_N}


def exit_code(code: int) -> str:
    """A run that exited neither 0 nor 2, as its reason."""
    return f"{_EXIT}-{code}"


def killed_by(signal_number: int) -> str:
    """A process killed by a signal other than SIGKILL, as its reason."""
    return f"{_SIGNAL}-{signal_number}"


def with_error(token: str, error: object) -> str:
    """A token followed by the message that explains it, cut to fit a record field. Every
    runner or engine message a record carries comes through here, so it is scrubbed of
    credential shapes here (an engine's message may quote the job's env), before the cut."""
    from dispatch.secrets.patterns import scrub_patterns  # compiled for errors alone: not at import

    return scrub_patterns(f"{token}: {error}")[:_ERROR_CAP]


def lookup(token: str) -> Reason | None:
    """The entry for a stored token; None for one this release does not know."""
    head = token.partition(": ")[0]  # create-failed: <the engine's message>
    found = CATALOGUE.get(head)
    if found is None:
        stem, _, number = head.rpartition("-")
        found = _FAMILIES.get(stem) if number.isdigit() else None
    return found


def delay_ms(token: str) -> int:
    """The re-check delay declared with `token`: fixed, the first of a backoff, or a floor."""
    return _declared_delay(token, CATALOGUE[token].delay_ms)


def max_delay_ms(token: str) -> int:
    """Where the re-check backoff declared with `token` stops."""
    return _declared_delay(token, CATALOGUE[token].max_delay_ms)


def _declared_delay(token: str, delay: int | None) -> int:
    if delay is None:
        raise LookupError(f"{token} declares no such re-check delay")
    return delay


# -- the table of gates, reasons and re-check delays ---------------------------------------


@dataclass(frozen=True, slots=True)
class Stage:
    """Where a job can wait or be refused: a gate, in the order a pickup meets them
    (gates/pipeline.py), or a component around the run."""

    source: str  # as its reasons name it (`Reason.source`)
    gate: str = ""  # the gate's `name`; "" for a component, which the table does not number
    when: str = ""  # the case it looks at, when it does not look at every job
    note: str = ""  # what it decides that no reason of its own records
    also: tuple[str, ...] = ()  # reasons of another stage that this one gives too


STAGES: Final[tuple[Stage, ...]] = (
    Stage("head", "head"),
    Stage(
        "settled record",
        "settled",
        note="a job picked up again after a stall, whose attempt already has the run record of "
        "a run that reached its own exit, ends with that outcome",
    ),
    Stage("trigger overlap", "trigger-overlap"),
    Stage(
        "folder",
        "folder",
        when="only local jobs",
        note="resolves the job's folder once: every later gate and the runner use that path",
        also=(FOLDER_NOT_ALLOWED,),
    ),
    Stage("project", "project", note="decides the job's project, from projects.json"),
    Stage("pause window", "pause"),
    Stage("secret profiles", "secret-profiles"),
    Stage(
        "job user",
        "job-user",
        when="only local jobs of the docker runner, DISPATCH_CONTAINER_USER unset",
    ),
    Stage("size", "size"),
    Stage("wait-for", "wait"),
    Stage("host slot", "host-slot", when="only without a host budget"),
    Stage("scope", "scope"),
    Stage("settings overlay", "overlay", also=(NEWER_RELEASE,)),
    Stage("egress", "egress", when="only on dispatch's own job network"),
    Stage("endpoint", "endpoint"),
    Stage(
        "host budget", "host-budget", when="only with DISPATCH_HOST_MEMORY or DISPATCH_HOST_CPUS"
    ),
    Stage("dirty tree", "dirty-tree", when="only local jobs not submitted with --force"),
    Stage("spend caps", "spend", when="only with spend caps"),
    Stage("runner"),
    Stage("processor"),
    Stage("lock keeper"),
    Stage("fleet lease"),
    Stage("worker"),
    Stage("trigger catch-up"),
)

_BEGIN = "<!-- reasons:begin -->"
_END = "<!-- reasons:end -->"


def waits_or_refuses(reason: Reason) -> bool:
    """Whether the table shows `reason`: a deferral, a refusal, or an abort handed back."""
    return reason.kind in ("defer", "refusal") or reason.delay_ms is not None


def markdown() -> str:
    """The table: a row for each reason a job waits or is refused for, by stage in order."""
    numbers = itertools.count(1)
    lines = ["| # | gate | reason recorded | re-check |", "|---|---|---|---|"]
    for stage in STAGES:
        lines += _rows(str(next(numbers)) if stage.gate else "-", stage)
    return "\n".join(lines) + "\n"


def _rows(label: str, stage: Stage) -> list[str]:
    cells = [(f"none: {stage.note}", "-")] if stage.note else []
    cells += [(_recorded(r), recheck(r)) for r in given_by(stage)]
    named = f"{stage.source} ({stage.when})" if stage.when else stage.source
    heads = [(label, named)] + [("", "")] * (len(cells) - 1)
    return [_row(*head, *cell) for head, cell in zip(heads, cells, strict=True)]


def given_by(stage: Stage) -> list[Reason]:
    """The reasons `stage` makes a job wait or refuses it for, as the table lists them."""
    own = [r for r in ENTRIES if r.source == stage.source and waits_or_refuses(r)]
    return own + [CATALOGUE[token] for token in stage.also]


def _recorded(reason: Reason) -> str:
    refused = "refused " if reason.kind == "refusal" else ""
    return f"{refused}`{reason.token}`: {reason.sentence}"


def recheck(reason: Reason) -> str:
    """When a job that waits for `reason` is looked at again, in the table's words."""
    if reason.delay_ms is None:
        return reason.timing or "-"
    first, most = reason.delay_ms, reason.max_delay_ms or reason.delay_ms
    return (reason.timing or "{delay}").format(delay=_duration(first), max=_duration(most))


def _duration(ms: int) -> str:
    if ms == 0:
        return "at once"
    if ms > 60_000 and ms % 60_000 == 0:
        return f"{ms // 60_000} min"
    return f"{ms / 1000:g} s"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def region(text: str) -> str:
    """What stands between the reasons:begin and reasons:end markers of `text`."""
    _, begin, rest = text.partition(_BEGIN)
    inside, end, _ = rest.partition(_END)
    if not (begin and end):
        raise ValueError(f"no {_BEGIN} ... {_END} region")
    return inside


def with_table(text: str) -> str:
    """`text` with the table between its markers, in place of what stood there."""
    head, tail = text.split(_BEGIN + region(text), 1)
    return f"{head}{_BEGIN}\n\n{markdown()}\n{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dispatch.reasons", description="The reason catalogue, as docs."
    )
    parser.add_argument(
        "--markdown", action="store_true", help="the table of gates, reasons and re-check delays"
    )
    parser.add_argument(
        "--write", type=Path, metavar="FILE", help="put it between FILE's reasons markers"
    )
    args = parser.parse_args(argv)
    if not args.markdown:
        parser.error("say what to print: --markdown")
    if args.write is None:
        sys.stdout.write(markdown())
        return 0
    try:
        page = with_table(args.write.read_text())
    except (OSError, ValueError) as exc:  # no such file, or no markers in it
        raise SystemExit(f"{args.write}: {exc}") from None
    args.write.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
