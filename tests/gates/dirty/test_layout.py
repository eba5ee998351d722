"""The dirty-tree gate on the private git directory: the verdict still matches git's own, for
the repository shapes operators have (packed refs, sha256, split index, no commit yet,
submodules, ignore rules), and what cannot be read is refused `repo-unreadable`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.gates.base import Admit, Decision, Refuse
from dispatch.gates.dirty.gate import DirtyTreeGate
from dispatch.gates.dirty.shadow import _ALLOWED, allowed_settings
from dispatch.model import Job
from tests.support.pickups import pickup_of

pytestmark = pytest.mark.anyio
IDENT = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=m"]


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *IDENT, "-C", str(folder), *args], check=True, capture_output=True
    )
    return done.stdout.decode().strip()


def make_repo(folder: Path, *init: str) -> Path:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "app.py").write_text("print(1)\n")
    git(folder, "init", "-q", *init)
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "first")
    return folder


async def judge(folder: Path) -> Decision:
    job = Job(id="j1", kind="local", folder=str(folder))
    return await DirtyTreeGate(roots=(str(folder.parent),)).check(pickup_of(job))


def is_dirty(decision: Decision) -> bool:
    return isinstance(decision, Refuse) and "has uncommitted changes" in decision.sentence


async def assert_tracks_changes(repo: Path) -> None:
    assert await judge(repo) == Admit()
    (repo / "src" / "app.py").write_text("print(2)\n")
    assert is_dirty(await judge(repo))


async def test_a_branch_in_packed_refs_only(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "web")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "m").exists()
    await assert_tracks_changes(repo)


async def test_a_detached_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "web")
    git(repo, "checkout", "-q", "--detach")
    await assert_tracks_changes(repo)


async def test_a_sha256_repository(tmp_path: Path) -> None:
    await assert_tracks_changes(make_repo(tmp_path / "web", "--object-format=sha256"))


async def test_a_split_index(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "web")
    git(repo, "update-index", "--split-index")
    assert list((repo / ".git").glob("sharedindex.*"))
    await assert_tracks_changes(repo)


async def test_a_repository_with_no_commit_yet(tmp_path: Path) -> None:
    repo = tmp_path / "web"
    repo.mkdir()
    git(repo, "init", "-q")
    assert await judge(repo) == Admit()
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    assert is_dirty(await judge(repo))


async def test_ignore_rules_and_file_modes_follow_the_repository(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "web")
    (repo / ".git" / "info" / "exclude").write_text("*.log\n")
    (repo / "build.log").write_text("noise\n")
    git(repo, "config", "core.fileMode", "false")
    (repo / "src" / "app.py").chmod(0o755)
    assert await judge(repo) == Admit()
    git(repo, "config", "core.fileMode", "true")
    assert is_dirty(await judge(repo))


async def test_a_staged_submodule_change_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "web")
    make_repo(repo / "lib")
    git(repo, "add", "lib")
    git(repo, "commit", "-q", "-m", "with lib")
    assert await judge(repo) == Admit()
    git(repo, "rm", "-q", "--cached", "lib")  # staged, and hidden from status by submodule rules
    (repo / "lib").rename(tmp_path / "lib")
    assert is_dirty(await judge(repo))


@pytest.mark.parametrize(
    ("head", "why"),
    [
        ("garbage\n", "its HEAD is not a commit or a branch"),
        ("ref: refs/heads/../../config\n", "its HEAD names a branch git would not accept"),
        ("ref: refs/heads/a\n", "its HEAD is a longer chain of references than git follows"),
    ],
)
async def test_a_head_git_would_not_read_is_refused(tmp_path: Path, head: str, why: str) -> None:
    repo = make_repo(tmp_path / "web")
    for a, b in zip("abcdef", "bcdefa", strict=True):  # a loop of symbolic refs
        (repo / ".git" / "refs" / "heads" / a).write_text(f"ref: refs/heads/{b}\n")
    (repo / ".git" / "HEAD").write_text(head)
    assert await judge(repo) == Refuse(
        "repo-unreadable",
        f"cannot check web safely: {why}; repair the repository or submit with --force",
    )


def test_allowed_settings_keep_only_what_compares_the_tree() -> None:
    text = (
        b'[core]\n\tfileMode = false ; a comment\n\tsshCommand = "touch x"\n\tsymlinks\n'
        b'[core "x"]\n\tignorecase = true\n[CORE] autocrlf = input\n'
        b"[extensions]\n\tobjectFormat = sha256\n\tpartialClone = origin\n"
        b"[core]\n\tfilemode = maybe\n\teol = crlf\n"
    )
    assert allowed_settings(text) == {
        "core.symlinks": "true",
        "core.autocrlf": "input",
        "extensions.objectformat": "sha256",
        "core.eol": "crlf",
        "core.repositoryformatversion": "1",
    }


@given(st.binary(max_size=400))
def test_allowed_settings_never_carry_a_key_or_value_off_the_list(text: bytes) -> None:
    for key, value in allowed_settings(text).items():
        assert key in _ALLOWED
        assert value.isalnum()
