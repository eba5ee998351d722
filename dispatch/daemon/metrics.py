"""Prometheus metrics of one daemon, at `/metrics` on `DISPATCH_METRICS_ADDR` (off by default).

prometheus-client serves them (its own HTTP server, on a thread: a scrape never waits on the
event loop) from a registry of this daemon's own. Names follow Prometheus's rules: the
`dispatch_` prefix, base units, `_total` on counters, and labels only from bounded sets (a
reason's catalogue token, an outcome, a queue name, an error kind, a fleet lease's name), never
a job id or a text.

Per daemon: jobs claimed, finished by outcome and reason, deferred, retried and refused by
reason, cancelled; run durations and queue waits; running jobs and slots; the claims held
while claiming ahead (daemon/capacity.py), those waiting and those handed back; the event
loop's lag (how late a 1 s timer fires); build info. From the log's events: errors by kind,
and per fleet lease (a name from the config: a project, a repo, an endpoint, the wait checks)
the acquires found full, so that a job waited, and the grants made without Redis's answer (no
fence).

Fleet-wide gauges (jobs per queue and state, waiting jobs and their oldest age by reason,
paused queues, live hosts, running jobs and slots of the fleet) come from the fleet snapshot
(dispatch/fleet/view.py) and are exported by one daemon only: the one holding a short metrics
lease in Redis (`dispatch_metrics_leader` 1), so a dashboard summing over daemons never counts
the fleet twice. The others export those series empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import start_http_server
from redis.asyncio import Redis

from dispatch.config.schemas import ConfigSnapshot
from dispatch.fleet.view import Snapshot, snapshot
from dispatch.model import RunRecord, instant_ms
from dispatch.reasons import CANCELLED, OPERATOR_CANCEL, POLICY
from dispatch.spend.plan import MICRO
from dispatch.spend.standing import Line, lines

LEASE_MS = 30_000  # the fleet gauges' leader holds this long without a renewal
FLEET_EVERY_S = 10.0  # the leader's snapshot period (the lease is renewed with it)
LAG_EVERY_S = 1.0
# log events that are errors, by kind: each counts in dispatch_errors_total{kind}
ERROR_EVENTS = {
    "gate_redis_fault": "redis",
    "renew_failed": "redis",
    "redis_error": "redis",
    "finish_retry": "redis",
    "lease_degraded": "redis",
    "docker_unavailable": "engine",
    "engine_lost_run": "engine",
    "container_lost": "engine",
    "container_remove_failed": "engine",
    "job_crashed": "internal",
    "step_failed": "internal",
}
# log events of the gates' fleet leases, each counted under its `lease` field
LEASE_WAIT = "lease_full_deferred"
LEASE_DEGRADED = "lease_granted_degraded"
_WAIT_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86_400)
_RUN_BUCKETS = (1, 5, 15, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600)


def token(reason: str) -> str:
    """The catalogue token of a stored reason: `create-failed: <message>` is `create-failed`."""
    return reason.partition(":")[0].strip() or "none"


class Metrics:
    def __init__(self, host: str, version: str) -> None:
        self.registry = r = CollectorRegistry()
        self.claimed = Counter("dispatch_jobs_claimed", "claims taken", ["queue"], registry=r)
        self.finished = Counter(
            "dispatch_jobs_finished", "jobs ended for good", ["outcome", "reason"], registry=r
        )
        self.deferred = Counter("dispatch_jobs_deferred", "deferrals", ["reason"], registry=r)
        self.retried = Counter("dispatch_jobs_retried", "retries", ["reason"], registry=r)
        self.refused = Counter("dispatch_jobs_refused", "refusals", ["reason"], registry=r)
        self.cancelled = Counter("dispatch_jobs_cancelled", "jobs cancelled", registry=r)
        self.run_seconds = Histogram(
            "dispatch_run_duration_seconds", "run time", buckets=_RUN_BUCKETS, registry=r
        )
        self.wait_seconds = Histogram(
            "dispatch_queue_wait_seconds", "enqueue to start", buckets=_WAIT_BUCKETS, registry=r
        )
        self.running = Gauge("dispatch_running_jobs", "runs of this daemon", registry=r)
        self.slots = Gauge(
            "dispatch_slots", "job slots: settings.json's concurrency, else DISPATCH_CONCURRENCY",
            registry=r,
        )  # fmt: skip
        self.claims_limit = Gauge(
            "dispatch_claims_limit", "claims held at once: the slots, more while claiming ahead",
            registry=r,
        )  # fmt: skip
        self.claims_waiting = Gauge(
            "dispatch_claims_waiting", "claims held beyond the slots, waiting for a run to end",
            registry=r,
        )  # fmt: skip
        self.handed_back = Counter(
            "dispatch_claims_handed_back", "waiting claims given back unrun", ["queue"], registry=r
        )
        self.lag = Gauge("dispatch_event_loop_lag_seconds", "a 1 s timer's lateness", registry=r)
        self.errors = Counter("dispatch_errors", "error events", ["kind"], registry=r)
        self.lease_waits = Counter(
            "dispatch_lease_waits", "acquires found full: the job waits", ["lease"], registry=r
        )
        self.lease_degraded = Counter(
            "dispatch_lease_degraded_grants", "grants failed open (no fence)", ["lease"], registry=r
        )
        self.leader = Gauge("dispatch_metrics_leader", "exports the fleet gauges", registry=r)
        Info("dispatch_build", "this daemon's build", registry=r).info(
            {"version": version, "host": host}
        )
        self.fleet = _FleetGauges(r)
        self._last_tick: float | None = None
        self._compiled: tuple[object, list[Any]] = ((), [])  # triggers.json's, compiled once

    def ended(self, action: str, record: RunRecord | None, defer_reason: str = "") -> None:
        """Count one claim's ending (worker.py, as it hands it to the lane)."""
        if action == "defer":
            self.deferred.labels(token(defer_reason)).inc()
        elif action == "retry":  # not a reason: the action
            self.retried.labels(token(record.reason if record else defer_reason)).inc()
        elif record is not None:
            reason = token(record.reason) if record.reason else "none"
            self.finished.labels(record.outcome, reason).inc()
            if record.outcome == POLICY:
                self.refused.labels(reason).inc()
            if record.outcome == CANCELLED or record.reason == OPERATOR_CANCEL:
                self.cancelled.inc()
        if record is not None and record.started_at:
            self._timings(record)

    def _timings(self, record: RunRecord) -> None:
        started = _seconds(record.started_at)
        if started is None:
            return
        queued, ended = _seconds(record.queued_at), _seconds(record.ended_at)
        if queued is not None and started >= queued:
            self.wait_seconds.observe(started - queued)
        if ended is not None and ended >= started:
            self.run_seconds.observe(ended - started)

    async def _triggers(
        self, redis: Redis, prefix: str, current: ConfigSnapshot, now_ms: int
    ) -> list[dict[str, Any]]:
        """Each trigger's next instant and its last minted occurrence's (triggers.json's)."""
        from dispatch.triggers import control
        from dispatch.triggers.spec import compile_all
        from dispatch.triggers.store import TriggerStore

        if self._compiled[0] is not current.triggers:
            self._compiled = (current.triggers, compile_all(current.triggers))
        return await control.rows(TriggerStore(redis, prefix), self._compiled[1], now_ms)

    def count_events(self, name: str, fields: dict[str, Any]) -> None:
        """A log listener: an error event counts under its kind, a lease's under its name."""
        kind = ERROR_EVENTS.get(name)
        if kind is not None:
            self.errors.labels(kind).inc()
        elif name == LEASE_WAIT:
            self.lease_waits.labels(str(fields.get("lease"))).inc()
        elif name == LEASE_DEGRADED:
            self.lease_degraded.labels(str(fields.get("lease"))).inc()

    def serve(self, host: str, port: int) -> Callable[[], None]:
        """Start the HTTP server; the function that stops it."""
        server, thread = start_http_server(port, host, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            thread.join(timeout=5)

        return stop

    def lag_step(self) -> None:
        """Called every LAG_EVERY_S by a plain timer: how late it fires is the loop's lag."""
        now = time.monotonic()
        if self._last_tick is not None:
            self.lag.set(max(now - self._last_tick - LAG_EVERY_S, 0.0))
        self._last_tick = now

    async def fleet_step(
        self,
        redis: Redis,
        prefix: str,
        holder: str,
        config: Callable[[], ConfigSnapshot] | None = None,
    ) -> None:
        """Take or keep the metrics lease; while held, the fleet gauges from a snapshot, and
        the spend ledgers of scoped-limits.json (`config`) as `dispatch budget` reads them.

        Every read comes before any gauge changes: a scrape (on the server's thread) sees the
        last round or this one, never a round's gauges cleared while Redis is still asked."""
        try:
            leads = await _hold(redis, f"{prefix}:metrics:leader", holder)
            self.leader.set(1 if leads else 0)
            if leads:
                found = await snapshot(redis, prefix)
                spent, triggers = None, None
                if config is not None and not found.error:
                    current = config()
                    spent = await lines(redis, prefix, current.limits, current.overlay, found.at_ms)
                    triggers = await self._triggers(redis, prefix, current, found.at_ms)
                self.fleet.show(found)
                if spent is not None and triggers is not None:
                    self.fleet.spend(spent)
                    self.fleet.triggers(triggers)
            else:
                self.fleet.clear()
        except Exception:  # Redis away: say nothing of the fleet rather than something stale
            self.leader.set(0)
            self.fleet.clear()
            raise


async def _hold(redis: Redis, key: str, holder: str) -> bool:
    """Take the lease if free, renew it if ours; whether this holder leads."""
    if await redis.set(key, holder, px=LEASE_MS, nx=True):
        return True
    if _text(await redis.get(key)) != holder:
        return False
    await redis.pexpire(key, LEASE_MS)
    return True


class _FleetGauges:
    def __init__(self, r: CollectorRegistry) -> None:
        self.jobs = Gauge(
            "dispatch_queue_jobs", "jobs by queue and state", ["queue", "state"], registry=r
        )
        self.waiting = Gauge(
            "dispatch_waiting_jobs", "delayed jobs by reason", ["reason"], registry=r
        )
        self.oldest = Gauge(
            "dispatch_oldest_waiting_seconds", "age of the oldest by reason", ["reason"], registry=r
        )
        self.paused = Gauge("dispatch_queue_paused", "1 while paused", ["queue"], registry=r)
        ledger = ["ledger", "metric", "window"]
        self.used = Gauge("dispatch_spend_used", "spent this window", ledger, registry=r)
        self.in_flight = Gauge(
            "dispatch_spend_in_flight", "reserved for runs under way", ledger, registry=r
        )
        self.cap = Gauge("dispatch_spend_cap", "the window's cap", ledger, registry=r)
        self.next = Gauge(
            "dispatch_trigger_next_timestamp_seconds", "next occurrence", ["trigger"], registry=r
        )
        self.last = Gauge(
            "dispatch_trigger_last_timestamp_seconds", "last minted", ["trigger"], registry=r
        )
        self.overdue = Gauge(
            "dispatch_trigger_overdue", "1 while an occurrence went unminted", ["trigger"],
            registry=r,
        )  # fmt: skip
        self.hosts = Gauge("dispatch_live_hosts", "hosts beating", registry=r)
        self.running = Gauge("dispatch_fleet_running_jobs", "running jobs, fleet", registry=r)
        self.slots = Gauge("dispatch_fleet_slots", "slots of the live hosts", registry=r)
        self._all = (
            self.jobs, self.waiting, self.oldest, self.paused, self.used, self.in_flight, self.cap,
            self.next, self.last, self.overdue,
        )  # fmt: skip

    def clear(self) -> None:
        for g in self._all:
            g.clear()
        for g in (self.hosts, self.running, self.slots):
            g.set(0)

    def spend(self, found: list[Line]) -> None:
        """Dollars in dollars, runs and tokens as counted (`dispatch budget`'s numbers)."""
        for g in (self.used, self.in_flight, self.cap):
            g.clear()
        for line in found:
            scale = MICRO if line.metric == "usd" else 1
            labels = (line.ledger, line.metric, line.window)
            self.used.labels(*labels).set(line.used / scale)
            self.in_flight.labels(*labels).set(line.in_flight / scale)
            self.cap.labels(*labels).set(line.cap / scale)

    def triggers(self, rows: list[dict[str, Any]]) -> None:
        """From `dispatch triggers`' rows: a paused or disabled trigger has no next."""
        for g in (self.next, self.last, self.overdue):
            g.clear()
        for row in rows:
            self.overdue.labels(row["id"]).set(1 if row.get("overdue") else 0)
            for gauge, field in ((self.next, "next"), (self.last, "last")):
                at = _seconds(row.get(field))
                if at is not None:
                    gauge.labels(row["id"]).set(at)

    def show(self, s: Snapshot) -> None:
        if s.error:
            self.clear()
            return
        for g in self._all:
            g.clear()
        for q in s.queues:
            for state, n in (("ready", q.ready), ("delayed", q.delayed), ("active", q.active)):
                self.jobs.labels(q.name, state).set(n)
            self.paused.labels(q.name).set(1 if q.paused or s.paused == "fleet" else 0)
        for reason, w in s.reasons.items():
            self.waiting.labels(token(reason)).set(w.count)
            if w.oldest_ms is not None:
                self.oldest.labels(token(reason)).set(max(s.at_ms - w.oldest_ms, 0) / 1000)
        live = s.live
        self.hosts.set(len(live))
        self.running.set(sum(h.running for h in live))
        self.slots.set(sum(h.slots or 0 for h in live))


def _seconds(text: str | None) -> float | None:
    ms = instant_ms(text) if text else None
    return None if ms is None else ms / 1000


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")
