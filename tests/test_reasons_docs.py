"""The table of gates, reasons and re-check delays: generated from the catalogue, in the docs as
generated, in the order of the pipeline, and leaving no reason out."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from dispatch import reasons
from dispatch.gates import pipeline as gate_pipeline
from dispatch.gates.base import SCOPE_DELAY_MS, WAIT_THROTTLE_DELAY_MS
from dispatch.reasons import (
    CHAINED,
    COMPLETED,
    ENTRIES,
    SCOPE_FOLDER,
    SCOPE_PROJECT,
    SCOPE_REPO,
    STAGES,
    WAIT_ABORTED,
    delay_ms,
    given_by,
    markdown,
    max_delay_ms,
    recheck,
    region,
    waits_or_refuses,
    with_table,
)

DOCS = Path(__file__).parent.parent / "docs" / "operating" / "waiting.md"
# each gate's construction in `pipeline()`, in order: `HeadGate(),` `*([SpendGate(...)] ...`
GATE_CALL = re.compile(r"\b(\w+Gate)\(")


def test_the_docs_show_the_table_as_generated() -> None:
    hint = "regenerate: python -m dispatch.reasons --markdown --write docs/operating/waiting.md"
    assert region(DOCS.read_text()).strip() == markdown().strip(), hint


def test_the_numbered_stages_are_the_gates_in_pipeline_order() -> None:
    classes = GATE_CALL.findall(inspect.getsource(gate_pipeline.pipeline))
    names = [getattr(gate_pipeline, cls).name for cls in classes]
    assert [stage.gate for stage in STAGES if stage.gate] == names


def test_every_reason_a_job_waits_or_is_refused_for_has_a_row() -> None:
    shown = {r.token for stage in STAGES for r in given_by(stage)}
    assert {r.token for r in ENTRIES if waits_or_refuses(r)} == shown
    assert len({stage.source for stage in STAGES}) == len(STAGES)


def test_every_deferral_says_when_it_is_looked_at_again() -> None:
    for entry in ENTRIES:
        said = recheck(entry)
        assert "{" not in said and "}" not in said, entry
        assert (said != "-") == (entry.kind == "defer" or entry.delay_ms is not None), entry


def test_one_delay_serves_what_one_gate_constant_serves() -> None:
    assert {delay_ms(t) for t in (SCOPE_FOLDER, CHAINED, SCOPE_REPO, SCOPE_PROJECT)} == {
        SCOPE_DELAY_MS
    }
    assert delay_ms(WAIT_ABORTED) == WAIT_THROTTLE_DELAY_MS


def test_a_reason_without_a_delay_has_none_to_read() -> None:
    with pytest.raises(LookupError):
        delay_ms(COMPLETED)
    with pytest.raises(LookupError):
        max_delay_ms(SCOPE_FOLDER)


def test_writing_the_table_replaces_only_its_region(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n<!-- reasons:begin -->\nold\n<!-- reasons:end -->\n\nAfter.\n")
    assert reasons.main(["--markdown", "--write", str(page)]) == 0
    written = page.read_text()
    assert region(written).strip() == markdown().strip()
    assert written.startswith("# Title\n\n<!-- reasons:begin -->\n\n| # | gate |")
    assert written.endswith("|\n\n<!-- reasons:end -->\n\nAfter.\n")
    assert with_table(written) == written


def test_a_page_without_the_markers_is_left_alone(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# no table here\n")
    with pytest.raises(SystemExit, match="reasons:begin"):
        reasons.main(["--markdown", "--write", str(page)])
    assert page.read_text() == "# no table here\n"


def test_the_table_is_printed_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert reasons.main(["--markdown"]) == 0
    assert capsys.readouterr().out == markdown()
