"""Checks every `lua/*.lua` file, not only the lease scripts, against the rules of lua/README.md.

- the first line is `#!lua` (so the server itself rejects an undeclared key);
- a header lists each KEYS[n] and ARGV[n] the body uses, numbered 1..n, and says what it returns;
- every key a `redis.call` touches is a KEYS entry, never a name built from strings;
- the keys dispatch.queue.keys spells for one queue (or one lease) land in one cluster slot.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dispatch.queue import keys as keyspace
from dispatch.queue.scripts import Script, lua_dir

SCRIPTS = sorted(lua_dir().glob("*.lua"))
# commands whose first argument is not a key
KEYLESS = {"TIME", "PING", "ECHO", "PUBLISH", "SPUBLISH", "INFO", "DBSIZE"}
# commands whose first two arguments are both keys
TWO_KEYS = {"RPOPLPUSH", "LMOVE", "BLMOVE", "SMOVE", "RENAME", "RENAMENX", "COPY"}
KEY_EXPR = re.compile(r"^KEYS\[[^\]]+\]$")


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def cluster_slot(key: str) -> int:
    start = key.find("{")
    if start != -1:
        end = key.find("}", start + 1)
        if end > start + 1:  # an empty tag "{}" does not count: the whole key is hashed
            key = key[start + 1 : end]
    return crc16_xmodem(key.encode()) % 16384


def test_crc16_matches_the_cluster_spec() -> None:
    # reference values from the Redis Cluster specification and its hash tag rules
    assert crc16_xmodem(b"123456789") == 0x31C3
    assert cluster_slot("foo") == 12182
    assert cluster_slot("{user1000}.following") == cluster_slot("{user1000}.followers")
    assert cluster_slot("foo{}{bar}") == crc16_xmodem(b"foo{}{bar}") % 16384


def strip_comments(source: str) -> str:
    """The code of a script without comments; string literals are kept intact."""
    out, i = [], 0
    while i < len(source):
        if source.startswith("--[[", i):
            i = source.find("]]", i) + 2 if "]]" in source[i:] else len(source)
        elif source.startswith("--", i):
            i = source.find("\n", i) if "\n" in source[i:] else len(source)
        elif source[i] in "'\"":
            end = _string_end(source, i)
            out.append(source[i:end])
            i = end
        else:
            out.append(source[i])
            i += 1
    return "".join(out)


def _string_end(source: str, start: int) -> int:
    quote, i = source[start], start + 1
    while i < len(source) and source[i] != quote:
        i += 2 if source[i] == "\\" else 1
    return i + 1


def call_args(code: str, open_paren: int) -> list[str]:
    """The top-level arguments of the call whose '(' is at `open_paren`."""
    args, depth, current, i = [], 0, [], open_paren + 1
    while i < len(code):
        ch = code[i]
        if ch in "'\"":
            end = _string_end(code, i)
            current.append(code[i:end])
            i = end
            continue
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    args.append("".join(current).strip())
    return [a for a in args if a]


def from_keys(code: str, expr: str, depth: int = 0) -> bool:
    """Whether `expr` is a KEYS entry, directly or through a local or a function parameter."""
    if KEY_EXPR.match(expr):
        return True
    if depth > 3 or not re.fullmatch(r"[A-Za-z_]\w*", expr):
        return False
    bindings = [
        value.strip()
        for value in re.findall(rf"(?:^|[^.\w]){expr}\s*=(?!=)([^\n;]*)", code, re.MULTILINE)
    ]
    for func, params in re.findall(r"function\s+(\w+)\s*\(([^)]*)\)", code):
        names = [p.strip() for p in params.split(",")]
        if expr in names:
            position = names.index(expr)
            for call in re.finditer(rf"(?<!function ){func}\s*\(", code):
                args = call_args(code, call.end() - 1)
                bindings.append(args[position] if position < len(args) else "nil")
    return bool(bindings) and all(from_keys(code, b, depth + 1) for b in bindings)


def redis_calls(code: str) -> list[list[str]]:
    return [call_args(code, m.end() - 1) for m in re.finditer(r"redis\.p?call\s*\(", code)]


def header(source: str) -> str:
    match = re.search(r"--\[\[(.*?)\]\]", source, re.DOTALL)
    assert match, "no --[[ header ]] block"
    return match.group(1)


def declared_names(source: str, kind: str) -> dict[int, str]:
    found = re.findall(rf"^{kind}\[(\d+)\]\s+(\w+)", header(source), re.MULTILINE)
    return {int(n): name for n, name in found}


@pytest.fixture(params=SCRIPTS, ids=lambda p: p.stem)
def lua(request: pytest.FixtureRequest) -> Path:
    return request.param


def test_there_are_scripts() -> None:
    assert any(p.stem.startswith("lease_") for p in SCRIPTS)


def test_first_line_is_shebang(lua: Path) -> None:
    first = lua.read_text().splitlines()[0]
    assert first == "#!lua" or first.startswith("#!lua "), first


def test_header_lists_keys_and_args_the_body_uses(lua: Path) -> None:
    source = lua.read_text()
    text = header(source)
    assert text.lstrip().startswith(lua.stem + ":"), "header opens with '<name>: what it does'"
    assert re.search(r"^Returns\s", text, re.MULTILINE), "header says what it returns"
    code = strip_comments(source.split("\n", 1)[1])
    for kind in ("KEYS", "ARGV"):
        names = declared_names(source, kind)
        assert sorted(names) == list(range(1, len(names) + 1)), f"{kind} numbered 1..n"
        assert Script(lua.stem).declared(kind) == len(names)
        used = {int(n) for n in re.findall(rf"\b{kind}\[(\d+)\]", code)}
        assert used <= set(names), f"{kind}{sorted(used - set(names))} used but not in header"
        if re.search(rf"\b{kind}\b", code) and not names:
            assert re.search(rf"^{kind}\s+none", text, re.MULTILINE), f"header omits {kind}"
    assert declared_names(source, "KEYS"), "a script with no keys has no place in lua/"


def test_every_key_argument_is_a_keys_entry(lua: Path) -> None:
    code = strip_comments(lua.read_text().split("\n", 1)[1])
    calls = redis_calls(code)
    assert calls
    for args in calls:
        command = args[0].strip("'\"").upper() if args[0][0] in "'\"" else None
        if command in KEYLESS or len(args) < 2:
            continue
        key_args = args[1:3] if command in TWO_KEYS else args[1:2]
        for key in key_args:
            assert from_keys(code, key), f"{lua.stem}: redis.call({', '.join(args)}) key {key!r}"
    assert not re.search(r"KEYS\[[^\]]+\]\s*\.\.|\.\.\s*KEYS\[", code), "key name built in Lua"


def keys_for(lua: Path) -> list[str]:
    """The keys dispatch.queue.keys gives this script, looked up by the names in its header."""
    families = {
        "lease": keyspace.lease_keys("gpu"),
        "host": keyspace.host_keys("h1"),
        "budget": keyspace.budget_keys(),
    }
    family: object = families.get(lua.stem.split("_")[0], keyspace.queue_keys("jobs"))
    resolved = []
    for n, name in sorted(declared_names(lua.read_text(), "KEYS").items()):
        value = getattr(family, name, None)
        if callable(value):
            value = value("job-1")
        assert isinstance(value, str), f"{lua.stem} KEYS[{n}] {name!r}: not spelled in keys.py"
        resolved.append(value)
    return resolved


def test_keys_of_one_call_share_a_cluster_slot(lua: Path) -> None:
    slots = {key: cluster_slot(key) for key in keys_for(lua)}
    assert len(set(slots.values())) == 1, slots


def test_a_lease_and_a_queue_each_have_one_slot() -> None:
    queue = keyspace.queue_keys("jobs")
    queue_keys = [getattr(queue, f) for f in queue.__dataclass_fields__ if f != "tag"]
    assert len({cluster_slot(k) for k in [*queue_keys, queue.ack("x")]}) == 1
    lease = keyspace.lease_keys("gpu", prefix="other")
    assert cluster_slot(lease.holders) == cluster_slot(lease.fence)
