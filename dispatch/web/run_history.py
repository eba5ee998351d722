"""The Runs page's numbers: the runs of a span from the run records, binned.

The records indexed in the span (`Client.records_since`, at most `MOST` a queue; a queue that
has more says so, and the span's oldest bins are then short), binned by when each run ended,
the last bin ending now: 1 h in 60 bins of 1 minute, 24 h in 96 of 15 minutes, 7 d in 84 of 2
hours. A bin's throughput is its runs ended per minute; its wait is each started run's
`started_at - queued_at`, as the nearest-rank p50, p95 and p99 (no interpolation: each is a
wait some run had).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from markupsafe import Markup

from dispatch.client import Client
from dispatch.model import RunRecord, instant_ms
from dispatch.web import charts
from dispatch.web.listing import BadQuery

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
MOST = 50_000  # run records read per queue for one span
NEWEST = 100  # runs in the page's table
PCT = (50, 95, 99)


@dataclass(frozen=True)
class Span:
    name: str
    ms: int
    bin_ms: int
    words: str  # "the last <words>"

    @property
    def bins(self) -> int:
        return self.ms // self.bin_ms

    @classmethod
    def parse(cls, text: str) -> Span:
        found = SPANS.get(text)
        if found is None:
            raise BadQuery(f"span {text[:20]!r}: use one of {', '.join(SPANS)}")
        return found


SPANS = {
    s.name: s
    for s in (
        Span("1h", HOUR_MS, MINUTE_MS, "hour"),
        Span("24h", DAY_MS, 15 * MINUTE_MS, "24 hours"),
        Span("7d", 7 * DAY_MS, 2 * HOUR_MS, "7 days"),
    )
}


@dataclass(frozen=True)
class Waits:
    """Nearest-rank percentiles of waits, in ms."""

    p50: int
    p95: int
    p99: int
    n: int

    @classmethod
    def of(cls, waits: Sequence[int]) -> Waits | None:
        if not waits:
            return None
        ordered = sorted(waits)
        p50, p95, p99 = (ordered[max(math.ceil(p * len(ordered) / 100) - 1, 0)] for p in PCT)
        return cls(p50, p95, p99, len(ordered))


@dataclass(frozen=True)
class Row:
    """One run as the table shows it."""

    record: RunRecord
    ended_ms: int
    waited_ms: int | None  # None: it never started, or an instant is missing

    @property
    def waited(self) -> str:
        return duration(self.waited_ms)

    @property
    def ran_for(self) -> str:
        return duration(self.record.slot_ms if self.record.started_at else None)


@dataclass
class Bin:
    start_ms: int
    ms: int
    ended: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    waits_ms: list[int] = field(default_factory=list)

    def add(self, row: Row) -> None:
        self.ended += 1
        outcome = row.record.outcome
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if row.waited_ms is not None:
            self.waits_ms.append(row.waited_ms)

    @property
    def per_minute(self) -> float:
        return self.ended / (self.ms / MINUTE_MS)

    @property
    def waits(self) -> Waits | None:
        return Waits.of(self.waits_ms)


@dataclass(frozen=True)
class Runs:
    span: Span
    bins: list[Bin]
    newest: list[Row]  # newest first
    capped: list[str]  # queues with more than MOST records in the span
    undated: int  # records without a readable end: not counted
    throughput: Markup
    waiting: Markup

    @property
    def spans(self) -> list[str]:
        return list(SPANS)

    @property
    def most(self) -> int:
        return MOST

    @property
    def ended(self) -> int:
        return sum(b.ended for b in self.bins)

    @property
    def per_minute(self) -> float:
        return self.ended / (self.span.ms / MINUTE_MS)

    @property
    def outcomes(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for b in self.bins:
            for outcome, n in b.outcomes.items():
                total[outcome] = total.get(outcome, 0) + n
        return dict(sorted(total.items(), key=lambda kv: -kv[1]))

    @cached_property
    def waits(self) -> Waits | None:
        return Waits.of([w for b in self.bins for w in b.waits_ms])

    @property
    def said(self) -> list[str]:
        """The span's numbers in words, a sentence each."""
        if not self.ended:
            return [f"No run ended in the last {self.span.words}."]
        outcomes = ", ".join(f"{n:,} {outcome}" for outcome, n in self.outcomes.items())
        found = [
            f"{_runs(self.ended)} ended in the last {self.span.words},"
            f" {self.per_minute:.2f} a minute: {outcomes}."
        ]
        w = self.waits
        if w is not None:
            found.append(
                f"Waited from queued to started: p50 {duration(w.p50)}, p95 {duration(w.p95)},"
                f" p99 {duration(w.p99)}, over the {_runs(w.n)} that started."
            )
        return found


