"""Where a ledger's entries really are, asked of each bookie the metadata names for them."""

from __future__ import annotations

import asyncio

from bkclient import BookKeeper
from bkclient.digest import DigestManager
from bkclient.ops.read import write_set_bookies
from bkmeta.model import LedgerMetadata
from bkproto.errors import NoSuchEntryError, NoSuchLedgerError


async def holders(
    bk: BookKeeper, ledger_id: int, md: LedgerMetadata, entry_id: int, skip: str | None = None
) -> list[str]:
    """The bookies of ``entry_id``'s write set in ``md`` (but ``skip``, say a paused one: it
    would not answer) that hold a copy whose digest verifies."""
    digest = DigestManager(ledger_id, md.password, md.digest_type)

    async def holds(bookie_id: str) -> bool:
        try:
            result = await bk.ctx.bookie(bookie_id).read_entry(ledger_id, entry_id)
        except (NoSuchEntryError, NoSuchLedgerError):
            return False
        digest.verify_entry(entry_id, result.body)
        return True

    write_set = [b for b in write_set_bookies(md, entry_id) if b != skip]
    found = await asyncio.gather(*(holds(b) for b in write_set))
    return [b for b, held in zip(write_set, found, strict=True) if held]


async def short_of_ack_quorum(bk: BookKeeper, ledger_id: int, md: LedgerMetadata) -> list[int]:
    """The entries up to ``md.last_entry_id`` held by fewer than Qa bookies of their write set."""
    short: list[int] = []
    batch = 64  # reads in flight
    for first in range(0, md.last_entry_id + 1, batch):
        ids = range(first, min(first + batch, md.last_entry_id + 1))
        counts = await asyncio.gather(*(holders(bk, ledger_id, md, e) for e in ids))
        short += [e for e, held in zip(ids, counts, strict=True) if len(held) < md.ack_quorum_size]
    return short
