"""A bookie connection that refuses everything with one error, known before connecting.

The connection pool hands it out when connecting cannot work and the reason is known up front (a
TLS-only bookie, by its registration, for a client without TLS): every add completes with the
error and every call raises it, so the caller sees why instead of an unreachable bookie.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bkproto.errors import BKError

from .transport import AddListener, DiskInfo, ReadResult, StandingStridePoll, StrideResult

if TYPE_CHECKING:
    from .add_stream import AddRequestEncoder


class RefusedBookie:
    """Implements :class:`bkclient.transport.BookieConnection`; every operation fails with ``error``."""

    def __init__(self, bookie_id: str, error: BKError) -> None:
        self._bookie_id = bookie_id
        self.error = error

    @property
    def bookie_id(self) -> str:
        return self._bookie_id

    @property
    def closed(self) -> bool:
        return False

    def add_encoded(self, encoded: bytes, listener: AddListener, token: int) -> None:
        listener.add_complete(self._bookie_id, token, self.error)

    def add_bodies(
        self,
        packer: AddRequestEncoder,
        bodies: Sequence[bytes],
        listener: AddListener,
        entry_ids: Sequence[int],
    ) -> None:
        for entry_id in entry_ids:
            listener.add_complete(self._bookie_id, entry_id, self.error)

    def add(
        self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool = False
    ) -> asyncio.Future[None]:
        refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        refused.set_exception(self.error)
        # A caller that gave up on the add (the ledger failed meanwhile) need not retrieve it.
        refused.add_done_callback(asyncio.Future.exception)
        return refused

    async def read_entry(self, ledger_id: int, entry_id: int, **_: object) -> ReadResult:
        raise self.error

    async def read_entries(self, ledger_id: int, first: int, max_count: int, max_bytes: int,
                           **_: object) -> list[bytes]:
        raise self.error

    def standing_stride_poll(self, ledger_id: int, first: int, stride: int, max_count: int, max_bytes: int,
                             long_poll_timeout_ms: int) -> StandingStridePoll:
        return _Refused(self.error)

    async def write_lac(self, ledger_id: int, lac: int, master_key: bytes, body: bytes, **_: object) -> None:
        raise self.error

    async def force_ledger(self, ledger_id: int, **_: object) -> None:
        raise self.error

    async def get_bookie_info(self, **_: object) -> DiskInfo:
        raise self.error

    async def list_entries(self, ledger_id: int, **_: object) -> list[tuple[int, int]]:
        raise self.error

    async def close(self) -> None:
        return None


class _Refused:
    """A standing stride poll whose first answer is the error."""

    def __init__(self, error: BKError) -> None:
        self._error = error

    async def next(self) -> StrideResult:
        raise self._error

    def cancel(self) -> None:
        pass
