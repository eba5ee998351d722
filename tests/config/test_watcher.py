"""The watched config files: load, validate, keep the last good copy, reload on change."""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatch import log
from dispatch.clock import FakeClock
from dispatch.config.schemas import (
    FILES,
    ConfigSnapshot,
    Endpoint,
    Overlay,
    PauseWindow,
    Project,
    ScopedLimit,
    SecretProfile,
    Trigger,
    WaitProfile,
)
from dispatch.config.watcher import ConfigFiles, load_once, scaffold

GOOD: dict[str, dict[str, Any]] = {
    "settings.json": {"version": 1, "settings": {"model": "m1", "jobMemory": "2g"}},
    "scoped-limits.json": {"version": 1, "limits": [{"scope": "acme/web", "day": 10}]},
    "pause-windows.json": {"version": 1, "windows": []},
    "projects.json": {"version": 1, "projects": [{"id": "web", "repos": ["acme/web"]}]},
    "model-endpoints.json": {
        "version": 1,
        "endpoints": [{"id": "gpu1", "host": "gpu1:8000", "slots": 2, "models": ["m1"]}],
    },
    "wait-profiles.json": {"version": 1, "profiles": {"jira": {"command": ["check", "{target}"]}}},
    "triggers.json": {"version": 1, "triggers": [{"id": "nightly", "cron": "0 3 * * *"}]},
    "egress.json": {"version": 1, "hosts": ["api.example.com", "*.example.org", "10.0.0.5:8000"]},
    "secrets.json": {
        "version": 1,
        "profiles": {"vault": {"command": ["vault-read", "{name}"]}, "disk": {"file": "/etc/s"}},
    },
}

# what of a file the snapshot shows, and the same taken from the file's decoded content
PART: dict[str, Callable[[ConfigSnapshot], object]] = {
    "settings.json": lambda s: s.overlay,
    "scoped-limits.json": lambda s: s.limits,
    "pause-windows.json": lambda s: s.windows,
    "projects.json": lambda s: s.projects,
    "model-endpoints.json": lambda s: s.endpoints,
    "wait-profiles.json": lambda s: s.profiles,
    "triggers.json": lambda s: None,  # not in the snapshot: only its validity is
    "egress.json": lambda s: s.egress,
    "secrets.json": lambda s: s.secrets,
}
PART_OF_FILE: dict[str, Callable[[Any], object]] = {
    "settings.json": lambda c: c.settings,
    "scoped-limits.json": lambda c: tuple(c.limits),
    "pause-windows.json": lambda c: tuple(c.windows),
    "projects.json": lambda c: tuple(c.projects),
    "model-endpoints.json": lambda c: tuple(c.endpoints),
    "wait-profiles.json": lambda c: dict(c.profiles),
    "triggers.json": lambda c: None,
    "egress.json": lambda c: tuple(c.hosts),
    "secrets.json": lambda c: dict(c.profiles),
}


def projects(*ids: str) -> dict[str, object]:
    return {"version": 1, "projects": [{"id": one} for one in ids]}


def write(path: Path, data: object) -> None:
    """Atomically, as an editor or `dispatch init` does: a temp file, then os.replace."""
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(raw)
    os.replace(tmp, path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def files(tmp_path: Path, clock: FakeClock) -> ConfigFiles:
    return ConfigFiles(tmp_path, clock, check_every_s=1.0)


def look(files: ConfigFiles, clock: FakeClock) -> ConfigSnapshot:
    clock.advance(1.0)
    return files.current()


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[dict[str, Any]]]:
    stream = io.StringIO()
    monkeypatch.setattr(log.log, "stream", stream)
    monkeypatch.setattr(log.log, "human", False)
    return lambda: [json.loads(line) for line in stream.getvalue().splitlines()]


# -- loading ------------------------------------------------------------------------------


def test_a_missing_dir_is_an_empty_snapshot(tmp_path: Path, clock: FakeClock) -> None:
    snapshot = ConfigFiles(tmp_path / "nope", clock).current()
    assert snapshot == ConfigSnapshot()
    assert (snapshot.errors, snapshot.newer, snapshot.overlay_error) == ({}, (), None)


