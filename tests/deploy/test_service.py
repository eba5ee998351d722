"""`dispatch service`: the unit rendered from deploy/dispatch.service.in for both scopes, every
placeholder of its fixed table filled, the directives the service needs present, and
`systemd-analyze verify` silent on it (Debian's systemd, as the test command installs); the
environment file 0600 and never on a command line; install's systemctl calls, and its refusal
of a second unit in the other scope.

No systemd runs in this container, so install and uninstall are checked against a stand-in
`systemctl` that records its arguments (the unit they write is the one verified above)."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from dispatch.cli import service
from dispatch.config.settings import Settings, from_env
from dispatch.errors import DispatchError

NEEDED = [
    "Type=notify", "NotifyAccess=main", "WatchdogSec=30", "Restart=on-failure", "RestartSec=5",
    "RestartPreventExitStatus=2", "StartLimitIntervalSec=60", "StartLimitBurst=5",
    "KillSignal=SIGTERM", "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes",
    "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "RestrictSUIDSGID=yes",
    "SystemCallArchitectures=native", "LockPersonality=yes",
]  # fmt: skip


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return from_env(
        {
            "DISPATCH_REDIS_URL": "redis://:s3cret@redis.internal:6379/0",
            "DISPATCH_STATE_DIR": str(tmp_path / "state"),
            "DISPATCH_CONFIG_DIR": str(tmp_path / "config"),
            "DISPATCH_HOST": "svc-host",
            "DISPATCH_SHUTDOWN_GRACE": "45s",
        }
    )


@pytest.fixture
def places(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's and the machine's unit dirs, under tmp; a systemctl that records its calls."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home-config"))
    monkeypatch.setattr(service, "SYSTEM_UNITS", tmp_path / "etc-systemd")
    monkeypatch.setattr(service, "SYSTEM_ENV", tmp_path / "etc-dispatch" / "dispatch.env")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return calls


def rendered(settings: Settings, scope: str) -> str:
    return service.render(
        service.template(), service.table(settings, service.scopes(settings)[scope])
    )


@pytest.mark.parametrize("scope", ["user", "system"])
def test_the_rendered_unit_has_what_the_service_needs_and_verifies(
    settings: Settings, scope: str, tmp_path: Path
) -> None:
    unit = rendered(settings, scope)
    assert "@" not in unit.replace("redis://", "")  # every placeholder filled
    lines = unit.splitlines()
    for directive in NEEDED:
        assert directive in lines, directive
    assert "TimeoutStopSec=75" in lines  # the 45 s grace and 30 s
    assert f"ReadWritePaths={settings.state_dir}" in lines
    assert f"ExecStart={service.executable()} worker" in lines
    assert "s3cret" not in unit  # the URL is in the environment file only
    verify(unit, scope, tmp_path)


def verify(unit: str, scope: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI") == "true":
            pytest.fail("systemd-analyze is missing: apt-get install systemd")
        pytest.skip("systemd-analyze is missing")
    where = tmp_path / "units"
    where.mkdir(exist_ok=True)
    (where / service.UNIT).write_text(unit)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    argv = [analyze, *(["--user"] if scope == "user" else []), "verify", str(where / service.UNIT)]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=os.environ | {"XDG_RUNTIME_DIR": str(runtime)}
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr  # a warning is a failure too


def test_the_table_and_the_template_agree_exactly(settings: Settings) -> None:
    values = service.table(settings, service.scopes(settings)["user"])
    with pytest.raises(Exception, match="disagree"):
        service.render(service.template(), {k: v for k, v in values.items() if k != "EXEC"})
    with pytest.raises(Exception, match="disagree"):
        service.render(service.template(), values | {"EXTRA": "x"})


def test_the_embedded_default_runs_up_and_a_root_under_home_lifts_protect_home(
    settings: Settings,
) -> None:
    embedded = replace(settings, embedded=True)
    assert f"ExecStart={service.executable()} up" in rendered(embedded, "user").splitlines()
    assert "ProtectHome=read-only" in rendered(settings, "user").splitlines()
    homely = replace(settings, allowed_roots=(str(Path.home() / "src"),))
    assert "ProtectHome=no" in rendered(homely, "user").splitlines()


def test_install_writes_a_private_environment_file_and_enables_the_unit(
    settings: Settings, places: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPATCH_REDIS_URL", 'redis://:p"a\\ss@r:6379/0')
    scope = service.scopes(settings)["user"]
    assert service.install(settings, scope) == 0
    assert stat.S_IMODE(scope.env_file.stat().st_mode) == 0o600
    env = scope.env_file.read_text()
    assert 'DISPATCH_REDIS_URL="redis://:p\\"a\\\\ss@r:6379/0"' in env.splitlines()
    assert f'DISPATCH_STATE_DIR="{settings.state_dir}"' in env.splitlines()
    assert scope.unit.read_text() == rendered(settings, "user")
    assert places.read_text().splitlines() == [
        "--user daemon-reload",
        "--user enable --now dispatch.service",
    ]
    run = argparse.Namespace(action="uninstall", scope="user")
    assert service.run(run, settings) == 0 and not scope.unit.exists()
    assert scope.env_file.exists()  # the operator's settings stay


def test_install_refuses_a_second_unit_in_the_other_scope(settings: Settings, places: Path) -> None:
    system = service.scopes(settings)["system"]
    system.unit.parent.mkdir(parents=True)
    system.unit.write_text("[Unit]\n")
    with pytest.raises(DispatchError, match="reap each other's containers"):
        service.install(settings, service.scopes(settings)["user"])
    assert not places.exists()  # systemctl was never called


def test_a_system_install_without_root_prints_the_privileged_commands(
    settings: Settings, places: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert service.install(settings, service.scopes(settings)["system"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "run as root:" and said[-1] == "  systemctl enable --now dispatch.service"
    staged = Path(said[1].split()[4])
    assert stat.S_IMODE(staged.stat().st_mode) == 0o600
    assert not places.exists()


def test_status_says_what_systemd_shows_and_the_hosts_heartbeat(
    redis_url: str, prefix: str, tmp_path: Path, places: Path, capsys
) -> None:
    import json

    from redis import Redis

    settings = from_env(
        {"DISPATCH_REDIS_URL": redis_url, "DISPATCH_PREFIX": prefix, "DISPATCH_HOST": "svc-host",
         "DISPATCH_CONFIG_DIR": str(tmp_path / "config")}
    )  # fmt: skip
    beat = {"host": "svc-host", "running": 1, "slots": 3, "version": "9.9"}
    with Redis.from_url(redis_url) as r:
        r.sadd(f"{prefix}:hosts", "svc-host")
        r.set(f"{prefix}:host:svc-host", json.dumps(beat), px=60_000)
    shown = "ActiveState=active\nSubState=running\nNRestarts=2\nStatusText=1/3 slots\n"
    shown += "UnitFileState=enabled\n"
    stub = places.parent / "bin" / "systemctl"
    stub.write_text(f"#!/bin/sh\nprintf '{shown}'\n")
    assert service.status(service.scopes(settings)["user"], settings) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == (
        "dispatch.service (user): active (running), 1/3 slots; restarts 2, enabled: enabled"
    )
    assert said[1].startswith("heartbeat: svc-host live, 1/3 slots, version 9.9, last beat")
