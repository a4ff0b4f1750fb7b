"""Explicit LAC: the writer stores its LAC on every bookie of the current ensemble when no later
entry carried it (BookKeeper's ``PendingWriteLacOp``), so tailing readers learn about the last
entries of an idle writer. Best effort: a bookie that fails is only logged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ..transport import BookieConnection

log = logging.getLogger(__name__)


async def write_lac_to_ensemble(
    ledger_id: int,
    ensemble: Sequence[str],
    clients: Sequence[BookieConnection],
    master_key: bytes,
    lac: int,
    body: bytes,
) -> bool:
    """WriteLac ``lac`` (``body``: its digest-protected form) to every bookie of ``ensemble``
    (``clients`` in the same order); whether at least one stored it."""
    results = await asyncio.gather(
        *(c.write_lac(ledger_id, lac, master_key, body) for c in clients), return_exceptions=True
    )
    for bookie_id, result in zip(ensemble, results, strict=True):
        if isinstance(result, BaseException):
            log.info("ledger %d: explicit LAC to %s failed: %s", ledger_id, bookie_id, result)
    return any(r is None for r in results)
