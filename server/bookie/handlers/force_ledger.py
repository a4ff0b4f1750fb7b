"""ForceLedger: make every entry accepted so far durable (backs DEFERRED_SYNC writers' force())."""

from __future__ import annotations

from bkproto.v1 import bookie_pb2
from bookie.handlers.common import UnaryHandler, require_ledger_id, status_code
from bookie.stats import OpLatency


class ForceLedgerHandler(UnaryHandler[bookie_pb2.ForceLedgerRequest, bookie_pb2.ForceLedgerResponse]):
    name = "force ledger"

    def stat_for(self, request: bookie_pb2.ForceLedgerRequest) -> OpLatency:
        return self.stats.force_ledger

    def error_response(
        self, request: bookie_pb2.ForceLedgerRequest, status: int, message: str
    ) -> bookie_pb2.ForceLedgerResponse:
        return bookie_pb2.ForceLedgerResponse(
            status=status_code(status), ledger_id=request.ledger_id, message=message
        )

    async def serve(self, request: bookie_pb2.ForceLedgerRequest) -> bookie_pb2.ForceLedgerResponse:
        require_ledger_id(request.ledger_id)
        await self.core.force_ledger(request.ledger_id)
        return bookie_pb2.ForceLedgerResponse(status=bookie_pb2.EOK, ledger_id=request.ledger_id)
