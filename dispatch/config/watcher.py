"""Loads the watched JSON files of the config dir, validates them, and reloads them on change.

How reload works: the daemon calls `ConfigFiles.current()` once per pickup. At most once per
`check_every_s` (by the injected clock) it stats every file and reads again only those whose
(inode, mtime_ns, size, mode) changed since the last look, so an atomic replace (a new inode) or
two same-size writes within one second are both noticed. Each file then ends up:

    missing  as if it held `{"version": 1}`: no limits, no windows, not an error
    good     its content replaces the last good copy
    newer    its version is above CONFIG_VERSION: named in `snapshot.newer` (holds work),
             the last good copy is kept
    broken   bad JSON, wrong shape, failed validation, unreadable: the reason goes in
             `snapshot.errors`, the last good copy (or the empty one) is kept

The files are one table, `WATCHED`: a row names a file, its shape, how it is checked beyond the
types, what a broken copy does besides keeping the last good one, and the snapshot field that
shows it. Adding a file is its shape in `dispatch.config.schemas` (with its `FILES` entry and
`ConfigSnapshot` field) and one row here.

A new `ConfigSnapshot` is built only when some file's outcome changed; otherwise `current()`
hands back the very same object. `load_once` reads everything once (CLI, doctor) and `scaffold`
writes the missing files empty and valid (`dispatch init`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from dispatch.clock import Clock, SystemClock
from dispatch.config.limits import limit_problems, overlay_problems
from dispatch.config.schemas import (
    CONFIG_VERSION,
    FILES,
    ConfigSnapshot,
    EgressFile,
    EndpointsFile,
    PauseWindowsFile,
    ProjectsFile,
    ScopedLimitsFile,
    SecretsFile,
    SettingsFile,
    TriggersFile,
    WaitProfilesFile,
)
from dispatch.config.units import check_cpus, parse_memory
from dispatch.config.windows import window_problems
from dispatch.egress.rules import parse_rule
from dispatch.errors import ConfigError
from dispatch.host.files import NotRegular, TooLarge, read_bounded, write_atomic
from dispatch.log import event

T = TypeVar("T")
Stamp = tuple[int, ...]  # (inode, mtime_ns, size, mode); () when the file is missing
LogEvent = Callable[..., None]

_MAX_BYTES = 1 << 20  # a pickup must stay cheap; no config file is anywhere near this
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_PROFILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # as a reference names it
_MISSING: Stamp = ()


class _Version(msgspec.Struct):
    """Only the version: unknown fields allowed, so a newer file is recognised before decoding."""

    version: int | None = None


class _Newer(Exception):
    def __init__(self, version: int) -> None:
        super().__init__(f"version {version}")
        self.version = version


_peek = msgspec.json.Decoder(_Version)


# -- one file: read, decode, validate -----------------------------------------------------


def _parse(watched: Watched, raw: bytes) -> Any:
    """The content of a copy of the file; raises ConfigError (broken) or _Newer."""
    try:
        version = _peek.decode(raw).version
    except msgspec.DecodeError as exc:
        raise ConfigError(_one_line(exc)) from None
    if version is None or version < 1:
        raise ConfigError(f'"version" must be an integer from 1 to {CONFIG_VERSION}')
    if version > CONFIG_VERSION:
        raise _Newer(version)
    try:
        content = _decoders[watched.name].decode(raw)
    except msgspec.DecodeError as exc:
        raise ConfigError(_one_line(exc)) from None
    problems = watched.check(content)
    if problems:
        raise ConfigError(problems[0])
    return content


def _read(path: Path) -> bytes | None:
    """The file's bytes, None when it is missing; ConfigError when it is not a readable file.
    A FIFO left in the config dir never hangs the pickup; a symlink is followed (the files are
    the operator's)."""
    try:
        return read_bounded(path, _MAX_BYTES, follow_links=True)
    except FileNotFoundError:
        return None
    except NotRegular:
        raise ConfigError("not a regular file") from None
    except TooLarge:
        raise ConfigError(f"larger than {_MAX_BYTES} bytes") from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}") from None


def _stamp(path: Path) -> Stamp | None:
    """What tells a change; () when missing, None when stat failed (look again next time)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return _MISSING
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# -- validation beyond the types ----------------------------------------------------------


def _is_repo(text: str) -> bool:
    return bool(_REPO.fullmatch(text))


def _is_folder(text: str) -> bool:
    return os.path.isabs(text) and "\0" not in text


def _value_problem(where: str, value: T | None, parse: Callable[[T], object]) -> list[str]:
    """`parse`'s complaint about a value given (a memory size, a CPU count), if any."""
    if value is None:
        return []
    try:
        parse(value)
    except ValueError as exc:
        return [f"{where}: {exc}"]
    return []


def _duplicates(where: str, ids: list[str]) -> list[str]:
    seen: set[str] = set()
    for one in ids:
        if one in seen:
            return [f"{where}: id {one!r} appears twice"]
        seen.add(one)
    return []


