"""The one grammar of memory sizes, CPU counts and durations: round trips, bounds, refusals."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dispatch.config.units import (
    GIB,
    MAX_DURATION_MS,
    MAX_HOST_MEMORY,
    MAX_JOB_CPUS,
    MAX_JOB_MEMORY,
    MIB,
    MIN_MEMORY,
    format_memory,
    parse_cpus,
    parse_duration_ms,
    parse_memory,
)

_SCALE = {"k": 1024, "m": MIB, "g": GIB, "t": 1024 * GIB}
job_memory = st.integers(MIN_MEMORY, MAX_JOB_MEMORY)


@given(job_memory)
@example(MIN_MEMORY)
@example(MAX_JOB_MEMORY)
def test_a_formatted_size_parses_back_to_itself(n: int) -> None:
    assert parse_memory(format_memory(n)) == n


@given(
    st.sampled_from(list(_SCALE)),
    st.integers(1, 1024),
    st.sampled_from(["", "b", "B", "ib", "iB", "IB"]),
    st.booleans(),
)
def test_every_spelling_of_a_unit_means_the_same_bytes(
    unit: str, count: int, suffix: str, upper: bool
) -> None:
    n = count * _SCALE[unit]
    if not MIN_MEMORY <= n <= MAX_JOB_MEMORY:
        return
    spelled = f"{count}{unit.upper() if upper else unit}{suffix}"
    assert parse_memory(spelled) == n


@pytest.mark.parametrize(
    ("text", "n"),
    [("6m", 6 * MIB), ("1.5g", 3 * GIB // 2), ("6291456", MIN_MEMORY), ("6291456b", MIN_MEMORY)],
)
def test_documented_examples(text: str, n: int) -> None:
    assert parse_memory(text) == n


@given(st.integers(0, MIN_MEMORY - 1))
def test_below_the_floor_is_refused_in_any_spelling(n: int) -> None:
    for text in (str(n), format_memory(n)):
        with pytest.raises(ValueError, match="floor"):
            parse_memory(text)


@given(st.integers(MAX_JOB_MEMORY + 1, MAX_HOST_MEMORY))
def test_above_the_job_ceiling_is_refused_but_fits_a_host_budget(n: int) -> None:
    with pytest.raises(ValueError, match="ceiling"):
        parse_memory(format_memory(n))
    assert parse_memory(format_memory(n), MAX_HOST_MEMORY) == n


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0",
        "0g",
        "-4g",
        "4 g",
        " 4g",
        "4g\n",
        "4gg",
        "4p",
        "1e9",
        "nan",
        "inf",
        "0x100",
        "4,5g",
        "٤g",
        "g",
    ],
)
def test_what_is_not_a_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_memory(text)


@given(st.text(max_size=30))
def test_any_text_parses_or_is_refused_on_one_line(text: str) -> None:
    try:
        n = parse_memory(text)
    except ValueError as exc:
        assert len(str(exc).splitlines()) == 1
    else:
        assert MIN_MEMORY <= n <= MAX_JOB_MEMORY


@given(st.decimals(min_value="0.01", max_value=MAX_JOB_CPUS, places=2))
def test_cpus_in_bounds_parse(value: object) -> None:
    assert math.isclose(parse_cpus(str(value)), float(str(value)))


@pytest.mark.parametrize(
    "text", ["0", "0.001", "513", "nan", "inf", "-1", "1e2", "", "two", "True", "1_0"]
)
def test_cpus_out_of_bounds_or_not_decimal_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpus(text)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250ms", 250), ("90", 90_000), ("1.5s", 1500), ("10m", 600_000), ("1d", 86_400_000)],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["nan", "inf", "-1s", "1e3", "9" * 400, "3651d", "soon", "1w"])
def test_durations_refuse_nan_inf_negative_and_beyond_ten_years(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(text)
    assert parse_duration_ms("3650d") == MAX_DURATION_MS
