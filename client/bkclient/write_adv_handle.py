"""A ledger written with caller-chosen entry ids (BookKeeper's ledger-adv): :class:`WriteAdvHandle`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bkproto.errors import DuplicateEntryIdError

from .ops.add import AddCompletion
from .write_handle import WriteHandle


class WriteAdvHandle(WriteHandle):
    """A ledger written with caller-chosen entry ids (BookKeeper's ledger-adv). Entries may be
    written in any order; completion (and the LAC) still advance strictly in id order."""

    def append_async(self, data: bytes) -> asyncio.Future[int]:
        raise DuplicateEntryIdError("a ledger-adv handle needs explicit entry ids: use write()")

    def append_with_callback(self, data: bytes, callback: AddCompletion) -> int:
        raise DuplicateEntryIdError("a ledger-adv handle needs explicit entry ids: use write()")

    async def append(self, data: bytes) -> int:
        raise DuplicateEntryIdError("a ledger-adv handle needs explicit entry ids: use write()")

    def append_batch_async(self, payloads: Sequence[bytes]) -> asyncio.Future[int]:
        raise DuplicateEntryIdError("a ledger-adv handle needs explicit entry ids: use write()")

    async def append_batch(self, payloads: Sequence[bytes]) -> int:
        raise DuplicateEntryIdError("a ledger-adv handle needs explicit entry ids: use write()")

    def write_async(self, entry_id: int, data: bytes) -> asyncio.Future[int]:
        self._check_new_entry(entry_id)
        future: asyncio.Future[int] = self._client_ctx.loop.create_future()
        self._add(entry_id, data, future, None)
        return future

    def write_with_callback(self, entry_id: int, data: bytes, callback: AddCompletion) -> None:
        self._check_new_entry(entry_id)
        self._add(entry_id, data, None, callback)

    def _check_new_entry(self, entry_id: int) -> None:
        self._check_writable()
        if entry_id < 0:
            raise DuplicateEntryIdError(f"entry id must be >= 0, got {entry_id}")
        if entry_id <= self.last_add_confirmed or entry_id in self._pending:
            raise DuplicateEntryIdError(f"ledger {self.ledger_id}: entry {entry_id} was already written")

    async def write(self, entry_id: int, data: bytes) -> int:
        async with self._append_lock:
            await self.wait_writable()
            future = self.write_async(entry_id, data)
        return await future
