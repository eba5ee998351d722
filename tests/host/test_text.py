"""A command's reply as the text a log line or a record keeps."""

from __future__ import annotations

from dispatch.host.text import LINE_CAP, first_line, reply_lines


def test_reply_lines_are_stripped_and_blank_ones_dropped() -> None:
    assert list(reply_lines(b"\n  warning: x  \r\n\t\nfatal: y\n")) == ["warning: x", "fatal: y"]


def test_bytes_that_are_not_utf8_are_replaced_not_an_error() -> None:
    assert list(reply_lines(b"caf\xe9 ok")) == ["caf\ufffd ok"]


def test_first_line_is_the_first_non_blank_one_capped() -> None:
    assert first_line(b"\n\n  ready  \nmore") == "ready"
    assert first_line(b"a" * 1000) == "a" * LINE_CAP
    assert first_line(b"abcdef", cap=3) == "abc"


def test_no_reply_is_an_empty_line() -> None:
    assert first_line(b"") == ""
    assert first_line(b" \n\t\n") == ""
