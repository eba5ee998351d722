"""The folder gate resolves a local job's folder once, and every later gate judges that path
(issue 26, item 1): a job submitted through a symlink counts in its real folder's project and
pause windows, a row written through a symlink takes in the real folder's jobs, and a folder
that resolves outside DISPATCH_ALLOWED_ROOTS is refused before any hold. Real directories and
symlinks under a temp dir; the gates run in the pipeline's order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dispatch.clock import SystemClock
from dispatch.config.schemas import ConfigSnapshot, PauseWindow, Project
from dispatch.gates.base import ADMIT, Decision, Defer, Pickup, Refuse
from dispatch.gates.folder import FolderGate
from dispatch.gates.pause import PauseGate
from dispatch.gates.project import ProjectGate
from dispatch.model import Job
from dispatch.reasons import FOLDER_NOT_ALLOWED, PAUSE_WINDOW
from tests.support.pickups import pickup_of

pytestmark = pytest.mark.anyio
SIDES = ("real", "via")


def iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """root/real (a folder), root/via -> root/real, and root/outside-link -> elsewhere."""
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "via").symlink_to(root / "real")
    (tmp_path / "elsewhere").mkdir()
    (root / "outside-link").symlink_to(tmp_path / "elsewhere")
    return root, root / "real", root / "via"


async def through(pickup: Pickup, roots: tuple[str, ...]) -> Decision:
    """The folder, project and pause gates, in the pipeline's order."""
    for gate in (FolderGate(roots), ProjectGate(), PauseGate(SystemClock())):
        decision = await gate.check(pickup)
        if decision is not ADMIT:
            return decision
    return ADMIT


def local(folder: Path, *, projects=(), windows=()) -> Pickup:
    job = Job(id="j1", command=["true"], kind="local", folder=str(folder))
    config = ConfigSnapshot(projects=tuple(projects), windows=tuple(windows))
    return pickup_of(job, config=config, folder=None)  # as claimed: nothing resolved yet


# the job's folder and the row's, each spelled through the symlink or not
SPELLINGS = pytest.mark.parametrize(("spelled", "row"), [(a, b) for a in SIDES for b in SIDES])


@SPELLINGS
async def test_a_folder_counts_in_its_real_project_however_either_side_spells_it(
    tmp_path: Path, spelled: str, row: str
) -> None:
    root, real, _ = layout(tmp_path)
    web = Project(id="web", folders=[str(root / row)])
    pickup = local(root / spelled / ".", projects=[web])
    assert await through(pickup, (str(root),)) == ADMIT
    assert pickup.folder == str(real)
    assert pickup.project is not None and pickup.project.id == "web"


@SPELLINGS
async def test_a_folder_is_held_by_its_real_folders_pause_window(
    tmp_path: Path, spelled: str, row: str
) -> None:
    root, _, _ = layout(tmp_path)
    now = time.time()
    window = PauseWindow(scope=str(root / row), start=iso(now - 60), end=iso(now + 3600))
    decision = await through(local(root / spelled, windows=[window]), (str(root),))
    assert isinstance(decision, Defer) and decision.reason == PAUSE_WINDOW


async def test_a_folder_that_resolves_outside_the_roots_is_refused_before_any_hold(
    tmp_path: Path,
) -> None:
    root, _, _ = layout(tmp_path)
    pickup = local(root / "outside-link")
    decision = await through(pickup, (str(root),))
    assert isinstance(decision, Refuse) and decision.reason == FOLDER_NOT_ALLOWED
    assert "outside-link" in decision.sentence and str(tmp_path) not in decision.sentence
    assert pickup.holds == [] and pickup.folder is None