def _check_projects(content: ProjectsFile) -> list[str]:
    problems = _duplicates("projects", [p.id for p in content.projects])
    for i, p in enumerate(content.projects):
        at = f"projects[{i}]"
        problems += [f"{at}: repo {r!r} is not owner/name" for r in p.repos if not _is_repo(r)]
        problems += [f"{at}: folder {f!r} is not absolute" for f in p.folders if not _is_folder(f)]
        if p.host_share is not None and not 0 < p.host_share <= 1:
            problems.append(f"{at}: hostShare must be above 0 and at most 1")
        if p.concurrent is not None and p.concurrent < 0:
            problems.append(f"{at}: concurrent must be 0 or more")
        problems += _value_problem(at, p.memory, parse_memory)
        problems += _value_problem(at, p.cpus, check_cpus)
    return problems


def _check_limits(content: ScopedLimitsFile) -> list[str]:
    return limit_problems(content.limits)


def _check_endpoints(content: EndpointsFile) -> list[str]:
    problems = _duplicates("endpoints", [e.id for e in content.endpoints])
    for i, e in enumerate(content.endpoints):
        if e.slots < 1:
            problems.append(f"endpoints[{i}]: slots must be 1 or more")
        if not e.models:
            problems.append(f"endpoints[{i}]: models must name at least one model")
    return problems


def _check_windows(content: PauseWindowsFile) -> list[str]:
    if not content.windows:
        return []
    try:
        return [
            f"windows[{i}]: {problem}"
            for i, window in enumerate(content.windows)
            for problem in window_problems(window)
        ]
    except Exception as exc:  # another module's check failing must not stop pickups
        return [f"windows: cannot check ({_one_line(exc)})"]


def _check_triggers(content: TriggersFile) -> list[str]:
    if not content.triggers:
        return []
    try:
        # lazily: dispatch.triggers owns what a trigger means (and loads the cron parser)
        from dispatch.triggers.spec import file_problems

        return file_problems(content.triggers)
    except Exception as exc:  # another module's check failing must not stop pickups
        return [f"triggers: cannot check ({_one_line(exc)})"]


def _check_profiles(content: WaitProfilesFile) -> list[str]:
    problems = []
    for name, profile in content.profiles.items():
        if not profile.command:
            problems.append(f"profiles[{name!r}]: command must not be empty")
        if profile.timeout_ms < 1:
            problems.append(f"profiles[{name!r}]: timeoutMs must be 1 or more")
    return problems


def _check_egress(content: EgressFile) -> list[str]:
    problems = []
    for i, text in enumerate(content.hosts):
        try:
            parse_rule(text)
        except ValueError as exc:
            problems.append(f"hosts[{i}]: {exc}")
    return problems


def _check_secrets(content: SecretsFile) -> list[str]:
    problems = []
    for name, p in content.profiles.items():
        at = f"profiles[{name!r}]"
        if not _PROFILE.fullmatch(name):
            problems.append(f"{at}: a name is 1-64 of A-Z a-z 0-9 . _ - (no slash)")
        if (p.command is None) == (p.file is None):
            problems.append(f"{at}: give exactly one of command or file")
        if p.command is not None and not (p.command and p.command[0]):
            problems.append(f"{at}: command must not be empty")
        if p.file is not None and not _is_folder(p.file):
            problems.append(f"{at}: file must be an absolute path")
        if not 1 <= p.timeout_ms <= 300_000:
            problems.append(f"{at}: timeoutMs must be from 1 to 300000")
    return problems


def _check_settings(content: SettingsFile) -> list[str]:
    overlay = content.settings
    return (
        _value_problem("settings", overlay.job_memory, parse_memory)
        + _value_problem("settings", overlay.job_cpus, check_cpus)
        + overlay_problems(overlay)
    )


# -- the table of files -------------------------------------------------------------------

# What a broken copy does. Always: the last good copy (or the empty one) serves on, and the
# reason is in `snapshot.errors`. REFUSE also puts it in the snapshot's `<shown>_error`, and
# every job is refused while it stands: settings the daemon cannot read are not guessed at.
Broken = Literal["keep", "refuse"]
KEEP: Broken = "keep"
REFUSE: Broken = "refuse"


@dataclass(frozen=True)
class Watched:
    """One watched file of the config dir."""

    name: str
    shape: type[msgspec.Struct]
    check: Callable[[Any], list[str]]  # problems beyond the types; the first one is reported
    broken: Broken
    shown: str  # the ConfigSnapshot field showing its last good content
    source: str = ""  # the content's field shown there, when not named as `shown`

    def part(self, content: Any) -> object:
        """The snapshot's value for `shown`: the content's lists as tuples, dicts copied."""
        value = getattr(content, self.source or self.shown)
        if isinstance(value, list):
            return tuple(value)
        if isinstance(value, dict):
            return dict(value)
        return value


