"""The job document: what decodes, what is refused (one-line `InvalidJob`), and `peek_version`.

No Redis here; `tests/test_client_submit.py` checks that refused submissions write nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dispatch.errors import InvalidJob
from dispatch.model import (
    _FREE_ENV_NAME,
    FIRST_VERSION,
    JOB_VERSION,
    MAX_JOB_BYTES,
    Job,
    Result,
    RunRecord,
    decode_job,
    encode_job,
    encoder,
    env_name_reserved,
    iso,
    peek_version,
    validate,
)
from dispatch.reasons import ENV_NAME_RESERVED
from tests.support.documents import (
    BAD_DOCS,
    ENV_RE,
    ID_RE,
    doc,
    documents,
    json_values,
    oversize,
)


def assert_refused(raw: bytes | str) -> InvalidJob:
    with pytest.raises(InvalidJob) as caught:
        decode_job(raw)
    assert one_line(str(caught.value))
    return caught.value


def one_line(reason: str) -> bool:
    return len(reason.splitlines()) == 1 and reason.strip() != ""


@pytest.mark.parametrize("raw", BAD_DOCS.values(), ids=BAD_DOCS.keys())
def test_bad_document_is_refused_with_one_line_reason(raw: bytes) -> None:
    assert_refused(raw)


def test_reasons_name_the_problem() -> None:
    assert "bytes" in str(assert_refused(oversize()))
    assert "version" in str(assert_refused(doc(v=JOB_VERSION + 1)))
    assert "absolute folder" in str(assert_refused(doc(kind="local", folder="rel")))
    assert "owner/name" in str(assert_refused(doc(kind="forge", repo="x")))
    assert "'A-B'" in str(assert_refused(doc(env={"A-B": "1"})))
    assert "bogus" in str(assert_refused(doc(bogus=1)))


def test_minimal_and_full_documents_decode() -> None:
    assert decode_job(b'{"id":"a"}') == Job(id="a")
    full = doc(
        kind="forge",
        repo="owner/name",
        number=7,
        command=["make", "test"],
        env={"CI": "1", "_X9": ""},
        queue="jobs@host-1",
        attempts=100,
        timeoutMs=1000,
        size={"memory": "512m", "cpus": 1.5},
        waitFor=[{"after": "2030-01-01T00:00:00Z"}, {"profile": "ci"}],
        dedup="key",
        force=True,
    )
    job = decode_job(full)
    assert (job.repo, job.number, job.target()) == ("owner/name", 7, "owner/name#7")
    assert decode_job(full.decode()) == job  # str documents too
    local = doc(kind="local", folder="/work/repo/", queue="jobs@host-1")
    assert decode_job(local).target() == "repo"


def test_size_cap_is_inclusive() -> None:
    base = doc(command=[""])
    fits = doc(command=["x" * (MAX_JOB_BYTES - len(base))])
    assert len(fits) == MAX_JOB_BYTES
    assert decode_job(fits).command[0].startswith("x")
    assert_refused(doc(command=["x" * (MAX_JOB_BYTES - len(base) + 1)]))


def test_encode_refuses_oversize_job() -> None:
    with pytest.raises(InvalidJob, match="bytes"):
        encode_job(Job(id="a", command=["x" * MAX_JOB_BYTES]))


def test_peek_version_reads_a_newer_version_without_trusting_the_rest() -> None:
    newer = JOB_VERSION + 1
    assert peek_version(doc(v=newer)) == newer
    assert peek_version(json.dumps({"v": newer, "id": 5, "future": {"x": [1]}})) == newer
    assert peek_version(json.dumps({"v": newer, "kind": "quantum", "attempts": "many"})) == newer
    assert peek_version(b'{"id":"a"}') == FIRST_VERSION  # no v: the first version
    for unreadable in (b"", b"{", b"[2]", b'"v"', b'{"v":"2"}', b'{"v":true}', b"\xff"):
        assert peek_version(unreadable) == 0, unreadable


@pytest.mark.parametrize(
    "fields",
    [
        {"id": "job\n"},
        {"env": {"PATH\n": "x"}},
        {"queue": "jobs\n"},
        {"kind": "forge", "repo": "owner/name\n"},
        {"size": {"memory": "4g\n"}},
    ],
    ids=["id", "env name", "queue", "repo", "memory"],
)
def test_trailing_newline_is_refused(fields) -> None:
    assert_refused(doc(**fields))


def test_size_cap_counts_bytes_of_a_str_document() -> None:
    raw = json.dumps({"id": "a", "command": ["é" * 40_000]}, ensure_ascii=False)
    assert len(raw) < MAX_JOB_BYTES < len(raw.encode())
    assert_refused(raw)


def test_reason_is_one_line_for_an_unknown_field_with_a_newline() -> None:
    assert_refused(b'{"id": "a", "x\\ny": 1}')


def assert_valid(job: Job) -> None:
    """What a decoded job must satisfy; no trailing newline slips through (tested above)."""
    validate(job)
    assert ID_RE.fullmatch(job.id), job.id
    assert all(ENV_RE.fullmatch(name) for name in job.env)
    assert decode_job(encode_job(job)) == job


@settings(max_examples=200, deadline=None)
@given(value=json_values)
@example(value={"id": "a", "v": 2})
@example(value=[{"id": "a"}])
def test_any_json_value_decodes_or_is_refused(value) -> None:
    decodes_or_is_refused(json.dumps(value).encode())


def decodes_or_is_refused(raw: bytes | str) -> None:
    """Either a valid job or InvalidJob with a one-line reason; nothing else."""
    try:
        job = decode_job(raw)
    except InvalidJob as exc:
        assert one_line(str(exc)), exc
        return
    assert_valid(job)


@settings(max_examples=200, deadline=None)
@given(document=documents)
def test_any_document_decodes_or_is_refused(document) -> None:
    decodes_or_is_refused(json.dumps(document))


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200))
@example(raw=b'{"id":"a","command":["\\ud800"]}')  # a lone surrogate
@example(raw=b'{"id":"a","number":99999999999999999999999}')
def test_any_bytes_decode_or_are_refused(raw: bytes) -> None:
    decodes_or_is_refused(raw)


@settings(max_examples=200, deadline=None)
@given(
    ident=st.from_regex(ID_RE, fullmatch=True),
    name=st.from_regex(ENV_RE, fullmatch=True).filter(lambda n: not env_name_reserved(n)),
)
def test_ids_and_env_names_of_the_documented_form_are_accepted(ident: str, name: str) -> None:
    job = decode_job(doc(id=ident, env={name: "v"}))
    assert (job.id, list(job.env)) == (ident, [name])
    assert msgspec.json.decode(encode_job(job))["id"] == ident


PROXIES = ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"]
any_case = st.sampled_from(PROXIES).flatmap(
    lambda name: st.tuples(*[st.sampled_from([c.lower(), c.upper()]) for c in name]).map("".join)
)
reserved = st.one_of(any_case, st.from_regex(r"DISPATCH_[A-Za-z0-9_]*", fullmatch=True))


@settings(max_examples=200, deadline=None)
@given(name=reserved, value=st.sampled_from(["x", {"secret": "vault/proxy"}]))
def test_an_env_name_the_runner_owns_is_refused_naming_it(name: str, value: object) -> None:
    refused = str(assert_refused(doc(id="j1", env={"MODE": "fix", name: value})))
    assert refused.startswith(f"{ENV_NAME_RESERVED}: env {name} ")


@settings(max_examples=200, deadline=None)
@given(
    name=st.one_of(
        st.from_regex(ENV_RE, fullmatch=True).filter(
            lambda n: n.upper() not in PROXIES and not n.startswith("DISPATCH_")
        ),
        # HOME is the job's: the docker runner lets a job's own HOME win (security.md)
        st.sampled_from(["HOME", "dispatch_mode", "DISPATCH", "MY_HTTPS_PROXY", "HTTP_PROXY_2"]),
    )
)
def test_every_other_env_name_is_accepted(name: str) -> None:
    assert list(decode_job(doc(id="j1", env={name: "x"})).env) == [name]


@settings(max_examples=500, deadline=None)
@given(
    name=st.one_of(
        st.text(alphabet="AaDdHhIiNnOoPpSsTtXxYy_-019\u017f\u212a\n ", max_size=14),
        reserved,
        reserved.map(lambda n: n + "\n"),
        st.from_regex(ENV_RE, fullmatch=True),
    )
)
@example(name="http_proxy")
@example(name="HTTP_PROXY_")
@example(name="DISPATCH")
@example(name="\u212a")  # the Kelvin sign: a K only to case-blind Unicode matching
def test_one_match_frees_an_env_name_exactly_when_both_checks_do(name: str) -> None:
    """The decoder lets a name through on one match, and names its problem only on a miss."""
    free = bool(ENV_RE.fullmatch(name)) and not env_name_reserved(name)
    assert bool(_FREE_ENV_NAME.fullmatch(name)) == free
    if free:
        assert list(decode_job(doc(id="j1", env={name: "x"})).env) == [name]
    else:
        assert_refused(doc(id="j1", env={"OK": "x", name: "x"}))


def test_records_from_before_sentences_decode_and_an_empty_one_is_not_written() -> None:
    old = b'{"id":"a","attempt":1,"host":"h","queue":"jobs","outcome":"policy","reason":"r"}'
    record = msgspec.json.decode(old, type=RunRecord)
    assert record.sentence == "" and encoder.encode(record) == old
    old_result = b'{"state":"failed","outcome":"policy","reason":"r"}'
    result = msgspec.json.decode(old_result, type=Result)
    assert result.sentence == "" and encoder.encode(result) == old_result


def test_a_job_s_egress_hosts_follow_the_allow_list_grammar() -> None:
    job = Job(id="j1", egress=["api.example.com", "*.example.org:8443"])
    assert decode_job(encode_job(job)) == job
    with pytest.raises(InvalidJob, match="egress"):
        decode_job(encode_job(Job(id="j1", egress=["not a host"])))
    with pytest.raises(InvalidJob, match="at most 100"):
        decode_job(encode_job(Job(id="j1", egress=[f"h{i}.example.com" for i in range(101)])))


@given(
    st.lists(st.integers(0, 4_102_444_800_000), min_size=1, max_size=20).flatmap(st.permutations)
)
def test_iso_is_each_instant_as_utc_with_milliseconds_whatever_came_before(
    instants: list[int],
) -> None:
    for ms in [*instants, *instants]:  # repeats and returns: its one-entry cache must not leak
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
        assert iso(ms) == moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


TEXT = st.text(st.sampled_from(["a", "\0", "\\", "u", "0", "é", '"']), max_size=8)


@given(st.lists(TEXT, max_size=3), TEXT, st.booleans())
@example(["\\u0000"], "", False)  # the escape written as text: no NUL, no refusal
@example([], "x\0", True)
def test_a_nul_in_any_text_is_refused_and_only_a_nul(
    command: list[str], image: str, as_text: bool
) -> None:
    raw = encoder.encode(Job(id="n1", command=command, image=image or None))
    has_nul = any("\0" in text for text in [*command, image])
    try:
        job = decode_job(raw.decode() if as_text else raw)
    except InvalidJob as exc:
        assert has_nul and "NUL" in str(exc)
    else:
        assert not has_nul and job.command == command
