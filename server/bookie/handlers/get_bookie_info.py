"""GetBookieInfo: disk capacity and free space, as requested by the bit set (disk-weighted placement)."""

from __future__ import annotations

from bkproto.v1 import bookie_pb2
from bookie.handlers.common import UnaryHandler, status_code
from bookie.stats import OpLatency


class GetBookieInfoHandler(UnaryHandler[bookie_pb2.GetBookieInfoRequest, bookie_pb2.GetBookieInfoResponse]):
    name = "bookie info"

    def stat_for(self, request: bookie_pb2.GetBookieInfoRequest) -> OpLatency:
        return self.stats.get_bookie_info

    def error_response(
        self, request: bookie_pb2.GetBookieInfoRequest, status: int, message: str
    ) -> bookie_pb2.GetBookieInfoResponse:
        return bookie_pb2.GetBookieInfoResponse(status=status_code(status), message=message)

    async def serve(self, request: bookie_pb2.GetBookieInfoRequest) -> bookie_pb2.GetBookieInfoResponse:
        info = self.core.disk_info()
        response = bookie_pb2.GetBookieInfoResponse(status=bookie_pb2.EOK)
        if request.requested & bookie_pb2.TOTAL_DISK_CAPACITY:
            response.total_disk_capacity = info.total_bytes
        if request.requested & bookie_pb2.FREE_DISK_SPACE:
            response.free_disk_space = info.free_bytes
        return response
