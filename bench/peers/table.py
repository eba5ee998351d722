"""`bench.compare`'s arithmetic and table: pure functions over the runs' rows."""

from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

Row = dict[str, Any]
SYSTEMS = ("dispatch", "dispatch-gates", "bullmq", "arq", "saq")
DISPATCH = ("dispatch", "dispatch-gates")
# summary figure: the run row's key (bench.queue's names; peers' rows use the same)
FIGURES = {
    "cmds_per_job": "redis_cmds_per_job",
    "process_cmds_per_job": "process_cmds_per_job",
    "cpu_us_per_job": "worker_cpu_us_per_job",
    "spread_p99_ms": "lateness_spread_p99_ms",
    "burst_p99_ms": "lateness_burst_p99_ms",
    "steal_pct": "steal_pct",
}
COLUMNS = ("jobs/s (min-max)", "cmds/job", "proc cmds/job", "CPU us/job", "spread p99", "burst p99")


def rotation(systems: list[str], reps: int) -> list[list[str]]:
    """The run order per rep: each rep starts one system later than the one before."""
    if not systems:
        return [[] for _ in range(reps)]
    k = len(systems)
    return [systems[r % k :] + systems[: r % k] for r in range(reps)]


def quiet(run: Row, max_steal: float) -> bool:
    """Whether a run's host lost no more than `max_steal` percent of a core to steal."""
    return float(run.get("steal_pct", 0.0)) <= max_steal


def summarize(rows: dict[str, list[Row]]) -> dict[str, Row]:
    """Per system: median, min and max jobs/s; the median of every other figure."""
    out: dict[str, Row] = {}
    for system, runs in rows.items():
        if not runs:
            continue
        rates = [r["processed_per_s"] for r in runs]
        s: Row = {"runs": len(runs), "jobs_per_s": round(median(rates))}
        s.update(jobs_per_s_min=min(rates), jobs_per_s_max=max(rates))
        for name, key in FIGURES.items():
            s[name] = round(median(r[key] for r in runs), 3)
        out[system] = s
    return out


def ratios(summary: dict[str, Row]) -> dict[str, dict[str, float]]:
    """Dispatch's median jobs/s (gates off, gates on) over each peer's median."""
    peers = [p for p in summary if p not in DISPATCH]
    return {
        d: {p: round(summary[d]["jobs_per_s"] / summary[p]["jobs_per_s"], 2) for p in peers}
        for d in DISPATCH
        if d in summary
    }


def cells(s: Row) -> list[str]:
    rate = f"{s['jobs_per_s']:,} ({s['jobs_per_s_min']:,}-{s['jobs_per_s_max']:,})"
    figures = (s["cmds_per_job"], s["process_cmds_per_job"], s["cpu_us_per_job"])
    late = (s["spread_p99_ms"], s["burst_p99_ms"])
    return [rate, *(f"{x:g}" for x in figures), *(f"{x:,.1f} ms" for x in late)]


def config_table(name: str, result: Row) -> list[str]:
    summary = result["summary"]
    widths = (16, 26, 9, 14, 11, 12, 12)
    head = ("system", *COLUMNS)
    lines = [name, "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    for system, s in summary.items():
        row = (system, *cells(s))
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for d, by_peer in result["ratios"].items():
        said = ", ".join(f"{p} {r:g}x" for p, r in by_peer.items()) or "no peer ran"
        lines.append(f"{d} / peer jobs/s: {said}")
    for system, errors in result.get("failed", {}).items():
        lines.append(f"{system}: {len(errors)} failed run(s), first: {errors[0][:200]}")
    for system, runs in result.get("stolen", {}).items():
        steals = ", ".join(f"{r['steal_pct']:g}%" for r in runs)
        lines.append(f"{system}: {len(runs)} run(s) run again for steal ({steals})")
    return lines + warnings(result.get("runs", {}))


def warnings(runs: dict[str, list[Row]]) -> list[str]:
    """Dispatch's daemon warnings (lock losses, Redis errors) summed over a system's runs."""
    lines = []
    for system, rows in runs.items():
        seen: Counter[str] = Counter()
        for r in rows:
            seen.update(r.get("daemon_warnings", {}))
        if seen:
            said = ", ".join(f"{name} {count}" for name, count in sorted(seen.items()))
            lines.append(f"{system}: daemon warnings over its runs: {said}")
    return lines


def render(out: Row) -> list[str]:
    """The plain-text report: one table per config, then what could not run."""
    lines = [f"{out['jobs']:,} jobs per run, {out['reps']} reps, Redis {out.get('redis', '?')}"]
    lines += [f"  {name} {version}" for name, version in out["versions"].items()]
    for name, result in out["configs"].items():
        lines += ["", *config_table(name, result)]
    lines += [f"{system}: {why}" for system, why in out["not_installed"].items()]
    return lines
