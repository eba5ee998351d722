"""settings.json's `concurrency` changed under a running daemon: raised, the waiting jobs
start within one reload; lowered, the running ones finish and no new one starts until the
host is below the new count. `hosts` shows the live value."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, state_of, wait_state
from tests.support.polling import eventually_sync

HOST = "live-slots"


def slots(config: Path, rows: dict[str, int]) -> None:
    text = json.dumps({"version": 1, "settings": {"concurrency": rows}})
    staged = config / "settings.json.tmp"
    staged.write_text(text)
    staged.replace(config / "settings.json")  # whole, as an editor's save would land


def active(env: dict[str, str], ids: list[str]) -> list[str]:
    found = dispatch_json(env, "jobs")
    return [v["id"] for v in found if v["id"] in ids and v["state"] == "active"]


def host_slots(env: dict[str, str]) -> list[int]:
    return [h["slots"] for h in dispatch_json(env, "hosts")["hosts"] if h["name"] == HOST]


def test_raising_and_lowering_the_slots_applies_without_a_restart(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(
        redis_url, prefix, tmp_path / "state", DISPATCH_HOST=HOST, DISPATCH_CONCURRENCY="1"
    )
    config = Path(env["DISPATCH_CONFIG_DIR"])
    config.mkdir(parents=True)
    gates = [tmp_path / f"go{i}" for i in range(3)]
    with daemon(env):
        held = [
            dispatch(
                env, "submit", "--", "sh", "-c", f"while [ ! -e {g} ]; do sleep .05; done"
            ).stdout.strip()
            for g in gates
        ]
        eventually_sync(lambda: len(active(env, held)) == 1, 30)
        slots(config, {"*": 3})
        eventually_sync(lambda: len(active(env, held)) == 3, 15)  # one reload, not a restart
        eventually_sync(lambda: host_slots(env) == [3], 15)  # the next beat says so
        slots(config, {HOST: 1, "*": 3})  # this host's own row wins over the fleet's
        quick = [dispatch(env, "submit", "--", "sleep", "0.5").stdout.strip() for _ in range(2)]
        eventually_sync(lambda: host_slots(env) == [1], 15)  # applied, and beaten
        for g in gates[:2]:
            g.touch()
        for job_id in held[:2]:
            assert wait_state(env, job_id, "completed") == "completed"
        assert active(env, quick) == []  # one still runs: the host is not below 1 slot
        gates[2].touch()
        seen: set[int] = set()

        def done() -> bool:
            seen.add(len(active(env, quick)))
            return all(state_of(env, j) == "completed" for j in quick)

        eventually_sync(done, 30)
        assert max(seen) <= 1  # one at a time, as the new count says
