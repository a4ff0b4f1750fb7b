"""The gRPC servicer: one method per request type, each delegating to its handler object."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc.aio

from bkproto.v1 import bookie_pb2, bookie_pb2_grpc
from bkproto.wire import EncodedMessage
from bookie.api import BookieCore
from bookie.handlers.add_batch import AddBatchProcessor
from bookie.handlers.add_entries import AddEntriesHandler, SizedAddEntriesRequest
from bookie.handlers.add_entry import AddEntryHandler
from bookie.handlers.common import HandlerLimits
from bookie.handlers.force_ledger import ForceLedgerHandler
from bookie.handlers.get_bookie_info import GetBookieInfoHandler
from bookie.handlers.get_list_of_entries import GetListOfEntriesHandler
from bookie.handlers.read_entries import ReadEntriesAnswer, ReadEntriesHandler
from bookie.handlers.read_entry import ReadEntryHandler
from bookie.handlers.read_lac import ReadLacHandler
from bookie.handlers.read_stream import ReadStreamHandler, StreamAnswer
from bookie.handlers.stride_poll import StridePollHandler
from bookie.handlers.write_lac import WriteLacHandler
from bookie.limits import PeerLongPolls
from bookie.stats import RequestStats

Context = grpc.aio.ServicerContext[Any, Any]


class BookieServicer(bookie_pb2_grpc.BookieServicer):
    def __init__(self, core: BookieCore, stats: RequestStats, limits: HandlerLimits | None = None) -> None:
        limits = limits or HandlerLimits()
        adds = AddBatchProcessor(core, stats, limits)
        self.add_entries = AddEntriesHandler(adds, limits)
        self.add_entry = AddEntryHandler(adds)
        long_polls = PeerLongPolls(limits.max_long_polls_per_peer, stats.limits)
        # one budget of the read answers not yet sent, whatever carries them (answer_budget.py)
        answers = limits.answer_budget()
        self.read_entry = ReadEntryHandler(core, stats, limits, long_polls, answers)
        self.stride_poll = StridePollHandler(core, stats, limits, long_polls, answers)
        self.read_entries = ReadEntriesHandler(core, stats, limits, answer_bytes=answers)
        self.read_stream = ReadStreamHandler(
            self.read_entry, self.stride_poll, self.read_entries, limits.read_stream_max_in_flight
        )
        self.read_lac = ReadLacHandler(core, stats, limits)
        self.write_lac = WriteLacHandler(core, stats, limits)
        self.force_ledger = ForceLedgerHandler(core, stats, limits)
        self.get_bookie_info = GetBookieInfoHandler(core, stats, limits)
        self.get_list_of_entries = GetListOfEntriesHandler(core, stats, limits)

    def drain(self) -> None:
        """Shutdown step: add streams stop taking new batches and finish the started ones."""
        self.add_entries.drain()

    async def AddEntries(
        self, request_iterator: AsyncIterator[SizedAddEntriesRequest], context: Context
    ) -> AsyncIterator[bookie_pb2.AddEntriesResponse]:
        # grpc.aio recognises streaming handlers by being async generator functions.
        async for response in self.add_entries(request_iterator, context):
            yield response

    async def AddEntry(self, request: bookie_pb2.AddRequest, context: Context) -> bookie_pb2.AddResponse:
        return await self.add_entry(request, context)

    async def ReadEntry(self, request: bookie_pb2.ReadRequest, context: Context) -> EncodedMessage:
        return await self.read_entry.unary(request, context)

    async def ReadStream(
        self, request_iterator: AsyncIterator[bookie_pb2.ReadStreamRequest], context: Context
    ) -> AsyncIterator[StreamAnswer]:
        async for response in self.read_stream(request_iterator, context):
            yield response

    async def ReadEntries(
        self, request: bookie_pb2.ReadEntriesRequest, context: Context
    ) -> ReadEntriesAnswer:
        return await self.read_entries.unary(request, context)

    async def ReadLac(
        self, request: bookie_pb2.ReadLacRequest, context: Context
    ) -> bookie_pb2.ReadLacResponse:
        return await self.read_lac(request, context)

    async def WriteLac(
        self, request: bookie_pb2.WriteLacRequest, context: Context
    ) -> bookie_pb2.WriteLacResponse:
        return await self.write_lac(request, context)

    async def ForceLedger(
        self, request: bookie_pb2.ForceLedgerRequest, context: Context
    ) -> bookie_pb2.ForceLedgerResponse:
        return await self.force_ledger(request, context)

    async def GetBookieInfo(
        self, request: bookie_pb2.GetBookieInfoRequest, context: Context
    ) -> bookie_pb2.GetBookieInfoResponse:
        return await self.get_bookie_info(request, context)

    async def GetListOfEntriesOfLedger(
        self, request: bookie_pb2.GetListOfEntriesOfLedgerRequest, context: Context
    ) -> bookie_pb2.GetListOfEntriesOfLedgerResponse:
        return await self.get_list_of_entries(request, context)
