"""Where the scripts are read from in a checkout (the wheel's copy is tests/e2e/test_wheel.py)."""

from __future__ import annotations

from pathlib import Path

from dispatch.queue.scripts import lua_dir

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_reads_the_top_level_lua_folder_itself() -> None:
    # an editable install also gets a copy under site-packages; edits must not go stale there
    assert lua_dir() == REPO / "lua"
