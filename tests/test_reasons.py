"""The reason catalogue: one entry per token, each explained, and no token spelled elsewhere."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from dispatch import reasons
from dispatch.model import Result, State, encoder
from dispatch.reasons import (
    CATALOGUE,
    CREATE_FAILED,
    DIRTY_TREE,
    ENTRIES,
    EXIT_N,
    POLICY,
    SIGNAL_N,
    Kind,
    Outcome,
    exit_code,
    killed_by,
    lookup,
    with_error,
)

PACKAGE = Path(reasons.__file__).parent
KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
# a quoted string on one line, any prefix (r, b, f, ...); its body without the quotes
LITERAL = re.compile(r"""(?<![\w])[rRbBuUfF]{0,2}(["'])([^"'\\\n]*)\1""")
# a line that spells a token's word for something else (a gate's name, an engine's event)
EXEMPT = "# not a reason"


def test_every_token_is_unique_and_kebab_case() -> None:
    tokens = [entry.token for entry in ENTRIES]
    assert len(tokens) == len(set(tokens))
    assert [t for t in tokens if not KEBAB.fullmatch(t)] == []
    assert set(CATALOGUE) == set(tokens)


def test_every_entry_says_where_it_comes_from_and_what_it_means() -> None:
    for entry in (*ENTRIES, EXIT_N, SIGNAL_N):
        assert entry.kind in get_args(Kind), entry
        assert entry.source.strip() and entry.sentence.strip(), entry
        assert str(entry) == entry.token


def test_every_constant_is_catalogued_and_every_outcome_is_one() -> None:
    constants = {
        name: value
        for name, value in vars(reasons).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    }
    assert {n for n, v in constants.items() if v not in CATALOGUE} == set()
    outcomes = {e.token for e in ENTRIES if e.kind == "outcome"}
    assert outcomes == set(get_args(Outcome))


@pytest.mark.parametrize(
    ("token", "entry"),
    [
        (exit_code(3), EXIT_N),
        (exit_code(255), EXIT_N),
        (killed_by(15), SIGNAL_N),
        (with_error(CREATE_FAILED, "engine answered 500: boom"), CATALOGUE[CREATE_FAILED]),
        ("exit-unknown", CATALOGUE["exit-unknown"]),
        ("dirty-tree", CATALOGUE[DIRTY_TREE]),
        ("from-a-newer-release", None),
        ("exit-", None),
        ("", None),
    ],
)
def test_lookup_finds_the_entry_of_any_stored_token(token: str, entry: object) -> None:
    assert lookup(token) == entry


def test_an_error_message_is_cut_to_fit_a_record_field() -> None:
    assert len(with_error(CREATE_FAILED, "x" * 1000)) == 300


def test_records_store_tokens_as_plain_strings() -> None:
    result = Result(state="failed", outcome=POLICY, reason=DIRTY_TREE)
    assert encoder.encode(result) == b'{"state":"failed","outcome":"policy","reason":"dirty-tree"}'


def test_no_module_spells_a_token_itself() -> None:
    # a job state shares its word with an outcome ("failed"); a regex cannot tell them apart
    tokens = set(CATALOGUE) - set(get_args(State))
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {body!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "reasons.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if EXEMPT not in line
        for _, body in LITERAL.findall(line)
        if body in tokens
    ]
    assert found == [], "use the constant from dispatch/reasons.py:\n" + "\n".join(found)
