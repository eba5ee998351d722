"""Secrets across a mixed fleet (issue 26, item 4), with two real daemons on one Redis: a job
on the shared queue needing a profile only host `keeper` declares is deferred
`secret-profile-elsewhere` by host `plain`, which lacks it, and `keeper` runs it with the
value; no host ever refuses it. The heartbeat names the profile, never the value or its file."""

from __future__ import annotations

import hashlib
import json
import secrets
from contextlib import ExitStack
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync
from tests.support.redis_server import sync_client

VALUE = "e2e-" + secrets.token_urlsafe(18)


def declare(env: dict[str, str], tmp_path: Path) -> Path:
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"api": VALUE}))
    values.chmod(0o600)
    config = Path(env["DISPATCH_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    document = {"version": 1, "profiles": {"vault": {"file": str(values)}}}
    (config / "secrets.json").write_text(json.dumps(document))
    return values


def test_a_profile_only_one_host_declares_runs_there_never_refused(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    keeper, plain = (
        cli_env(redis_url, prefix, tmp_path / host, DISPATCH_HOST=host, DISPATCH_CONCURRENCY="1",
                DISPATCH_LOCK_MS="3000")
        for host in ("keeper", "plain")
    )  # fmt: skip
    values = declare(keeper, tmp_path)
    with ExitStack() as stack:
        stack.enter_context(daemon(keeper))
        # keeper's one slot is busy until plain has deferred the shared job (a blocker that
        # ended on its own clock could free the slot before plain's first claim, under load)
        blocker = dispatch(keeper, "submit", "--queue", "jobs@keeper", "--", "sleep", "120")
        blocker_id = blocker.stdout.strip()
        wait_state(keeper, blocker_id, "active")
        stack.enter_context(daemon(plain))
        script = 'printf %s "$TOKEN" | sha256sum'
        submitted = dispatch(
            plain, "submit", "--secret", "TOKEN=vault/api", "--", "sh", "-c", script
        )
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()

        def deferred_by_plain() -> dict | None:
            view = next(v for v in dispatch_json(plain, "jobs") if v["id"] == job_id)
            defer = view.get("defer") or {}
            return view if defer.get("reason") == "secret-profile-elsewhere" else None

        held = eventually_sync(deferred_by_plain, 30)
        assert held["defer"]["host"] == "plain" and "keeper" in held["defer"]["detail"]
        assert "api" not in held["defer"]["detail"] and VALUE not in json.dumps(held)
        assert dispatch(keeper, "cancel", blocker_id).returncode == 0
        assert wait_state(keeper, job_id, "completed", "failed", timeout=60) == "completed"

        redis = sync_client(redis_url)
        beat = json.loads(redis.get(f"{prefix}:host:keeper") or b"{}")
        redis.close()
        assert beat.get("secret_profiles") == ["vault"]
        assert VALUE not in json.dumps(beat) and str(values) not in json.dumps(beat)

    (run,) = [r for r in dispatch_json(keeper, "runs") if r["id"] == job_id]
    assert run["host"] == "keeper" and run["outcome"] == "completed"
    output = Path(run["output"]).read_text() if run.get("output") else ""
    assert hashlib.sha256(VALUE.encode()).hexdigest() in output
