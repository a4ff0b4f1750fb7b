"""A restart replays the journal from its mark without reading the whole file into memory: a
journal file grows to journalMaxSizeMB (2 GiB by default) before it rolls, and a bookie that
read it whole at every start needed that much memory on top of everything else."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from bookie.storage.journal_format import RecordType, file_header, file_name, record

FILE_BYTES = 1 << 30  # a journal file near its roll size: sparse, so the test writes little
TAIL_RECORDS = 100


def test_replay_from_a_mark_near_the_end_of_a_big_file_touches_only_the_tail(tmp_path: Path) -> None:
    current = tmp_path / "current"
    current.mkdir()
    path = current / file_name(7)
    mark = FILE_BYTES - 64 * 1024
    with open(path, "wb") as f:
        f.write(file_header(7))
        f.truncate(FILE_BYTES)  # the hole reads as zeros, as the zero-filled area does
        f.seek(mark)
        for i in range(TAIL_RECORDS):
            f.write(record(RecordType.FENCE, i.to_bytes(8, "big")))
    script = textwrap.dedent(f"""
        import resource, sys
        from pathlib import Path
        from bookie.api import LogMark
        from bookie.storage.journal import Journal, JournalSettings
        from bookie.storage.stats import StorageStats
        from prometheus_client import CollectorRegistry
        directory = Path({str(current)!r})
        settings = JournalSettings(directory, 1 << 20, 1 << 31, 5, 1000, 0.0, 1 << 20, True, True)
        journal = Journal(settings, StorageStats(CollectorRegistry()))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        count = sum(1 for _ in journal.replay(LogMark(7, {mark})))
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        print(count, grown_mib)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    count, grown_mib = done.stdout.split()
    assert int(count) == TAIL_RECORDS
    assert float(grown_mib) < 64, f"replay grew the process by {grown_mib} MiB for a 1 GiB file"
