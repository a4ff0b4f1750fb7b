"""What the shell (``pybk shell``) and the HTTP admin API (``bookie.http``) both answer, written
once: a ledger's metadata as a JSON-ready dict (and reading many of them), the cluster at a
glance, each bookie's disk space, the under-replicated ledgers, triggering an audit, and a
bookie's sanity check.

Each function works on a connected :class:`~bkclient.BookKeeper` (or its metadata) and returns
plain data; the shell prints it as text or ``--json``, the HTTP API in BookKeeper's shapes.
Passwords are never shown (``has_password`` only), as BookKeeper's ``toSafeString`` does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import os
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from bkclient.admin import BookKeeperAdmin
from bkclient.bookkeeper import BookKeeper
from bkclient.placement import BookieRacks
from bkmeta.ledger_manager import LedgerManager
from bkmeta.model import LedgerMetadata, Versioned
from bkmeta.replication_control import ReplicationControl
from bkmeta.serde import CorruptLedgerMetadataError
from bkmeta.underreplication import UnderreplicationIndex
from bkproto.errors import BKError, NoSuchLedgerError, NotEnoughBookiesError

INFO_TIMEOUT_S = 10.0  # how long one bookie may take to tell its disk space
SANITY_PASSWORD = b"bookiesanity"


def _custom_value(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()
    return text if text.isprintable() else "base64:" + base64.b64encode(raw).decode()


def _ctime(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(timespec="milliseconds")


def metadata_dict(ledger_id: int, md: LedgerMetadata) -> dict[str, Any]:
    """A ledger's metadata as JSON-ready data (no password)."""
    return {
        "ledger_id": ledger_id,
        "state": md.state.name,
        "ensemble_size": md.ensemble_size,
        "write_quorum_size": md.write_quorum_size,
        "ack_quorum_size": md.ack_quorum_size,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "digest_type": md.digest_type.name,
        "has_password": bool(md.password),
        "ctime": md.ctime,
        "ctime_iso": _ctime(md.ctime),
        "custom_metadata": {k: _custom_value(v) for k, v in sorted(md.custom_metadata.items())},
        "segments": [
            {"first_entry_id": s.first_entry_id, "bookies": list(s.bookies)} for s in md.segments
        ],
    }


async def cluster_info(bk: BookKeeper) -> dict[str, Any]:
    """BookKeeper's ``clusterinfo`` with its field names: whether an autorecovery leads and which,
    whether re-replication is enabled, whether any ledger is under-replicated (worked out from the
    metadata), and the bookies the cluster knows (by their cookies), writable, read-only and not."""
    meta = bk.ctx.metadata
    auditor = await meta.replication_control.auditor()
    known = set(await meta.cookies.bookie_ids())
    watcher = bk.ctx.bookie_watcher
    writable, readonly = set(watcher.writable_bookies()), set(watcher.readonly_bookies())
    under_replicated = bool(await BookKeeperAdmin(bk).underreplicated_ledgers())
    enabled = await meta.replication_control.is_enabled()
    known |= writable | readonly  # one being decommissioned may have lost its cookie already
    return {
        "auditorElected": auditor is not None,
        "auditorId": auditor or "",
        "clusterUnderReplicated": under_replicated,
        "ledgerReplicationEnabled": enabled,
        "totalBookiesCount": len(known),
        "writableBookiesCount": len(writable),
        "readonlyBookiesCount": len(readonly),
        "unavailableBookiesCount": len(known - writable - readonly),
    }


async def bookie_disk_space(bk: BookKeeper, timeout_s: float = INFO_TIMEOUT_S) -> list[dict[str, Any]]:
    """Each registered bookie's free and total bytes, asked of the bookie itself (GetBookieInfo);
    a bookie that does not answer in time is listed with its ``error``."""
    watcher = bk.ctx.bookie_watcher
    bookie_ids = sorted({*watcher.writable_bookies(), *watcher.readonly_bookies()})

    async def ask(bookie_id: str) -> dict[str, Any]:
        try:
            total, free = await bk.ctx.bookie(bookie_id).get_bookie_info(timeout=timeout_s)
        except BKError as exc:
            return {"bookie_id": bookie_id, "error": f"{type(exc).__name__}: {exc}"}
        return {"bookie_id": bookie_id, "free_bytes": free, "total_bytes": total}

    return list(await asyncio.gather(*(ask(b) for b in bookie_ids)))


async def underreplicated_ledgers(bk: BookKeeper) -> dict[int, set[str]]:
    """Each under-replicated ledger with the replicas it is short of: the auditor's index
    (``underreplication/ledgers``, what autorecovery found and has not repaired yet) joined with
    the ledgers whose metadata names a bookie that is gone, so that the answer is true with no
    autorecovery running. The second part reads every ledger's metadata once."""
    found = await BookKeeperAdmin(bk).underreplicated_ledgers()
    meta = bk.ctx.metadata
    for marker in await UnderreplicationIndex(meta.zk, meta.layout).markers():
        found.setdefault(marker.ledger_id, set()).update(marker.replicas)
    return found


