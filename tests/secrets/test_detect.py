"""The submit warning's detector: known token shapes and long random strings, and none of the
values an env ordinarily carries."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.secrets.detect import credential_sign, warning

TOKENS = {
    "sk-proj-" + "Ab3dE" * 8: "sk-",
    "sk-ant-api03-" + "x9Y" * 10: "sk-",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc": "sk_live_",
    "ghp_" + "a1B2c3D4e5" * 4: "ghp_",
    "github_pat_11ABCDEFG0" + "x" * 40: "github_pat_",
    "xoxb-123456789012-1234567890123-" + "A" * 24: "xoxb-",
    "AKIAIOSFODNN7EXAMPLE": "AKIA",
    "glpat-" + "Zx8" * 7: "glpat-",
    "AIza" + "SyD" * 11 + "xy": "AIza",
    "hf_" + "Qw3" * 11: "hf_",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn": "a private key",
    "postgres://app:hunter2@db:5432/app": "a password in a URL",
    "Bearer ghp_" + "a1B2c3D4e5" * 4: "ghp_",
    "aZ3kP9qL2mX7vB4nR8tY1wE6sD5fG0hJ": "a long random string",
}


@pytest.mark.parametrize(("value", "sign"), TOKENS.items())
def test_known_shapes_and_random_strings_are_named(value: str, sign: str) -> None:
    assert credential_sign(value) == sign


def test_the_warning_is_one_line_naming_variables_never_values() -> None:
    value = "ghp_" + "a1B2c3D4e5" * 4
    line = warning({"GH": value, "PLAIN": "hello", "AWS": "AKIAIOSFODNN7EXAMPLE"})
    assert "\n" not in line and value not in line and "AKIAIOSFODNN7EXAMPLE" not in line
    assert "AWS (AKIA), GH (ghp_)" in line and "--secret NAME=<profile>/<name>" in line
    assert warning({"PLAIN": "hello"}) == ""


words = st.text(string.ascii_lowercase, min_size=1, max_size=12)
ordinary = st.one_of(
    st.integers().map(str),
    st.floats(allow_nan=False).map(str),
    st.sampled_from(["true", "false", "yes", "0", "", "production", "en_US.UTF-8"]),
    st.lists(words, min_size=1, max_size=8).map("/".join).map(lambda p: "/" + p),
    st.lists(words, min_size=1, max_size=8).map(" ".join),
    st.lists(words, min_size=1, max_size=6).map("_".join).map(str.upper),
    st.lists(words, min_size=1, max_size=6).map(lambda w: "".join(x.title() for x in w)),
    st.tuples(words, words, words).map(lambda t: f"https://{t[0]}.example.com/{t[1]}?q={t[2]}"),
    st.binary(min_size=20, max_size=20).map(bytes.hex),  # git hashes
    st.uuids().map(str),
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
    st.tuples(*[st.integers(0, 99)] * 3).map(lambda v: "{}.{}.{}".format(*v)),
    st.lists(words, min_size=1, max_size=5).map(",".join),
)


@settings(max_examples=600, deadline=None)
@given(value=ordinary)
def test_ordinary_values_pass_without_a_word(value: str) -> None:
    assert credential_sign(value) == ""
