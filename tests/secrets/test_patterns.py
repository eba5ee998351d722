"""Credential shapes: each is masked wherever dispatch writes it (a log line, a record's error
text, the captured output), near misses stay as they were, and a stream cut anywhere is masked
as it would be whole.

Every token here is fake, built from repeated pieces at run time.
"""

from __future__ import annotations

import io
import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch import log
from dispatch.reasons import CREATE_FAILED, with_error
from dispatch.runners.output import OutputFile
from dispatch.secrets.patterns import (
    MAX_KEY_LINES,
    PatternStream,
    scrub_patterns,
    scrub_patterns_bytes,
)


def fake(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    """n characters that look random enough: a walk through `alphabet` with a stride of 7."""
    return "".join(alphabet[(i * 7 + i // len(alphabet)) % len(alphabet)] for i in range(n))


B64URL = string.ascii_letters + string.digits + "-_"
JWT = "eyJ" + fake(33, B64URL) + "." + "eyJ" + fake(40, B64URL) + "." + fake(43, B64URL)
AWS_SECRET = fake(40, string.ascii_letters + string.digits + "/+")
KEY_BODY = [fake(64 + i, string.ascii_letters + string.digits + "+/")[i:] for i in range(5)]
KEY_BODY.append("Zm9v")
PEM = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *KEY_BODY, "-----END RSA PRIVATE KEY-----"])

# what a line holds -> the line once masked
SHAPES = {
    "OPENAI_API_KEY=sk-" + fake(48): "OPENAI_API_KEY=sk-***",
    "key sk-proj-" + fake(120, B64URL) + " used": "key sk-proj-*** used",
    "sk-svcacct-" + fake(60, B64URL): "sk-svcacct-***",
    "x-api-key: sk-ant-api03-" + fake(93, B64URL) + "AA": "x-api-key: sk-ant-***",
    "token ghp_" + fake(36): "token ghp_***",
    "gho_" + fake(36): "gho_***",
    "ghu_" + fake(36): "ghu_***",
    "ghs_" + fake(36): "ghs_***",
    "ghr_" + fake(36): "ghr_***",
    "https://x-access-token:ghs_" + fake(36) + "@github.com/o/r": (
        "https://x-access-token:ghs_***@github.com/o/r"
    ),
    "GH_TOKEN=github_pat_11" + fake(20) + "_" + fake(59): "GH_TOKEN=github_pat_***",
    "glpat-" + fake(20, B64URL): "glpat-***",
    "AKIA" + fake(16, string.ascii_uppercase + "234567"): "AKIA***",
    "id=ASIA" + fake(16, string.ascii_uppercase + "234567") + ";": "id=ASIA***;",
    "aws_secret_access_key = " + AWS_SECRET: "aws_secret_access_key = ***",
    "AWS_SECRET_ACCESS_KEY=" + AWS_SECRET: "AWS_SECRET_ACCESS_KEY=***",
    '{"SecretAccessKey": "' + AWS_SECRET + '"}': '{"SecretAccessKey": "***"}',
    "xoxb-1234567890-" + fake(24): "xoxb-***",
    "xoxp-12-34-" + fake(32): "xoxp-***",
    "Bearer " + JWT: "Bearer eyJ***",
    "Authorization: Bearer " + fake(40, B64URL + "."): "Authorization: Bearer ***",
    "> authorization: token " + fake(40): "> authorization: token ***",
    "Proxy-Authorization: Basic " + fake(24) + "==": "Proxy-Authorization: Basic ***",
    "{'Authorization': 'Bearer " + fake(20) + "'}": "{'Authorization': 'Bearer ***'}",
    # glued to what precedes by a JSON escape or a colour code, not by a word
    '{"error":"no\\nghp_' + fake(36) + '"}': '{"error":"no\\nghp_***"}',
    "\x1b[32mghp_" + fake(36) + "\x1b[0m": "\x1b[32mghp_***\x1b[0m",
    "key: " + PEM: "key: -----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----",
    json.dumps({"key": PEM}): (
        '{"key": "-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----"}'
    ),
}

NEAR_MISSES = [
    "sk-" + fake(12),  # too short
    "pip install sk-learn-compatible-estimators",  # no digit: a name, not a key
    "disk-usage-report-2024-05-01-full-volumes",  # sk- inside a word
    "sk-prod-2024-05-01-eu-west-cluster-7",  # a name: a bare sk- key holds no dash
    "sk-" + fake(40, string.ascii_letters),  # no digit
    "task-1234567890abcdefghijklmnop",
    "ghp_" + fake(20),
    "github_pat_" + fake(10),
    "glpat-" + fake(8),
    "xoxb-" + "abcdefghijklmnop",
    "AKIA",
    "KAKIA" + "ABCDEFGHIJKLMNOP",  # AKIA in a word
    "AKIA" + "ABCDEFGHIJKLMNOPQ",  # one too many
    "the Asia region, ASIA-east",
    "Authorization failed for user bob",
    "Authorization: required",
    "curl -H 'Authorization: Bearer $TOKEN' https://api.example.com",
    "Authorization: Bearer <token>",
    "eyJ",
    "eyJhbGciOiJIUzI1NiJ9",  # a JWT's header alone
    "eyJ" + fake(30, B64URL) + ".e30",  # two parts: no signature
    "SGVsbG8gd29ybGQsIHRoaXMgaXMgYSBwbGFpbiBiYXNlNjQgYmxvYg==",
    fake(40, "0123456789abcdef"),  # a git SHA
    "3f2504e0-4f89-11d3-9a0c-0305e82c3301",  # a UUID
    AWS_SECRET,  # 40 characters without the label
    "secret_access_key is documented in the AWS guide",
    "-----BEGIN CERTIFICATE-----\n" + fake(64) + "\n-----END CERTIFICATE-----",
    'const header = "-----BEGIN RSA PRIVATE KEY-----"',
    "/home/agent/.ssh/id_ed25519",
    "https://user@example.com/path?q=1",
]


def chunked(data: bytes, cuts: list[int]) -> bytes:
    stream = PatternStream()
    out, start = [], 0
    for cut in sorted(c for c in cuts if c <= len(data)):
        out.append(stream.feed(data[start:cut]))
        start = cut
    out.append(stream.feed(data[start:]))
    return b"".join(out) + stream.flush()


@pytest.mark.parametrize(("text", "masked"), SHAPES.items())
def test_each_shape_is_masked_keeping_its_prefix(text: str, masked: str) -> None:
    assert scrub_patterns(text) == masked


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_stay_readable(text: str) -> None:
    assert scrub_patterns(text) == text
    assert scrub_patterns_bytes(text.encode()) == text.encode()


words = st.text(string.ascii_letters + string.digits, min_size=1, max_size=12)
ordinary = st.one_of(
    words,
    st.integers().map(str),
    st.uuids().map(str),
    st.binary(min_size=20, max_size=20).map(bytes.hex),
    st.binary(min_size=8, max_size=60).map(lambda b: __import__("base64").b64encode(b).decode()),
    st.lists(words, min_size=1, max_size=5).map("/".join).map(lambda p: "/" + p),
    st.lists(words, min_size=1, max_size=5).map("-".join),
    st.lists(words, min_size=1, max_size=5).map("_".join),
    st.sampled_from(NEAR_MISSES),
)
text_of = st.lists(st.tuples(ordinary, st.sampled_from([" ", "\n", ", ", ": ", "="])))


def joined(parts: list[tuple[str, str]]) -> str:
    return "".join(word + sep for word, sep in parts)


@settings(max_examples=300, deadline=None)
@given(text_of)
def test_text_without_a_credential_is_unchanged(parts: list[tuple[str, str]]) -> None:
    text = joined(parts)
    assert scrub_patterns(text) == text
    assert scrub_patterns_bytes(text.encode()) == text.encode()


@settings(max_examples=300, deadline=None)
@given(before=text_of, after=text_of, shape=st.sampled_from(sorted(SHAPES.items())))
def test_a_credential_anywhere_in_text_is_masked(
    before: list[tuple[str, str]], after: list[tuple[str, str]], shape: tuple[str, str]
) -> None:
    token, masked = shape
    text = f"{joined(before)} {token} {joined(after)}"
    assert scrub_patterns(text) == f"{scrub_patterns(joined(before))} {masked} {joined(after)}"


stream_lines = st.lists(
    st.one_of(
        st.sampled_from([t for t in SHAPES if "\n" not in t]),
        st.sampled_from([t for t in NEAR_MISSES if "\n" not in t]),
        ordinary,
        st.sampled_from(["ghp_", "sk-", "Authoriz", "AKIA12", "-----BEGIN RSA", "eyJ"]),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    lines=stream_lines,
    seps=st.lists(st.sampled_from([" ", "\n", "\r\n", "\t"]), min_size=12, max_size=12),
    cuts=st.lists(st.integers(0, 1200), max_size=12),
)
def test_a_stream_cut_anywhere_is_masked_as_the_text_whole(
    lines: list[str], seps: list[str], cuts: list[int]
) -> None:
    text = "".join(line + sep for line, sep in zip(lines, seps, strict=False))
    assert chunked(text.encode(), cuts) == scrub_patterns(text).encode()


@settings(max_examples=200, deadline=None)
@given(
    before=stream_lines,
    after=stream_lines,
    cuts=st.lists(st.integers(0, 1600), max_size=20),
    crlf=st.booleans(),
)
def test_a_private_key_in_a_stream_cut_anywhere_is_masked_line_by_line(
    before: list[str], after: list[str], cuts: list[int], crlf: bool
) -> None:
    end = "\r\n" if crlf else "\n"
    data = end.join([*before, "web-1  | " + PEM.replace("\n", end + "web-1  | "), *after, ""])
    out = chunked(data.encode(), cuts)
    assert out == chunked(data.encode(), [])
    masked = out.decode()
    assert all(line not in masked for line in KEY_BODY)
    assert f"-----BEGIN RSA PRIVATE KEY-----{end}" + f"***{end}" * len(KEY_BODY) in masked
    assert masked.endswith(end.join([*map(scrub_patterns, after), ""]))


def test_a_stream_gives_out_at_once_what_no_chunk_can_change() -> None:
    stream = PatternStream()
    assert stream.feed(b"building step 1 of 3") == b"building step 1 of 3"
    assert stream.feed(b"\nthe token is gh") == b"\nthe token is "
    assert stream.feed(b"p_" + fake(36).encode()) == b""  # it may still grow
    assert stream.feed(b" and more\n") == b"ghp_*** and more\n"
    assert stream.feed(b"AKIA") == b""
    assert stream.feed(b"NOTAKEY\n") == b"AKIANOTAKEY\n"
    assert stream.flush() == b""


def test_a_cut_anywhere_near_a_token_masks_it_as_whole() -> None:
    # a cut between a colour code and its token once lost the code the edge looks back at
    data = ("ok \x1b[32mghp_" + fake(36) + "\x1b[0m done\\nsk-" + fake(48) + "\n").encode()
    whole = scrub_patterns(data.decode()).encode()
    assert whole == b"ok \x1b[32mghp_***\x1b[0m done\\nsk-***\n"
    for cut in range(len(data) + 1):
        for second in range(cut, len(data) + 1, 5):
            assert chunked(data, [cut, second]) == whole, (cut, second)


def test_a_quoted_begin_marker_does_not_blank_the_rest_of_the_output() -> None:
    quoted = b'if line == "-----BEGIN RSA PRIVATE KEY-----":\n    found = True\n'
    assert scrub_patterns_bytes(quoted) == quoted
    unended = b"-----BEGIN EC PRIVATE KEY-----\n" + b"QUJD\n" * (MAX_KEY_LINES + 2) + b"done\n"
    out = scrub_patterns_bytes(unended)
    assert out.count(b"***\n") == MAX_KEY_LINES and out.endswith(b"QUJD\nQUJD\ndone\n")


def test_the_captured_output_is_masked_as_it_streams(tmp_path: Path) -> None:
    token = "ghp_" + fake(36)
    resolved = "hunter2-resolved"
    data = f"env: GH_TOKEN={token} PASS={resolved}\n{PEM}\nAuthorization: Bearer {JWT}".encode()
    out = OutputFile(tmp_path / "o" / "j.1.log", 1 << 20, "j", hide=[resolved])
    for start in range(0, len(data), 7):  # 7 bytes at a time: every token is cut somewhere
        assert out.write(data[start : start + 7])
    out.close()
    written = (tmp_path / "o" / "j.1.log").read_text()
    assert written == "\n".join(
        [
            "env: GH_TOKEN=ghp_*** PASS=***",
            "-----BEGIN RSA PRIVATE KEY-----",
            *["***"] * len(KEY_BODY),
            "-----END RSA PRIVATE KEY-----",
            "Authorization: Bearer ***",
        ]
    )


def test_every_log_line_is_masked(logged: io.StringIO) -> None:
    token = "sk-proj-" + fake(80, B64URL)
    log.event("container_create_failed", job="j1", error=f"engine said: OPENAI_API_KEY={token}")
    log.event("nested", detail={"headers": {"Authorization": f"Bearer {JWT}"}}, env=[PEM])
    lines = [json.loads(line) for line in logged.getvalue().splitlines()]
    assert lines[0]["error"] == "engine said: OPENAI_API_KEY=sk-proj-***"
    assert lines[1]["detail"] == {"headers": {"Authorization": "Bearer ***"}}
    assert lines[1]["env"] == ["-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----"]


def test_a_record_s_error_text_is_masked_before_it_is_cut() -> None:
    token = "ghp_" + fake(36)
    said = with_error(CREATE_FAILED, f"engine answered 400: bad env GH={token} " + "x" * 400)
    assert said.startswith(f"{CREATE_FAILED}: engine answered 400: bad env GH=ghp_*** x")
    assert token[4:10] not in said and len(said) == 300
