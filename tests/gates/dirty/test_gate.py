from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dispatch.gates.base import Admit, Pickup, Refuse
from dispatch.gates.dirty.gate import DirtyTreeGate
from dispatch.model import Job
from tests.support.pickups import pickup_of

pytestmark = pytest.mark.anyio
NO_GIT = "/nonexistent/git"  # a gate that must not spawn git is given this one


def git(folder: Path, *args: str) -> None:
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=m"]
    subprocess.run(["git", *ident, "-C", str(folder), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "web"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "app.py").write_text("print(1)\n")
    git(folder, "init", "-q")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "first")
    return folder


def pickup(folder: Path | str, **kw: Any) -> Pickup:
    return pickup_of(Job(id="j1", kind="local", folder=str(folder), **kw))


def fake_git(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-git"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


async def test_a_clean_repo_is_admitted(repo: Path) -> None:
    assert await DirtyTreeGate().check(pickup(repo)) == Admit()
    assert await DirtyTreeGate().check(pickup(repo / "src")) == Admit()


async def test_a_modified_file_is_refused(repo: Path) -> None:
    (repo / "src" / "app.py").write_text("print(2)\n")
    decision = await DirtyTreeGate().check(pickup(repo))
    assert isinstance(decision, Refuse) and decision.reason == "dirty-tree"
    assert decision.sentence.startswith("web has uncommitted changes")
    assert str(repo) not in decision.sentence


async def test_an_untracked_file_is_refused(repo: Path) -> None:
    (repo / "notes.txt").write_text("mine\n")
    decision = await DirtyTreeGate().check(pickup(repo))
    assert isinstance(decision, Refuse) and decision.reason == "dirty-tree"


async def test_a_subfolder_answers_for_its_whole_work_tree(repo: Path) -> None:
    (repo / "notes.txt").write_text("mine\n")
    decision = await DirtyTreeGate().check(pickup(repo / "src"))
    assert isinstance(decision, Refuse)
    assert decision.sentence.startswith("src has uncommitted changes")


async def test_force_admits_a_dirty_tree_without_asking_git(repo: Path) -> None:
    (repo / "notes.txt").write_text("mine\n")
    assert await DirtyTreeGate(git=NO_GIT).check(pickup(repo, force=True)) == Admit()


async def test_a_folder_outside_any_repo_is_admitted_without_git(tmp_path: Path) -> None:
    assert not any(os.path.lexists(folder / ".git") for folder in (tmp_path, *tmp_path.parents))
    assert await DirtyTreeGate(git=NO_GIT).check(pickup(tmp_path)) == Admit()


async def test_only_local_jobs_are_checked() -> None:
    job = Job(id="j1", kind="forge", repo="acme/web", number=7)
    assert await DirtyTreeGate(git=NO_GIT).check(pickup_of(job)) == Admit()


async def test_a_held_index_lock_does_not_stop_the_check(repo: Path) -> None:
    (repo / "src" / "app.py").write_text("print(2)\n")
    # another git holding the index lock does not stop a read-only status
    (repo / ".git" / "index.lock").write_text("")
    decision = await DirtyTreeGate().check(pickup(repo))
    assert isinstance(decision, Refuse) and decision.sentence.startswith("web has uncommitted")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the repo to another user")
async def test_a_repo_owned_by_another_user_is_still_read(repo: Path) -> None:
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 65534, 65534)
    assert await DirtyTreeGate().check(pickup(repo)) == Admit()


async def test_git_not_installed_refuses(repo: Path) -> None:
    decision = await DirtyTreeGate(git=NO_GIT).check(pickup(repo))
    assert decision == Refuse(
        "dirty-tree", "cannot tell whether web has uncommitted changes: git is not installed"
    )


async def test_git_failing_refuses_and_names_no_full_path(repo: Path, tmp_path: Path) -> None:
    body = f"echo 'warning: noise' >&2; echo \"fatal: cannot read '{repo}/.git'\" >&2; exit 128"
    decision = await DirtyTreeGate(git=fake_git(tmp_path, body)).check(pickup(repo))
    assert decision == Refuse(
        "dirty-tree",
        "cannot tell whether web has uncommitted changes: "
        "git status exited 128: fatal: cannot read '.git'",
    )


async def test_git_timing_out_refuses(repo: Path, tmp_path: Path) -> None:
    gate = DirtyTreeGate(timeout_s=0.2, git=fake_git(tmp_path, "exec sleep 30"))
    decision = await gate.check(pickup(repo))
    assert decision == Refuse(
        "dirty-tree",
        "cannot tell whether web has uncommitted changes: git status took longer than 0.2 s",
    )