async def trigger_audit(control: ReplicationControl) -> str | None:
    """Make the leading autorecovery re-replicate every lost bookie now (BookKeeper's
    ``triggerAudit``: the delay written again with its own value); returns why it was refused,
    as BookKeeper refuses it when nothing would act on it, or None when triggered."""
    if await control.auditor() is None:
        return "no autorecovery is leading (is pybk autorecovery running?)"
    if not await control.is_enabled():
        return "autorecovery is disabled (pybk shell autorecovery --enable)"
    if await control.trigger_audit() is None:
        return "the cluster has no lostBookieRecoveryDelay yet (its autorecovery has not started)"
    return None


class OneBookiePlacement:
    """Every ledger on one chosen bookie; never a replacement (a failure must show, not heal)."""

    def __init__(self, bookie_id: str) -> None:
        self.bookie_id = bookie_id

    def new_ensemble(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int,
        bookies: BookieRacks, exclude: Collection[str] = (),
    ) -> list[str]:
        if ensemble_size != 1:
            raise NotEnoughBookiesError(f"bookiesanity places ledgers on one bookie, not {ensemble_size}")
        if self.bookie_id not in bookies or self.bookie_id in exclude:
            raise NotEnoughBookiesError(f"{self.bookie_id} is not a writable bookie")
        return [self.bookie_id]

    def replace_bookie(
        self, ensemble: Sequence[str], index: int, write_quorum: int,
        bookies: BookieRacks, exclude: Collection[str] = (),
    ) -> str:
        raise NotEnoughBookiesError(f"bookiesanity tests {self.bookie_id} alone: no replacement")


class SanityMismatchError(RuntimeError):
    """The bookie returned entries (with valid digests) other than those written."""


async def bookie_sanity(bk: BookKeeper, bookie_id: str, entries: int, timeout_s: float) -> dict[str, Any]:
    """BookKeeper's bookie sanity test: a ledger with E = Qw = Qa = 1 on ``bookie_id`` alone,
    ``entries`` written, closed, read back, compared, deleted. ``bk`` is given over to it (its
    placement is changed): use a client of its own. Returns ``bookie_id``, ``ok``, ``error``
    when not ok, and ``elapsed_s``."""
    bk.ctx.placement = OneBookiePlacement(bookie_id)
    started = time.monotonic()
    result: dict[str, Any] = {"bookie_id": bookie_id, "ok": True}
    try:
        async with asyncio.timeout(timeout_s):
            await _write_read_delete(bk, entries)
    except (BKError, TimeoutError, SanityMismatchError) as exc:
        result = {"bookie_id": bookie_id, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["elapsed_s"] = round(time.monotonic() - started, 3)
    return result


async def _write_read_delete(bk: BookKeeper, entries: int) -> None:
    payloads = [f"bookiesanity {i} ".encode() + os.urandom(16) for i in range(entries)]
    writer = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=SANITY_PASSWORD)
    try:
        for payload in payloads:
            await writer.append(payload)
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, password=SANITY_PASSWORD, recovery=False)
        read_back = [entry.data async for entry in reader.read(0, reader.last_add_confirmed)]
        if read_back != payloads:
            raise SanityMismatchError(
                f"ledger {writer.ledger_id}: read back {len(read_back)} entries that differ "
                f"from the {len(payloads)} written"
            )
    except BaseException:
        # Clean up, but report the original failure, not a cleanup one.
        with contextlib.suppress(BKError):
            await bk.delete_ledger(writer.ledger_id)
        raise
    await bk.delete_ledger(writer.ledger_id)


# Metadata reads in flight at once when listing many ledgers: enough to hide ZooKeeper round
# trips, bounded so a cluster with a million ledgers does not queue a million requests.
METADATA_READ_CONCURRENCY = 32


async def read_metadata_many(
    manager: LedgerManager, ledger_ids: Sequence[int], on_corrupt: Callable[[int, Exception], None],
) -> list[tuple[int, Versioned[LedgerMetadata]]]:
    """The metadata of each of ``ledger_ids`` that still exists, in their order; a ledger deleted
    meanwhile is left out, one whose metadata is corrupt too, after ``on_corrupt`` (one bad znode
    must not hide the others)."""
    limit = asyncio.Semaphore(METADATA_READ_CONCURRENCY)

    async def read(ledger_id: int) -> tuple[int, Versioned[LedgerMetadata]] | None:
        async with limit:
            try:
                return ledger_id, await manager.read_ledger_metadata(ledger_id)
            except NoSuchLedgerError:
                return None  # deleted between listing and reading
            except CorruptLedgerMetadataError as exc:
                on_corrupt(ledger_id, exc)
                return None

    return [found for found in await asyncio.gather(*(read(i) for i in ledger_ids)) if found is not None]
