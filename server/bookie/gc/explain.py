"""Why an entry log is still on disk (``pybk shell gcexplain``, ``GET /api/v1/bookie/gc_explain``).

An entry log is freed whole: deleted once none of its ledgers lives, or rewritten by compaction
once its live share falls below the minor or major threshold at that pass's interval. A few
long-lived ledgers interleaved with many short-lived ones keep a log's live share just above the
threshold for months; BookKeeper gives the operator no way to see that. For every log this says:

- its age, size, live bytes and live share, and the ledgers that pin it: ``live`` (in the
  metadata and stored here), ``open`` (live and still being written) and ``deleted`` (gone from
  the metadata, still stored here: the next garbage collection deletes them); a ledger already
  collected pins nothing;
- why it has not been reclaimed: being written; deleted at the next run; waiting for the next
  minor/major compaction (and how long its live bytes take at ``compactionRateByBytes``);
  compaction suspended by an operator or paused for disk space; above the major threshold, by
  how much;
- what would free it: the ledgers whose deletion brings it under the major threshold (the
  biggest first, fewest ledgers), or the threshold that would take it;
- ``reclaimable_bytes``: what deleting or compacting it frees (size less live bytes). The
  report is sorted by it, largest first.

Live here means "in the metadata listing": a ledger deleted in the metadata counts as garbage
already, since the next run collects it. Without a listing (the metadata store did not answer),
every stored ledger counts as live.
"""

from __future__ import annotations

import time
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import Any

from bookie.storage.log_garbage import LogFacts


@dataclass(frozen=True)
class GcState:
    """What the collector knows of its own schedule, for the verdicts."""

    minor_threshold: float
    major_threshold: float
    minor_enabled: bool
    major_enabled: bool
    next_run_in_s: float
    next_minor_in_s: float
    next_major_in_s: float
    minor_suspended_by_operator: bool
    major_suspended_by_operator: bool
    minor_paused_for_disk: bool
    major_paused_for_disk: bool
    rate_bytes: int  # compactionRateByBytes (0: unlimited)


def _freeing_set(pins: list[tuple[int, int]], total: int, threshold: float) -> list[int] | None:
    """The fewest live ledgers (the biggest first) whose deletion brings the live share below
    ``threshold``; None when even all of them would not (cannot happen: then share is 0)."""
    live = sum(n for _, n in pins)
    chosen = []
    for ledger_id, n in pins:
        if total and live / total < threshold:
            break
        chosen.append(ledger_id)
        live -= n
    return chosen if not total or live / total < threshold else None


def _why(facts: LogFacts, share: float, live: int, state: GcState) -> tuple[str, str]:
    """(verdict code, sentence)."""
    if facts.current:
        return "being_written", "being written: collected only once finished (at logSizeLimit)"
    if facts.unreadable:
        return "unreadable", "its ledger map cannot be read: kept, see the bookie's log"
    if live == 0:
        return "next_gc_run", (f"no live ledger: deleted at the next garbage collection"
                               f" (in {state.next_run_in_s:.0f} s)")
    passes = (
        ("minor", state.minor_enabled, state.minor_threshold, state.minor_suspended_by_operator,
         state.minor_paused_for_disk, state.next_minor_in_s),
        ("major", state.major_enabled, state.major_threshold, state.major_suspended_by_operator,
         state.major_paused_for_disk, state.next_major_in_s),
    )
    for kind, enabled, threshold, suspended, paused, due in passes:
        if not enabled or share >= threshold:
            continue
        below = f"below the {kind} threshold ({share:.3f} < {threshold})"
        if suspended:
            return f"{kind}_suspended", (f"{below}, but {kind} compaction is suspended by an operator"
                                         " (PUT /api/v1/bookie/gc/resume_compaction)")
        if paused:
            return f"{kind}_paused_for_disk", (f"{below}, but {kind} compaction is paused: the disks are"
                                               " (nearly) full (see isForceGCAllowWhenNoSpace)")
        copy = ""
        if state.rate_bytes > 0:
            copy = (f"; copying its {live} live bytes takes {live / state.rate_bytes:.0f} s at"
                    " compactionRateByBytes")
        when = f"in {max(0.0, due):.0f} s"
        return f"waiting_{kind}", f"{below}: compacted by the next {kind} compaction, {when}{copy}"
    if not state.major_enabled and not state.minor_enabled:
        return "compaction_off", "compaction is off (thresholds or intervals 0)"
    kind = "major" if state.major_enabled else "minor"
    top = state.major_threshold if state.major_enabled else state.minor_threshold
    return "above_threshold", (f"live share {share:.3f} is above the {kind} threshold {top}"
                               f" by {share - top:.3f}")


def explain(facts: Sequence[LogFacts], in_metadata: Set[int] | None, state: GcState,
            now: float | None = None, open_ledgers: Set[int] = frozenset()) -> list[dict[str, Any]]:
    """One report per entry log, sorted by reclaimable bytes (largest first); a live pinning
    ledger in ``open_ledgers`` is reported ``open`` (still being written: it will pin more)."""
    now = time.time() if now is None else now
    out: list[dict[str, Any]] = []
    for f in facts:
        total = sum(f.ledgers.values())
        pins: list[tuple[int, int]] = []
        deleted: list[tuple[int, int]] = []
        for ledger_id, n in f.ledgers.items():
            if ledger_id not in f.stored:
                continue  # collected already: garbage
            (pins if in_metadata is None or ledger_id in in_metadata else deleted).append((ledger_id, n))
        pins.sort(key=lambda p: (-p[1], p[0]))
        deleted.sort(key=lambda p: (-p[1], p[0]))
        live = sum(n for _, n in pins)
        share = live / total if total else 0.0
        code, why = _why(f, share, live, state)
        frees: dict[str, Any] = {}
        if code == "above_threshold":
            top = state.major_threshold if state.major_enabled else state.minor_threshold
            frees = {"delete_ledgers": _freeing_set(pins, total, top),
                     "or_threshold_above": round(share, 4)}
        elif deleted and code not in ("being_written", "unreadable"):
            frees = {"next_gc_run_collects_ledgers": [lid for lid, _ in deleted]}
        out.append({
            "log_id": f.log_id,
            "log_file": f"{f.directory}/{f.log_id:x}.log",
            "age_s": max(0.0, round(now - f.mtime, 1)),
            "size_bytes": f.size,
            "live_bytes": live,
            "live_share": round(share, 4),
            "reclaimable_bytes": 0 if f.current else max(0, f.size - live),
            "pinned_by": [{"ledger_id": lid, "bytes": n, "state": "open" if lid in open_ledgers else "live"}
                          for lid, n in pins]
            + [{"ledger_id": lid, "bytes": n, "state": "deleted"} for lid, n in deleted],
            "verdict": code,
            "why": why,
            "would_free_it": frees,
        })
    out.sort(key=lambda r: (-r["reclaimable_bytes"], r["log_id"]))
    return out


def summary(reports: Sequence[dict[str, Any]]) -> tuple[float, int]:
    """(age in seconds of the oldest entry log, bytes reclaimable over all logs)."""
    oldest = max((r["age_s"] for r in reports), default=0.0)
    return float(oldest), sum(int(r["reclaimable_bytes"]) for r in reports)
