"""`dispatch jobs` search: by id prefix, by what the job works on, by host and by age, on top of
`--state` and `--reason`; each state's jobs listed oldest first."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dispatch.cli import inputs
from dispatch.model import instant_ms

if TYPE_CHECKING:
    from dispatch.records.job_views import JobView


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--id", dest="id_prefix", metavar="PREFIX", help="jobs whose id starts so")
    p.add_argument(
        "--target", metavar="TEXT", help="jobs on it: a repo (owner/name[#n]) or a folder name"
    )
    p.add_argument("--host", metavar="HOST", help="jobs running, deferred or ended on this host")
    p.add_argument("--since", metavar="DURATION", help="jobs queued within it, e.g. 2h")


@dataclass(frozen=True)
class Filters:
    prefix: str = ""
    target: str = ""  # casefolded
    host: str = ""
    since_ms: int | None = None

    @classmethod
    def of(cls, args: argparse.Namespace, now_ms: int) -> Filters:
        """The filters asked for, checked: a bad --since is a one-line usage error."""
        since_ms = now_ms - inputs.duration("--since", args.since) if args.since else None
        target = (args.target or "").casefold()
        return cls(args.id_prefix or "", target, args.host or "", since_ms)

    def keep(self, v: JobView) -> bool:
        return (
            v.id.startswith(self.prefix)
            and (not self.target or self.target in targets_of(v))
            and (not self.host or self.host in hosts_of(v))
            and (self.since_ms is None or _queued_ms(v) >= self.since_ms)
        )


def targets_of(v: JobView) -> set[str]:
    """`acme/web#7` is found as itself or as its repo."""
    target = v.target.casefold()
    return {target, target.partition("#")[0]} - {""}


def hosts_of(v: JobView) -> set[str]:
    found = {v.owner or ""}
    if v.defer is not None:
        found.add(v.defer.host)
    if v.result is not None:
        found.add(v.result.host)
    return found - {""}


def _queued_ms(v: JobView) -> int:
    return (instant_ms(v.queued_at) if v.queued_at else None) or 0


def oldest_first(views: Sequence[JobView]) -> list[JobView]:
    """By when each was queued (the id for a tie, or none known)."""
    return sorted(views, key=lambda v: (_queued_ms(v), v.id))
