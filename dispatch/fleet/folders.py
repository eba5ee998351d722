"""The folder mutex: at most one job in any folder tree of this host at a time.

    folders = FolderLocks()
    ticket = folders.try_acquire("/x/a/b", owner="job-1")
    if ticket is None:
        other = folders.in_the_way("/x/a/b")  # the ticket of /x/a, /x/a/b or /x/a/b/c held
    ...
    folders.release(ticket)

A job with a folder mounted read-write can change everything beneath it, so a held folder
excludes itself, every folder inside it and every folder above it: no two held folders are ever
equal or nested. Paths are compared by components (`/x/ab` is not under `/x/a`); callers pass
realpaths, so two spellings of one folder (symlinks, `..`) are one folder.

Each held folder is recorded twice: under its own path, and in the `below` set of every one of
its ancestors. A check then looks up each ancestor (is one held?) and the folder's own `below`
set (is anything inside it held?): O(depth), whatever the number of folders held. Release goes
by ticket identity, like `Slots`: a second release is a no-op and never frees another holder,
and every entry it made is removed, so the maps hold exactly the folders held now.

In-process only: a local job's folder exists on one machine and its jobs all go to that
host's queue (`jobs@<host>`), where one daemon claims them, so nothing fleet-wide is needed.
Synchronous, so within one event loop a check and its take are atomic.
"""

from __future__ import annotations

from dataclasses import dataclass
from posixpath import normpath

Parts = tuple[str, ...]


@dataclass(frozen=True, slots=True, eq=False)
class FolderTicket:
    """Proof that one folder is held. Compared by identity, like a slot's `Ticket`."""

    path: str
    owner: str = ""  # who holds it (a job id), for `dispatch why`


def parts_of(path: str) -> Parts:
    """A path's components, root first: `/x/a` -> ("/", "x", "a"); `/` -> ("/",)."""
    clean = normpath(path)
    if not clean.startswith("/"):
        raise ValueError(f"the folder mutex takes absolute paths, got {path!r}")
    return ("/", *(p for p in clean.split("/") if p))


class FolderLocks:
    def __init__(self) -> None:
        self._held: dict[Parts, FolderTicket] = {}
        self._below: dict[Parts, set[FolderTicket]] = {}  # held strictly inside each prefix
        self._parts: dict[FolderTicket, Parts] = {}
        self.denials = 0

    def in_the_way(self, path: str) -> FolderTicket | None:
        """The held folder that excludes `path`: itself, an ancestor, else a descendant."""
        parts = parts_of(path)
        for depth in range(1, len(parts) + 1):
            held = self._held.get(parts[:depth])
            if held is not None:
                return held
        inside = self._below.get(parts)
        return min(inside, key=lambda t: t.path) if inside else None

    def try_acquire(self, path: str, owner: str = "") -> FolderTicket | None:
        """Hold `path` if nothing equal, above or inside it is held; None (a denial) if not."""
        if self.in_the_way(path) is not None:
            self.denials += 1
            return None
        parts = parts_of(path)
        ticket = FolderTicket(path, owner)
        self._held[parts] = ticket
        self._parts[ticket] = parts
        for depth in range(1, len(parts)):
            self._below.setdefault(parts[:depth], set()).add(ticket)
        return ticket

    def release(self, ticket: FolderTicket) -> bool:
        """Give the folder back; False if the ticket was released already or is not ours."""
        parts = self._parts.pop(ticket, None)
        if parts is None:
            return False
        del self._held[parts]
        for depth in range(1, len(parts)):
            prefix = parts[:depth]
            inside = self._below[prefix]
            inside.discard(ticket)
            if not inside:
                del self._below[prefix]
        return True

    def holds(self, ticket: FolderTicket) -> bool:
        return ticket in self._parts

    def held(self) -> list[FolderTicket]:
        return sorted(self._parts, key=lambda t: t.path)


def relation(path: str, other: str) -> str:
    """How `other` stands to `path`: "same", "above" (an ancestor), "inside", or "apart"."""
    mine, theirs = parts_of(path), parts_of(other)
    if mine == theirs:
        return "same"
    if theirs == mine[: len(theirs)]:
        return "above"
    if mine == theirs[: len(mine)]:
        return "inside"
    return "apart"
