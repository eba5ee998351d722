"""A real daemon's /metrics (issue 27): scraped over HTTP after it ran jobs, and read with
prometheus-client's own parser. The counters count what happened, labels are catalogue tokens,
and the one daemon of the fleet holds the metrics lease and exports the fleet gauges. A job that
waits for a fleet lease another daemon holds is counted by the daemon that picked it up."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, wait_state
from tests.support.metrics import scrape, scrape_if_up
from tests.support.polling import clear_of_midnight, eventually_sync
from tests.support.redis_server import free_port

DAY_RUNS = (("ledger", "the whole fleet"), ("metric", "runs"), ("window", "day"))


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
    # at midnight: clear_of_midnight below keeps it from coming due while the test counts jobs
    nightly = {"id": "nightly", "cron": "0 0 * * *", "job": {"command": ["true"]}}
    (config / "triggers.json").write_text(json.dumps({"version": 1, "triggers": [nightly]}))
    clear_of_midnight(60)  # its two runs counted in one day window, the trigger not yet due
    with daemon(env):
        ok = dispatch(env, "submit", "--", "true").stdout.strip()
        bad = dispatch(env, "submit", "--attempts", "1", "--", "sh", "-c", "exit 3").stdout.strip()
        later = dispatch(env, "submit", "--after", "+1h", "--", "true").stdout.strip()
        assert wait_state(env, ok, "completed") == "completed"
        assert wait_state(env, bad, "failed") == "failed"
        wait_state(env, later, "delayed")

        def counted() -> dict | None:
            found = scrape_if_up(port)
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
    assert found[("dispatch_claims_limit", ())] == 3  # two jobs: no claiming ahead
    assert found[("dispatch_claims_waiting", ())] == 0
    assert found[("dispatch_run_duration_seconds_count", ())] == 2
    assert found[("dispatch_build_info", (("host", "m1"), ("version", found_version(found))))] == 1
    assert found[("dispatch_live_hosts", ())] == 1
    assert found[("dispatch_waiting_jobs", (("reason", "scheduled"),))] == 2
    next_at = found[("dispatch_trigger_next_timestamp_seconds", (("trigger", "nightly"),))]
    assert 0 < next_at - time.time() <= 86_400
    assert found[("dispatch_trigger_overdue", (("trigger", "nightly"),))] == 0
    assert ("dispatch_event_loop_lag_seconds", ()) in found
    assert found[("dispatch_spend_cap", DAY_RUNS)] == 100  # both runs started: both charged
    assert found[("dispatch_spend_in_flight", DAY_RUNS)] == 0
    labels = {v for k in found for _, v in k[1]}
    assert ok not in labels and bad not in labels  # never a job id in a label


def test_a_job_waiting_on_a_full_fleet_lease_is_counted(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """A model endpoint of one slot, held by h1's job: h2's job waits, and h2 counts it."""
    port = free_port()
    config = tmp_path / "config"
    config.mkdir()
    gpu = {"id": "gpu", "host": "gpu.internal", "slots": 1, "models": ["m1"]}
    (config / "model-endpoints.json").write_text(json.dumps({"version": 1, "endpoints": [gpu]}))
    h1, h2 = (
        cli_env(redis_url, prefix, tmp_path / host, DISPATCH_HOST=host,
                DISPATCH_CONFIG_DIR=str(config), **extra)
        for host, extra in (("h1", {}), ("h2", {"DISPATCH_METRICS_ADDR": f"127.0.0.1:{port}"}))
    )  # fmt: skip
    running, go = tmp_path / "running", tmp_path / "go"
    holds = f"touch {running}; while [ ! -e {go} ]; do sleep 0.05; done"
    waits = ("dispatch_lease_waits_total", (("lease", "endpoint:gpu"),))
    with daemon(h1), daemon(h2):
        first = submit(h1, "--queue", "jobs@h1", "--model", "m1", "--", "sh", "-c", holds)
        eventually_sync(running.exists, 20)  # h1 holds the endpoint's one fleet slot
        second = submit(h2, "--queue", "jobs@h2", "--model", "m1", "--", "true")
        # counted once per pickup that found the endpoint full
        eventually_sync(lambda: scrape_if_up(port).get(waits), 30)
        found = scrape(port)
        go.touch()
        assert wait_state(h1, first, "completed") == "completed"
        assert wait_state(h2, second, "completed") == "completed"
    assert not [k for k in found if k[0] == "dispatch_lease_degraded_grants_total"]
    assert second not in {v for k in found for _, v in k[1]}  # never a job id in a label


def submit(env: dict[str, str], *args: str) -> str:
    done = dispatch(env, "submit", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def found_version(found: dict) -> str:
    [key] = [k for k in found if k[0] == "dispatch_build_info"]
    return dict(key[1])["version"]
