"""Shared helpers for the storage and bookie-core unit tests (real files under tmp_path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bkproto.entry_format import HEADER, LAC_HEADER
from bookie.api import AddOp
from bookie.bookie import Bookie
from bookie.on_disk import bookie_on_disk
from bookie.storage.config import StorageConfig

KEY = bytes(range(20))
OTHER_KEY = bytes(range(1, 21))


def make_config(tmp_path: Path, **overrides: Any) -> StorageConfig:
    settings: dict[str, Any] = {
        "journal_dirs": [tmp_path / "journal"],
        "ledger_dirs": [tmp_path / "ledgers"],
        "write_cache_max_size_mb": 4,
        "read_ahead_cache_max_size_mb": 1,
        "journal_pre_alloc_size_mb": 1,
        "flush_interval_ms": 60_000,  # tests checkpoint explicitly
    }
    settings.update(overrides)
    return StorageConfig(**settings)


def make_bookie(config: StorageConfig, **kwargs: Any) -> Bookie:
    """A bookie over a DbLedgerStorage in ``config``'s directories (``bookie.storage``)."""
    return bookie_on_disk(config, CollectorRegistry(), **kwargs)


def body(ledger_id: int, entry_id: int, lac: int = -1, payload: bytes | None = None) -> bytes:
    if payload is None:
        payload = f"payload {ledger_id}/{entry_id} ".encode() * 8
    return HEADER.pack(ledger_id, entry_id, lac, len(payload)) + payload


def add_op(ledger_id: int, entry_id: int, lac: int = -1, key: bytes = KEY, recovery: bool = False,
           payload: bytes | None = None) -> AddOp:
    return AddOp(ledger_id, entry_id, key, body(ledger_id, entry_id, lac, payload), recovery)


def lac_body(ledger_id: int, lac: int) -> bytes:
    return LAC_HEADER.pack(ledger_id, lac) + b"digest"


async def add_all(bookie: Bookie, ops: list[AddOp]) -> None:
    results = await bookie.add_entries(ops)
    assert [r.status for r in results] == [0] * len(ops), results
