"""Every reason dispatch records, in one catalogue: its token, its kind, where it comes from and
what it means in plain words.

A token is what Redis and the records store. Tokens are plain strings and never change once
released, so records written by any release stay readable. Kinds:

    defer     the job waits in `delayed` and spends no attempt (`dispatch why` says why)
    refusal   the job ends `failed`, outcome `policy`, and is not retried
    outcome   how a run ended: a run record's `outcome`
    abort     why a running job was stopped, then recorded as the run's reason
    infra     something around the job failed, not the job itself

Some tokens carry a value: `exit_code(n)` (`exit-<n>`), `killed_by(n)` (`signal-<n>`), and
`with_error(CREATE_FAILED, exc)` (`create-failed: <the engine's message>`). `lookup` finds the
entry for any stored token, those included, and None for a token from a newer release.

Nothing else spells a token: `tests/test_reasons.py` fails on a string literal equal to one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["defer", "refusal", "outcome", "abort", "infra"]
Outcome = Literal["completed", "policy", "failed", "infra", "cancelled"]


@dataclass(frozen=True, slots=True)
class Reason:
    token: str
    kind: Kind
    source: str  # the gate or component that gives it
    sentence: str  # in plain words, for an operator

    def __str__(self) -> str:
        return self.token


# -- outcomes -------------------------------------------------------------------------------
COMPLETED: Final = "completed"
POLICY: Final = "policy"
FAILED: Final = "failed"
INFRA: Final = "infra"
CANCELLED: Final = "cancelled"

# -- deferrals ------------------------------------------------------------------------------
NEWER_RELEASE: Final = "newer-release"
PAUSE_WINDOW: Final = "pause-window"
SIZE_NEVER_FITS: Final = "size-never-fits"
HOST_SLOT: Final = "host-slot"
SCOPE_FOLDER: Final = "scope-folder"
CHAINED: Final = "chained"
SCOPE_REPO: Final = "scope-repo"
SCOPE_PROJECT: Final = "scope-project"
ENDPOINT: Final = "endpoint"
HOST_BUDGET: Final = "host-budget"
REDIS_UNAVAILABLE: Final = "redis-unavailable"
RETRY: Final = "retry"
ENGINE_UNAVAILABLE: Final = "engine-unavailable"
OUTCOME_WAIT: Final = "outcome-wait"
EGRESS_UNAVAILABLE: Final = "egress-unavailable"
SOFT_HOLD: Final = "soft-hold"
WAIT_AFTER: Final = "wait-after"
WAIT_SUPERSEDE: Final = "wait-supersede"
WAIT_THROTTLED: Final = "wait-throttled"
WAIT_HOLD: Final = "wait-hold"
WAIT_ABORTED: Final = "wait-aborted"

# -- refusals -------------------------------------------------------------------------------
INVALID_JOB: Final = "invalid-job"
PROJECT_SIZE_INVALID: Final = "project-size-invalid"
JOB_SIZE_INVALID: Final = "job-size-invalid"
JOB_SIZE_EXCEEDS_HOST: Final = "job-size-exceeds-host"
JOB_SIZE_EXCEEDS_SHARE: Final = "job-size-exceeds-share"
SETTINGS_OVERLAY_INVALID: Final = "settings-overlay-invalid"
DIRTY_TREE: Final = "dirty-tree"
REPO_UNREADABLE: Final = "repo-unreadable"
JOB_REFUSED: Final = "job-refused"
IMAGE_MISSING: Final = "image-missing"
FOLDER_NOT_ALLOWED: Final = "folder-not-allowed"
NO_COMMAND: Final = "no-command"
COMMAND_NOT_FOUND: Final = "command-not-found"
OVER_BUDGET: Final = "over-budget"
SCOPE_CAP: Final = "scope-cap"
DOLLAR_CAP: Final = "dollar-cap"
DAILY_TOKEN_CAP: Final = "daily-token-cap"
JOB_USER_ROOT: Final = "job-user-root"
MOUNT_MISMATCH: Final = "mount-mismatch"
TRIGGER_OVERLAP: Final = "trigger-overlap"
TRIGGER_MISSED: Final = "trigger-missed"
SECRET_PROFILE_UNKNOWN: Final = "secret-profile-unknown"
WAIT_SUPERSEDED: Final = "wait-superseded"
WAIT_UNREADABLE: Final = "wait-unreadable"
WAIT_PROFILE_UNKNOWN: Final = "wait-profile-unknown"
WAIT_AFTER_BEYOND_MAX: Final = "wait-after-beyond-max"
WAIT_REFUSED: Final = "wait-refused"
WAIT_UNANSWERABLE: Final = "wait-unanswerable"
WAIT_EXPIRED: Final = "wait-expired"

# -- aborts ---------------------------------------------------------------------------------
OPERATOR_CANCEL: Final = "operator-cancel"
JOB_TIMEOUT: Final = "job-timeout"
LOCK_LOST: Final = "lock-lost"
LEASE_LOST: Final = "lease-lost"
SHUTDOWN: Final = "shutdown"

# -- infrastructure -------------------------------------------------------------------------
NOT_STARTED: Final = "not-started"
ABORTED_BEFORE_START: Final = "aborted-before-start"
ABORT_UNCONFIRMED: Final = "abort-unconfirmed"
EXIT_UNKNOWN: Final = "exit-unknown"
OOM: Final = "oom"
STOP_TIMEOUT: Final = "stop-timeout"
SIGKILLED: Final = "sigkill"
DOCKER_UNAVAILABLE: Final = "docker-unavailable"
DOCKER_ERROR: Final = "docker-error"
CREATE_FAILED: Final = "create-failed"
START_FAILED: Final = "start-failed"
ENGINE_RESTARTED: Final = "engine-restarted"
STALLED: Final = "stalled"
INTERNAL_ERROR: Final = "internal-error"
SECRET_UNRESOLVED: Final = "secret-unresolved"

_EXIT = "exit"
_SIGNAL = "signal"
_ERROR_CAP = 300  # an engine's message can be long; a record field should not be


def exit_code(code: int) -> str:
    """A run that exited neither 0 nor 2, as its reason."""
    return f"{_EXIT}-{code}"


def killed_by(signal_number: int) -> str:
    """A process killed by a signal other than SIGKILL, as its reason."""
    return f"{_SIGNAL}-{signal_number}"


def with_error(token: str, error: object) -> str:
    """A token followed by the message that explains it, cut to fit a record field."""
    return f"{token}: {error}"[:_ERROR_CAP]


def _defer(token: str, source: str, sentence: str) -> Reason:
    return Reason(token, "defer", source, sentence)


def _refusal(token: str, source: str, sentence: str) -> Reason:
    return Reason(token, "refusal", source, sentence)


def _abort(token: str, source: str, sentence: str) -> Reason:
    return Reason(token, "abort", source, sentence)


def _infra(token: str, source: str, sentence: str) -> Reason:
    return Reason(token, "infra", source, sentence)


def _outcome(token: str, sentence: str) -> Reason:
    return Reason(token, "outcome", "run record", sentence)


ENTRIES: Final[tuple[Reason, ...]] = (
    _outcome(COMPLETED, "the job ran and exited 0"),
    _outcome(POLICY, "a rule said no: a gate or the job itself refused it; not retried"),
    _outcome(FAILED, "the job failed for good: it ran out of time, or dispatch hit a bug"),
    _outcome(INFRA, "something around the job failed; retried while attempts remain"),
    _outcome(CANCELLED, "an operator cancelled the job"),
    _defer(
        NEWER_RELEASE,
        "head",
        "a config file or the job itself was written by a newer release of dispatch; "
        "upgrade this host or set the file back",
    ),
    _defer(PAUSE_WINDOW, "pause window", "a pause window covers the job until its end"),
    _defer(
        SIZE_NEVER_FITS,
        "size",
        "the job is larger than this host's job budget; another host may fit it",
    ),
    _defer(HOST_SLOT, "host slot", "every slot of this host (DISPATCH_CONCURRENCY) is busy"),
    _defer(
        SCOPE_FOLDER,
        "scope",
        "another job is working in the same folder, or in one above or inside it",
    ),
    _defer(CHAINED, "scope", "the job waits for its parent's folder"),
    _defer(SCOPE_REPO, "scope", "the repo's limit of concurrent jobs is reached"),
    _defer(SCOPE_PROJECT, "scope", "the project's limit of concurrent jobs is reached"),
    _defer(ENDPOINT, "endpoint", "every slot of an endpoint serving the job's model is busy"),
    _defer(
        HOST_BUDGET,
        "host budget",
        "the running jobs leave too little memory or CPU of this host's job budget",
    ),
    _defer(
        REDIS_UNAVAILABLE,
        "processor",
        "Redis failed a call while the job's gates were checked (an error reply such as READONLY "
        "or OOM, no answer in time, or no connection); every hold was given back, and it is "
        "looked at again soon, spending no attempt",
    ),
    _defer(RETRY, "processor", "an infrastructure failure ended the last attempt; it runs again"),
    _defer(
        ENGINE_UNAVAILABLE,
        "processor",
        "the Docker engine could not be reached, so the job never started; it waits, spending "
        "no attempt, and after DISPATCH_ENGINE_WAIT_MAX it is retried as an infrastructure failure",
    ),
    _defer(
        OUTCOME_WAIT,
        "settled record",
        "the job's previous claim stalled; before running it again, dispatch waits a moment for "
        "that run's outcome, which a host cut off from Redis delivers once it answers",
    ),
    _defer(
        EGRESS_UNAVAILABLE,
        "egress",
        "the job network, its firewall rules or the egress proxy is not in place on this host, "
        "and a job never runs unprotected; it waits, spending no attempt (dispatch doctor says "
        "what is missing)",
    ),
    _defer(
        SOFT_HOLD,
        "spend caps",
        "a spend cap's soft-hold band (softHoldPct) is reached; the job waits until that "
        "window turns, unless it is urgent (submit --urgent)",
    ),
    _defer(WAIT_AFTER, "wait-for", "the job waits for its `after` instant"),
    _defer(
        WAIT_SUPERSEDE,
        "wait-for",
        "another job with the same dedup key holds the wait, and whether it is still alive could "
        "not be read; asked again soon",
    ),
    _defer(
        WAIT_THROTTLED,
        "wait-for",
        "every wait check slot (DISPATCH_WAIT_CHECK_SLOTS, DISPATCH_WAIT_FLEET_CHECKS) was busy, "
        "so the job's checks could not run yet",
    ),
    _defer(WAIT_HOLD, "wait-for", "a wait check answered not yet (or could not tell)"),
    _defer(
        WAIT_ABORTED,
        "wait-for",
        "a wait check was cut short (shutdown, cancel or a lost claim); nothing was counted",
    ),
    _refusal(INVALID_JOB, "processor", "the job document in Redis is not a valid job"),
    _refusal(
        PROJECT_SIZE_INVALID, "size", "the memory or cpus of the job's project row is not valid"
    ),
    _refusal(
        JOB_SIZE_INVALID,
        "size",
        "the job's memory or CPUs lie outside dispatch's bounds (6m to 1t, 0.01 to 512 CPUs), "
        "and no container is made without both limits",
    ),
    _refusal(
        JOB_SIZE_EXCEEDS_HOST,
        "size",
        "the job is larger than this host's job budget, and no other host may take it",
    ),
    _refusal(
        JOB_SIZE_EXCEEDS_SHARE,
        "size",
        "the job is larger than its project's share of this host's job budget",
    ),
    _refusal(
        SETTINGS_OVERLAY_INVALID,
        "settings overlay",
        "settings.json is not valid, and the job is not run on settings nobody meant",
    ),
    _refusal(
        DIRTY_TREE,
        "dirty tree",
        "the job's folder has uncommitted changes, or git could not tell; "
        "commit or stash them, or submit with --force",
    ),
    _refusal(
        REPO_UNREADABLE,
        "dirty tree",
        "the git repository around the job's folder cannot be checked safely: it reaches "
        "outside DISPATCH_ALLOWED_ROOTS (its .git file, alternates, a symlink) or a file git "
        "needs cannot be read; repair it, or submit with --force",
    ),
    _refusal(JOB_REFUSED, "runner", "the job exited 2: it refused the work itself"),
    _refusal(
        IMAGE_MISSING,
        "runner",
        "no image was named, or it is not on this host (dispatch never pulls images)",
    ),
    _refusal(
        FOLDER_NOT_ALLOWED,
        "runner",
        "the job's folder is not a folder under DISPATCH_ALLOWED_ROOTS",
    ),
    _refusal(
        JOB_USER_ROOT,
        "job user",
        "the job's folder belongs to root, and a local job runs as its folder's owner, never as "
        "root unasked; chown the folder to the user the job should run as, or set "
        "DISPATCH_CONTAINER_USER",
    ),
    _refusal(
        MOUNT_MISMATCH,
        "runner",
        "the engine mounted something other than the job's checked folder, so the container was "
        "killed at once; someone changed the path or the engine's mounts",
    ),
    _refusal(
        SECRET_PROFILE_UNKNOWN,
        "secret profiles",
        "an env value of the job refers to a secret profile that secrets.json on this host does "
        "not declare; declare it (on every host that takes the queue) or fix the reference",
    ),
    _refusal(
        TRIGGER_OVERLAP,
        "trigger overlap",
        "the trigger's previous job was still waiting or running at this occurrence, and the "
        "trigger says overlap skip: this occurrence is skipped",
    ),
    _refusal(
        TRIGGER_MISSED,
        "trigger catch-up",
        "no daemon was minting when this occurrence came (downtime), and the trigger's catch-up "
        "policy does not run it late: it was cancelled before it started",
    ),
    _refusal(NO_COMMAND, "runner", "the job has no command to run"),
    _refusal(COMMAND_NOT_FOUND, "runner", "the job's command could not be found or started"),
    _refusal(
        OVER_BUDGET,
        "spend caps",
        "the fleet's run cap (the * row of scoped-limits.json) for the day, week or month is "
        "reached; nothing was counted",
    ),
    _refusal(
        SCOPE_CAP,
        "spend caps",
        "the run cap of the job's repo, folder, project or model for the day, week or month is "
        "reached; nothing was counted",
    ),
    _refusal(
        DOLLAR_CAP,
        "spend caps",
        "a dollar cap for the day, week or month has no room for the job's maxCostUsd; "
        "nothing was counted",
    ),
    _refusal(
        DAILY_TOKEN_CAP,
        "spend caps",
        "the day's tokens of a ledger are already at its dailyTokens cap; nothing was counted",
    ),
    _refusal(
        WAIT_SUPERSEDED,
        "wait-for",
        "another job with the same dedup key already waits, or already finished waiting, on "
        "the same conditions",
    ),
    _refusal(
        WAIT_UNREADABLE,
        "wait-for",
        "a waitFor condition this release cannot read (written by a newer one?), or one that "
        "cannot be asked for this job",
    ),
    _refusal(
        WAIT_PROFILE_UNKNOWN, "wait-for", "a waitFor profile is not declared in wait-profiles.json"
    ),
    _refusal(
        WAIT_AFTER_BEYOND_MAX,
        "wait-for",
        "the job's `after` instant is further out than DISPATCH_WAIT_AFTER_MAX",
    ),
    _refusal(WAIT_REFUSED, "wait-for", "a wait check answered that its condition will never clear"),
    _refusal(
        WAIT_UNANSWERABLE,
        "wait-for",
        "a wait check could not tell DISPATCH_WAIT_MAX_FAULTS times in a row",
    ),
    _refusal(
        WAIT_EXPIRED,
        "wait-for",
        "the job waited DISPATCH_WAIT_MAX, or was checked DISPATCH_WAIT_MAX_CHECKS times, "
        "without its conditions clearing",
    ),
    _abort(OPERATOR_CANCEL, "operator", "an operator cancelled the job (dispatch cancel)"),
    _abort(
        JOB_TIMEOUT,
        "processor",
        "the job ran past its timeout and was stopped; not retried, it would time out again",
    ),
    _abort(
        LOCK_LOST,
        "lock keeper",
        "this host lost the job's lock, or could not renew it in time, so the run was stopped "
        "before another host could take the job; it goes back, spending no attempt",
    ),
    _abort(
        LEASE_LOST,
        "fleet lease",
        "a fleet lease the job held lapsed; the run was stopped and goes back, spending no attempt",
    ),
    _abort(
        SHUTDOWN,
        "worker",
        "its host shut down before the job ended; it waits for a pickup, spending no attempt",
    ),
    _infra(NOT_STARTED, "runner", "the job never started, and the runner did not say why"),
    _infra(ABORTED_BEFORE_START, "runner", "the run was stopped before it started"),
    _infra(
        ABORT_UNCONFIRMED,
        "processor",
        "(records of older releases) the run did not confirm it stopped after an abort",
    ),
    _infra(
        EXIT_UNKNOWN,
        "runner",
        "the job started, then its exit could not be read (the engine or process went missing)",
    ),
    _infra(OOM, "runner", "the job ran out of memory and was killed"),
    _infra(STOP_TIMEOUT, "runner", "the job did not stop within its grace and was killed"),
    _infra(SIGKILLED, "runner", "something other than dispatch killed the job (SIGKILL)"),
    _infra(DOCKER_UNAVAILABLE, "docker runner", "the Docker engine did not answer"),
    _infra(DOCKER_ERROR, "docker runner", "the Docker engine failed while the job ran"),
    _infra(CREATE_FAILED, "docker runner", "the Docker engine could not create the container"),
    _infra(START_FAILED, "docker runner", "the Docker engine could not start the container"),
    _infra(
        ENGINE_RESTARTED,
        "docker runner",
        "the Docker engine went away while the job ran and its container did not outlive it "
        "(no live-restore), or its exit could not be told from the engine's shutdown",
    ),
    _infra(
        SECRET_UNRESOLVED,
        "secret resolver",
        "a secret the job refers to could not be resolved at start (the profile's command "
        "failed, timed out or printed nothing; the file is missing, not private or lacks the "
        "name); the job never started and is retried while attempts remain",
    ),
    _infra(
        STALLED,
        "worker",
        "the job's host stopped renewing its lock too many times; it is not picked up again",
    ),
    _infra(
        INTERNAL_ERROR,
        "processor",
        "dispatch hit a bug handling the job; it failed for good, with the error recorded",
    ),
)

# The two tokens that carry a number, catalogued by their form.
EXIT_N: Final = _infra(
    f"{_EXIT}-<code>",
    "runner",
    "the job exited neither 0 nor 2: an infrastructure failure, retried while attempts remain",
)
SIGNAL_N: Final = _infra(f"{_SIGNAL}-<number>", "process runner", "a signal killed the job")
_FAMILIES: Final[Mapping[str, Reason]] = {_EXIT: EXIT_N, _SIGNAL: SIGNAL_N}


CATALOGUE: Final[Mapping[str, Reason]] = {entry.token: entry for entry in ENTRIES}


def lookup(token: str) -> Reason | None:
    """The entry for a stored token; None for one this release does not know."""
    head = token.partition(": ")[0]  # create-failed: <the engine's message>
    found = CATALOGUE.get(head)
    if found is None:
        stem, _, number = head.rpartition("-")
        found = _FAMILIES.get(stem) if number.isdigit() else None
    return found