async def runs(client: Client, span: Span) -> Runs:
    now_ms = client.clock.now_ms()
    since_ms = now_ms - span.ms
    records = await client.records_since(since_ms, MOST)
    bins = [Bin(since_ms + i * span.bin_ms, span.bin_ms) for i in range(span.bins)]
    placed: list[Row] = []
    undated = 0
    for record in records:
        row = row_of(record)
        if row is None:
            undated += 1
        elif row.ended_ms >= since_ms:  # an end after now (a host's clock ahead): the last bin
            bins[min((row.ended_ms - since_ms) // span.bin_ms, span.bins - 1)].add(row)
            placed.append(row)
    placed.sort(key=lambda r: r.ended_ms, reverse=True)
    throughput, waiting = _run_charts(span, bins)
    return Runs(span, bins, placed[:NEWEST], _capped(records), undated, throughput, waiting)


def row_of(record: RunRecord) -> Row | None:
    ended = instant_ms(record.ended_at) if record.ended_at else None
    if ended is None:
        return None
    queued = instant_ms(record.queued_at) if record.queued_at else None
    started = instant_ms(record.started_at) if record.started_at else None
    waited = None if queued is None or started is None else max(started - queued, 0)
    return Row(record, ended, waited)


def _capped(records: Sequence[RunRecord]) -> list[str]:
    counts: dict[str, int] = {}
    for r in records:
        counts[r.queue] = counts.get(r.queue, 0) + 1
    return sorted(queue for queue, n in counts.items() if n >= MOST)


def _run_charts(span: Span, bins: Sequence[Bin]) -> tuple[Markup, Markup]:
    labels = [_bin_label(span, b.start_ms) for b in bins]
    titles = [
        f"{label}: {b.ended:,} ended, {b.per_minute:.2f} a minute"
        for label, b in zip(labels, bins, strict=True)
    ]
    throughput = charts.bars(
        [b.per_minute for b in bins], labels, titles=titles, fmt=_per_minute, name="throughput"
    )
    series: dict[str, list[float | None]] = {"p50": [], "p95": [], "p99": []}
    for b in bins:
        w = b.waits
        for name, values in series.items():
            values.append(None if w is None else getattr(w, name))
    waiting = charts.lines(series, labels, fmt=lambda v: duration(round(v)), name="wait")
    return throughput, waiting


def _bin_label(span: Span, ms: int) -> str:
    """A bin's start on this machine's clock (as the other pages show instants)."""
    return datetime.fromtimestamp(ms / 1000).strftime("%a %H:%M" if span.ms > DAY_MS else "%H:%M")


def _per_minute(value: float) -> str:
    return f"{value:.2g}/min"


def _runs(n: int) -> str:
    return f"{n:,} run" if n == 1 else f"{n:,} runs"


def duration(ms: int | None) -> str:
    """`850 ms`, `12.3 s`, `4m05s`, `2h03m`: a wait or a run's length, for a reader."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < MINUTE_MS:
        return f"{ms / 1000:.1f} s"
    s = ms // 1000
    if ms < HOUR_MS:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
