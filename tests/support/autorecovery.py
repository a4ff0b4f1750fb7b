"""What a running ``pybk autorecovery`` process shows: its Prometheus samples, and which bookie
entries a ledger's replicas can serve (asked of each bookie, as the auditor's ledger check does)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from autorecovery.checks import expected_entries
from bkclient import BookKeeper
from bkmeta.model import LedgerMetadata
from bkproto.errors import NoSuchLedgerError


def service_metrics(log_path: Path, prefixes: tuple[str, ...] = ("autorecovery_", "auditor_",
                                                                  "replication_worker_")) -> dict[str, float]:
    """The service's Prometheus samples whose names start with one of ``prefixes`` (its port is
    in its log)."""
    port = re.search(r"metrics on http port (\d+)", log_path.read_text())
    assert port is not None, log_path.read_text()
    with urllib.request.urlopen(f"http://127.0.0.1:{port[1]}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return {name: float(value) for name, _, value in (line.partition(" ") for line in lines)
            if name.startswith(prefixes)}


async def served_entries(bk: BookKeeper, ledger_id: int, bookie_id: str) -> set[int]:
    """The entry ids ``bookie_id`` says it can serve for the ledger (GetListOfEntriesOfLedger)."""
    try:
        runs = await bk.ctx.bookie(bookie_id).list_entries(ledger_id)
    except NoSuchLedgerError:
        return set()
    return {e for first, last in runs for e in range(first, last + 1)}


def should_hold(md: LedgerMetadata, bookie_id: str) -> set[int]:
    """The entries of closed ``md`` its striping puts on ``bookie_id``."""
    return set(expected_entries(md, bookie_id, md.last_entry_id))
