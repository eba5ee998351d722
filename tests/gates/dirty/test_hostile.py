"""A corpus of hostile repositories for the dirty-tree gate (issue 11).

Each case is a repository an earlier job could have left in its folder, built to run a command
(`touch <markers>/pwned-<case>`) or to make git read outside the allowed roots. For each: the
gate judges the tree or refuses it (`dirty-tree`, `repo-unreadable`), no marker is written, and,
where strace is installed, git opened nothing outside the roots and ran no other program. The
cases that name a command are shown live: a plain `git status` in the folder runs it. The whole
corpus runs a second time with the config scan emptied, so what keeps it safe is the private git
directory, not the deny-list.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dispatch.gates.base import Admit, Decision, Refuse
from dispatch.gates.dirty import gate as dirty
from dispatch.gates.dirty.gate import DirtyTreeGate
from dispatch.model import Job
from tests.support.pickups import pickup_of

pytestmark = pytest.mark.anyio
IDENT = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=m"]
PLAIN_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


@dataclass
class Where:
    repo: Path  # the job's folder, under the roots
    roots: Path
    outside: Path  # not under the roots
    markers: Path

    def marker(self, case: str) -> str:
        return f"touch {self.markers}/pwned-{case}"

    def script(self, case: str) -> Path:
        path = self.outside / f"{case}.sh"
        path.write_text(f"#!/bin/sh\n{self.marker(case)}\nexit 1\n")
        path.chmod(0o755)
        return path


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *IDENT, "-C", str(folder), *args], check=True, capture_output=True, env=PLAIN_ENV
    )
    return done.stdout.decode().strip()


def config(w: Where, text: str) -> None:
    with (w.repo / ".git" / "config").open("a") as file:
        file.write(text)


def make_repo(folder: Path) -> None:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "app.py").write_text("print(1)\n")
    git(folder, "init", "-q")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "first")


def promisor(w: Where, url: str, extra: str = "") -> None:
    """A partial clone whose HEAD tree is missing: git fetches it from `url` when asked."""
    tree = git(w.repo, "rev-parse", "HEAD^{tree}")
    (w.repo / ".git" / "objects" / tree[:2] / tree[2:]).unlink()
    git(w.repo, "config", "core.repositoryformatversion", "1")
    config(w, f'[extensions]\n\tpartialclone = origin\n[remote "origin"]\n\turl = {url}\n')
    config(w, f"\tpromisor = true\n{extra}")


def filter_driver(w: Where) -> None:
    config(w, f'[filter "evil"]\n\tclean = "{w.marker("filter")}; cat"\n\tsmudge = cat\n')
    (w.repo / ".gitattributes").write_text("*.py filter=evil\n")
    (w.repo / "src" / "app.py").write_text("print(2)\n")


def include(w: Where) -> None:
    (w.outside / "evil.cfg").write_text(f'[filter "evil"]\n\tclean = "{w.marker("include")}"\n')
    config(w, f"[include]\n\tpath = {w.outside}/evil.cfg\n")
    (w.repo / ".gitattributes").write_text("*.py filter=evil\n")
    (w.repo / "src" / "app.py").write_text("print(2)\n")


def include_if(w: Where) -> None:
    (w.outside / "evil.cfg").write_text(f"[core]\n\tfsmonitor = {w.script('include_if')}\n")
    config(w, f'[includeIf "gitdir:/"]\n\tpath = {w.outside}/evil.cfg\n')


def fsmonitor(w: Where) -> None:
    config(w, f"[core]\n\tfsmonitor = {w.script('fsmonitor')}\n")


def uploadpack(w: Where) -> None:
    source = w.outside / "source"
    shutil.copytree(w.repo, source)
    extra = f'\tuploadpack = "{w.marker("uploadpack")}; git-upload-pack"\n'
    promisor(w, f"file://{source}", extra)


def ssh_command(w: Where) -> None:
    promisor(w, "ssh://git@example.invalid/web.git", f"[core]\n\tsshCommand = {w.script('ssh')}\n")


def ext_transport(w: Where) -> None:
    promisor(w, f"ext::{w.script('ext')}", "[protocol]\n\tallow = always\n")
    config(w, '[protocol "ext"]\n\tallow = always\n')


def alternates(w: Where) -> None:
    """The HEAD tree lives only in an object directory outside the roots."""
    store = w.outside / "objects"
    tree = git(w.repo, "rev-parse", "HEAD^{tree}")
    (store / tree[:2]).mkdir(parents=True)
    (w.repo / ".git" / "objects" / tree[:2] / tree[2:]).rename(store / tree[:2] / tree[2:])
    (w.repo / ".git" / "objects" / "info" / "alternates").write_text(f"{store}\n")


def worktree_elsewhere(w: Where) -> None:
    (w.outside / "tree").mkdir()
    (w.outside / "tree" / "secret.txt").write_text("not the job's\n")
    config(w, f"[core]\n\tworktree = {w.outside}/tree\n")


def git_file_outside(w: Where) -> None:
    (w.repo / ".git").rename(w.outside / "store.git")
    (w.repo / ".git").write_text(f"gitdir: {w.outside}/store.git\n")


def hooks(w: Where) -> None:
    (w.outside / "hooks").mkdir()
    for name in ("post-index-change", "reference-transaction", "post-checkout", "pre-commit"):
        for folder in (w.repo / ".git" / "hooks", w.outside / "hooks"):
            shutil.copy(w.script("hooks"), folder / name)
    config(w, f"[core]\n\thooksPath = {w.outside}/hooks\n")
    (w.repo / "src" / "app.py").write_text("print(2)\n")  # an index refresh would be written


def symlinked_pack(w: Where) -> None:
    git(w.repo, "gc", "-q")
    pack = w.repo / ".git" / "objects" / "pack"
    pack.rename(w.outside / "pack")
    pack.symlink_to(w.outside / "pack")


def symlinked_index(w: Where) -> None:
    (w.repo / ".git" / "index").rename(w.outside / "index")
    (w.repo / ".git" / "index").symlink_to(w.outside / "index")


def submodule_outside(w: Where) -> None:
    sub = w.repo / "lib"
    make_repo(sub)
    git(w.repo, "add", "lib")
    git(w.repo, "commit", "-q", "-m", "with lib")
    (sub / ".git").rename(w.outside / "lib.git")
    (sub / ".git").write_text(f"gitdir: {w.outside}/lib.git\n")


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Where], None]
    runs: bool  # a plain `git status` in the folder runs the marker
    verdict: str | None = None  # the refusal the gate must give, when only one is right


CASES = [
    Case("filter", filter_driver, runs=True),
    Case("include", include, runs=True),
    Case("include_if", include_if, runs=True),
    Case("fsmonitor", fsmonitor, runs=True),
    Case("uploadpack", uploadpack, runs=True),
    Case("ssh", ssh_command, runs=True),
    Case("ext", ext_transport, runs=True),
    Case("alternates", alternates, runs=False, verdict="repo-unreadable"),
    Case("worktree", worktree_elsewhere, runs=False),
    Case("git_file", git_file_outside, runs=False, verdict="repo-unreadable"),
    Case("hooks", hooks, runs=False),
    Case("pack_symlink", symlinked_pack, runs=False, verdict="repo-unreadable"),
    Case("index_symlink", symlinked_index, runs=False, verdict="repo-unreadable"),
    Case("submodule", submodule_outside, runs=False, verdict="repo-unreadable"),
]


@pytest.fixture
def where(tmp_path: Path) -> Where:
    w = Where(tmp_path / "roots" / "web", tmp_path / "roots", tmp_path / "out", tmp_path / "m")
    w.outside.mkdir()
    w.markers.mkdir()
    make_repo(w.repo)
    return w


def traced_git(w: Where, log: Path) -> str:
    """A git that records every program it starts and every file it opens."""
    wrapper = w.outside.parent / "traced-git"
    trace = "trace=execve,open,openat,openat2"
    wrapper.write_text(
        f'#!/bin/sh\nexec strace -f -qq -e {trace} -ff -o {log}/t {shutil.which("git")} "$@"\n'
    )
    wrapper.chmod(0o755)
    log.mkdir()
    return str(wrapper)


def strays(w: Where, log: Path) -> list[str]:
    """Programs other than git started, and files opened outside the roots and the system."""
    git_binary = os.path.realpath(shutil.which("git") or "git")
    lines = [line for trace in log.iterdir() for line in trace.read_text().splitlines()]
    return [line for line in lines if _stray(w, line, git_binary)]


def _stray(w: Where, line: str, git_binary: str) -> bool:
    path = re.search(r'"([^"]*)"', line)
    if path is None:
        return False
    if line.startswith("execve("):
        return os.path.realpath(path[1]) != git_binary
    # through any symlink: git runs in the work tree, so relative paths start there
    return os.path.realpath(w.repo / path[1]).startswith((str(w.outside), str(w.markers)))


def plain_git_status(w: Where) -> None:
    subprocess.run(["git", "status"], cwd=w.repo, env=PLAIN_ENV, capture_output=True)


def make_gate(w: Where, **kw: Any) -> DirtyTreeGate:
    return DirtyTreeGate(roots=(str(w.roots),), **kw)


async def judge(w: Where, **kw: Any) -> Decision:
    return await make_gate(w, **kw).check(pickup_of(Job(id="j1", kind="local", folder=str(w.repo))))


def assert_judged_or_refused(decision: Decision, case: Case) -> None:
    assert decision == Admit() or isinstance(decision, Refuse), decision
    if isinstance(decision, Refuse):
        assert decision.reason in ("dirty-tree", "repo-unreadable")
        assert decision.sentence.startswith(("web ", "cannot check web", "cannot tell whether web"))
        assert "/" not in decision.sentence.split(":", 1)[-1].replace("--force", "")
    if case.verdict:
        assert isinstance(decision, Refuse) and decision.reason == case.verdict, decision


@pytest.mark.parametrize("scan", [True, False], ids=["scanned", "unscanned"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_a_hostile_repo_runs_nothing_and_reads_nothing_outside(
    where: Where, tmp_path: Path, case: Case, scan: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    case.build(where)
    if not scan:  # the private git dir alone must hold
        monkeypatch.setattr(dirty, "_HAZARDS", ())
    decision = await judge(where)
    assert_judged_or_refused(decision, case)
    assert list(where.markers.iterdir()) == []
    if shutil.which("strace"):
        log = tmp_path / "trace"
        assert await judge(where, git=traced_git(where, log)) == decision
        assert strays(where, log) == []
    if case.runs:  # the case is live: git left to itself runs the marker
        plain_git_status(where)
        assert [p.name for p in where.markers.iterdir()] == [f"pwned-{case.name}"]
