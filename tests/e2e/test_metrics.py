"""A real daemon's /metrics (issue 27): scraped over HTTP after it ran jobs, and read with
prometheus-client's own parser. The counters count what happened, labels are catalogue tokens,
and the one daemon of the fleet holds the metrics lease and exports the fleet gauges."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemons import cli_env, daemon, dispatch, wait_state
from tests.support.polling import eventually_sync

DAY_RUNS = (("ledger", "the whole fleet"), ("metric", "runs"), ("window", "day"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_daemon_serves_its_metrics_and_the_fleets(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    port = free_port()
    env = cli_env(
        redis_url, prefix, tmp_path / "state", DISPATCH_HOST="m1",
        DISPATCH_METRICS_ADDR=f"127.0.0.1:{port}", DISPATCH_CONCURRENCY="3",
    )  # fmt: skip
    config = Path(env["DISPATCH_CONFIG_DIR"])
    config.mkdir(parents=True)
    limits = {"version": 1, "limits": [{"scope": "*", "day": 100}]}
    (config / "scoped-limits.json").write_text(json.dumps(limits))
    hourly = {"id": "hourly", "cron": "0 * * * *", "job": {"command": ["true"]}}
    (config / "triggers.json").write_text(json.dumps({"version": 1, "triggers": [hourly]}))
    with daemon(env):
        ok = dispatch(env, "submit", "--", "true").stdout.strip()
        bad = dispatch(env, "submit", "--attempts", "1", "--", "sh", "-c", "exit 3").stdout.strip()
        later = dispatch(env, "submit", "--after", "+1h", "--", "true").stdout.strip()
        assert wait_state(env, ok, "completed") == "completed"
        assert wait_state(env, bad, "failed") == "failed"
        wait_state(env, later, "delayed")

        def counted() -> dict | None:
            found = scrape(port)
            done = found.get(
                ("dispatch_jobs_finished_total", (("outcome", "completed"), ("reason", "none")))
            )
            leads = found.get(("dispatch_metrics_leader", ()))
            # the fleet gauges are the leader's snapshot, taken every 10 s
            # the --after job and the trigger's next occurrence, minted ahead
            delayed = found.get(("dispatch_queue_jobs", (("queue", "jobs"), ("state", "delayed"))))
            spent = found.get(("dispatch_spend_used", DAY_RUNS))
            return found if done == 1 and leads == 1 and delayed == 2 and spent == 2 else None

        found = eventually_sync(counted, 30)
    assert found[("dispatch_jobs_claimed_total", (("queue", "jobs"),))] == 2
    failed = [
        k for k in found if k[0] == "dispatch_jobs_finished_total" and ("outcome", "infra") in k[1]
    ]
    assert [dict(k[1])["reason"] for k in failed] == ["exit-3"]
    assert found[("dispatch_slots", ())] == 3 and found[("dispatch_running_jobs", ())] == 0
    assert found[("dispatch_run_duration_seconds_count", ())] == 2
    assert found[("dispatch_build_info", (("host", "m1"), ("version", found_version(found))))] == 1
    assert found[("dispatch_live_hosts", ())] == 1
    assert found[("dispatch_waiting_jobs", (("reason", "scheduled"),))] == 2
    next_at = found[("dispatch_trigger_next_timestamp_seconds", (("trigger", "hourly"),))]
    assert 0 < next_at - time.time() <= 3600
    assert ("dispatch_event_loop_lag_seconds", ()) in found
    assert found[("dispatch_spend_cap", DAY_RUNS)] == 100  # both runs started: both charged
    assert found[("dispatch_spend_in_flight", DAY_RUNS)] == 0
    labels = {v for k in found for _, v in k[1]}
    assert ok not in labels and bad not in labels  # never a job id in a label


def found_version(found: dict) -> str:
    [key] = [k for k in found if k[0] == "dispatch_build_info"]
    return dict(key[1])["version"]
