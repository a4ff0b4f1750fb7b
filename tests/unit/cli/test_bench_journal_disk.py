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
        (["--time", "0"], "argument --time: must be > 0, got 0"),
        (["--size", "-1"], "argument --size: must be >= 1, got -1"),
        (["--size", str(1 << 30)], "argument --size: must be at most"),
        (["--interval-ms", "-1"], "argument --interval-ms: must be >= 0, got -1"),
        (["--stall-ms", "0"], "argument --stall-ms: must be > 0, got 0"),
    ],
)
def test_bad_arguments_are_named(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "journal-disk", "--dir", str(tmp_path), *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_directory_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "journal-disk", "--dir", str(tmp_path / "nope")])
    assert info.value.code == 2
    assert "is not a directory" in capsys.readouterr().err
