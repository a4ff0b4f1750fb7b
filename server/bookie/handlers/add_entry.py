"""AddEntry: one add per unary call (tools and simple clients; the stream is the fast path)."""

from __future__ import annotations

from typing import Any

import grpc.aio

from bkproto.v1 import bookie_pb2
from bookie.handlers.add_batch import AddBatchProcessor


class AddEntryHandler:
    def __init__(self, processor: AddBatchProcessor) -> None:
        self._processor = processor

    async def __call__(
        self, request: bookie_pb2.AddRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> bookie_pb2.AddResponse:
        response = await self._processor.process([request])
        return response.results[0]
