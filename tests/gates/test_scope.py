from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch.config.schemas import ConfigSnapshot, Project, ScopedLimit
from dispatch.fleet.leases import FleetLeases, LeaseSettings, holder_host, holders
from dispatch.fleet.slots import Slots
from dispatch.gates.base import ADMIT, SCOPE_DELAY_MS, Defer, Pickup
from dispatch.gates.hold import lease_name
from dispatch.gates.scope import ScopeGate
from dispatch.model import Job
from dispatch.queue.keys import lease_keys
from tests.support.pickups import hold_names, pickup_of
from tests.support.redis_server import free_port

pytestmark = pytest.mark.anyio


def pickup(job_id: str, *, project=None, limits=(), **job) -> Pickup:
    return pickup_of(
        Job(id=job_id, **job), config=ConfigSnapshot(limits=tuple(limits)), project=project
    )


# folders


async def test_one_job_per_folder_until_the_first_gives_it_back(hosts, tmp_path) -> None:
    gate = hosts[0].scope
    first = pickup("job-1", kind="local", folder=str(tmp_path))
    second = pickup("job-2", kind="local", folder=str(tmp_path))
    assert await gate.check(first) == ADMIT
    assert hold_names(first) == [f"slot:folder:{tmp_path.resolve()}"]
    decision = await gate.check(second)
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder, decision.delay_ms) == (
        "scope-folder",
        "job-1",
        SCOPE_DELAY_MS,
    )
    assert decision.detail == f"folder {tmp_path.name} runs 1 of 1 on this host (held by job-1)"
    assert str(tmp_path.parent) not in decision.detail  # basename only
    await first.release()
    assert await gate.check(second) == ADMIT


async def test_two_spellings_of_one_folder_are_one_scope(hosts, tmp_path) -> None:
    real = tmp_path / "site"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    gate = hosts[0].scope
    assert await gate.check(pickup("job-1", kind="local", folder=str(real))) == ADMIT
    via_link = pickup("job-2", kind="local", folder=f"{tmp_path}/alias/../alias")
    decision = await gate.check(via_link)
    assert isinstance(decision, Defer) and decision.holder == "job-1"


def tree(root: Path) -> tuple[Path, Path, Path]:
    """root/x/a, root/x/a/b, and root/link -> root/x/a/b."""
    b = root / "x" / "a" / "b"
    b.mkdir(parents=True)
    (root / "link").symlink_to(b)
    return b.parent, b, root / "link"


async def test_a_folder_excludes_the_folders_above_and_inside_it(hosts, tmp_path) -> None:
    a, b, _ = tree(tmp_path)
    gate = hosts[0].scope
    outer = pickup("job-a", kind="local", folder=str(a))
    assert await gate.check(outer) == ADMIT
    decision = await gate.check(pickup("job-b", kind="local", folder=str(b)))
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder) == ("scope-folder", "job-a")
    assert (
        decision.detail
        == "folder b is inside folder a, which runs 1 of 1 on this host (held by job-a)"
    )
    await outer.release()
    inner = pickup("job-b", kind="local", folder=str(b))
    assert await gate.check(inner) == ADMIT
    decision = await gate.check(pickup("job-x", kind="local", folder=str(a.parent)))
    assert isinstance(decision, Defer) and decision.holder == "job-b"
    assert (
        decision.detail
        == "folder x contains folder b, which runs 1 of 1 on this host (held by job-b)"
    )
    await inner.release()
    assert await gate.check(pickup("job-x", kind="local", folder=str(a.parent))) == ADMIT


async def test_a_symlink_into_a_held_tree_is_in_that_tree(hosts, tmp_path) -> None:
    a, _, link = tree(tmp_path)
    gate = hosts[0].scope
    assert await gate.check(pickup("job-a", kind="local", folder=str(a))) == ADMIT
    decision = await gate.check(pickup("job-l", kind="local", folder=str(link)))
    assert isinstance(decision, Defer) and decision.holder == "job-a"
    assert "folder b is inside folder a" in decision.detail  # named as resolved


async def test_a_shared_name_prefix_is_not_nesting(hosts, tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "ab").mkdir()
    gate = hosts[0].scope
    assert await gate.check(pickup("job-1", kind="local", folder=str(tmp_path / "a"))) == ADMIT
    assert await gate.check(pickup("job-2", kind="local", folder=str(tmp_path / "ab"))) == ADMIT


