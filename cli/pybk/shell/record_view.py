"""How ``readjournal`` and ``readlog`` print a record: BookKeeper's line per record
(``--------- Lid=…, Eid=…, ByteOffset=…, EntrySize=… ---------``), and the same as JSON."""

from __future__ import annotations

from typing import Any

from bookie.storage.file_dump import DumpedRecord, RecordKind


def record_json(record: DumpedRecord, with_data: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": record.kind.value, "offset": record.offset, "ledger_id": record.ledger_id,
                           "size": record.size}
    if record.entry_id is not None:
        out["entry_id"] = record.entry_id
    if record.last_add_confirmed is not None:
        out["last_add_confirmed"] = record.last_add_confirmed
    if record.problem is not None:
        out["problem"] = record.problem
    if with_data:
        out["data"] = record.data.hex()
    return out


def record_lines(record: DumpedRecord, with_data: bool) -> list[str]:
    fields = {
        RecordKind.ENTRY: f"Eid={record.entry_id}, ByteOffset={record.offset}, EntrySize={record.size}",
        RecordKind.MASTER_KEY: f"MasterKey, ByteOffset={record.offset}",
        RecordKind.FENCE: f"Fence, ByteOffset={record.offset}",
        RecordKind.EXPLICIT_LAC: f"ExplicitLAC={record.last_add_confirmed}, ByteOffset={record.offset}",
    }[record.kind]
    lines = [f"--------- Lid={record.ledger_id}, {fields} ---------"]
    if record.problem is not None:
        lines.append(f"DAMAGED: {record.problem}")
    if with_data:
        if record.kind is RecordKind.ENTRY and record.last_add_confirmed is not None:
            lines.append(f"LastConfirmed : {record.last_add_confirmed}")
        label = "Data (digest, then payload)" if record.kind is RecordKind.ENTRY else "Data"
        lines.append(f"{label} : {record.data.hex()}")
    return lines
