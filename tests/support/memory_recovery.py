"""Ledger recovery over the memory cluster (``tests.support.memory_cluster``): the operation under
test, and how many bookies of a write set really hold an entry once it is done."""

from __future__ import annotations

from bkclient.digest import DigestManager
from bkclient.ops.read import write_set_bookies
from bkclient.ops.recovery import LedgerRecoveryOp
from bkmeta.model import LedgerMetadata, Versioned
from tests.support.memory_cluster import LEDGER, PASSWORD, FakeContext, Writer


def recovery_op(ctx: FakeContext, writer: Writer, password: bytes = PASSWORD) -> LedgerRecoveryOp:
    """A recovery of ``writer``'s ledger (registered with the metadata store if not yet)."""
    ctx.ledger_manager.ledgers.setdefault(LEDGER, Versioned(writer.metadata, 1))
    digest = DigestManager(LEDGER, password, writer.metadata.digest_type)
    return LedgerRecoveryOp(ctx, LEDGER, password, digest)


def copies_in_write_set(ctx: FakeContext, md: LedgerMetadata, entry_id: int) -> int:
    """How many bookies the metadata names for ``entry_id`` really hold it."""
    return sum(entry_id in ctx.bookies[b].entries.get(LEDGER, {}) for b in write_set_bookies(md, entry_id))
