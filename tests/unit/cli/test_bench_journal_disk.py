"""``pybk bench journal-disk`` against a real directory: real writes, real fdatasync."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pybk.main import main


def test_reports_sync_latency_and_stall_time_and_cleans_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["bench", "journal-disk", "--dir", str(tmp_path), "--time", "0.3", "--size", "512", "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["entries"] > 0  # one per synced write
    assert report["errors"] == 0
    assert 0 < report["latency_ms"]["p50"] <= report["latency_ms"]["max"]
    assert report["size"] == 512
    assert report["stall_ms"] == 20.0
    assert 0 <= report["stalls"] <= report["entries"]
    assert 0.0 <= report["stalled_time_pct"] <= 100.0
    assert list(tmp_path.iterdir()) == []  # the probe file is removed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--time", "0"], "--time must be > 0"),
        (["--size", "-1"], "--size must be > 0"),
        (["--interval-ms", "-1"], "--interval-ms must be >= 0"),
        (["--stall-ms", "0"], "--stall-ms must be > 0"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        main(["bench", "journal-disk", "--dir", str(tmp_path), *argv])


def test_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="is not a directory"):
        main(["bench", "journal-disk", "--dir", str(tmp_path / "nope")])
