"""Resolving secret references on the host that runs the job.

A profile of secrets.json is either:

    command  an argv run with no shell, `{name}` replaced by the reference's name in each
             argument; its environment is scrubbed to PATH and HOME; it gets no stdin, its
             stderr is discarded (it might hold the value, and it is never recorded), and its
             stdout, less one trailing newline, is the value. It runs in a process group of its
             own, killed whole when it outlives its `timeoutMs` or the run is aborted (cancel,
             job timeout, shutdown), and dies with the daemon (parent-death signal).
    file     a JSON object of name -> value, opened once per resolution and checked on the open
             descriptor: a regular file owned by the daemon's user, with no group or other
             permission bits (chmod 600), else it is not read.

Whatever fails raises `Unresolved` with a one-line reason naming the reference, the profile and
the command's basename, never a value, a path or the command's output. A value must be UTF-8,
hold no NUL byte, be at most 64 KiB and at least `MIN_CHARS` long (shorter cannot be masked).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Mapping

import msgspec

from dispatch.config.schemas import SecretProfile
from dispatch.host.commands import RESOLVER, read_capped, reap, spawn
from dispatch.host.files import TooLarge, read_bounded
from dispatch.model import SecretRef
from dispatch.runners.base import AbortSignal
from dispatch.secrets.mask import MIN_CHARS

MAX_VALUE_BYTES = 64 * 1024
MAX_FILE_BYTES = 1 << 20
_DRAIN_S = 2.0
_file_decoder = msgspec.json.Decoder(dict[str, str])


class Unresolved(Exception):
    """A reference could not be resolved; the message is fit for a record."""


class Aborted(Exception):
    """The run was aborted while a reference was being resolved."""


async def resolve(
    refs: Mapping[str, SecretRef], profiles: Mapping[str, SecretProfile], abort: AbortSignal
) -> dict[str, str]:
    """Variable -> value for every reference, one at a time (each ref resolved once)."""
    by_ref: dict[str, str] = {}
    for ref in refs.values():
        if ref.secret not in by_ref:
            by_ref[ref.secret] = await resolve_one(ref, profiles, abort)
    return {var: by_ref[ref.secret] for var, ref in refs.items()}


async def resolve_one(
    ref: SecretRef, profiles: Mapping[str, SecretProfile], abort: AbortSignal
) -> str:
    if abort.is_set:
        raise Aborted
    profile = profiles.get(ref.profile)
    if profile is None:  # declared when the gate looked, gone since (secrets.json changed)
        raise Unresolved(f"{ref.secret}: profile {ref.profile!r} is not declared")
    if profile.command:
        raw = await _from_command(ref, profile.command, profile.timeout_ms / 1000, abort)
    else:
        raw = _from_file(ref, profile.file or "")
    return _checked(ref, raw)


def _checked(ref: SecretRef, raw: bytes) -> str:
    try:
        value = raw.decode()
    except UnicodeDecodeError:
        raise Unresolved(f"{ref.secret}: the value is not UTF-8") from None
    if "\0" in value:
        raise Unresolved(f"{ref.secret}: the value holds a NUL byte")
    if len(value) < MIN_CHARS:
        raise Unresolved(
            f"{ref.secret}: the value is empty or under {MIN_CHARS} characters (too short to mask)"
        )
    return value


# -- command profiles -----------------------------------------------------------------------


def scrubbed_env() -> dict[str, str]:
    """All a resolver command inherits: where to find programs, and its user's home
    (`dispatch.host.commands.RESOLVER`)."""
    return RESOLVER.inherited()


async def _from_command(
    ref: SecretRef, command: list[str], timeout_s: float, abort: AbortSignal
) -> bytes:
    argv = [arg.replace("{name}", ref.name) for arg in command]
    who = f"{ref.secret}: {os.path.basename(argv[0])}"
    try:
        proc = await spawn(argv, RESOLVER, scrubbed_env())
    except OSError as exc:
        raise Unresolved(f"{who} cannot start: {exc.strerror or type(exc).__name__}") from None
    try:
        code, out = await _finished(proc, timeout_s, abort, who)
    finally:
        # its whole group killed (nothing it started outlives it), then the pipe read to its
        # end, so no transport is left open; one a process outside the group holds is closed
        await reap(proc, RESOLVER, drain_s=_DRAIN_S)
    if code != 0:
        raise Unresolved(f"{who} exited {code}")
    if len(out) > MAX_VALUE_BYTES:
        raise Unresolved(f"{who} printed more than {MAX_VALUE_BYTES} bytes")
    if out.endswith(b"\n"):  # what `echo` and most tools end with is not part of the value
        out = out[:-2] if out.endswith(b"\r\n") else out[:-1]
    return out


async def _finished(
    proc: asyncio.subprocess.Process, timeout_s: float, abort: AbortSignal, who: str
) -> tuple[int, bytes]:
    """The exit code and stdout; Aborted or Unresolved (timeout) when it must be killed."""
    done = asyncio.ensure_future(_exit_and_output(proc))
    aborted = asyncio.ensure_future(abort.event.wait())
    try:
        await asyncio.wait({done, aborted}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
    if done.done():
        return done.result()
    done.cancel()
    if abort.is_set:
        raise Aborted
    raise Unresolved(f"{who} timed out after {timeout_s:g}s")


async def _exit_and_output(proc: asyncio.subprocess.Process) -> tuple[int, bytes]:
    assert proc.stdout is not None
    out = await read_capped(proc.stdout, MAX_VALUE_BYTES + 1, drain=False)
    if len(out) > MAX_VALUE_BYTES:  # enough to refuse it: do not wait for the rest
        return 0, out
    return await proc.wait(), out


# -- file profiles --------------------------------------------------------------------------


def file_problem(st: os.stat_result) -> str:
    """Why a secrets file with this stat must not be read ("" when it may)."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not the daemon's user (uid {os.geteuid()})"
    if st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        return f"has mode {mode:04o}: group or others may use it; chmod 600 it"
    return ""


def _private(st: os.stat_result) -> None:
    problem = file_problem(st)
    if problem:
        raise ValueError(problem)


def read_private(path: str) -> dict[str, str]:
    """The file's names and values, checked on the descriptor it is read from (ValueError).
    A symlink to it is followed: the operator names this file in secrets.json."""
    try:
        raw = read_bounded(path, MAX_FILE_BYTES, follow_links=True, check=_private)
    except TooLarge:
        raise ValueError(f"is larger than {MAX_FILE_BYTES} bytes") from None
    except OSError as exc:
        raise ValueError(f"cannot be opened: {exc.strerror or type(exc).__name__}") from None
    try:  # msgspec's message is not used: it could quote the file
        return _file_decoder.decode(raw)
    except msgspec.DecodeError:
        raise ValueError("is not a JSON object of string values") from None


def _from_file(ref: SecretRef, path: str) -> bytes:
    try:
        values = read_private(path)
    except ValueError as exc:
        raise Unresolved(f"{ref.secret}: the file of profile {ref.profile!r} {exc}") from None
    if ref.name not in values:
        raise Unresolved(f"{ref.secret}: the file of profile {ref.profile!r} has no {ref.name!r}")
    return values[ref.name].encode()
