"""`dispatch service render|install|uninstall|status|restart [--user|--system]`: this
install's daemon as a systemd service.

The unit is rendered from `deploy/dispatch.service.in` by a fixed table of substitutions
(`table`): the venv's own `dispatch`, `worker` against DISPATCH_REDIS_URL (or `up` on the
embedded default), the environment file, the state dir it may write, the stop timeout (the
shutdown grace and 30 s). Every DISPATCH_* variable set when it is installed goes to that
file, written 0600, so no value (a Redis password in the URL) is ever on a command line.

`--user` (the default) installs into the user's manager; `--system` into the machine's, and
when not run as root it prints the exact privileged commands instead of running them. Both at
once would be two daemons on one engine reaping each other's containers: install refuses
when the other scope already has the unit.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dispatch.config.settings import Settings
from dispatch.errors import ConfigError, DispatchError

UNIT = "dispatch.service"
TEMPLATE = "dispatch.service.in"
SYSTEM_UNITS = Path("/etc/systemd/system")
SYSTEM_ENV = Path("/etc/dispatch/dispatch.env")
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")
Adder = Callable[..., argparse.ArgumentParser]
Command = Callable[[argparse.Namespace, Settings], int]


@dataclass(frozen=True)
class Scope:
    name: str  # "user" | "system"
    unit_dir: Path
    env_file: Path

    @property
    def unit(self) -> Path:
        return self.unit_dir / UNIT

    @property
    def systemctl(self) -> list[str]:
        return ["systemctl", "--user"] if self.name == "user" else ["systemctl"]


def scopes(settings: Settings) -> dict[str, Scope]:
    user_units = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return {
        "user": Scope(
            "user", user_units / "systemd" / "user", settings.config_dir / "dispatch.env"
        ),
        "system": Scope("system", SYSTEM_UNITS, SYSTEM_ENV),
    }


def template() -> str:
    """The installed package's copy, else the checkout's `deploy/`."""
    from importlib.resources import files

    packaged = Path(str(files("dispatch") / "deploy" / TEMPLATE))
    checkout = Path(__file__).resolve().parents[2] / "deploy" / TEMPLATE
    return (packaged if packaged.exists() else checkout).read_text()


def executable() -> str:
    beside = Path(sys.executable).parent / "dispatch"
    return str(beside) if beside.exists() else f"{sys.executable} -m dispatch"


def table(settings: Settings, scope: Scope) -> dict[str, str]:
    """Every substitution the template takes, and only those."""
    home = Path.home().resolve()
    under_home = [Path(p) for p in settings.allowed_roots if Path(p).resolve().is_relative_to(home)]
    system = scope.name == "system"
    return {
        "AFTER": "network-online.target docker.service" if system else "network-online.target",
        "ENV_FILE": str(scope.env_file),
        "EXEC": executable(),
        "COMMAND": "up" if settings.embedded else "worker",
        "TIMEOUT_STOP_S": str(math.ceil(settings.shutdown_grace_s + 30)),
        "STATE_DIR": str(settings.state_dir),
        "PROTECT_HOME": "no" if under_home else "read-only",
        "WANTED_BY": "multi-user.target" if system else "default.target",
    }


def render(text: str, values: dict[str, str]) -> str:
    wanted = set(_PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise ConfigError(
            f"the unit template and its table disagree: {sorted(wanted ^ set(values))}"
        )
    return _PLACEHOLDER.sub(lambda m: values[m[1]], text)


def env_file(settings: Settings, environ: dict[str, str] | None = None) -> str:
    """The DISPATCH_* variables set now, quoted as systemd reads an EnvironmentFile."""
    environ = dict(os.environ if environ is None else environ)
    found = {k: v for k, v in environ.items() if k.startswith("DISPATCH_")}
    found |= {
        "DISPATCH_STATE_DIR": str(settings.state_dir),
        "DISPATCH_CONFIG_DIR": str(settings.config_dir),
        "DISPATCH_HOST": settings.host,
    }
    lines = [f'{k}="{_quoted(v)}"' for k, v in sorted(found.items())]
    return (
        "# written by `dispatch service install`; readable by its owner only\n"
        + "\n".join(lines)
        + "\n"
    )


def _quoted(value: str) -> str:
    if "\n" in value or "\0" in value:
        raise ConfigError("a DISPATCH_* value holds a line break: it cannot go to the unit")
    return value.replace("\\", "\\\\").replace('"', '\\"')


# -- the commands ------------------------------------------------------------------------------


def add_command(add: Adder, func: Command) -> None:
    p = add("service", func, "this host's daemon as a systemd service: render, install, ...")
    p.add_argument("action", choices=["render", "install", "uninstall", "status", "restart"])
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", dest="scope", action="store_const", const="user")
    where.add_argument("--system", dest="scope", action="store_const", const="system")
    p.set_defaults(scope="user")
    p.add_argument(
        "--drain", action="store_true", help="restart: drain this host first (dispatch drain)"
    )
    p.add_argument("--grace", default="1h", help="with --drain: DURATION its jobs may take")


def run(args: argparse.Namespace, settings: Settings) -> int:
    scope = scopes(settings)[args.scope]
    if args.action == "render":
        print(render(template(), table(settings, scope)), end="")
        return 0
    if args.action == "install":
        return install(settings, scope)
    if args.action == "uninstall":
        return uninstall(scope)
    if args.action == "restart":
        if args.drain:
            return _drained_restart(settings, scope, args.grace)
        return _systemctl(scope, "restart", UNIT)
    return status(scope, settings)


def install(settings: Settings, scope: Scope) -> int:
    other = next(s for s in scopes(settings).values() if s.name != scope.name)
    if other.unit.exists():
        raise DispatchError(
            f"{other.unit} is installed already: two daemons on one engine reap each other's"
            f" containers (dispatch service uninstall --{other.name} first)"
        )
    unit = render(template(), table(settings, scope))
    env = env_file(settings)
    if scope.name == "system" and os.geteuid() != 0:
        return _print_privileged(scope, unit, env)
    _write(scope.env_file, env, 0o600)
    _write(scope.unit, unit, 0o644)
    print(f"wrote {scope.unit} and {scope.env_file} (0600)")
    return _systemctl(scope, "daemon-reload") or _systemctl(scope, "enable", "--now", UNIT)


def uninstall(scope: Scope) -> int:
    if not scope.unit.exists():
        print(f"{scope.unit} is not installed")
        return 0
    code = _systemctl(scope, "disable", "--now", UNIT)
    scope.unit.unlink()
    print(f"removed {scope.unit}; {scope.env_file} is kept (it holds your settings)")
    return code or _systemctl(scope, "daemon-reload")


def status(scope: Scope, settings: Settings) -> int:
    import subprocess

    fields = "ActiveState,SubState,MainPID,NRestarts,StatusText,ExecMainStatus,UnitFileState"
    done = subprocess.run(
        [*scope.systemctl, "show", UNIT, f"--property={fields}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(
            f"dispatch: systemctl show: {done.stderr.strip() or done.returncode}", file=sys.stderr
        )
        return 1
    shown = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    said = f"{UNIT} ({scope.name}): {shown.get('ActiveState', '?')} ({shown.get('SubState', '?')})"
    if shown.get("StatusText"):
        said += f", {shown['StatusText']}"
    said += f"; restarts {shown.get('NRestarts', '0')}"
    print(f"{said}, enabled: {shown.get('UnitFileState', '?')}")
    print(heartbeat_line(settings))
    return 0 if shown.get("ActiveState") == "active" else 1


def heartbeat_line(settings: Settings) -> str:
    """What the fleet sees of this host: its heartbeat in Redis, bounded like `status`."""
    import asyncio

    from dispatch.client import Client
    from dispatch.fleet.view import age, snapshot

    async def read() -> str:
        async with Client.from_settings(settings) as client:
            snap = await snapshot(client.redis, client.prefix, timeout_s=3.0)
        if snap.error:
            return f"heartbeat: {snap.error}"
        host = next((h for h in snap.hosts if h.name == settings.host), None)
        if host is None or not host.alive:
            return f"heartbeat: none from {settings.host} (not running, or not reaching Redis)"
        state = "draining" if host.draining else "live"
        return (
            f"heartbeat: {settings.host} {state}, {host.running}/{host.slots} slots, version"
            f" {host.version}, last beat {age(snap.at_ms, host.last_beat_ms)} ago"
        )

    return asyncio.run(read())


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, mode)  # an existing file keeps its old mode through O_CREAT


def _print_privileged(scope: Scope, unit: str, env: str) -> int:
    """Not root: the files go to a private temporary dir, and these commands install them."""
    import tempfile

    staged = Path(tempfile.mkdtemp(prefix="dispatch-service-"))
    _write(staged / "dispatch.env", env, 0o600)
    _write(staged / UNIT, unit, 0o644)
    print("run as root:")
    print(f"  install -D -m 0600 {staged / 'dispatch.env'} {scope.env_file}")
    print(f"  install -D -m 0644 {staged / UNIT} {scope.unit}")
    print("  systemctl daemon-reload")
    print(f"  systemctl enable --now {UNIT}")
    return 0


def _systemctl(scope: Scope, *args: str) -> int:
    import subprocess

    try:
        return subprocess.run([*scope.systemctl, *args]).returncode
    except FileNotFoundError:
        raise DispatchError("systemctl is not installed: this machine has no systemd") from None


def _drained_restart(settings: Settings, scope: Scope, grace: str) -> int:
    """Drain this host's daemon and wait for it to exit (0, so systemd leaves it stopped),
    then start the unit again: the new install's code, with no job aborted."""
    import asyncio

    from dispatch.cli import drain
    from dispatch.client import Client

    async def drained() -> int:
        async with Client.from_settings(settings) as client:
            if await drain.started_ms(client, settings.host) is None:
                return 0  # not running: nothing to drain
            return await drain.run(client, settings.host, grace, wait=True)

    return asyncio.run(drained()) or _systemctl(scope, "start", UNIT)
