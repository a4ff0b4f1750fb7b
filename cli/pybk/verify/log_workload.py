"""The stream layer under faults: named logs written with the Spark sink's commit protocol.

A ``logger`` process plays a streaming job: batch after batch (``version``), it writes one to
three segments (a ledger per task) and commits them to its log with ``txn=(app, version)``, as
``bkclient.spark`` does for a micro-batch. A batch whose commit outcome is unknown is replayed
with the same version and fresh ledgers, as Spark replays a batch after a failure: the log must
then hold it exactly once. A restarted logger (a new incarnation) starts its versions higher.

Its history holds, per commit, each segment's ledger, entry count and a digest of its entries'
hashes; the final read records the same for every segment the log holds, and
:func:`check_logs` compares them: every committed batch in the log once, in order, with the
entries it was acknowledged with, and nothing of a refused or abandoned batch.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from bkclient.named_log import NamedLogs, SegmentOptions
from bkproto.errors import BKError
from pybk.verify.checker import DIVERGENT, LOST, CheckResult, Violation
from pybk.verify.history import FAIL, INFO, INVOKE, OK, Event, make_payload, payload_hash

if TYPE_CHECKING:
    from bkclient import BookKeeper
    from pybk.verify.worker import Worker

LOG_PREFIX = "pybk-verify-"
VERSIONS_PER_INCARNATION = 1_000_000
DUPLICATE = "log-duplicate"
LOG_ORDER = "log-order"
REFUSED_VISIBLE = "log-refused-visible"


def segment_digest(hashes: Iterable[str]) -> str:
    """One digest for a segment: its entries' payload hashes, in entry order."""
    return hashlib.blake2b("".join(hashes).encode(), digest_size=8).hexdigest()


async def run_logger(worker: Worker, bk: BookKeeper) -> None:
    name = worker.name.rsplit(".", 1)[0]  # logger-0.3 -> logger-0: one log and app per logger
    log_name = LOG_PREFIX + name
    incarnation = int(worker.name.rsplit(".", 1)[1])
    logs = NamedLogs(bk)
    options = SegmentOptions(ensemble=2, write_quorum=2, ack_quorum=2, password=b"")
    version = incarnation * VERSIONS_PER_INCARNATION
    while not worker.stopping.is_set():
        write_id = f"{worker.name}-v{version}-{uuid.UUID(int=worker.rng.getrandbits(128)).hex[:8]}"
        worker.history.emit(INVOKE, "log-commit", log=log_name, version=version, write=write_id)
        segments = []
        digests: dict[int, str] = {}
        try:
            for task in range(worker.rng.randint(1, 3)):
                seg_writer = await logs.open_segment(log_name, write_id, task, options)
                hashes = []
                for seq in range(worker.rng.randint(1, 50)):
                    data = make_payload(worker.name, seg_writer.ledger_id, seq, worker.rng,
                                        worker.rng.randint(16, 256))
                    hashes.append(payload_hash(data))
                    await seg_writer.append_many([data])
                segment = await seg_writer.close()
                digests[segment.ledger_id] = segment_digest(hashes)
                segments.append(segment)
            result = await logs.commit(log_name, write_id, segments, txn=(name, version))
        except BKError as exc:
            # Unknown: the commit may have landed. Replay the batch (same version, new ledgers).
            worker.history.emit(INFO, "log-commit", log=log_name, version=version, write=write_id,
                                error=type(exc).__name__)
            await worker.stoppable_sleep(0.5)
            continue
        worker.history.emit(
            OK, "log-commit", log=log_name, version=version, write=write_id, committed=result.committed,
            segments=[[s.ledger_id, s.entries, digests[s.ledger_id]] for s in segments],
        )
        version += 1
        await worker.stoppable_sleep(worker.rng.uniform(0.0, 0.5))


async def read_logs(bk: BookKeeper) -> list[Event]:
    """The final read of every verify log: each segment with its entries' digest."""
    events: list[Event] = []
    logs = NamedLogs(bk)
    for log_name in await logs.names():
        if not log_name.startswith(LOG_PREFIX):
            continue
        stamp = round(time.time(), 4)
        try:
            segments = await logs.segments(log_name)
            found = []
            for seg in segments:
                hashes = [payload_hash(entry.data) async for entry in logs.read_segment(seg)]
                found.append([seg.ledger_id, len(hashes), segment_digest(hashes), seg.write_id])
        except BKError as exc:
            events.append({"t": stamp, "f": FAIL, "op": "final-log", "p": "final", "log": log_name,
                           "error": f"{type(exc).__name__}: {exc}"})
            continue
        events.append({"t": stamp, "f": OK, "op": "final-log", "p": "final", "log": log_name,
                       "segments": found})
    return events


def check_logs(events: Iterable[Event], result: CheckResult) -> None:
    commits: list[Event] = []
    finals: dict[str, Event] = {}
    versions: dict[str, int] = {}  # write id -> version
    for ev in events:
        if ev.get("op") == "log-commit":
            versions[ev["write"]] = ev["version"]
            if ev["f"] == OK:
                commits.append(ev)
        elif ev.get("op") == "final-log":
            finals[ev["log"]] = ev
            if ev["f"] != OK:
                result.violations.append(Violation(LOST, f"log {ev['log']} could not be read: {ev['error']}",
                                                   t=ev["t"]))
    result.log_commits = sum(1 for c in commits if c["committed"])
    held: dict[str, dict[int, list[object]]] = defaultdict(dict)  # log -> ledger -> segment
    for log_name, ev in finals.items():
        if ev["f"] != OK:
            continue
        seen_versions: dict[int, str] = {}
        last = -1
        for seg in ev["segments"]:
            ledger, _, _, write_id = seg
            held[log_name][ledger] = seg
            version = versions.get(write_id)
            if version is None:
                continue
            if seen_versions.get(version, write_id) != write_id:
                result.violations.append(Violation(
                    DUPLICATE, f"log {log_name} holds version {version} twice (writes "
                    f"{seen_versions[version]} and {write_id})", ledger, t=ev["t"]))
            seen_versions[version] = write_id
            if version < last:
                result.violations.append(Violation(
                    LOG_ORDER, f"log {log_name}: version {version} after version {last}", ledger, t=ev["t"]))
            last = max(last, version)
    for commit in commits:
        log_name = commit["log"]
        if log_name not in finals or finals[log_name]["f"] != OK:
            continue
        for ledger, entries, digest in commit["segments"]:
            seg = held[log_name].get(ledger)
            where = f"log {log_name} version {commit['version']} segment ledger {ledger}"
            if not commit["committed"]:
                if seg is not None:
                    result.violations.append(Violation(
                        REFUSED_VISIBLE, f"{where}: its commit was refused, yet the log holds it", ledger,
                        t=commit["t"]))
                continue
            if seg is None:
                result.violations.append(Violation(LOST, f"{where}: committed, not in the log", ledger,
                                                   t=commit["t"]))
            elif seg[1] != entries or seg[2] != digest:
                result.violations.append(Violation(
                    DIVERGENT, f"{where}: committed {entries} entries ({digest}), read {seg[1]} ({seg[2]})",
                    ledger, t=commit["t"]))