async def test_git_runs_pinned_on_a_private_git_dir(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "seen"
    keys = ("GIT_OPTIONAL_LOCKS", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_SSH_COMMAND")
    shown = " ".join(f"${{{key}:-unset}}" for key in keys)
    body = f'echo "{shown} $HOME $GIT_DIR $GIT_WORK_TREE $GIT_OBJECT_DIRECTORY $*" >> {seen}'
    monkeypatch.setenv("GIT_DIR", "/elsewhere/.git")  # the daemon's own GIT_* must not leak
    monkeypatch.setenv("GIT_SSH_COMMAND", "touch /tmp/escaped")
    assert await DirtyTreeGate(git=fake_git(tmp_path, body)).check(pickup(repo)) == Admit()
    status, cached = (line.split() for line in seen.read_text().splitlines())
    env, private = status[:4], status[4:9]
    assert env == ["0", "/dev/null", "1", "unset"]
    home, gitdir = Path(private[0]), Path(private[1])
    assert gitdir.parent == home.parent and not str(gitdir).startswith(str(repo))
    assert not gitdir.exists()  # the private git dir is gone once the check is done
    assert private[2:] == [str(repo), f"{repo}/.git/objects", "--no-pager"]
    pinned = ["core.fsmonitor=false", "core.hooksPath=/dev/null", "core.untrackedCache=false"]
    assert status[9:17] == [
        arg for value in (*pinned, "protocol.allow=never") for arg in ("-c", value)
    ]
    assert status[17:] == [
        *("status", "--porcelain", "--untracked-files=normal", "--ignore-submodules=all")
    ]
    assert cached[17:21] == ["diff-index", "--cached", "--quiet", "--ignore-submodules=none"]


# A previous job's container had the folder mounted read-write, so it could have written the
# repository's config; git reading that config on the host must never run a command from it.


def plant_filter(config: Path, marker: Path) -> None:
    """A clean filter that leaves `marker` behind if git ever runs it."""
    with config.open("a") as file:
        file.write(f'[filter "evil"]\n\tclean = "touch {marker}; cat"\n')


def dirty_with_filter(folder: Path) -> None:
    (folder / ".gitattributes").write_text("*.py filter=evil\n")
    (folder / "src" / "app.py").write_text("print(2)\n")


def assert_unsafe(decision: object, what: str) -> None:
    assert decision == Refuse(
        "dirty-tree",
        f"cannot check web safely: its {what}; clean it up or submit with --force",
    )


async def test_a_filter_in_the_repo_config_is_refused_and_never_run(
    repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "escaped"
    plant_filter(repo / ".git" / "config", marker)
    dirty_with_filter(repo)
    assert_unsafe(await DirtyTreeGate().check(pickup(repo)), "git config defines a filter driver")
    assert not marker.exists()
    # the setup is live: a plain git status on the host does run the filter
    git(repo, "status")
    assert marker.exists()


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("[include]\n\tpath = /tmp/elsewhere.cfg\n", "an include"),
        ('[includeIf "gitdir:/"]\n\tpath = /tmp/elsewhere.cfg\n', "an include"),
        ("[core]\n\tfsmonitor = touch /tmp/escaped\n", "an fsmonitor command"),
        ("[core]\n\tfsMonitor = true\n", "an fsmonitor command"),
        ('[ FILTER "x"]\n\tclean = cat\n', "a filter driver"),
        ("[filter.x]\n\tsmudge = cat\n", "a filter driver"),
        # git starts a section after any whitespace or `]`, a bare CR or mid-line too
        ('[user]\r[Filter "x"] process = cat\n', "a filter driver"),
        ('[user] name = t\n[core][filter "x"]\n', "a filter driver"),
        (b"[user]\n\tname = \xff\xfe\n[Include]\n".decode("latin-1"), "an include"),
    ],
)
async def test_risky_config_sections_are_refused(repo: Path, text: str, what: str) -> None:
    with (repo / ".git" / "config").open("a", encoding="latin-1") as file:
        file.write(text)
    decision = await DirtyTreeGate(git=NO_GIT).check(pickup(repo / "src"))
    assert decision == Refuse(
        "dirty-tree",
        f"cannot check src safely: its git config defines {what}; clean it up or submit "
        "with --force",
    )


async def test_a_worktree_is_checked_through_its_common_dir(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "web"
    git(repo, "worktree", "add", "-q", str(tree))
    assert (tree / ".git").is_file()
    gate = DirtyTreeGate(roots=(str(tmp_path),))  # the worktree's git dir is the repo's
    assert await gate.check(pickup(tree)) == Admit()
    marker = tmp_path / "escaped"
    plant_filter(repo / ".git" / "config", marker)  # the config the worktree shares
    dirty_with_filter(tree)
    assert_unsafe(await gate.check(pickup(tree)), "git config defines a filter driver")
    assert not marker.exists()


async def test_a_worktree_config_is_scanned_too(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "web"
    git(repo, "worktree", "add", "-q", str(tree))
    git(repo, "config", "extensions.worktreeConfig", "true")
    marker = tmp_path / "escaped"
    plant_filter(repo / ".git" / "worktrees" / "web" / "config.worktree", marker)
    dirty_with_filter(tree)
    gate = DirtyTreeGate(roots=(str(tmp_path),))
    assert_unsafe(await gate.check(pickup(tree)), "git config defines a filter driver")
    assert not marker.exists()


async def test_a_git_file_is_followed_to_its_git_dir(repo: Path, tmp_path: Path) -> None:
    (repo / ".git").rename(tmp_path / "store.git")
    (repo / ".git").write_text("gitdir: ../store.git\n")  # relative to the folder holding it
    gate = DirtyTreeGate(roots=(str(tmp_path),))
    assert await gate.check(pickup(repo / "src")) == Admit()
    marker = tmp_path / "escaped"
    plant_filter(tmp_path / "store.git" / "config", marker)
    dirty_with_filter(repo)
    assert_unsafe(await gate.check(pickup(repo)), "git config defines a filter driver")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "sentence"),
    [
        ("gitdir: ../nowhere.git\n", ".git file points to no git directory"),
        ("../store.git\n", ".git file does not name a git directory"),
        ("gitdir: \n", ".git file does not name a git directory"),
    ],
)
async def test_a_broken_git_file_is_refused(repo: Path, content: str, sentence: str) -> None:
    (repo / ".git").rename(repo.parent / "store.git")
    (repo / ".git").write_text(content)
    assert_unsafe(await DirtyTreeGate(git=NO_GIT).check(pickup(repo)), sentence)


async def test_a_dangling_git_entry_is_refused(repo: Path) -> None:
    (repo / ".git").rename(repo.parent / "store.git")
    (repo / ".git").symlink_to(repo.parent / "nowhere")
    decision = await DirtyTreeGate(git=NO_GIT).check(pickup(repo))
    assert_unsafe(decision, ".git is neither a file nor a directory")


async def test_a_config_that_is_not_a_regular_file_is_refused_without_blocking(
    repo: Path,
) -> None:
    (repo / ".git" / "config").unlink()
    os.mkfifo(repo / ".git" / "config")  # opening it for reading would wait for a writer
    decision = await DirtyTreeGate(git=NO_GIT).check(pickup(repo))
    assert_unsafe(decision, "git config cannot be read (not a regular file)")


async def test_a_commondir_elsewhere_is_scanned(repo: Path, tmp_path: Path) -> None:
    common = tmp_path / "common"
    common.mkdir()
    plant_filter(common / "config", tmp_path / "escaped")
    (repo / ".git" / "commondir").write_text(f"{common}\n")
    decision = await DirtyTreeGate(git=NO_GIT, roots=(str(tmp_path),)).check(pickup(repo))
    assert_unsafe(decision, "git config defines a filter driver")


async def test_force_admits_without_reading_the_config(repo: Path) -> None:
    (repo / ".git" / "config").unlink()
    os.mkfifo(repo / ".git" / "config")  # reading it would refuse
    assert await DirtyTreeGate(git=NO_GIT).check(pickup(repo, force=True)) == Admit()


def add_submodule(repo: Path) -> Path:
    sub = repo / "lib"
    sub.mkdir()
    (sub / "a.txt").write_text("a\n")
    (sub / ".gitattributes").write_text("*.txt filter=evil\n")
    git(sub, "init", "-q")
    git(sub, "add", ".")
    git(sub, "commit", "-q", "-m", "lib")
    git(repo, "add", "lib")  # a gitlink; git recurses into it with no .gitmodules at all
    git(repo, "commit", "-q", "-m", "with lib")
    return sub


async def test_a_submodule_config_is_never_run(repo: Path, tmp_path: Path) -> None:
    sub = add_submodule(repo)
    marker = tmp_path / "escaped"
    plant_filter(sub / ".git" / "config", marker)
    (sub / "a.txt").write_text("b\n")
    await DirtyTreeGate().check(pickup(repo))
    assert not marker.exists()
    git(repo, "status")  # a plain status runs the submodule's own filter
    assert marker.exists()


async def test_a_submodule_at_another_commit_is_still_refused(repo: Path) -> None:
    sub = add_submodule(repo)
    (sub / "a.txt").write_text("b\n")
    git(sub, "commit", "-q", "-am", "moved")
    decision = await DirtyTreeGate().check(pickup(repo))
    assert isinstance(decision, Refuse) and decision.sentence.startswith("web has uncommitted")