async def test_a_chained_child_names_its_parents_folder_above_its_own(hosts, tmp_path) -> None:
    a, b, _ = tree(tmp_path)
    gate = hosts[0].scope
    assert await gate.check(pickup("parent", kind="local", folder=str(a))) == ADMIT
    child = pickup("child", kind="local", folder=str(b), parent_job_id="parent")
    decision = await gate.check(child)
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder) == ("chained", "parent")
    assert decision.detail == (
        "waits for its parent's folder b (inside folder a), held by job parent (its parent)"
    )


async def test_no_config_lifts_the_folder_limit(hosts, tmp_path) -> None:
    gate = hosts[0].scope
    rows = [ScopedLimit(scope=str(tmp_path), concurrent=5)]
    first = pickup("job-1", kind="local", folder=str(tmp_path), limits=rows)
    assert await gate.check(first) == ADMIT
    second = pickup("job-2", kind="local", folder=str(tmp_path), limits=rows)
    assert isinstance(await gate.check(second), Defer)


async def test_a_zero_row_closes_the_folder(hosts, tmp_path) -> None:
    rows = [ScopedLimit(scope=str(tmp_path), concurrent=0)]
    p = pickup("job-1", kind="local", folder=str(tmp_path), limits=rows)
    decision = await hosts[0].scope.check(p)
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder) == ("scope-folder", None)
    assert "admits no jobs" in decision.detail
    assert p.holds == []


async def test_a_chained_child_waits_for_its_parents_folder(hosts, tmp_path) -> None:
    gate = hosts[0].scope
    assert await gate.check(pickup("parent", kind="local", folder=str(tmp_path))) == ADMIT
    child = pickup("child", kind="local", folder=str(tmp_path), parent_job_id="parent")
    decision = await gate.check(child)
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder) == ("chained", "parent")
    assert decision.detail == (
        f"waits for its parent's folder {tmp_path.name}, held by job parent (its parent)"
    )


async def test_a_chained_child_names_a_holder_that_is_not_its_parent(hosts, tmp_path) -> None:
    gate = hosts[0].scope
    assert await gate.check(pickup("other", kind="local", folder=str(tmp_path))) == ADMIT
    child = pickup("child", kind="local", folder=str(tmp_path), parent_job_id="parent")
    decision = await gate.check(child)
    assert isinstance(decision, Defer) and decision.reason == "chained"
    assert decision.holder == "other"
    assert "(not its parent parent)" in decision.detail


async def test_a_folder_takes_no_fleet_lease(hosts, redis, prefix, tmp_path) -> None:
    p = pickup("job-1", kind="local", folder=str(tmp_path))
    assert await hosts[0].scope.check(p) == ADMIT
    assert hosts[0].leases.held() == []
    assert await redis.exists(f"{prefix}:leases") == 0


# repos


def web(job_id: str, limit: int | None = 2, scope: str = "acme/web", **kw) -> Pickup:
    rows = [ScopedLimit(scope=scope, concurrent=limit)]
    return pickup(job_id, kind="forge", repo="Acme/Web", number=7, limits=rows, **kw)


async def test_repo_limit_holds_fleet_wide(hosts, redis, prefix) -> None:
    a, b = hosts
    first, second, third = web("job-1"), web("job-2"), web("job-3")
    assert await a.scope.check(first) == ADMIT
    assert hold_names(first) == ["slot:repo:acme/web", "lease:scope:repo:acme/web"]
    assert await b.scope.check(second) == ADMIT
    decision = await a.scope.check(third)  # host-a's own slot is free; the fleet is full
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder, decision.delay_ms) == (
        "scope-repo",
        "host-a",
        SCOPE_DELAY_MS,
    )
    assert decision.detail == "acme/web runs 2 of 2 fleet-wide (held by host-a, host-b)"
    await third.release()
    await second.release()
    assert await a.scope.check(third) == ADMIT
    held = await holders(redis, lease_keys("scope:repo:acme/web", prefix))
    assert sorted(holder_host(h) for h in held) == ["host-a", "host-a"]
    await first.release()
    await third.release()


async def test_repo_limit_holds_on_one_host(hosts) -> None:
    gate = hosts[0].scope
    first = web("job-1", limit=1, scope="ACME/web")  # rows match case-insensitively
    assert await gate.check(first) == ADMIT
    decision = await gate.check(web("job-2", limit=1))
    assert isinstance(decision, Defer) and decision.reason == "scope-repo"
    assert decision.detail == "acme/web runs 1 of 1 on this host (held by job-1)"
    await first.release()


