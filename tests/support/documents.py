"""Job documents for the model and submit tests: ones a submitter must refuse, and a
hypothesis strategy of plausible documents mixed with arbitrary JSON."""

from __future__ import annotations

import json
import re

from hypothesis import strategies as st

from dispatch.model import JOB_VERSION, MAX_JOB_BYTES

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def doc(**fields) -> bytes:
    return json.dumps({"id": "job-1", **fields}).encode()


def oversize() -> bytes:
    return doc(command=["x" * MAX_JOB_BYTES])


# name -> a document the submitter must refuse; shared with tests/test_client_submit.py
BAD_DOCS: dict[str, bytes] = {
    "empty": b"",
    "truncated json": b'{"id": "a"',
    "not json": b"id=a",
    "trailing garbage": b'{"id": "a"} x',
    "invalid utf-8": b'{"id": "\xff"}',
    "null": b"null",
    "list": b'[{"id": "a"}]',
    "string": b'"a"',
    "no id": b"{}",
    "id not a string": doc(id=5),
    "attempts as text": doc(attempts="3"),
    "attempts as float": doc(attempts=2.5),
    "force as text": doc(force="yes"),
    "command as text": doc(command="make test"),
    "command with a number": doc(command=["sleep", 1]),
    "env value a number": doc(env={"A": 1}),
    "env as list": doc(env=["A=1"]),
    "unknown kind": doc(kind="docker"),
    "unknown field": doc(bogus=1),
    "snake_case field": doc(timeout_ms=1000),
    "unknown nested field": doc(size={"gpus": 1}),
    "unknown waitFor field": doc(waitFor=[{"until": "x"}]),
    "oversize": oversize(),
    "newer version": doc(v=JOB_VERSION + 1),
    "version zero": doc(v=0),
    "version as text": doc(v="1"),
    "relative folder": doc(kind="local", folder="work/repo"),
    "local without folder": doc(kind="local"),
    "folder with nul": doc(kind="local", folder="/work\u0000/x"),
    "folder on plain job": doc(folder="/work/repo"),
    "repo on plain job": doc(repo="owner/name"),
    "repo without slash": doc(kind="forge", repo="ownername"),
    "repo with two slashes": doc(kind="forge", repo="a/b/c"),
    "repo with space": doc(kind="forge", repo="own er/name"),
    "forge without repo": doc(kind="forge"),
    "number zero": doc(kind="forge", repo="a/b", number=0),
    "env name with dash": doc(env={"MY-VAR": "1"}),
    "env name with digit first": doc(env={"1A": "1"}),
    "env name empty": doc(env={"": "1"}),
    "env name with space": doc(env={"A B": "1"}),
    "env name with equals": doc(env={"A=B": "1"}),
    "id empty": doc(id=""),
    "id starting with dash": doc(id="-a"),
    "id starting with dot": doc(id=".a"),
    "id with slash": doc(id="a/b"),
    "id with space": doc(id="a b"),
    "id with brace": doc(id="a{b}"),
    "id too long": doc(id="a" * 129),
    "queue unknown": doc(queue="other"),
    "queue empty host": doc(queue="jobs@"),
    "attempts zero": doc(attempts=0),
    "attempts over 100": doc(attempts=101),
    "timeout under a second": doc(timeoutMs=999),
    "timeout over a week": doc(timeoutMs=7 * 24 * 3_600_000 + 1),
    "memory unit unknown": doc(size={"memory": "4p"}),
    "memory zero": doc(size={"memory": "0"}),
    "memory below the 6m floor": doc(size={"memory": "6291455"}),
    "memory above the 1t ceiling": doc(size={"memory": "1025g"}),
    "memory with a space": doc(size={"memory": "4 g"}),
    "cpus zero": doc(size={"cpus": 0}),
    "cpus below 0.01": doc(size={"cpus": 0.001}),
    "cpus above 512": doc(size={"cpus": 513}),
    "nul in command": doc(command=["sh", "-c", "echo\u0000hi"]),
    "nul in env value": doc(env={"A": "x\u0000y"}),
    "nul in image": doc(image="busybox\u0000"),
    "local job on the shared queue": doc(kind="local", folder="/work/repo", queue="jobs"),
    "waitFor empty": doc(waitFor=[{}]),
    "waitFor both": doc(waitFor=[{"after": "2030-01-01T00:00:00Z", "profile": "ci"}]),
}


# -- the wide input space --------------------------------------------------------------------

# keys without line breaks: an unknown field's name is echoed in the reason (the bug above)
keys = st.text(st.characters(exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "id", "v", "queue", "kind", "folder", "forge", "repo", "number", "image", "command", "env",
    "project", "size", "provider", "model", "waitFor", "dedup", "parentJobId", "attempts",
    "timeoutMs", "force",
]  # fmt: skip
# plausible values for each field, mixed with arbitrary JSON, so validation is reached often
plausible = {
    "id": st.from_regex(ID_RE, fullmatch=True) | st.text(max_size=5),
    "kind": st.sampled_from(["plain", "local", "forge", "other"]),
    "folder": st.sampled_from(["/abs/dir", "rel/dir", "/", ""]),
    "repo": st.sampled_from(["o/n", "o", "o/n/x"]),
    "queue": st.sampled_from(["jobs", "jobs@h", "jobs@", "x"]),
    "env": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
    "attempts": st.integers(-1, 102),
    "timeoutMs": st.integers(0, 10**9),
    "command": st.lists(st.text(max_size=5), max_size=3),
    "number": st.integers(-2, 5),
}
documents = st.fixed_dictionaries(
    {"id": plausible["id"]},
    optional={f: (plausible.get(f, json_values) | json_values) for f in FIELDS if f != "id"},
)
