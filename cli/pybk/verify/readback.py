"""The final read: every ledger of the run, through a fresh client, into the history.

An open ledger (its writer killed or fenced) is opened *with recovery*, so it is closed at the
point BookKeeper decides; then every entry 0..last is read and recorded as process ``final``.
An entry the range read cannot return is asked for alone, so one bad entry does not hide the rest.
Every verify named log is read too, segment by segment (:func:`.log_workload.read_logs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

from bkclient import BookKeeper, ClientConfig
from bkclient.read_handle import ReadHandle
from bkproto.errors import BKError
from pybk.verify.history import FAIL, INFO, OK, Event, read_fields
from pybk.verify.log_workload import read_logs
from pybk.verify.worker import APPLICATION, PASSWORD

FINAL = "final"
OPEN_ATTEMPTS = 10


def _event(kind: str, op: str, **fields: object) -> Event:
    return {"t": round(time.time(), 4), "f": kind, "op": op, "p": FINAL, **fields}


async def ledgers_of_run(bk: BookKeeper, known: Iterable[int]) -> list[int]:
    """The ledgers the history names plus every ledger tagged as ours (a writer killed between
    creating a ledger and recording it leaves one the history does not know)."""
    found = set(known)
    for lid in await bk.list_ledgers():
        if lid in found:
            continue
        with contextlib.suppress(BKError):
            if (await bk.ledger_metadata(lid)).custom_metadata.get("application") == APPLICATION:
                found.add(lid)
    return sorted(found)


async def _open(bk: BookKeeper, ledger: int) -> ReadHandle:
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return await bk.open_ledger(ledger, PASSWORD, recovery=True)
        except BKError as exc:
            if not exc.retriable or attempt == OPEN_ATTEMPTS - 1:
                raise
            await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


async def read_back(zk_hosts: str, known: Iterable[int]) -> list[Event]:
    events: list[Event] = []
    config = ClientConfig(read_entry_timeout_s=5.0, metadata_timeout_s=30.0)
    async with await BookKeeper.connect(zk_hosts, config) as bk:
        events += await read_logs(bk)
        for ledger in await ledgers_of_run(bk, known):
            try:
                handle = await _open(bk, ledger)
            except BKError as exc:
                events.append(_event(FAIL, "final-open", l=ledger, error=f"{type(exc).__name__}: {exc}"))
                continue
            last = handle.last_add_confirmed
            events.append(_event(OK, "final-open", l=ledger, last=last,
                                 fragments=len(handle.metadata.segments)))
            seen = -1
            try:
                async for entry in handle.read(0, last):
                    events.append(
                        _event(OK, "read", **read_fields(entry.data, ledger, entry.entry_id), src=FINAL)
                    )
                    seen = entry.entry_id
            except BKError:
                for entry_id in range(seen + 1, last + 1):
                    try:
                        entry = await handle.read_entry(entry_id)
                    except BKError as exc:
                        events.append(_event(INFO, "read", l=ledger, e=entry_id, src=FINAL,
                                             error=f"{type(exc).__name__}: {exc}"))
                        continue
                    events.append(_event(OK, "read", **read_fields(entry.data, ledger, entry_id), src=FINAL))
            finally:
                await handle.close()
    return events
