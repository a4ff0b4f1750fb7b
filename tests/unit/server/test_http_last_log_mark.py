"""The bookie's ``GET /api/v1/bookie/last_log_mark`` route, read by ``pybk shell lastmark``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from tests.support.admin_http import status_and_body

from bookie.api import JournalMark, LogMark
from bookie.http import BookieHttpServer

ROUTE = "/api/v1/bookie/last_log_mark"


def test_last_log_mark_is_served_as_json_and_follows_the_core() -> None:
    marks = [[JournalMark(Path("/j"), LogMark(journal_id=7, offset=4096))]]
    server = BookieHttpServer(CollectorRegistry(), "127.0.0.1", 0, last_log_marks=lambda: marks[-1])
    port = server.start()
    try:
        status, body = status_and_body(port, ROUTE)
        assert status == 200
        assert json.loads(body) == {
            "journal_id": 7,
            "offset": 4096,
            "journals": [{"journal_dir": "/j", "journal_id": 7, "offset": 4096}],
        }
        marks.append([JournalMark(Path("/j"), LogMark(journal_id=8, offset=0))])
        later = json.loads(status_and_body(port, ROUTE)[1])
        assert later["journals"] == [{"journal_dir": "/j", "journal_id": 8, "offset": 0}]
    finally:
        server.close()


def test_several_journals_each_answer_with_their_dir() -> None:
    marks = [JournalMark(Path("/j0"), LogMark(3, 512)), JournalMark(Path("/j1"), LogMark(1, 64))]
    server = BookieHttpServer(CollectorRegistry(), "127.0.0.1", 0, last_log_marks=lambda: marks)
    port = server.start()
    try:
        answer = json.loads(status_and_body(port, ROUTE)[1])
        assert (answer["journal_id"], answer["offset"]) == (3, 512)  # the first journal's
        assert answer["journals"] == [
            {"journal_dir": "/j0", "journal_id": 3, "offset": 512},
            {"journal_dir": "/j1", "journal_id": 1, "offset": 64},
        ]
    finally:
        server.close()


@pytest.mark.parametrize("path", [ROUTE, "/api/v1/bookie/nothing"])
def test_without_a_core_the_route_is_not_found(path: str) -> None:
    server = BookieHttpServer(CollectorRegistry(), "127.0.0.1", 0)
    port = server.start()
    try:
        assert status_and_body(port, path)[0] == 404
    finally:
        server.close()
