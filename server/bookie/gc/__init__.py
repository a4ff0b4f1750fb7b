"""Garbage collection: deleting the local data of ledgers deleted from the metadata store."""

from __future__ import annotations

from .collector import GarbageCollector, GcRun, GcSettings, GcStats, GcStorage, LedgerLister

__all__ = ["GarbageCollector", "GcRun", "GcSettings", "GcStats", "GcStorage", "LedgerLister"]
