from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.fleet.folders import FolderLocks, FolderTicket, parts_of, relation


def test_a_held_folder_excludes_itself_its_ancestors_and_its_descendants() -> None:
    folders = FolderLocks()
    held = folders.try_acquire("/x/a/b", owner="job-1")
    assert held is not None
    for path in ("/x/a/b", "/x/a", "/x", "/", "/x/a/b/c", "/x/a/b/c/d"):
        assert folders.try_acquire(path) is None, path
        assert folders.in_the_way(path) is held
    assert folders.denials == 6
    for path in (
        "/x/a/c",
        "/x/ab",
        "/x/a/bc",
        "/y",
    ):  # siblings, and names that only share a prefix
        assert folders.try_acquire(path) is not None, path


def test_release_gives_back_exactly_the_ticket_it_is_given() -> None:
    folders = FolderLocks()
    inner = folders.try_acquire("/x/a/b")
    assert inner is not None and folders.release(inner)
    assert not folders.release(inner)  # a second release frees nothing
    outer = folders.try_acquire("/x/a")
    assert outer is not None
    assert not folders.release(inner)
    assert folders.holds(outer) and folders.try_acquire("/x/a/b") is None
    assert not folders.release(FolderTicket("/x/a"))  # a ticket we never gave
    assert folders.holds(outer)


def test_the_inside_holder_is_named_whichever_was_taken_first() -> None:
    folders = FolderLocks()
    c = folders.try_acquire("/x/a/c", owner="job-c")
    b = folders.try_acquire("/x/a/b", owner="job-b")
    assert c is not None and b is not None
    assert folders.in_the_way("/x/a") is b  # the first by path, so a defer's detail is stable
    folders.release(b)
    assert folders.in_the_way("/x/a") is c


def test_components_not_characters_decide_nesting() -> None:
    assert parts_of("/x/a/") == ("/", "x", "a")
    assert parts_of("/") == ("/",)
    assert relation("/x/a/b", "/x/a") == "above"
    assert relation("/x/a", "/x/a/b") == "inside"
    assert relation("/x/a", "/x/a") == "same"
    assert relation("/x/ab", "/x/a") == "apart"
    assert relation("/x/a", "/") == "above"
    with pytest.raises(ValueError, match="absolute"):
        parts_of("x/a")


def nested_or_equal(a: str, b: str) -> bool:
    return relation(a, b) != "apart"


# A random tree: short names from a tiny alphabet, so nesting, equality and shared prefixes
# (`/a` against `/ab`) all come up often.
paths = st.lists(st.sampled_from(["a", "b", "ab"]), min_size=0, max_size=4).map(
    lambda names: "/" + "/".join(names)
)
steps = st.lists(st.tuples(st.booleans(), paths, st.integers(0, 20)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_no_two_held_folders_are_ever_nested_or_equal(ops: list[tuple[bool, str, int]]) -> None:
    folders = FolderLocks()
    tickets: list[FolderTicket] = []
    for take, path, pick in ops:
        if take or not tickets:
            held_before = [t.path for t in folders.held()]
            ticket = folders.try_acquire(path)
            # granted exactly when no held folder is equal, above or inside it
            assert (ticket is None) == any(nested_or_equal(path, h) for h in held_before)
            if ticket is not None:
                tickets.append(ticket)
        else:
            assert folders.release(tickets.pop(pick % len(tickets)))
        held = [t.path for t in folders.held()]
        assert not [
            (a, b) for i, a in enumerate(held) for b in held[i + 1 :] if nested_or_equal(a, b)
        ]
    for ticket in tickets:
        assert folders.release(ticket)
    assert folders.held() == []
    assert folders._below == {}  # release leaves no entry behind: the maps never grow
    assert folders.try_acquire("/") is not None