async def test_no_row_means_no_holds(hosts) -> None:
    gate = hosts[0].scope
    for i in range(5):
        p = pickup(f"job-{i}", kind="forge", repo="acme/web")
        assert await gate.check(p) == ADMIT
        assert p.holds == []
    unbounded = web("job-9", limit=None)  # a row without `concurrent`
    assert await gate.check(unbounded) == ADMIT and unbounded.holds == []


async def test_a_degraded_lease_is_accepted(prefix) -> None:
    dead = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    settings = LeaseSettings(prefix=prefix, timeout_s=0.5)
    try:
        async with FleetLeases(dead, settings, host="host-a") as leases:
            gate = ScopeGate(Slots(), leases)
            first = web("job-1", limit=1)
            assert await gate.check(first) == ADMIT
            assert len(first.holds) == 2
            # the in-process bound still holds while Redis is away
            assert isinstance(await gate.check(web("job-2", limit=1)), Defer)
            await first.release()
    finally:
        await dead.aclose()


async def test_lease_loss_aborts_the_run(hosts, redis, prefix) -> None:
    a = hosts[0]
    p = web("job-1")
    assert await a.scope.check(p) == ADMIT
    [lease] = a.leases.held()
    await redis.delete(lease_keys("scope:repo:acme/web", prefix).holders)
    assert not await a.leases.renew(lease)
    assert p.signal.event.is_set() and p.signal.reason == "lease-lost"
    await p.release()


# projects


async def test_project_concurrency_holds_fleet_wide(hosts) -> None:
    a, b = hosts
    project = Project(id="shop", concurrent=1)
    first = pickup("job-1", project=project)
    assert await a.scope.check(first) == ADMIT
    assert hold_names(first) == ["slot:project:shop", "lease:scope:project:shop"]
    second = pickup("job-2", project=project)
    decision = await b.scope.check(second)
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder) == ("scope-project", "host-a")
    assert decision.detail == "project shop runs 1 of 1 fleet-wide (held by host-a)"
    assert hold_names(second) == ["slot:project:shop"]  # given back by the processor's defer
    await second.release()
    await first.release()
    assert await b.scope.check(second) == ADMIT
    await second.release()


async def test_repo_then_project_holds_in_order(hosts) -> None:
    p = web("job-1", project=Project(id="shop", concurrent=3))
    assert await hosts[0].scope.check(p) == ADMIT
    assert hold_names(p) == [
        "slot:repo:acme/web",
        "lease:scope:repo:acme/web",
        "slot:project:shop",
        "lease:scope:project:shop",
    ]
    await p.release()


async def test_project_without_concurrent_is_unbounded(hosts) -> None:
    p = pickup("job-1", project=Project(id="shop"))
    assert await hosts[0].scope.check(p) == ADMIT and p.holds == []


async def test_a_zero_project_admits_nothing(hosts) -> None:
    decision = await hosts[0].scope.check(pickup("job-1", project=Project(id="shop", concurrent=0)))
    assert isinstance(decision, Defer) and decision.reason == "scope-project"


def test_lease_names_never_carry_braces() -> None:
    assert lease_name("scope:project", "a{b}%") == "scope:project:a%7Bb%7D%25"
    lease_keys(lease_name("scope:project", "{x}"))  # would raise on a brace


async def test_each_new_file_is_read_anew(hosts, tmp_path) -> None:
    """The rows are worked out once per file (a new file is a new tuple), never kept past it."""
    gate = hosts[0].scope
    closed = ScopedLimit(scope=str(tmp_path), concurrent=0)
    rows = [ScopedLimit(scope=f"team{i}/svc", concurrent=1) for i in range(100)]
    for limits, repo_busy, folder_busy in (
        ([*rows, ScopedLimit(scope="acme/web", concurrent=0)], True, False),
        (rows, False, False),
        ([*rows, closed], False, True),
        ([ScopedLimit(scope="ACME/Web", concurrent=0), ScopedLimit(scope="acme/web")], True, False),
    ):
        forge = pickup("job-1", kind="forge", repo="acme/web", limits=limits)
        local = pickup("job-2", kind="local", folder=str(tmp_path), limits=limits)
        assert isinstance(await gate.check(forge), Defer) == repo_busy
        assert isinstance(await gate.check(local), Defer) == folder_busy
        await forge.release()
        await local.release()
