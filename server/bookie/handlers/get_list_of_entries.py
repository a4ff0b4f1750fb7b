"""GetListOfEntriesOfLedger: the stored entry ids as sorted inclusive runs (the auditor's replica check)."""

from __future__ import annotations

from bkproto.v1 import bookie_pb2
from bookie.handlers.common import UnaryHandler, require_ledger_id, status_code
from bookie.stats import OpLatency


class GetListOfEntriesHandler(
    UnaryHandler[bookie_pb2.GetListOfEntriesOfLedgerRequest, bookie_pb2.GetListOfEntriesOfLedgerResponse]
):
    name = "list of entries"

    def stat_for(self, request: bookie_pb2.GetListOfEntriesOfLedgerRequest) -> OpLatency:
        return self.stats.get_list_of_entries_of_ledger

    def error_response(
        self, request: bookie_pb2.GetListOfEntriesOfLedgerRequest, status: int, message: str
    ) -> bookie_pb2.GetListOfEntriesOfLedgerResponse:
        return bookie_pb2.GetListOfEntriesOfLedgerResponse(
            status=status_code(status), ledger_id=request.ledger_id, message=message
        )

    async def serve(
        self, request: bookie_pb2.GetListOfEntriesOfLedgerRequest
    ) -> bookie_pb2.GetListOfEntriesOfLedgerResponse:
        require_ledger_id(request.ledger_id)
        runs = await self.core.list_entries(request.ledger_id)
        return bookie_pb2.GetListOfEntriesOfLedgerResponse(
            status=bookie_pb2.EOK,
            ledger_id=request.ledger_id,
            ranges=[bookie_pb2.EntryRange(first=first, last=last) for first, last in runs],
        )
