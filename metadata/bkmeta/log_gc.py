"""Garbage of a named log: ledgers made for it that no commit will ever name.

Writers clean up after themselves (a failed task discards its ledger, a commit or an abort
deletes what its write left pending), but a process can die at any step. What can be left:

- a ledger still *pending* because the driver died before committing or aborting its write;
- an *untracked* ledger, tagged with the log's path but neither pending nor committed: its
  writer died between creating it and registering it, or an overwrite's clean-up died before
  deleting the ledgers it replaced.

Both are found only once older than ``min_age_s``: a write in progress looks the same. A pending
znode is removed before its ledger, so a late commit of that write fails (its transaction needs
the znode) instead of naming a deleted ledger.

The markers of aborted writes (``aborted/<write>``) go too, by the same age, once no ledger of
their write is pending. Not sooner: a task of an aborted write may register its ledger at any
time after the abort (a stalled executor), and the marker is what makes it delete that ledger;
removing the marker right after the abort's sweep would reopen that window. After the marker
goes, a task later still leaves a pending ledger that this collection removes once it is
``min_age_s`` old: what it does for a write whose driver died, so the window is no wider than
the one garbage collection already accepts.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from bkmeta.ledger_manager import LedgerManager
from bkmeta.named_log import LOG_NAME_KEY, WRITE_ID_KEY, LogStore
from bkproto.errors import IncorrectParameterError, NoSuchLedgerError

PENDING = "pending"
UNTRACKED = "untracked"


@dataclass(frozen=True)
class StaleMarker:
    write_id: str  # an aborted write
    age_s: float  # since its abort


@dataclass(frozen=True)
class LogGarbage:
    ledger_id: int
    write_id: str
    kind: str  # PENDING or UNTRACKED
    age_s: float


async def find_garbage(
    store: LogStore, ledgers: LedgerManager, name: str, *, min_age_s: float, now_s: float | None = None
) -> list[LogGarbage]:
    """The log's pending and untracked ledgers older than ``min_age_s``, by ledger id."""
    if min_age_s < 0:
        raise IncorrectParameterError(f"minimum age must be >= 0 seconds, got {min_age_s}")
    now_ms = (time.time() if now_s is None else now_s) * 1000.0
    # Pending before commits: a ledger only ever moves from pending to committed, so one that
    # is in neither list after these two reads (in this order) can never be committed.
    pending = await store.pending(name)
    committed = await _committed(store, name)
    found = [
        LogGarbage(ledger_id, p.write_id, PENDING, (now_ms - p.created_ms) / 1000.0)
        for ledger_id, p in pending.items()
        if now_ms - p.created_ms >= min_age_s * 1000.0
    ]
    tag = store.path(name).encode()
    for ledger_id in await ledgers.list_ledgers():
        if ledger_id in committed or ledger_id in pending:
            continue
        try:
            md = (await ledgers.read_ledger_metadata(ledger_id)).value
        except NoSuchLedgerError:
            continue  # deleted meanwhile
        if md.custom_metadata.get(LOG_NAME_KEY) != tag or now_ms - md.ctime < min_age_s * 1000.0:
            continue
        write_id = md.custom_metadata.get(WRITE_ID_KEY, b"").decode(errors="replace")
        found.append(LogGarbage(ledger_id, write_id, UNTRACKED, (now_ms - md.ctime) / 1000.0))
    return sorted(found, key=lambda g: g.ledger_id)


async def remove_garbage(
    store: LogStore, ledgers: LedgerManager, name: str, garbage: list[LogGarbage]
) -> list[LogGarbage]:
    """Delete the ledgers found; returns those deleted (one committed since is kept)."""
    removed = []
    pending = await store.pending(name)
    committed = await _committed(store, name)
    for item in garbage:
        if item.kind == PENDING and not await store.claim_pending(name, item.ledger_id):
            continue  # committed (or cleaned up) since it was found
        if item.kind == UNTRACKED and (item.ledger_id in committed or item.ledger_id in pending):
            continue  # registered since (only a write younger than the minimum age can be)
        with contextlib.suppress(NoSuchLedgerError):
            await ledgers.remove_ledger_metadata(item.ledger_id)
        removed.append(item)
    return removed


async def find_stale_markers(
    store: LogStore, name: str, *, min_age_s: float, now_s: float | None = None
) -> list[StaleMarker]:
    """The markers of writes aborted at least ``min_age_s`` ago that have no ledger pending
    (one that has is kept until a later collection: its ledger goes first), by write id."""
    if min_age_s < 0:
        raise IncorrectParameterError(f"minimum age must be >= 0 seconds, got {min_age_s}")
    now_ms = (time.time() if now_s is None else now_s) * 1000.0
    markers = await store.aborted_writes(name)
    writing = {p.write_id for p in (await store.pending(name)).values()}
    return sorted(
        (StaleMarker(write_id, (now_ms - created_ms) / 1000.0)
         for write_id, created_ms in markers.items()
         if now_ms - created_ms >= min_age_s * 1000.0 and write_id not in writing),
        key=lambda m: m.write_id,
    )


async def remove_stale_markers(store: LogStore, name: str, markers: list[StaleMarker]) -> list[StaleMarker]:
    """Remove the markers found; returns those removed (one whose write registered a ledger
    since is kept: that ledger still has to meet the marker and go)."""
    writing = {p.write_id for p in (await store.pending(name)).values()}
    return [m for m in markers if m.write_id not in writing and await store.forget_aborted(name, m.write_id)]


async def _committed(store: LogStore, name: str) -> set[int]:
    return {seg.ledger_id for commit in await store.commits(name) for seg in commit.segments}
