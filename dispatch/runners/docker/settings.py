"""The docker runner's settings: built once, from the settings the daemon already parsed.

Every `DISPATCH_*` variable is parsed by `dispatch.config.settings`; the daemon reads the
environment once and `docker_settings` builds these from that parse, so nothing here reads
the environment again. `DockerSettings.from_env` is the same rule for a caller with no daemon
settings at hand (the docker-only variables alone, the image and job size left at the runner's
defaults). The engine's address is the client's (`resolve_host`: DOCKER_HOST).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dispatch.config.settings import Settings
from dispatch.config.settings import from_env as settings_from_env
from dispatch.errors import ConfigError
from dispatch.runners.base import OUTPUT_CAP_BYTES

# The engine's log is only read while the run goes on, and bounded so that a job printing
# without end cannot fill the engine's disk: 3 files of 10 MiB, rotated by the `local` driver.
LOG_MAX_BYTES = 10 * 1024**2
LOG_FILES = 3


@dataclass(frozen=True, kw_only=True)
class DockerSettings:
    allowed_roots: tuple[str, ...] = ()  # local folders must lie under one of these
    # The next three come from dispatch.config.Settings (see `docker_settings`).
    default_image: str | None = None  # for jobs that name no image
    default_memory: str = "4g"  # for jobs run without the size gate
    default_cpus: float = 2.0
    user: str | None = None  # None: the folder's owner, or nobody (user.py); "" = image's USER
    network: str | None = None  # None = the engine's default bridge
    read_only: bool = True  # the opt-out is for images that must write outside /tmp and HOME
    pids_limit: int = 512
    log_max_bytes: int = LOG_MAX_BYTES  # per log file of the engine's `local` driver
    workspace: str = "/work"  # where a local job's folder is mounted
    output_drain_s: float = 5.0  # how long the output may trail the exit
    engine_wait_s: float = 600.0  # how long a run waits for an engine gone mid-run to answer

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> DockerSettings:
        """The docker-only DISPATCH_* variables, as dispatch.config.settings parsed them."""
        return _docker_only(settings_from_env(env))


def docker_settings(settings: Settings) -> DockerSettings:
    """The docker-only variables, with the image and default job size the daemon parsed."""
    return replace(
        _docker_only(settings),
        default_image=settings.image,
        default_memory=str(settings.job_memory),  # bytes: parse_memory reads a plain count
        default_cpus=settings.job_cpus,
        engine_wait_s=settings.engine_wait_ms / 1000,
    )


def _docker_only(s: Settings) -> DockerSettings:
    return DockerSettings(
        allowed_roots=s.allowed_roots,
        user=s.container_user,  # set, even empty, it decides for every job
        network=s.owned_network or s.container_network,
        read_only=s.container_read_only,
        pids_limit=s.container_pids_limit,
        log_max_bytes=_log_max_bytes(s.container_log_size),
    )


def _log_max_bytes(size: int | None) -> int:
    if size is None:
        return LOG_MAX_BYTES
    if size * LOG_FILES < OUTPUT_CAP_BYTES:  # a re-adopted run re-reads the log from its start
        raise ConfigError(
            f"DISPATCH_CONTAINER_LOG_SIZE={size}: the engine must keep at least the output "
            f"cap ({OUTPUT_CAP_BYTES // 1024**2} MiB) in {LOG_FILES} files: use 3m or more"
        )
    return size
