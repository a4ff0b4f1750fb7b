"""How the shell shows ledgers and entries: JSON-ready dicts and text lines, passwords never shown."""

from __future__ import annotations

import base64
import json

from bkclient import DigestType, LedgerEntry, LedgerMetadata, LedgerState, Segment
from bkclient.admin_views import metadata_dict
from pybk.shell.ledger_view import TEXT_PREVIEW_BYTES, entry_dict, entry_line, metadata_lines


def sample_metadata() -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, state=LedgerState.CLOSED,
        last_entry_id=41, length=4200, digest_type=DigestType.CRC32C, password=b"top secret",
        ctime=1_700_000_000_123, custom_metadata={"app": b"orders", "blob": b"\x00\xff"},
        segments=(
            Segment(0, ("b1:3181", "b2:3181", "b3:3181")),
            Segment(20, ("b1:3181", "b4:3181", "b3:3181")),
        ),
    )


def test_metadata_dict_is_json_and_hides_the_password() -> None:
    data = metadata_dict(7, sample_metadata())
    text = json.dumps(data)
    assert "top secret" not in text and data["has_password"] is True
    assert data["state"] == "CLOSED" and data["digest_type"] == "CRC32C"
    assert data["ctime_iso"] == "2023-11-14T22:13:20.123+00:00"
    blob = "base64:" + base64.b64encode(b"\x00\xff").decode()
    assert data["custom_metadata"] == {"app": "orders", "blob": blob}
    assert [s["first_entry_id"] for s in data["segments"]] == [0, 20]
    assert data["segments"][1]["bookies"] == ["b1:3181", "b4:3181", "b3:3181"]


def test_metadata_lines_name_every_ensemble() -> None:
    lines = metadata_lines(metadata_dict(7, sample_metadata()))
    assert lines[0] == "ledgerID: 7"
    assert "  ensemble from entry 20: b1:3181, b4:3181, b3:3181" in lines
    assert not any("top secret" in line for line in lines)


def test_entries_round_trip_through_json_and_preview_as_text_or_hex() -> None:
    binary = LedgerEntry(7, 3, bytes(range(256)))
    data = entry_dict(binary)
    assert base64.b64decode(data["data_base64"]) == binary.data and data["length"] == 256
    line = entry_line(binary)
    assert line.startswith("entry 3 (256 bytes): 000102") and line.endswith(" ...")
    assert len(line) < 40 + 2 * TEXT_PREVIEW_BYTES
    assert entry_line(LedgerEntry(7, 4, b"hello")) == "entry 4 (5 bytes): 'hello'"
