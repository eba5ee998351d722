"""The command line's part of the wait-for gate: `submit --wait-for`, `jobs --reason` and the
sentence `dispatch why` says of a job that waits on its conditions."""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING

import msgspec

from dispatch.config.settings import parse_duration_ms
from dispatch.errors import ConfigError, InvalidJob
from dispatch.model import Job, instant_ms, iso

if TYPE_CHECKING:
    from dispatch.gates.wait.state import WaitState
    from dispatch.records.job_views import JobView

# -- submit --wait-for ------------------------------------------------------------------------


def add_submit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait-for",
        action="append",
        default=[],
        metavar="COND",
        help="after=<ISO|+DURATION> or profile=<name>; repeatable, checked in order",
    )


def conditions(values: Sequence[str], now_ms: int) -> list[dict[str, str]]:
    """`--wait-for` values as waitFor entries; a `+DURATION` becomes an instant from now."""
    return [_condition(value, now_ms) for value in values]


def _condition(value: str, now_ms: int) -> dict[str, str]:
    kind, sep, text = value.partition("=")
    if kind == "profile" and sep and text:
        return {"profile": text}
    if kind != "after" or not sep or not text:
        raise InvalidJob(f"--wait-for {value!r}: expected after=<ISO|+DURATION> or profile=NAME")
    if text.startswith("+"):
        try:
            return {"after": iso(now_ms + parse_duration_ms(text[1:])) or ""}
        except (ConfigError, ValueError) as exc:
            raise InvalidJob(f"--wait-for {value!r}: {exc}") from None
    if instant_ms(text) is None:
        raise InvalidJob(f"--wait-for {value!r}: give an ISO-8601 instant with an offset")
    return {"after": text}


def check_afters(job: Job, now_ms: int, max_ms: int) -> None:
    """Refuse at submit an `after` the wait gate would refuse at pickup: further out than
    DISPATCH_WAIT_AFTER_MAX (this host's setting; the daemons read the same variable)."""
    for w in job.wait_for:
        at = instant_ms(w.after) if w.after else None
        if at is not None and at - now_ms > max_ms:
            from dispatch.gates.wait.refusals import span

            raise InvalidJob(
                f"waitFor after {w.after!r} is further out than DISPATCH_WAIT_AFTER_MAX"
                f" ({span(max_ms)})"
            )


# -- jobs --reason ----------------------------------------------------------------------------


def add_jobs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reason", metavar="PATTERN", help="only jobs whose reason matches, e.g. wait-*"
    )


def by_reason(views: Sequence[JobView], pattern: str | None) -> list[JobView]:
    if not pattern:
        return list(views)
    return [v for v in views if v.reason and fnmatch.fnmatchcase(v.reason, pattern)]


# -- why --------------------------------------------------------------------------------------


def why_line(state: WaitState, now_ms: int, tz: tzinfo | None = None) -> str:
    """The wait in words: on what, for what, since when, how it went, what comes next."""
    if state.cleared_ms:
        return f"Its wait on {state.label} cleared at {when(state.cleared_ms, now_ms, tz)}."
    on = f"`{state.profile}`" if state.profile else state.label
    target = f" for {state.target}" if state.target else ""
    if state.after_ms and state.after_ms > now_ms:
        then = f"; then {state.label} is checked" if state.label.startswith("`") else ""
        return f"It waits{target} for its after instant, {when(state.after_ms, now_ms, tz)}{then}."
    since = f" since {when(state.since_ms, now_ms, tz)}" if state.since_ms else ""
    said = [f"Waiting on {on}{target}{since} ({_story(state)})"]
    if state.next_ms:
        said.append(f"next check at {when(state.next_ms, now_ms, tz)}")
    if state.gives_up_ms:
        said.append(f"gives up at {when(state.gives_up_ms, now_ms, tz)}")
    return "; ".join(said) + "."


def _story(state: WaitState) -> str:
    checks = f"{state.checks} check{'' if state.checks == 1 else 's'}"
    if state.answer:
        checks += f", last: {state.answer}" + (f", {state.line!r}" if state.line else "")
    if state.throttles:
        checks += f", {state.throttles} denied a check slot in a row"
    return checks


def why_json(story: str, state: WaitState | None) -> str:
    """`why --json` with the wait state under "wait" (null when the gate never looked)."""
    document = msgspec.json.decode(story)
    document["wait"] = msgspec.to_builtins(state) if state is not None else None
    return msgspec.json.encode(document).decode()


def when(ms: int, now_ms: int, tz: tzinfo | None = None) -> str:
    """An instant as an operator says it: 10:47, 10:02 tomorrow, 2030-01-01 10:00."""
    at = datetime.fromtimestamp(ms / 1000, tz or UTC)
    today = datetime.fromtimestamp(now_ms / 1000, tz or UTC).date()
    hm = at.strftime("%H:%M")
    days = (at.date() - today).days
    if days == 0:
        return hm
    if days == 1:
        return f"{hm} tomorrow"
    if days == -1:
        return f"{hm} yesterday"
    return f"{at:%Y-%m-%d} {hm}"


def local_zone() -> tzinfo | None:
    return datetime.now().astimezone().tzinfo
