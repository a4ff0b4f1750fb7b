"""Ledger id generation from ZooKeeper sequence numbers (``ZkLedgerIdGenerator`` and
``LongZkLedgerIdGenerator``).

Short scheme: create an EPHEMERAL_SEQUENTIAL ``/ledgers/idgen/ID-`` node; its 10-digit sequence
number is the id; delete the node right away (ZooKeeper keeps counting in the parent's cversion).

Long scheme, once the short counter reaches ``Integer.MAX_VALUE`` (ZooKeeper sequence numbers are
signed 32-bit) or once ``/ledgers/idgen-long`` exists: the id is ``(high << 32) | low`` where ``high``
is the highest ``/ledgers/idgen-long/HOB-<high>`` directory and ``low`` the sequence number of an
``ID-`` node created under it. When ``low`` would overflow, the next ``HOB-`` directory is created.
Long ids start at ``2^32`` (HOB 1), above every id the short scheme can hand out.

Batching: the ids that callers ask for while an allocation is in flight are allocated together,
by one ZooKeeper multi of that many ``ID-`` creates (and their deletes by one multi in the
background), instead of one create and one delete each. Each id is still the sequence number of
an ``ID-`` node of its own, so BookKeeper's clients sharing the cluster (which create single
``ID-`` nodes) never get an id handed out here; no id is taken ahead of a caller asking for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bkmeta.layout import HOB_PREFIX, IDGEN_PREFIX, INT_MAX, ZkLayout
from bkmeta.store import (
    CREATE_EPHEMERAL_SEQUENTIAL,
    MetadataStore,
    TransactionOp,
    ZkNodeExistsError,
    ZkNoNodeError,
)
from bkproto.errors import MetadataStoreError

log = logging.getLogger(__name__)

# Ids allocated by one multi at most (a multi is one ZooKeeper request, bounded by jute.maxbuffer).
MAX_IDS_PER_REQUEST = 256


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
        self._waiting: list[asyncio.Future[int]] = []
        self._allocator: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    async def generate(self) -> int:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        if self._allocator is None:
            self._allocator = asyncio.ensure_future(self._allocate_for_waiters())
        return await fut

    async def _allocate_for_waiters(self) -> None:
        """Serve the callers waiting, a batch per ZooKeeper request, until none are left."""
        try:
            while self._waiting:
                batch = self._waiting[:MAX_IDS_PER_REQUEST]
                del self._waiting[:MAX_IDS_PER_REQUEST]
                try:
                    ids = await self._allocate(len(batch))
                except Exception as e:  # noqa: BLE001 - every caller of the batch hears it
                    for fut in batch:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for fut, ledger_id in zip(batch, ids, strict=True):
                    if not fut.done():  # a caller that gave up leaves its id unused
                        fut.set_result(ledger_id)
        finally:
            self._allocator = None
            for fut in self._waiting:  # only when cancelled (the loop is closing)
                fut.cancel()
            self._waiting.clear()

    async def _allocate(self, count: int) -> list[int]:
        if self._long_mode is None:
            self._long_mode = await self._zk.exists(self._layout.idgen_long) is not None
        ids: list[int] = []
        if not self._long_mode:
            # Sequence numbers of one multi are consecutive: the usable ones are a prefix.
            ids = [i for i in await self._next_sequences(self._layout.idgen, count) if i < INT_MAX]
            if len(ids) == count:
                return ids
            log.info("short ledger ids exhausted at %d: switching to the long id scheme", INT_MAX)
            self._long_mode = True
        while len(ids) < count:
            ids.extend(await self._generate_long(count - len(ids)))
        return ids

    async def _next_sequences(self, parent: str, count: int) -> list[int]:
        prefix_path = f"{parent}/{IDGEN_PREFIX}"
        try:
            created = await self._create_id_nodes(prefix_path, count)
        except ZkNoNodeError:
            await self._zk.ensure_path(parent)
            created = await self._create_id_nodes(prefix_path, count)
        # The ids are ours once the nodes exist; deleting them needs no wait (BookKeeper does not
        # wait either). If a delete is lost, the ephemeral goes with the session.
        self._delete_in_background(created)
        return [_sequence_of(path, IDGEN_PREFIX) for path in created]

    async def _create_id_nodes(self, prefix_path: str, count: int) -> list[str]:
        if count == 1:
            return [await self._zk.create(prefix_path, b"", ephemeral=True, sequence=True)]
        ops: list[TransactionOp] = [(CREATE_EPHEMERAL_SEQUENTIAL, prefix_path, b"", -1)] * count
        return await self._zk.multi(ops)

    def _delete_in_background(self, paths: list[str]) -> None:
        if len(paths) == 1:
            self._zk.delete_nowait(paths[0])
            return

        async def delete_all() -> None:
            try:
                await self._zk.multi([("delete", path, b"", -1) for path in paths])
            except MetadataStoreError:  # one already gone fails them all: delete one by one
                for path in paths:
                    self._zk.delete_nowait(path)

        task = asyncio.ensure_future(delete_all())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _generate_long(self, count: int) -> list[int]:
        while True:
            high = self._high if self._high is not None else await self._highest_hob()
            self._high = high
            lows = await self._next_sequences(self._layout.idgen_long_hob(high), count)
            ids = [(high << 32) | low for low in lows if low < INT_MAX]
            if len(ids) == count:
                return ids
            # This HOB directory's counter is used up: move to the next one (another client may
            # have created it already).
            self._high = high + 1
            with contextlib.suppress(ZkNodeExistsError):
                await self._zk.create(self._layout.idgen_long_hob(high + 1), b"", makepath=True)
            if ids:
                return ids

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
