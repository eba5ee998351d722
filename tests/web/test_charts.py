"""The inline SVG charts (dispatch/web/charts.py), as the browser would read them: well-formed,
styled by class only, every label escaped, bars and lines where the numbers put them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from markupsafe import Markup

from dispatch.web import charts
from dispatch.web.charts import PLOT_H, TOP, bars, lines, y_of

EVIL = "<script>alert(1)</script>"


def parsed(svg: Markup) -> ET.Element:
    text = str(svg)
    assert "style=" not in text  # the CSP allows no inline style
    return ET.fromstring(text)  # well-formed, or this raises


def of_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(tag) if e.get("class") == cls]


def test_a_label_a_name_or_a_title_that_carries_markup_comes_out_as_text() -> None:
    for svg in (
        bars([1, 2], [EVIL, "b"], name=EVIL),
        bars([1], ["a"], titles=[EVIL]),
        lines({"p50": [1.0, 2.0]}, [EVIL, "b"], name=EVIL),
    ):
        assert "<script>" not in svg and "&lt;script&gt;" in svg
        root = parsed(svg)
        assert not list(root.iter("script"))


def test_bar_heights_are_proportional_to_their_values_and_the_highest_fills_the_plot() -> None:
    root = parsed(bars([1, 2, 4, 0], ["a", "b", "c", "d"]))
    heights = [float(r.get("height", "")) for r in of_class(root, "rect", "col")]
    assert heights == [PLOT_H / 4, PLOT_H / 2, PLOT_H, 0.0]
    ys = [float(r.get("y", "")) for r in of_class(root, "rect", "col")]
    assert [y + h for y, h in zip(ys, heights, strict=True)] == [TOP + PLOT_H] * 4  # one baseline


def test_the_cap_and_soft_lines_sit_at_their_values_on_the_same_scale_as_the_bars() -> None:
    root = parsed(bars([5, 10], ["a", "b"], cap=20, soft=16))
    (cap,) = of_class(root, "line", "cap")
    (soft,) = of_class(root, "line", "soft")
    assert float(cap.get("y1", "")) == float(cap.get("y2", "")) == TOP  # the cap is the top
    assert float(soft.get("y1", "")) == round(y_of(16, 20), 1)
    tall = of_class(root, "rect", "col")[1]
    assert float(tall.get("height", "")) == PLOT_H / 2


def test_a_bar_over_the_cap_raises_the_scale_so_the_cap_line_stays_inside() -> None:
    root = parsed(bars([40], ["a"], cap=20))
    (cap,) = of_class(root, "line", "cap")
    assert float(cap.get("y1", "")) == TOP + PLOT_H / 2


def test_extra_is_stacked_lighter_on_its_bar_and_each_bar_has_its_hover_text() -> None:
    root = parsed(bars([3, None], ["a", "b"], extra=[1, 0], titles=["a: 3 used", "b: none"]))
    (col,) = of_class(root, "rect", "col")
    (extra,) = of_class(root, "rect", "col extra")
    assert float(col.get("height", "")) == PLOT_H * 3 / 4
    assert float(extra.get("height", "")) == PLOT_H / 4
    assert float(extra.get("y", "")) == TOP  # on top of the used part
    assert [t.text for g in root.iter("g") for t in g.iter("title")] == ["a: 3 used", "b: none"]


def test_a_line_breaks_where_a_bin_has_no_value() -> None:
    root = parsed(lines({"p50": [1.0, 2.0, None, 4.0], "p99": [4.0] * 4}, list("abcd")))
    (p50,) = of_class(root, "path", "line p50")
    assert p50.get("d", "").count("M") == 2
    dots = of_class(root, "circle", "dot p50")
    assert [t.text for d in dots for t in d.iter("title")] == ["a: p50 1", "b: p50 2", "d: p50 4"]
    (p99,) = of_class(root, "path", "line p99")
    assert {float(step.split()[1]) for step in p99.get("d", "").split("L")} == {float(TOP)}


def test_no_values_give_a_chart_that_says_so() -> None:
    for svg in (
        bars([], []),
        bars([None, None], ["a", "b"], cap=5),
        lines({"p50": [None, None]}, ["a", "b"]),
        lines({}, []),
    ):
        root = parsed(svg)
        assert [t.text for t in root.iter("text")] == ["no data"]
        assert root.get("class") == "chart"


def test_at_most_a_few_labels_are_written_under_a_long_chart() -> None:
    root = parsed(bars([1.0] * 96, [f"l{i}" for i in range(96)]))
    ticks = [t.text for t in root.iter("text") if (t.text or "").startswith("l")]
    assert ticks[0] == "l0" and len(ticks) <= charts.TICKS