def test_valid_files_load(tmp_path: Path, files: ConfigFiles) -> None:
    for name, doc in GOOD.items():
        write(tmp_path / name, doc)
    snapshot = files.current()
    assert snapshot.errors == {} and snapshot.newer == ()
    assert snapshot.projects == (Project(id="web", repos=["acme/web"]),)
    assert snapshot.overlay == Overlay(model="m1", job_memory="2g")
    assert [limit.day for limit in snapshot.limits] == [10]
    assert [e.slots for e in snapshot.endpoints] == [2]
    assert snapshot.profiles["jira"].command == ["check", "{target}"]
    assert snapshot.profiles["jira"].timeout_ms == 10_000


def test_a_missing_file_next_to_good_ones_is_empty_not_an_error(
    tmp_path: Path, files: ConfigFiles, clock: FakeClock
) -> None:
    write(tmp_path / "projects.json", GOOD["projects.json"])
    assert len(files.current().projects) == 1
    (tmp_path / "projects.json").unlink()
    snapshot = look(files, clock)
    assert snapshot.projects == () and snapshot.errors == {}


# -- broken files -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"version": 1, "projects": [}', "malformed"),
        (b'{"version": 1, "projects": {"id": "web"}}', "Expected `array`"),
        (b'{"version": 1, "projects": [{"id": "web", "colour": "red"}]}', "unknown field"),
        (b'{"version": 1, "projects": [{"id": "web", "repos": ["acme"]}]}', "owner/name"),
        (b'{"version": 1, "projects": [{"id": 7}]}', "Expected `str`"),
    ],
    ids=["bad-json", "wrong-type", "unknown-field", "failed-validation", "wrong-id-type"],
)
def test_a_broken_file_keeps_the_last_good_copy_until_fixed(
    tmp_path: Path,
    files: ConfigFiles,
    clock: FakeClock,
    events: Callable[[], list[dict[str, Any]]],
    raw: bytes,
    says: str,
) -> None:
    path = tmp_path / "projects.json"
    write(path, GOOD["projects.json"])
    good = files.current().projects
    write(path, raw)
    snapshot = look(files, clock)
    assert snapshot.projects == good
    assert says in snapshot.errors["projects.json"]
    assert "\n" not in snapshot.errors["projects.json"]
    look(files, clock)  # unchanged: no second complaint
    assert [e["event"] for e in events()] == ["config_invalid"]
    assert events()[0]["file"] == "projects.json" and says in events()[0]["error"]

    write(path, projects("api"))
    snapshot = look(files, clock)
    assert snapshot.errors == {} and [p.id for p in snapshot.projects] == ["api"]
    assert [e["event"] for e in events()] == ["config_invalid", "config_reloaded"]


def test_a_broken_file_with_no_good_copy_is_empty(tmp_path: Path, files: ConfigFiles) -> None:
    write(tmp_path / "scoped-limits.json", b"not json at all")
    snapshot = files.current()
    assert snapshot.limits == () and set(snapshot.errors) == {"scoped-limits.json"}


@pytest.mark.parametrize(
    "doc",
    [
        {"projects": []},
        {"version": 0},
        {"version": -3},
        {"version": "1"},
        {"version": 1.0},
        {"version": True},
        {"version": None},
        [1],
        "1",
    ],
)
def test_a_missing_or_bad_version_is_broken(tmp_path: Path, files: ConfigFiles, doc: Any) -> None:
    write(tmp_path / "projects.json", doc)
    snapshot = files.current()
    assert "projects.json" in snapshot.errors and snapshot.newer == ()