# In the order of schemas.FILES: `dispatch init` writes them so, and `snapshot.newer` lists so.
WATCHED: tuple[Watched, ...] = (
    # file, shape, checked by, what a broken copy does, shown as (from the content's field)
    Watched("settings.json", SettingsFile, _check_settings, REFUSE, "overlay", "settings"),
    Watched("scoped-limits.json", ScopedLimitsFile, _check_limits, KEEP, "limits"),
    Watched("pause-windows.json", PauseWindowsFile, _check_windows, KEEP, "windows"),
    Watched("projects.json", ProjectsFile, _check_projects, KEEP, "projects"),
    Watched("model-endpoints.json", EndpointsFile, _check_endpoints, KEEP, "endpoints"),
    Watched("wait-profiles.json", WaitProfilesFile, _check_profiles, KEEP, "profiles"),
    Watched("triggers.json", TriggersFile, _check_triggers, KEEP, "triggers"),
    Watched("egress.json", EgressFile, _check_egress, KEEP, "egress", "hosts"),
    Watched("secrets.json", SecretsFile, _check_secrets, KEEP, "secrets", "profiles"),
)
if [(w.name, w.shape) for w in WATCHED] != list(FILES.items()):
    raise ImportError("dispatch.config.watcher: WATCHED and schemas.FILES name other files")

_decoders = {w.name: msgspec.json.Decoder(w.shape) for w in WATCHED}
_EMPTY = {w.name: _decoders[w.name].decode(b'{"version": 1}') for w in WATCHED}


# -- the watcher --------------------------------------------------------------------------


@dataclass
class _File:
    """What the watcher knows of one file between looks."""

    watched: Watched
    good: Any  # last good content (the empty one until a good read)
    stamp: Stamp | None = None  # None: never looked, or stat failed
    newer: bool = False
    error: str | None = None
    looked: bool = False

    @property
    def name(self) -> str:
        return self.watched.name

    def settle(self, path: Path, log: LogEvent) -> bool:
        """Read the file again; True when its outcome changed (the snapshot must be rebuilt)."""
        try:
            raw = _read(path)
            content = _EMPTY[self.name] if raw is None else _parse(self.watched, raw)
        except _Newer as exc:
            return self._hold(exc.version, log)
        except ConfigError as exc:
            return self._broken(str(exc), log)
        changed = self.newer or self.error is not None or content != self.good
        if changed and self.looked:
            log("config_reloaded", file=self.name, missing=raw is None)
        self.good, self.newer, self.error, self.looked = content, False, None, True
        return changed

    def _hold(self, version: int, log: LogEvent) -> bool:
        changed = not self.newer or self.error is not None
        if changed:
            log("config_newer", file=self.name, version=version, supported=CONFIG_VERSION)
        self.newer, self.error, self.looked = True, None, True
        return changed

    def _broken(self, reason: str, log: LogEvent) -> bool:
        changed = reason != self.error or self.newer
        if changed:
            log("config_invalid", file=self.name, error=reason)
        self.newer, self.error, self.looked = False, reason, True
        return changed


class ConfigFiles:
    """The config dir's files as one snapshot, looked at no more than once per check_every_s."""

    def __init__(
        self,
        config_dir: Path,
        clock: Clock,
        check_every_s: float = 1.0,
        *,
        log: LogEvent = event,
    ) -> None:
        self.config_dir = config_dir
        self._clock = clock
        self._every_s = check_every_s
        self._log = log
        self._files = [_File(w, _EMPTY[w.name]) for w in WATCHED]
        self._next_look = -math.inf
        self._snapshot = ConfigSnapshot()

    def current(self) -> ConfigSnapshot:
        now = self._clock.monotonic()
        if now >= self._next_look:
            self._next_look = now + self._every_s
            if self._look():
                self._snapshot = _build(self._files)
        return self._snapshot

    def _look(self) -> bool:
        changed = False
        for f in self._files:
            path = self.config_dir / f.name
            stamp = _stamp(path)
            if stamp is not None and stamp == f.stamp:
                continue
            f.stamp = stamp
            changed |= f.settle(path, self._log)
        return changed


def _build(files: list[_File]) -> ConfigSnapshot:
    fields: dict[str, Any] = {}
    for f in files:
        assert isinstance(f.good, f.watched.shape)
        fields[f.watched.shown] = f.watched.part(f.good)
        if f.watched.broken == REFUSE:
            fields[f"{f.watched.shown}_error"] = f.error
    return ConfigSnapshot(
        **fields,
        newer=tuple(f.name for f in files if f.newer),
        errors={f.name: f.error for f in files if f.error is not None},
    )


def load_once(config_dir: Path) -> ConfigSnapshot:
    """Every file read once, without logging: the CLI and the doctor report it themselves."""
    return ConfigFiles(config_dir, SystemClock(), log=_quiet).current()


def _quiet(name: str, **fields: Any) -> None:
    pass


# -- scaffolding --------------------------------------------------------------------------


def scaffold(config_dir: Path) -> list[Path]:
    """Write each missing file empty and valid; never touch one that exists. The files written."""
    config_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for w in WATCHED:
        path = config_dir / w.name
        if not os.path.lexists(path):
            write_atomic(path, _empty_document(w.shape))
            written.append(path)
    return written


def _empty_document(shape: type[msgspec.Struct]) -> bytes:
    doc: dict[str, object] = {"version": CONFIG_VERSION}
    for f in msgspec.structs.fields(shape):
        if f.name != "version":
            doc[f.encode_name] = [] if f.default_factory is list else {}
    return (json.dumps(doc, indent=2) + "\n").encode()
