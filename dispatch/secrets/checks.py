"""What `dispatch doctor` says of each secret profile, without resolving anything: a command's
program is found on the resolver's PATH and is executable; a file is private to this user and a
JSON object of strings (how many names, never which values). Run the doctor as the daemon's user:
the file's owner is checked against whoever runs it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping

from dispatch.config.schemas import SecretProfile
from dispatch.secrets.resolver import read_private, scrubbed_env


def profile_checks(profiles: Mapping[str, SecretProfile]) -> list[tuple[bool, str]]:
    """(ok, detail) per profile, by name."""
    return [_check(name, profiles[name]) for name in sorted(profiles)]


def _check(name: str, profile: SecretProfile) -> tuple[bool, str]:
    if profile.command:
        ok, detail = _command(profile.command[0])
    else:
        ok, detail = _file(profile.file or "")
    return ok, f"profile {name}: {detail}"


def _command(program: str) -> tuple[bool, str]:
    found = shutil.which(program, path=scrubbed_env()["PATH"])
    if found is None:
        return False, f"command {program} is not an executable file on the resolver's PATH"
    return True, f"command {found}"


def _file(path: str) -> tuple[bool, str]:
    try:
        names = read_private(path)
    except ValueError as exc:
        return False, f"file {path} {exc}"
    return True, f"file {path}, private, {len(names)} names"
