"""An add-stream call whose answers a test gives by hand, for the tests of the client's
``AddStream`` (what it sends, and how it completes its adds from each answer), and a listener
that records how each add completed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from bkproto.add_port import FRAME_HEADER
from bkproto.errors import BKError
from bkproto.v1 import bookie_pb2


class ScriptedAddCall:
    """The grpc.aio stream call's shape (``write``, ``read``, ``cancel``): each written message is
    kept, parsed; ``read`` gives the answers queued by :meth:`answer`."""

    def __init__(self) -> None:
        self.sent: list[bookie_pb2.AddEntriesRequest] = []
        self.got_message = asyncio.Event()
        self._answers: asyncio.Queue[bookie_pb2.AddEntriesResponse] = asyncio.Queue()
        self.cancelled = False

    async def write(self, message: bytes) -> None:
        self.sent.append(bookie_pb2.AddEntriesRequest.FromString(message))
        self.got_message.set()

    async def read(self) -> Any:
        return await self._answers.get()

    def answer(self, response: bookie_pb2.AddEntriesResponse) -> None:
        self._answers.put_nowait(response)

    def cancel(self) -> None:
        self.cancelled = True


class CompletionLog:
    """Each completion call in order: ``("all", tokens)`` for ``adds_completed``, ``(token,
    error class name or None)`` for ``add_complete``; :meth:`wait` until ``count`` adds are done."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []
        self.done = 0
        self._changed = asyncio.Event()

    def add_complete(self, bookie_id: str, token: int, error: BKError | None) -> None:
        self.calls.append((token, None if error is None else type(error).__name__))
        self._count(1)

    def adds_completed(self, bookie_id: str, tokens: Sequence[int]) -> None:
        self.calls.append(("all", list(tokens)))
        self._count(len(tokens))

    def _count(self, adds: int) -> None:
        self.done += adds
        self._changed.set()

    async def wait(self, count: int) -> None:
        while self.done < count:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), 5)


class ScriptedAddPortCall(ScriptedAddCall):
    """:class:`ScriptedAddCall` in the add port call's shape: messages come with their length
    header (``write_framed``), which is checked against the message it precedes."""

    async def write(self, message: bytes) -> None:
        raise AssertionError("the add stream sends the add port framed messages")

    async def write_framed(self, framed: bytes) -> None:
        (length,) = FRAME_HEADER.unpack_from(framed)
        assert length == len(framed) - FRAME_HEADER.size, "a frame header that does not fit its message"
        await super().write(framed[FRAME_HEADER.size :])


class AnsweringAddCall(ScriptedAddCall):
    """A :class:`ScriptedAddCall` that answers each message as it is written, with what
    ``answer_for(message)`` returns."""

    def __init__(
        self, answer_for: Callable[[bookie_pb2.AddEntriesRequest], bookie_pb2.AddEntriesResponse]
    ) -> None:
        super().__init__()
        self._answer_for = answer_for

    async def write(self, message: bytes) -> None:
        await super().write(message)
        self.answer(self._answer_for(self.sent[-1]))