@pytest.mark.parametrize(
    ("name", "doc", "says"),
    [
        ("projects.json", {"projects": [{"id": "a"}, {"id": "a"}]}, "twice"),
        ("projects.json", {"projects": [{"id": "a", "folders": ["srv"]}]}, "absolute"),
        ("projects.json", {"projects": [{"id": "a", "hostShare": 0}]}, "hostShare"),
        ("projects.json", {"projects": [{"id": "a", "hostShare": 1.5}]}, "hostShare"),
        ("projects.json", {"projects": [{"id": "a", "concurrent": -1}]}, "concurrent"),
        ("projects.json", {"projects": [{"id": "a", "memory": "lots"}]}, "memory"),
        ("scoped-limits.json", {"limits": [{"scope": "web"}]}, "scope"),
        ("scoped-limits.json", {"limits": [{"scope": "acme/web", "day": -1}]}, "day"),
        ("scoped-limits.json", {"limits": [{"scope": "/srv", "concurrent": -1}]}, "concurrent"),
        ("model-endpoints.json", {"endpoints": [{"id": "a", "host": "h", "slots": 0}]}, "slots"),
        (
            "model-endpoints.json",
            {"endpoints": [{"id": "a", "host": "h", "slots": 1, "models": []}]},
            "models",
        ),
        (
            "model-endpoints.json",
            {"endpoints": [{"id": "a", "host": "h", "slots": 1, "models": ["m"]}] * 2},
            "twice",
        ),
        ("wait-profiles.json", {"profiles": {"p": {"command": []}}}, "command"),
        ("wait-profiles.json", {"profiles": {"p": {"command": ["x"], "timeoutMs": 0}}}, "timeout"),
        ("settings.json", {"settings": {"jobMemory": "4 apples"}}, "memory"),
        ("settings.json", {"settings": {"jobCpus": 0}}, "cpus"),
        # regression: a jobMemory of "0" was accepted, and Docker reads 0 as no limit
        ("settings.json", {"settings": {"jobMemory": "0"}}, "floor"),
        ("settings.json", {"settings": {"jobMemory": "2t"}}, "ceiling"),
        ("settings.json", {"settings": {"jobCpus": 0.001}}, "cpus"),
        ("settings.json", {"settings": {"jobCpus": 1024}}, "cpus"),
        ("settings.json", {"settings": {"concurrency": {"*": 0}}}, "1 to 10000"),
        ("settings.json", {"settings": {"concurrency": {"gpu 1": 2}}}, "host name"),
        ("settings.json", {"settings": {"concurrency": {"*": "3"}}}, "concurrency"),
        ("projects.json", {"projects": [{"id": "a", "memory": "0"}]}, "floor"),
        ("projects.json", {"projects": [{"id": "a", "memory": "1m"}]}, "floor"),
        ("projects.json", {"projects": [{"id": "a", "cpus": 0.001}]}, "cpus"),
        ("triggers.json", {"triggers": [{"id": "t"}]}, "cron"),
        ("egress.json", {"hosts": ["*.10.0.0.1"]}, "hosts[0]"),
        ("egress.json", {"hosts": ["ok.example.com", "bad host"]}, "hosts[1]"),
        ("egress.json", {"hosts": ["a.example.com:70000"]}, "port"),
    ],
)
def test_validation_beyond_the_types(
    tmp_path: Path, files: ConfigFiles, name: str, doc: dict[str, Any], says: str
) -> None:
    write(tmp_path / name, {"version": 1, **doc})
    assert says in files.current().errors[name]


def test_valid_rows_pass_validation(tmp_path: Path, files: ConfigFiles) -> None:
    project: dict[str, object] = {"id": "a", "repos": ["acme/web"], "folders": ["/srv/site"]}
    project |= {"memory": "1.5g", "cpus": 0.5, "hostShare": 1, "concurrent": 0}
    write(tmp_path / "projects.json", {"version": 1, "projects": [project]})
    limits = [{"scope": "/srv/site", "month": 0}, {"scope": "acme/web", "concurrent": 1}]
    write(tmp_path / "scoped-limits.json", {"version": 1, "limits": limits})
    snapshot = files.current()
    assert snapshot.errors == {}
    assert (len(snapshot.projects), len(snapshot.limits)) == (1, 2)


def test_a_pause_window_that_cannot_be_a_time_is_broken(tmp_path: Path, files: ConfigFiles) -> None:
    row = {"scope": "*", "from": "25:99", "to": "06:00"}
    write(tmp_path / "pause-windows.json", {"version": 1, "windows": [row]})
    snapshot = files.current()
    assert snapshot.windows == ()
    assert snapshot.errors["pause-windows.json"].startswith("windows[0]")


def test_settings_broken_sets_the_overlay_error_and_keeps_the_last_overlay(
    tmp_path: Path, files: ConfigFiles, clock: FakeClock
) -> None:
    write(tmp_path / "settings.json", GOOD["settings.json"])
    overlay = files.current().overlay
    write(tmp_path / "settings.json", {"version": 1, "settings": {"jobCpus": "two"}})
    snapshot = look(files, clock)
    assert snapshot.overlay == overlay
    assert snapshot.overlay_error == snapshot.errors["settings.json"]
    assert snapshot.overlay_error and "jobCpus" in snapshot.overlay_error
    write(tmp_path / "settings.json", GOOD["settings.json"])
    assert look(files, clock).overlay_error is None


