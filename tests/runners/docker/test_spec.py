"""The container's create body, built without an engine: what every container is made of."""

from __future__ import annotations

from pathlib import Path

from dispatch.model import Size
from dispatch.runners.docker import DockerSettings
from dispatch.runners.docker.spec import Plan, container_config, container_name
from dispatch.runners.docker.user import DEFAULT_USER, HOME_DIR, TMPFS_OPTIONS
from tests.support.docker import make_ctx

IMAGE = "some-image:1"


def test_a_plain_job_gets_the_hardened_defaults(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, "h1", ["true"], env={"A": "1"})
    config = container_config(ctx, Plan(IMAGE, DEFAULT_USER), DockerSettings())
    assert config == {
        "Image": IMAGE,
        "Labels": {
            "dispatch.host": "h1",
            "dispatch.job": ctx.job.id,
            "dispatch.attempt": "1",
            "dispatch.fence": "7",
        },
        "Env": [f"HOME={HOME_DIR}", "A=1"],
        "Cmd": ["true"],
        "User": DEFAULT_USER,
        "HostConfig": {
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "PidsLimit": 512,
            "Memory": 4 * 1024**3,
            "MemorySwap": 4 * 1024**3,
            "NanoCpus": 2_000_000_000,
            "ReadonlyRootfs": True,
            "RestartPolicy": {"Name": "no"},
            "AutoRemove": False,
            "Init": True,
            "Ulimits": [{"Name": "nofile", "Soft": 4096, "Hard": 8192}],
            "LogConfig": {
                "Type": "local",
                "Config": {"max-size": str(10 * 1024**2), "max-file": "3"},
            },
            "Tmpfs": {
                "/tmp": TMPFS_OPTIONS,
                HOME_DIR: f"{TMPFS_OPTIONS},uid=65534,gid=65534,mode=0700",
            },
        },
    }


def test_a_local_job_works_in_its_bound_folder(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, "h1", ["true"], kind="local", folder="/srv/repo")
    config = container_config(ctx, Plan(IMAGE, "1000:1000", "/srv/repo"), DockerSettings())
    assert config["WorkingDir"] == "/work"
    assert config["HostConfig"]["Mounts"] == [
        {"Type": "bind", "Source": "/srv/repo", "Target": "/work", "ReadOnly": False}
    ]


def test_the_jobs_size_and_the_settings_shape_the_limits(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, "h1", ["true"], size=Size(memory="256m", cpus=0.5))
    settings = DockerSettings(network="jobs", pids_limit=64, log_max_bytes=5 * 1024**2)
    host = container_config(ctx, Plan(IMAGE, DEFAULT_USER), settings)["HostConfig"]
    assert (host["Memory"], host["MemorySwap"]) == (256 * 1024**2, 256 * 1024**2)
    assert host["NanoCpus"] == 500_000_000
    assert host["PidsLimit"] == 64 and host["NetworkMode"] == "jobs"
    assert host["LogConfig"]["Config"]["max-size"] == str(5 * 1024**2)


def test_the_images_own_user_keeps_its_home_and_a_writable_root_has_no_tmp(
    tmp_path: Path,
) -> None:
    ctx = make_ctx(tmp_path, "h1", [])
    config = container_config(ctx, Plan(IMAGE, ""), DockerSettings(read_only=False))
    assert "User" not in config and "Cmd" not in config and config["Env"] == []
    assert config["HostConfig"]["Tmpfs"] == {} and config["HostConfig"]["ReadonlyRootfs"] is False


def test_the_jobs_home_wins_and_the_proxys_variables_come_last(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, "h1", ["true"], env={"HOME": "/mine", "HTTPS_PROXY": "own"})
    plan = Plan(IMAGE, DEFAULT_USER, env=("HTTPS_PROXY=http://gw:3128",))
    config = container_config(ctx, plan, DockerSettings())
    assert config["Env"] == ["HOME=/mine", "HTTPS_PROXY=own", "HTTPS_PROXY=http://gw:3128"]


def test_the_container_is_named_after_the_job() -> None:
    assert container_name("abc") == "dispatch-job-abc"
