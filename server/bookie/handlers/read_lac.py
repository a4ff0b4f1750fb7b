"""ReadLac: the explicit LAC body and the last stored entry (BookKeeper's ReadLacProcessorV3)."""

from __future__ import annotations

from bkproto.v1 import bookie_pb2
from bookie.handlers.common import UnaryHandler, require_ledger_id, status_code
from bookie.stats import OpLatency


class ReadLacHandler(UnaryHandler[bookie_pb2.ReadLacRequest, bookie_pb2.ReadLacResponse]):
    name = "LAC read"

    def stat_for(self, request: bookie_pb2.ReadLacRequest) -> OpLatency:
        return self.stats.read_lac

    def error_response(
        self, request: bookie_pb2.ReadLacRequest, status: int, message: str
    ) -> bookie_pb2.ReadLacResponse:
        return bookie_pb2.ReadLacResponse(
            status=status_code(status), ledger_id=request.ledger_id, message=message
        )

    async def serve(self, request: bookie_pb2.ReadLacRequest) -> bookie_pb2.ReadLacResponse:
        require_ledger_id(request.ledger_id)
        info = await self.core.read_lac(request.ledger_id)
        return bookie_pb2.ReadLacResponse(
            status=bookie_pb2.EOK,
            ledger_id=request.ledger_id,
            lac_body=info.explicit_lac_body or b"",
            last_entry_body=info.last_entry_body or b"",
        )
