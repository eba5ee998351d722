"""What the command line accepts, checked before anything is read or written, and how its
flags become a job's fields.

Every refusal is one line on stderr and exit 2: argparse's own errors (its usage text would
be several lines), numbers that are nan, inf, negative or beyond a bound, and raw arguments
that no job could carry: a NUL byte (no exec and no container takes one), text that is not
UTF-8, one argument over 64 KiB or all of them together over 1 MiB (a job document is at most
64 KiB in any case).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import NoReturn

from dispatch.config.settings import Settings
from dispatch.config.units import (
    MAX_DURATION_MS,
    MAX_JOB_CPUS,
    format_memory,
    parse_cpus,
    parse_duration_ms,
    parse_memory,
    shown,
)
from dispatch.errors import DispatchError
from dispatch.model import MAX_JOB_BYTES, Job, SecretRef, one_line

MAX_ARG_BYTES = 64 * 1024
MAX_ARGV_BYTES = 1024 * 1024
MAX_WAIT_S = 3600.0  # how long `cancel --wait` may wait for the owning host
MAX_LIMIT = 100_000  # rows a listing asks of each queue and state


class UsageError(DispatchError):
    pass


def read_file(path: str) -> bytes:
    """At most one byte over the document cap: enough for decode_job to refuse it."""
    try:
        if path == "-":
            return sys.stdin.buffer.read(MAX_JOB_BYTES + 1)
        with open(path, "rb") as f:
            return f.read(MAX_JOB_BYTES + 1)
    except (OSError, ValueError) as exc:  # ValueError: stdin closed
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def memory(text: str | None) -> str | None:
    """The size in its shortest exact spelling, which releases before the one grammar read too."""
    try:
        return None if text is None else format_memory(parse_memory(text))
    except ValueError as exc:
        raise UsageError(f"--memory: {exc}") from None


def env_pairs(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--env {shown(pair)}: expected NAME=VALUE")
        env[name] = value
    return env


def secret_pairs(pairs: list[str], env: dict[str, str]) -> dict[str, SecretRef]:
    """`--secret NAME=<profile>/<name>`: the reference, checked with the job; a NAME that
    --env also sets is refused (which of the two was meant?)."""
    refs = {}
    for pair in pairs:
        name, sep, ref = pair.partition("=")
        if not sep:
            raise UsageError(f"--secret {shown(pair)}: expected NAME=<profile>/<name>")
        if name in env:
            raise UsageError(f"--secret {shown(name)}: --env sets it too; give one of them")
        refs[name] = SecretRef(secret=ref)
    return refs


def duration(flag: str, text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def parse_after(text: str | None) -> tuple[int, int]:
    """(due_ms, delay_ms): an ISO instant is absolute, '+10m' is relative to the server's now."""
    if not text:
        return 0, 0
    if text.startswith("+"):
        return 0, duration("--after", text[1:])
    try:
        instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--after {shown(text)}: expected an ISO-8601 instant or +DURATION"
        ) from None
    if instant.tzinfo is None:
        raise UsageError(f"--after {shown(text)}: give a timezone (Z or +01:00)")
    due_ms = int(instant.timestamp() * 1000)
    # job_enqueue's own bound (by the server's clock): said here, not as a bad call
    if due_ms > time.time() * 1000 + MAX_DURATION_MS:
        raise UsageError(f"--after {shown(text)}: at most 10 years from now")
    return due_ms, 0


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors said in one line (subparsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        print(f"dispatch: {one_line(message)}", file=sys.stderr)
        sys.exit(2)


def argv_problem(argv: Sequence[str]) -> str:
    """Why these raw arguments are refused whole ("" when they are not)."""
    total = 0
    for arg in argv:
        try:
            size = len(arg.encode())
        except UnicodeEncodeError:  # undecodable bytes arrive as lone surrogates
            return f"argument {shown(arg.encode(errors='replace').decode())} is not UTF-8"
        if "\0" in arg:
            return f"argument {shown(arg)} holds a NUL byte"
        if size > MAX_ARG_BYTES:
            return f"an argument of {size} bytes is over the {MAX_ARG_BYTES}-byte cap"
        total += size
    if total > MAX_ARGV_BYTES:
        return f"the arguments are {total} bytes, over the {MAX_ARGV_BYTES}-byte cap"
    return ""


def seconds(text: str) -> float:
    """`--wait`: a duration (a bare number is seconds), at most an hour."""
    try:
        value = parse_duration_ms(text) / 1000
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value > MAX_WAIT_S:
        raise argparse.ArgumentTypeError(f"{shown(text)} is over {MAX_WAIT_S:g} seconds")
    return value


def count(floor: int, ceiling: int) -> Callable[[str], int]:
    """A whole number within [floor, ceiling], as an argparse type."""

    def whole(text: str) -> int:
        if not (text.isascii() and text.isdigit() and len(text) <= 12):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number")
        if not floor <= int(text) <= ceiling:
            raise argparse.ArgumentTypeError(f"{text} is not between {floor} and {ceiling}")
        return int(text)

    return whole


def cpus(text: str) -> float:
    try:
        return parse_cpus(text, MAX_JOB_CPUS)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def roots(dirs: list[str]) -> tuple[str, ...]:
    """`dispatch up --allow DIR`: each an existing directory, made absolute."""
    found = []
    for raw in dirs:
        path = os.path.abspath(os.path.expanduser(raw))
        if not os.path.isdir(path):
            raise UsageError(f"--allow {raw}: not a directory")
        found.append(path)
    return tuple(found)


def check_local_folder(job: Job, settings: Settings) -> None:
    """A local job for this host's docker runner, refused at submit as the runner would
    refuse it (one line, with the fix) rather than accepted and refused `folder-not-allowed`
    when it runs. A folder for another host's queue is that host's to judge."""
    from dispatch.host.files import allowed_folder

    if job.kind != "local" or not job.folder or settings.runner != "docker":
        return
    if job.queue != f"jobs@{settings.host}":
        return
    if allowed_folder(job.folder, settings.allowed_roots) is not None:
        return
    if not settings.allowed_roots:
        parent = os.path.dirname(job.folder.rstrip("/")) or "/"
        raise UsageError(
            f"folder {job.folder}: no folder is allowed on this host yet; set "
            f"DISPATCH_ALLOWED_ROOTS={parent}, or run dispatch up --allow {parent}"
        )
    raise UsageError(
        f"folder {job.folder} is not a directory under DISPATCH_ALLOWED_ROOTS "
        f"({os.pathsep.join(settings.allowed_roots)})"
    )
