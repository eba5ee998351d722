"""The allow-list grammar: what a rule lets through, and what is not a rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.egress.rules import Rule, allows, endpoint_rule, parse_rule

GOOD = [
    ("api.example.com", Rule("api.example.com")),
    ("API.Example.com.", Rule("api.example.com")),
    ("api.example.com:8443", Rule("api.example.com", port=8443)),
    ("*.example.com", Rule("example.com", wildcard=True)),
    ("*.example.com:22", Rule("example.com", wildcard=True, port=22)),
    ("10.1.2.3:8000", Rule("10.1.2.3", port=8000)),
    ("[fd00::1]:8000", Rule("fd00::1", port=8000)),
    ("localhost", Rule("localhost")),
]


@pytest.mark.parametrize(("text", "rule"), GOOD)
def test_a_rule_reads_as_written(text: str, rule: Rule) -> None:
    assert parse_rule(text) == rule
    assert parse_rule(str(rule)) == rule


@pytest.mark.parametrize(
    "text", ["", "*", "*.", "*.10.0.0.1", "a..b", "-a.com", "a.com:0", "a.com:65536", "a b", "a/b"]
)
def test_what_is_not_a_rule_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_rule(text)
    assert "\n" not in str(caught.value)


def test_a_rule_without_a_port_means_the_web_ports_only() -> None:
    rules = [parse_rule("github.com")]
    assert allows(rules, "github.com", 443) and allows(rules, "GitHub.com.", 80)
    assert allows(rules, "github.com", 22) is None


def test_a_wildcard_covers_names_below_the_domain_not_the_domain_or_lookalikes() -> None:
    rules = [parse_rule("*.example.com")]
    assert allows(rules, "a.b.example.com", 443)
    assert allows(rules, "example.com", 443) is None
    assert allows(rules, "evilexample.com", 443) is None
    assert allows(rules, "example.com.evil.net", 443) is None


@given(st.text(max_size=40), st.integers(1, 65535))
def test_no_list_means_nothing_gets_through(host: str, port: int) -> None:
    assert allows([], host, port) is None


@pytest.mark.parametrize(
    ("host", "rule"),
    [
        ("http://10.0.0.5:8000/v1", Rule("10.0.0.5", port=8000, endpoint=True)),
        ("https://models.example.com/v1", Rule("models.example.com", port=443, endpoint=True)),
        ("localhost:11434", Rule("localhost", port=11434, endpoint=True)),
        ("http://", None),
        ("ftp://x.example.com/", None),
    ],
)
def test_a_model_endpoint_becomes_a_rule_for_its_host_and_port(host: str, rule: Rule) -> None:
    assert endpoint_rule(host) == rule
