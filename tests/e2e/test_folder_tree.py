"""The folder mutex covers a folder's whole tree, with a real daemon and the process runner.

Jobs on `x/a`, on `x/a/b` and on a symlink to `x/a/b` each write their start and end instants;
with room for three at once on the host, no two of them may ever run together.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json
from tests.support.polling import eventually_sync


def marked(marks: Path, job_id: str) -> list[str]:
    at = f"{marks}/{job_id}"
    return ["sh", "-c", f"date +%s%N > {at}.start; sleep 0.5; date +%s%N > {at}.end"]


def overlaps(spans: list[tuple[int, int]]) -> int:
    """Pairs of runs that were running at the same instant (touching is not overlapping)."""
    return sum(
        1
        for i, (start, end) in enumerate(spans)
        for other_start, other_end in spans[i + 1 :]
        if start < other_end and other_start < end
    )


def completed(env: dict[str, str], ids: list[str]) -> bool:
    states = {v["id"]: v["state"] for v in dispatch_json(env, "jobs")}
    assert not [i for i in ids if states.get(i) == "failed"], states
    return all(states.get(i) == "completed" for i in ids)


def test_jobs_on_nested_folders_and_a_symlink_never_overlap(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    marks, inner = tmp_path / "marks", tmp_path / "x" / "a" / "b"
    marks.mkdir()
    inner.mkdir(parents=True)
    (tmp_path / "link").symlink_to(inner)
    folders = [inner.parent, inner, tmp_path / "link"] * 2
    env = cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_CONCURRENCY="3")
    ids = [f"tree-{n}" for n in range(len(folders))]
    with daemon(env):
        for job_id, folder in zip(ids, folders, strict=True):
            args = ("submit", "--id", job_id, "--folder", str(folder), "--")
            done = dispatch(env, *args, *marked(marks, job_id))
            assert done.returncode == 0, done.stderr
        eventually_sync(lambda: completed(env, ids), timeout=120, every=0.5)
    spans = [
        (int((marks / f"{i}.start").read_text()), int((marks / f"{i}.end").read_text()))
        for i in ids
    ]
    assert overlaps(spans) == 0, spans
