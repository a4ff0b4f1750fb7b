"""The auditor's ledger check (BookKeeper's ``checkAllLedgers``): does every bookie of a closed
ledger still hold every entry it should?

For each segment of a closed ledger, the entries a bookie should hold are those of the segment
whose write set takes its slot (round-robin striping). The bookie is asked once per ledger which
entries it can serve (``GetListOfEntriesOfLedger``: sorted runs, not the entries themselves, so
the check reads no data); an entry it should hold and does not is missing. That finds a registered
bookie that lost entries without losing its registration: a ledger directory wiped and formatted
again, an entry log deleted or unreadable.

The check must never hurt foreground traffic: it goes one ledger at a time, and the entries it
compares are paced by a rate (``auditorLedgerCheckEntriesPerSecond``), so a large cluster's
check takes long rather than loading the bookies.

Open ledgers are left to their writers (their last segment is still growing); a bookie that is
not registered is the bookie check's business, not this one's; a bookie that does not answer is
counted as unchecked, not as missing data (it may only be slow).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bkclient import BookKeeper
from bkclient.distribution import RoundRobinDistribution
from bkclient.rate_limiter import ByteRateLimiter
from bkmeta.model import LedgerMetadata
from bkmeta.registration import DEFAULT_RACK
from bkproto.errors import BKError, NoSuchLedgerError

log = logging.getLogger(__name__)


def expected_entries(md: LedgerMetadata, bookie_id: str, last_entry_id: int) -> list[int]:
    """Every entry id up to ``last_entry_id`` that ``bookie_id`` should hold, ascending."""
    schedule = RoundRobinDistribution(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size)
    segments = md.segments
    out: list[int] = []
    for index, segment in enumerate(segments):
        end = segments[index + 1].first_entry_id - 1 if index + 1 < len(segments) else last_entry_id
        for slot, bookie in enumerate(segment.bookies):
            if bookie == bookie_id:
                out.extend(e for e in range(segment.first_entry_id, end + 1) if schedule.has_entry(e, slot))
    return sorted(set(out))


def not_held(expected: Sequence[int], runs: Sequence[tuple[int, int]]) -> list[int]:
    """Those of ``expected`` outside every inclusive run of ``runs`` (sorted, disjoint)."""
    firsts = [first for first, _ in runs]
    missing = []
    for entry_id in expected:
        i = bisect.bisect_right(firsts, entry_id) - 1
        if i < 0 or runs[i][1] < entry_id:
            missing.append(entry_id)
    return missing


async def missing_on(bk: BookKeeper, ledger_id: int, md: LedgerMetadata, bookie_id: str) -> list[int]:
    """The entries of closed ``md`` that ``bookie_id`` should hold and cannot serve (raises the
    bookie's error when it does not answer)."""
    expected = expected_entries(md, bookie_id, md.last_entry_id)
    if not expected:
        return []
    try:
        runs = await bk.ctx.bookie(bookie_id).list_entries(
            ledger_id, timeout=bk.ctx.config.read_entry_timeout_s
        )
    except NoSuchLedgerError:
        return expected  # a wiped bookie knows nothing of the ledger
    return not_held(expected, runs)


@dataclass
class LedgerCheckResult:
    """What one run of the ledger check found."""

    short: dict[int, set[str]] = field(default_factory=dict)  # ledger -> bookies missing entries
    missing_entries: int = 0
    ledgers_checked: int = 0
    entries_checked: int = 0
    unchecked: int = 0  # (ledger, bookie) pairs that did not answer


class LedgerChecker:
    """Runs the ledger check over every closed ledger (see the module's docstring)."""

    def __init__(self, bk: BookKeeper, entries_per_s: int) -> None:
        self._bk = bk
        self._pace = ByteRateLimiter(entries_per_s) if entries_per_s > 0 else None

    async def check_ledger(self, ledger_id: int, result: LedgerCheckResult) -> None:
        bk = self._bk
        try:
            md = await bk.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            return
        if not md.is_closed or md.last_entry_id < 0:
            return
        watcher = bk.ctx.bookie_watcher
        registered = watcher.all_bookies()
        result.ledgers_checked += 1
        for bookie_id in sorted(md.all_bookies()):
            if bookie_id not in registered:
                continue  # lost: the bookie check's
            expected = expected_entries(md, bookie_id, md.last_entry_id)
            if self._pace is not None and expected:
                await self._pace.acquire(len(expected))
            result.entries_checked += len(expected)
            try:
                runs = await bk.ctx.bookie(bookie_id).list_entries(
                    ledger_id, timeout=bk.ctx.config.read_entry_timeout_s
                )
            except NoSuchLedgerError:
                runs = []
            except BKError as exc:
                log.info("ledger check: bookie %s did not list ledger %d: %s", bookie_id, ledger_id, exc)
                result.unchecked += 1
                continue
            missing = not_held(expected, runs)
            if missing:
                log.warning("ledger check: bookie %s lacks %d of the %d entries of ledger %d it should"
                            " hold (first %d)", bookie_id, len(missing), len(expected), ledger_id, missing[0])
                result.short.setdefault(ledger_id, set()).add(bookie_id)
                result.missing_entries += len(missing)

    async def run(self) -> LedgerCheckResult:
        result = LedgerCheckResult()
        for ledger_id in await self._bk.list_ledgers():
            await self.check_ledger(ledger_id, result)
        return result


def rack_shortfalls(md: LedgerMetadata, racks: Mapping[str, str], min_racks: int) -> list[int]:
    """The placement-policy check (BookKeeper's ``placementPolicyCheck`` under the rack-aware
    policy): the first entry ids of the segments where a write quorum spans fewer racks than
    ``min_racks`` (capped by Qw and by the racks the cluster has). A bookie ``racks`` does not
    know (unregistered) counts in the default rack."""
    available = len(set(racks.values())) or 1
    wanted = min(min_racks, md.write_quorum_size, available)
    short = []
    for segment in md.segments:
        ensemble = segment.bookies
        size = len(ensemble)
        for start in range(size):
            members = (ensemble[(start + w) % size] for w in range(md.write_quorum_size))
            quorum = {racks.get(bookie, DEFAULT_RACK) for bookie in members}
            if len(quorum) < wanted:
                short.append(segment.first_entry_id)
                break
    return short
