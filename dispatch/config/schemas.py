"""The shapes of the watched JSON files in the config dir, and one snapshot of all of them.

Every file is `{"version": 1, ...}`. Names are camelCase on disk. Unknown fields are refused,
so a typo is a broken file (the last good copy is kept) rather than a silently ignored limit.
`dispatch.config.watcher` loads, validates and reloads them; gates read one `ConfigSnapshot`
per pickup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import msgspec

CONFIG_VERSION = 1


class _Row(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    pass


class Project(_Row):
    """A project: its member repos ("owner/name") and folders (absolute), and its bounds."""

    id: str
    repos: list[str] = msgspec.field(default_factory=list)
    folders: list[str] = msgspec.field(default_factory=list)
    memory: str | None = None  # job size for the project's jobs, like "4g"
    cpus: float | None = None
    host_share: float | None = None  # fraction (0, 1] of this host's job budget
    concurrent: int | None = None  # jobs at once, fleet-wide


class ScopedLimit(_Row):
    """Limits for one scope (grammar in `config/limits.py`): `*`, a repo "owner/name", an
    absolute folder, `project:<id>` or `model:<name>`. `concurrent` is the scope gate's; the
    rest are spend caps (`dispatch/spend/`): runs, dollars and tokens per window."""

    scope: str
    concurrent: int | None = None
    day: int | None = None  # runs per day, ISO week, month (in settings' budgetTz)
    week: int | None = None
    month: int | None = None
    day_usd: float | None = None
    week_usd: float | None = None
    month_usd: float | None = None
    daily_tokens: int | None = None
    soft_hold_pct: float | None = None  # else settings' softHoldPct


class PauseWindow(_Row):
    """Recurring (`from`/`to` "HH:MM" in `tz`, on `days`) or fixed (`start`/`end`, ISO-8601).

    `scope` is "*" (everything), a repo "owner/name", an absolute folder, or a project id.
    """

    scope: str = "*"
    from_: str | None = msgspec.field(default=None, name="from")
    to: str | None = None
    tz: str = "UTC"
    days: list[str] = msgspec.field(default_factory=list)  # mon..sun; empty: every day
    start: str | None = None
    end: str | None = None


class Endpoint(_Row):
    """A model endpoint with `slots` concurrent requests, serving `models`."""

    id: str
    host: str
    slots: int
    models: list[str] = msgspec.field(default_factory=list)


class Overlay(_Row):
    """Tunables from settings.json, read once per pickup; each overrides its env default."""

    provider: str | None = None
    model: str | None = None
    job_memory: str | None = None
    job_cpus: float | None = None
    max_cost_usd: float | None = None  # a job's dollar cap when it names none
    budget_tz: str = "UTC"  # where spend windows turn (day, ISO week, month)
    soft_hold_pct: float | None = None  # where every cap's soft-hold band starts, percent
    # job slots per host, applied on reload: {"*": 3, "gpu-1": 1}; DISPATCH_CONCURRENCY else
    concurrency: dict[str, int] = msgspec.field(default_factory=dict)

    def slots_for(self, host: str, default: int) -> int:
        """This host's job slots: its own row, else the fleet's ("*"), else `default`."""
        return self.concurrency.get(host) or self.concurrency.get("*") or default


class WaitProfile(_Row):
    command: list[str]
    timeout_ms: int = 10_000


class SecretProfile(_Row):
    """How this host resolves `<profile>/<name>`: exactly one of `command` (argv run with no
    shell, `{name}` replaced, its stdout is the value) or `file` (a private JSON object of
    name -> value). See dispatch.secrets."""

    command: list[str] | None = None
    file: str | None = None
    timeout_ms: int = 10_000


class Trigger(_Row):
    """A cron schedule that mints `job` at each occurrence (dispatch/triggers/ says how)."""

    id: str
    cron: str  # 5 fields, or 6 with seconds first
    job: dict[str, object] = msgspec.field(default_factory=dict)  # a job document, no id
    tz: str = "UTC"  # IANA name
    catchup: Literal["skip", "latest"] = "skip"
    catchup_window: str = "1h"  # `latest` runs a missed occurrence at most this late
    overlap: Literal["skip", "allow"] = "skip"
    jitter: str = "0s"  # bound of the fixed offset each trigger id gets
    enabled: bool = True


class EgressFile(_Row):
    """Hosts jobs may reach through the egress proxy (grammar: dispatch.egress.rules)."""

    version: int
    hosts: list[str] = msgspec.field(default_factory=list)


class ProjectsFile(_Row):
    version: int
    projects: list[Project] = msgspec.field(default_factory=list)


class ScopedLimitsFile(_Row):
    version: int
    limits: list[ScopedLimit] = msgspec.field(default_factory=list)


class PauseWindowsFile(_Row):
    version: int
    windows: list[PauseWindow] = msgspec.field(default_factory=list)


class EndpointsFile(_Row):
    version: int
    endpoints: list[Endpoint] = msgspec.field(default_factory=list)


class SettingsFile(_Row):
    version: int
    settings: Overlay = msgspec.field(default_factory=Overlay)


class WaitProfilesFile(_Row):
    version: int
    profiles: dict[str, WaitProfile] = msgspec.field(default_factory=dict)


class SecretsFile(_Row):
    version: int
    profiles: dict[str, SecretProfile] = msgspec.field(default_factory=dict)


class TriggersFile(_Row):
    version: int
    triggers: list[Trigger] = msgspec.field(default_factory=list)


# file name -> its shape; `dispatch init` writes each as `{"version": 1}` plus its empty list
FILES: dict[str, type[_Row]] = {
    "settings.json": SettingsFile,
    "scoped-limits.json": ScopedLimitsFile,
    "pause-windows.json": PauseWindowsFile,
    "projects.json": ProjectsFile,
    "model-endpoints.json": EndpointsFile,
    "wait-profiles.json": WaitProfilesFile,
    "triggers.json": TriggersFile,
    "egress.json": EgressFile,
    "secrets.json": SecretsFile,
}


@dataclass(frozen=True)
class ConfigSnapshot:
    """Every file's last good content, as one immutable value a pickup reads throughout."""

    projects: tuple[Project, ...] = ()
    limits: tuple[ScopedLimit, ...] = ()
    windows: tuple[PauseWindow, ...] = ()
    endpoints: tuple[Endpoint, ...] = ()
    overlay: Overlay = field(default_factory=Overlay)
    profiles: dict[str, WaitProfile] = field(default_factory=dict)
    egress: tuple[str, ...] = ()  # egress.json's hosts, checked against the rule grammar
    secrets: dict[str, SecretProfile] = field(default_factory=dict)
    triggers: tuple[Trigger, ...] = ()
    overlay_error: str | None = None  # settings.json broken: jobs are refused, not misrun
    newer: tuple[str, ...] = ()  # files written by a newer version: they hold work
    errors: dict[str, str] = field(default_factory=dict)  # file -> why its last copy is kept
