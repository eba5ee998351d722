"""A secret reference in the job document: its shape, and the version it is written at."""

from __future__ import annotations

import json

import pytest

from dispatch.errors import InvalidJob
from dispatch.model import FIRST_VERSION, SECRET_VERSION, Job, SecretRef, decode_job, encode_job


def test_a_document_with_a_reference_is_written_at_the_version_that_holds_it() -> None:
    plain = Job(id="a", command=["true"], env={"MODE": "fast"})
    assert json.loads(encode_job(plain)).get("v", FIRST_VERSION) == FIRST_VERSION
    ref = Job(id="a", command=["true"], env={"KEY": SecretRef(secret="vault/gh/token")})
    raw = encode_job(ref)
    assert json.loads(raw)["v"] == SECRET_VERSION
    assert json.loads(raw)["env"] == {"KEY": {"secret": "vault/gh/token"}}
    decoded = decode_job(raw)
    assert decoded.secret_refs() == {"KEY": SecretRef(secret="vault/gh/token")}
    assert (decoded.plain_env(), ref.secret_refs()["KEY"].profile) == ({}, "vault")
    assert ref.secret_refs()["KEY"].name == "gh/token"


@pytest.mark.parametrize(
    "env",
    [
        {"K": {"secret": "no-slash"}},
        {"K": {"secret": "/name"}},
        {"K": {"secret": "p/"}},
        {"K": {"secret": "p/-option"}},
        {"K": {"secret": "p/with space"}},
        {"K": {"secret": "p/x", "value": "y"}},  # a reference carries nothing else
        {"K": {"secret": 7}},
        {"K": 7},
    ],
)
def test_a_malformed_reference_is_refused_in_one_line(env: dict[str, object]) -> None:
    with pytest.raises(InvalidJob) as caught:
        decode_job(json.dumps({"id": "a", "command": ["true"], "env": env}))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("env", "plain", "refs"),
    [
        ({}, {}, {}),
        ({"A": "1", "B": "2"}, {"A": "1", "B": "2"}, {}),
        ({"A": "1", "K": {"secret": "v/k"}}, {"A": "1"}, {"K": SecretRef(secret="v/k")}),
        ({"K": {"secret": "v/k"}}, {}, {"K": SecretRef(secret="v/k")}),
    ],
)
def test_a_decoded_env_splits_into_values_and_references(
    env: dict[str, object], plain: dict[str, str], refs: dict[str, SecretRef]
) -> None:
    job = decode_job(json.dumps({"id": "a", "command": ["true"], "env": env}))
    assert (job.plain_env(), job.secret_refs(), job.has_secret_refs()) == (plain, refs, bool(refs))
    job.plain_env()["X"] = "y"  # a copy: the document's env is not the caller's to change
    assert "X" not in job.env
