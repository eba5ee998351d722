"""Masking: what counts as a value, a stream cut anywhere, and the log's process-wide set."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch import log
from dispatch.secrets.mask import MIN_CHARS, StreamMask, forms

SECRET = "s3cr3t-v4lue"


def masked_in_chunks(values: list[str], data: bytes, cuts: list[int]) -> bytes:
    mask = StreamMask(values)
    out = []
    start = 0
    for cut in sorted(cuts):
        out.append(mask.feed(data[start:cut]))
        start = cut
    out.append(mask.feed(data[start:]))
    return b"".join(out) + mask.flush()


def test_a_value_and_the_lines_of_a_multi_line_one_are_masked_short_ones_are_not() -> None:
    key = "-----BEGIN KEY-----\r\nabcdefgh\nxy\n-----END KEY-----"
    assert forms([SECRET, key]) == sorted(
        {SECRET, key, "-----BEGIN KEY-----", "abcdefgh", "-----END KEY-----"},
        key=len,
        reverse=True,
    )
    assert all(len(f) >= MIN_CHARS for f in forms(["ab", key]))


def test_a_value_split_across_chunks_is_still_masked() -> None:
    data = f"token={SECRET}; again {SECRET}!".encode()
    for cut in range(len(data) + 1):
        assert masked_in_chunks([SECRET], data, [cut]) == b"token=***; again ***!"


def test_no_values_leaves_the_stream_as_it_is() -> None:
    mask = StreamMask([])
    assert mask.feed(b"abc") == b"abc" and mask.flush() == b""


@settings(max_examples=300, deadline=None)
@given(
    value=st.text("ab\n", min_size=MIN_CHARS, max_size=8),
    noise=st.lists(st.text("abc\n", max_size=12), max_size=6),
    cuts=st.lists(st.integers(0, 200), max_size=6),
)
def test_whatever_the_cuts_no_value_survives(value: str, noise: list[str], cuts: list[int]) -> None:
    data = value.join(noise).encode() if len(noise) > 1 else (value + "".join(noise)).encode()
    out = masked_in_chunks([value], data, [c for c in cuts if c <= len(data)])
    for form in forms([value]):
        assert form.encode() not in out.replace(b"***", b"\0")


def logged(**fields: object) -> str:
    stream = io.StringIO()
    log.Logger(stream, human=False).event("something", **fields)
    return stream.getvalue()


def test_the_log_masks_a_hidden_value_raw_or_escaped_until_every_holder_unhides_it() -> None:
    quoted = 'pa"ss\\word'
    log.hide([SECRET, quoted])
    log.hide([SECRET])  # a second job with the same value
    try:
        line = logged(error=f"boom {SECRET}", nested={"deep": [quoted]})
        assert SECRET not in line and json.dumps(quoted)[1:-1] not in line
        assert json.loads(line)["error"] == "boom ***"
        log.unhide([SECRET, quoted])
        assert SECRET not in logged(error=SECRET)  # the other job still holds it
    finally:
        log.unhide([SECRET])
    assert SECRET in logged(error=SECRET)
