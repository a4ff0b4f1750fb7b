"""Ledger id generation from ZooKeeper sequence numbers (``ZkLedgerIdGenerator`` and
``LongZkLedgerIdGenerator``).

Short scheme: create an EPHEMERAL_SEQUENTIAL ``/ledgers/idgen/ID-`` node; its 10-digit sequence
number is the id; delete the node right away (ZooKeeper keeps counting in the parent's cversion).

Long scheme, once the short counter reaches ``Integer.MAX_VALUE`` (ZooKeeper sequence numbers are
signed 32-bit) or once ``/ledgers/idgen-long`` exists: the id is ``(high << 32) | low`` where ``high``
is the highest ``/ledgers/idgen-long/HOB-<high>`` directory and ``low`` the sequence number of an
``ID-`` node created under it. When ``low`` would overflow, the next ``HOB-`` directory is created.
Long ids start at ``2^32`` (HOB 1), above every id the short scheme can hand out.
"""

from __future__ import annotations

import contextlib
import logging

from bkmeta.layout import HOB_PREFIX, IDGEN_PREFIX, INT_MAX, ZkLayout
from bkmeta.store import MetadataStore, ZkNodeExistsError, ZkNoNodeError
from bkproto.errors import MetadataStoreError

log = logging.getLogger(__name__)


def _sequence_of(created_path: str, prefix: str) -> int:
    name = created_path.rsplit("/", 1)[-1]
    if not name.startswith(prefix):
        raise MetadataStoreError(f"unexpected id node name {created_path!r}")
    return int(name[len(prefix) :])


class LedgerIdGenerator:
    """Hands out unique ledger ids; safe to use from many clients and coroutines at once."""

    def __init__(self, zk: MetadataStore, layout: ZkLayout) -> None:
        self._zk = zk
        self._layout = layout
        self._long_mode: bool | None = None  # decided on first use, then sticky
        self._high: int | None = None

    async def generate(self) -> int:
        if self._long_mode is None:
            self._long_mode = await self._zk.exists(self._layout.idgen_long) is not None
        if not self._long_mode:
            ledger_id = await self._next_sequence(self._layout.idgen)
            if ledger_id < INT_MAX:
                return ledger_id
            log.info("short ledger ids exhausted at %d: switching to the long id scheme", ledger_id)
            self._long_mode = True
        return await self._generate_long()

    async def _next_sequence(self, parent: str) -> int:
        prefix_path = f"{parent}/{IDGEN_PREFIX}"
        try:
            created = await self._zk.create(prefix_path, b"", ephemeral=True, sequence=True)
        except ZkNoNodeError:
            await self._zk.ensure_path(parent)
            created = await self._zk.create(prefix_path, b"", ephemeral=True, sequence=True)
        # The id is ours once the node exists; deleting it needs no wait (BookKeeper does not wait
        # either). If the delete is lost, the ephemeral goes with the session.
        self._zk.delete_nowait(created)
        return _sequence_of(created, IDGEN_PREFIX)

    async def _generate_long(self) -> int:
        while True:
            high = self._high if self._high is not None else await self._highest_hob()
            self._high = high
            low = await self._next_sequence(self._layout.idgen_long_hob(high))
            if low < INT_MAX:
                return (high << 32) | low
            # This HOB directory's counter is used up: move to the next one (another client may
            # have created it already).
            self._high = high + 1
            with contextlib.suppress(ZkNodeExistsError):
                await self._zk.create(self._layout.idgen_long_hob(high + 1), b"", makepath=True)

    async def _highest_hob(self) -> int:
        try:
            children = await self._zk.get_children(self._layout.idgen_long)
        except ZkNoNodeError:
            children = []
        highs = [int(c[len(HOB_PREFIX) :]) for c in children if c.startswith(HOB_PREFIX)]
        if highs:
            return max(highs)
        with contextlib.suppress(ZkNodeExistsError):
            await self._zk.create(self._layout.idgen_long_hob(1), b"", makepath=True)
        return 1