# -- newer versions -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["projects.json", "settings.json"])
def test_a_newer_version_holds_and_clears_when_set_back(
    tmp_path: Path,
    files: ConfigFiles,
    clock: FakeClock,
    events: Callable[[], list[dict[str, Any]]],
    name: str,
) -> None:
    write(tmp_path / name, GOOD[name])
    good = PART[name](files.current())
    write(tmp_path / name, {"version": 2, "somethingNew": {"a": 1}})
    snapshot = look(files, clock)
    assert snapshot.newer == (name,)
    assert (snapshot.errors, snapshot.overlay_error) == ({}, None)
    assert PART[name](snapshot) == good
    assert events()[-1] == {**events()[-1], "event": "config_newer", "file": name, "version": 2}

    write(tmp_path / name, GOOD[name])
    snapshot = look(files, clock)
    assert snapshot.newer == () and PART[name](snapshot) == good


# -- when it looks ------------------------------------------------------------------------


@pytest.fixture
def project_a(tmp_path: Path, files: ConfigFiles) -> tuple[Path, ConfigSnapshot]:
    """projects.json holding project "a", and the first snapshot taken of it."""
    path = tmp_path / "projects.json"
    write(path, projects("a"))
    return path, files.current()


def test_a_change_is_seen_only_after_check_every_s(
    project_a: tuple[Path, ConfigSnapshot], files: ConfigFiles, clock: FakeClock
) -> None:
    path, first = project_a
    write(path, projects("b"))
    assert files.current() is first
    clock.advance(0.5)
    assert files.current() is first
    clock.advance(0.5)
    assert [p.id for p in files.current().projects] == ["b"]


def test_nothing_changed_hands_back_the_same_snapshot(
    project_a: tuple[Path, ConfigSnapshot], files: ConfigFiles, clock: FakeClock
) -> None:
    _, first = project_a
    assert look(files, clock) is first
    assert look(files, clock) is first


def test_two_same_size_writes_with_the_same_mtime_are_both_seen(
    project_a: tuple[Path, ConfigSnapshot], files: ConfigFiles, clock: FakeClock
) -> None:
    path, first = project_a
    assert [p.id for p in first.projects] == ["a"]
    before = path.stat()
    write(path, projects("b"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # same second, same size
    assert path.stat().st_size == before.st_size
    assert [p.id for p in look(files, clock).projects] == ["b"]  # the inode differs


def test_a_file_whose_stamp_did_not_change_is_not_read_again(
    project_a: tuple[Path, ConfigSnapshot], files: ConfigFiles, clock: FakeClock
) -> None:
    path, first = project_a
    before = path.stat()
    path.write_bytes(path.read_bytes().replace(b'"a"', b'"b"'))  # in place: same inode
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert look(files, clock) is first


# -- odd files ----------------------------------------------------------------------------


def test_a_directory_or_a_symlink_to_one_is_broken(tmp_path: Path, files: ConfigFiles) -> None:
    (tmp_path / "projects.json").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "settings.json").symlink_to(tmp_path / "elsewhere")
    snapshot = files.current()
    assert snapshot.errors["projects.json"] == "not a regular file"
    assert snapshot.overlay_error == "not a regular file"


def test_a_symlink_to_a_file_is_followed(tmp_path: Path, files: ConfigFiles) -> None:
    write(tmp_path / "real", GOOD["projects.json"])
    (tmp_path / "projects.json").symlink_to(tmp_path / "real")
    assert files.current().projects[0].id == "web"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_broken(tmp_path: Path, files: ConfigFiles) -> None:
    write(tmp_path / "projects.json", GOOD["projects.json"])
    (tmp_path / "projects.json").chmod(0)
    assert "cannot read" in files.current().errors["projects.json"]


def test_a_config_dir_that_is_a_file_breaks_every_file_without_raising(
    tmp_path: Path, clock: FakeClock
) -> None:
    (tmp_path / "cfg").write_text("")
    snapshot = ConfigFiles(tmp_path / "cfg", clock).current()
    assert set(snapshot.errors) == set(FILES)
    assert all(reason.startswith("cannot read") for reason in snapshot.errors.values())


def test_an_unexpected_oserror_does_not_escape(
    tmp_path: Path, files: ConfigFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "projects.json", GOOD["projects.json"])

    def failing_open(*args: Any, **kwargs: Any) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "open", failing_open)
    assert files.current().errors["projects.json"] == "cannot read: Input/output error"


