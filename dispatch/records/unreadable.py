"""Records in Redis that do not decode: listed as unreadable, so a listing goes on past them.

A listing reads what every host and every release wrote. One record that a bug, a hand edit or
a release from the future left undecodable must cost the operator that one row, not the whole
`dispatch jobs` or `dispatch runs`; the row says which record it was and why.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from dispatch.model import RunRecord, one_line

# as records/disk_log.py decodes them; not imported from there, which loads asyncio for the
# daemon's writer: `dispatch jobs` lists through this module and loads no event loop
_decode_record = msgspec.json.Decoder(RunRecord).decode

UNREADABLE = "unreadable"  # the state a listing gives a job whose fields do not decode
_DETAIL_CAP = 200


@dataclass(frozen=True)
class Unreadable:
    queue: str
    id: str  # the job id, or a run record's run id (`<job>#<attempt>`)
    detail: str  # which record, and what the decoder said, on one line

    def as_json(self) -> dict[str, str]:
        return {"id": self.id, "queue": self.queue, "state": UNREADABLE, "detail": self.detail}


def detail(what: str, exc: Exception) -> str:
    return one_line(f"{what}: {exc}")[:_DETAIL_CAP]


def run_record(queue: str, run_id: str, raw: bytes | str) -> RunRecord | Unreadable:
    try:
        return _decode_record(raw)
    except ValueError as exc:  # msgspec's decode and validation errors are ValueErrors
        return Unreadable(queue, run_id, detail("run record", exc))
