"""WriteLac: store a writer's explicit LAC (BookKeeper's WriteLacProcessorV3).

The body is ``ledgerId(8) || lac(8) || digest``; its ids must match the request's.
"""

from __future__ import annotations

from bkproto.entry_format import LAC_HEADER, NO_ENTRY
from bkproto.v1 import bookie_pb2
from bookie.errors import BookieError, bad_request
from bookie.handlers.common import UnaryHandler, require_ledger_id, require_master_key, status_code
from bookie.stats import OpLatency


class WriteLacHandler(UnaryHandler[bookie_pb2.WriteLacRequest, bookie_pb2.WriteLacResponse]):
    name = "LAC write"

    def stat_for(self, request: bookie_pb2.WriteLacRequest) -> OpLatency:
        return self.stats.write_lac

    def error_response(
        self, request: bookie_pb2.WriteLacRequest, status: int, message: str
    ) -> bookie_pb2.WriteLacResponse:
        return bookie_pb2.WriteLacResponse(
            status=status_code(status), ledger_id=request.ledger_id, message=message
        )

    async def serve(self, request: bookie_pb2.WriteLacRequest) -> bookie_pb2.WriteLacResponse:
        ledger_id = request.ledger_id
        require_ledger_id(ledger_id)
        if request.lac < NO_ENTRY:
            raise bad_request(f"LAC {request.lac} is invalid")
        require_master_key(request.master_key, f"LAC write to ledger {ledger_id}")
        if len(request.body) < LAC_HEADER.size:
            raise bad_request(
                f"LAC body of {len(request.body)} bytes is shorter than its {LAC_HEADER.size}-byte header"
            )
        if len(request.body) > self.limits.max_entry_bytes:
            raise bad_request(f"LAC body of {len(request.body)} bytes exceeds {self.limits.max_entry_bytes}")
        body_ledger, body_lac = LAC_HEADER.unpack_from(request.body)
        if body_ledger != ledger_id or body_lac != request.lac:
            raise bad_request(
                f"LAC body says ledger {body_ledger} LAC {body_lac} but the request is for"
                f" ledger {ledger_id} LAC {request.lac}"
            )
        if self.core.read_only:
            raise BookieError(bookie_pb2.EREADONLY, "the bookie is read-only")
        await self.core.write_lac(ledger_id, request.lac, request.master_key, request.body)
        return bookie_pb2.WriteLacResponse(status=bookie_pb2.EOK, ledger_id=ledger_id)
