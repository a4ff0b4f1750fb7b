"""BookKeeper's wire protocol and formats for pybookkeeper (generated code lives in ``bkproto.v1``)."""

from __future__ import annotations

from bkproto import errors
from bkproto.entry_format import HEADER_SIZE, MASTER_KEY_SIZE, EntryHeader, parse_header

__all__ = ["HEADER_SIZE", "MASTER_KEY_SIZE", "EntryHeader", "errors", "parse_header"]
