"""``pybk shell lastmark`` against a bookie's real HTTP endpoint: one line per bookie, one mark per
journal dir when the bookie has several."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from bkmeta import BookieServiceInfo
from bookie.api import JournalMark, LogMark
from bookie.http import BookieHttpServer
from pybk.shell.cmd_lastmark import _describe, _mark


async def _ask(marks: list[JournalMark]) -> dict[str, object]:
    server = BookieHttpServer(CollectorRegistry(), "127.0.0.1", 0, last_log_marks=lambda: marks)
    port = server.start()
    try:
        info = BookieServiceInfo.for_address("127.0.0.1", 3181, http_host="127.0.0.1", http_port=port)
        return await _mark(info)
    finally:
        server.close()


async def test_one_journal_prints_its_mark() -> None:
    mark = await _ask([JournalMark(Path("/data/journal"), LogMark(5, 4096))])
    assert (mark["journal_id"], mark["offset"]) == (5, 4096)
    assert _describe(mark) == "LastLogMark: journal 5, offset 4096"


async def test_several_journals_print_each_mark_with_its_dir() -> None:
    mark = await _ask([JournalMark(Path("/j0"), LogMark(3, 512)), JournalMark(Path("/j1"), LogMark(1, 64))])
    assert mark["journals"] == [
        {"journal_dir": "/j0", "journal_id": 3, "offset": 512},
        {"journal_dir": "/j1", "journal_id": 1, "offset": 64},
    ]
    assert _describe(mark) == "LastLogMark: journal 3, offset 512 in /j0; journal 1, offset 64 in /j1"


async def test_a_bookie_without_http_is_reported_not_asked() -> None:
    mark = await _mark(BookieServiceInfo.for_address("127.0.0.1", 3181))
    assert _describe(mark).startswith("unavailable (the bookie registered no HTTP endpoint")