# -- scaffold -----------------------------------------------------------------------------


def test_scaffold_writes_empty_valid_files_and_never_overwrites(tmp_path: Path) -> None:
    config_dir = tmp_path / "deep" / "config"
    written = scaffold(config_dir)
    assert sorted(p.name for p in written) == sorted(FILES)
    assert load_once(config_dir) == ConfigSnapshot()
    settings_text = (config_dir / "settings.json").read_text()
    assert settings_text == '{\n  "version": 1,\n  "settings": {}\n}\n'
    assert json.loads((config_dir / "wait-profiles.json").read_text())["profiles"] == {}
    assert json.loads((config_dir / "projects.json").read_text())["projects"] == []

    write(config_dir / "projects.json", GOOD["projects.json"])
    (config_dir / "settings.json").unlink()
    assert scaffold(config_dir) == [config_dir / "settings.json"]
    assert json.loads((config_dir / "projects.json").read_text()) == GOOD["projects.json"]
    assert sorted(os.listdir(config_dir)) == sorted(FILES)  # no temp files left behind


# -- whatever is written, current() answers -----------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)
VALUES = (
    st.sampled_from(["a", "acme/web", "/srv/site", "4g", "lots", "22:00", "25:99", "UTC", "mon"])
    | st.integers(-2, 3)
    | st.floats(-1, 2)
    | st.none()
    | st.lists(st.sampled_from(["acme/web", "/srv", "m1", "x", ""]), max_size=3)
)
# each file's list (or map) field and its row shape, so rows often get as far as validation
BODIES: dict[str, tuple[str, type[msgspec.Struct]]] = {
    "settings.json": ("settings", Overlay),
    "scoped-limits.json": ("limits", ScopedLimit),
    "pause-windows.json": ("windows", PauseWindow),
    "projects.json": ("projects", Project),
    "model-endpoints.json": ("endpoints", Endpoint),
    "wait-profiles.json": ("profiles", WaitProfile),
    "triggers.json": ("triggers", Trigger),
    "secrets.json": ("profiles", SecretProfile),
}


def near(name: str) -> st.SearchStrategy[bytes]:
    """Documents shaped almost like the file: right field names, values of any kind."""
    if name == "egress.json":  # a list of host texts, not of rows
        hosts: st.SearchStrategy[object] = st.lists(st.text(max_size=30) | VALUES, max_size=4)
        return hosts.map(lambda v: json.dumps({"version": 1, "hosts": v}).encode())
    field, row = BODIES[name]
    keys = st.sampled_from([f.encode_name for f in msgspec.structs.fields(row)] + ["colour"])
    rows = st.dictionaries(keys, VALUES, max_size=6)
    if name == "settings.json":
        body: st.SearchStrategy[object] = rows
    elif name in {"wait-profiles.json", "secrets.json"}:
        body = st.dictionaries(st.sampled_from(["p", "q"]), rows, max_size=3)
    else:
        body = st.lists(rows, max_size=3)
    version = st.sampled_from([1, 1, 1, 1, 2, 0, "1"])
    doc = st.fixed_dictionaries({"version": version}, optional={field: body})
    return doc.map(lambda v: json.dumps(v).encode())


def garbage(name: str) -> st.SearchStrategy[tuple[str, bytes]]:
    raw = st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()) | near(name)
    return st.tuples(st.just(name), raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(written=st.sampled_from(sorted(FILES)).flatmap(garbage))
def test_whatever_is_written_leaves_the_last_good_copy_or_the_new_one(
    written: tuple[str, bytes],
) -> None:
    name, raw = written
    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock()
        files = ConfigFiles(Path(tmp), clock, log=lambda *a, **k: None)
        write(Path(tmp) / name, GOOD[name])
        good = files.current()
        assert good.errors == {}
        write(Path(tmp) / name, raw)
        snapshot = look(files, clock)
    if name in snapshot.errors or name in snapshot.newer:
        assert PART[name](snapshot) == PART[name](good)
        assert "\n" not in snapshot.errors.get(name, "")
    else:
        content = msgspec.json.decode(raw, type=FILES[name])  # a file taken is a valid file
        assert PART[name](snapshot) == PART_OF_FILE[name](content)
    assert (snapshot.overlay_error is not None) == ("settings.json" in snapshot.errors)
