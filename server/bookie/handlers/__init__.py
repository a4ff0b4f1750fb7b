"""Request handlers of the bookie's gRPC service: one module per request type."""

from __future__ import annotations

from bookie.handlers.common import HandlerLimits
from bookie.handlers.servicer import BookieServicer

__all__ = ["BookieServicer", "HandlerLimits"]
