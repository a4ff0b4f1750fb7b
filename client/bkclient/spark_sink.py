"""The Spark sink's work, without Spark: options, one partition's write, the driver's commit.

:mod:`bkclient.spark` wires these into PySpark's Python Data Source API (Spark 4). On older Spark,
or for a hand-made job, the same protocol works from ``foreachPartition`` and the driver::

    from bkclient.spark_sink import SinkOptions, new_write_id, write_partition, commit_write
    opts = SinkOptions.parse({"zkServers": "zk:2181", "log": "events"})
    write_id = new_write_id()
    segments = df.rdd.mapPartitionsWithIndex(
        lambda i, rows: [write_partition(opts, write_id, i, (r.value for r in rows))]).collect()
    commit_write(opts, write_id, segments)

Each partition becomes one ledger (BookKeeper ledgers are single-writer), each value one entry,
in the partition's order. The ledgers join the named log in partition order in one ZooKeeper
transaction (:mod:`bkmeta.named_log`), so readers see all of a write or none of it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bkmeta.model import DigestType
from bkmeta.named_log import LOGS_ROOT, CommitResult, LogSegment, check_log_name
from bkproto.errors import IllegalOpError, IncorrectParameterError

from .named_log import SegmentOptions

if TYPE_CHECKING:  # the client is imported where a task or a commit first needs it (client_config)
    from .config import ClientConfig
    from .sync import BookKeeper, SegmentWriter

log = logging.getLogger(__name__)

# TLS, the bookies' token and the ZooKeeper identity: files only, so no secret sits in a query's
# options (``bkclient.tls``, ``bkmeta.zk_security``). Unset: the executors' environment decides.
SECURITY_OPTIONS = (
    "clientTrustStore", "clientCertificatePath", "clientKeyStore", "clientAuthTokenFile",
    "tlsHostnameVerificationEnabled", "zkEnableSecurity", "zkDigestAuthFile", "zkTlsTrustStore",
    "zkTlsCertificatePath", "zkTlsKeyStore",
)
# The streaming reader's (``bkclient.spark_source``); kept as text here, parsed there.
SOURCE_OPTIONS = (
    "startingOffsets", "failOnDataLoss", "maxEntriesPerTrigger", "maxBytesPerTrigger",
    "maxEntriesPerPartition",
)
# Spark hands options over case-insensitively (lower-cased); documented spellings are these.
_KNOWN = (
    "zkServers", "log", "path", "ensembleSize", "writeQuorumSize", "ackQuorumSize", "digestType",
    "password", "logsRootPath", "maxOutstandingAdds", "txnAppId", "txnVersion", "checkpointLocation",
    *SECURITY_OPTIONS, *SOURCE_OPTIONS,
)
_BY_LOWER = {k.lower(): k for k in _KNOWN}


@dataclass(frozen=True)
class SinkOptions:
    zk_servers: str
    log: str
    segment: SegmentOptions = field(default_factory=SegmentOptions)
    logs_root: str = LOGS_ROOT
    max_outstanding_adds: int = 5000  # the client's throttle (BookKeeper's default too)
    txn_app_id: str | None = None
    txn_version: int | None = None
    checkpoint_location: str | None = None
    # SECURITY_OPTIONS given (kept as text: the options travel pickled to executors)
    security: tuple[tuple[str, str], ...] = ()
    source: tuple[tuple[str, str], ...] = ()  # SOURCE_OPTIONS given

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Strict: an unknown option or a bad value is an error naming it."""
        raw: dict[str, str] = {}
        for key, value in options.items():
            name = _BY_LOWER.get(key.lower())
            if name is None:
                raise IncorrectParameterError(
                    f"unknown bookkeeper option {key!r}; known: {', '.join(_KNOWN)}"
                )
            raw[name] = str(value)
        if not raw.get("zkServers"):
            raise IncorrectParameterError("option 'zkServers' (ZooKeeper hosts, e.g. zk1:2181) is required")
        log = raw.get("log") or raw.get("path")
        if not log:
            raise IncorrectParameterError("option 'log' (or save(<log name>)) is required: the named log")
        if raw.get("log") and raw.get("path") and raw["log"] != raw["path"]:
            raise IncorrectParameterError(f"option 'log' {raw['log']!r} and path {raw['path']!r} disagree")
        segment = SegmentOptions(
            ensemble=_int(raw, "ensembleSize", 2),
            write_quorum=_int(raw, "writeQuorumSize", 2),
            ack_quorum=_int(raw, "ackQuorumSize", 2),
            digest=_digest(raw.get("digestType", "CRC32C")),
            password=raw.get("password", "").encode(),
        )
        txn_version = _int(raw, "txnVersion", -1) if "txnVersion" in raw else None
        if txn_version is not None and "txnAppId" not in raw:
            raise IncorrectParameterError("option 'txnVersion' needs option 'txnAppId'")
        if "txnAppId" in raw and not raw["txnAppId"].strip():
            raise IncorrectParameterError("option 'txnAppId' must not be empty")
        return cls(
            zk_servers=raw["zkServers"],
            log=check_log_name(log),
            segment=segment,
            logs_root=raw.get("logsRootPath", LOGS_ROOT),
            max_outstanding_adds=_int(raw, "maxOutstandingAdds", 5000),
            txn_app_id=raw.get("txnAppId"),
            txn_version=txn_version,
            checkpoint_location=raw.get("checkpointLocation") or None,
            security=tuple((k, raw[k]) for k in SECURITY_OPTIONS if k in raw),
            source=tuple((k, raw[k]) for k in SOURCE_OPTIONS if k in raw),
        )

    def client_config(self) -> ClientConfig:
        """The client's configuration, TLS and ZooKeeper identity included (read from the files
        the options name, on whichever executor or driver runs this).

        The client's modules (gRPC, kazoo, the read and write paths) are imported here, not with
        this module: Spark starts Python workers that only parse options (the data source's
        schema, a write's planning), and each would pay for them."""
        from bkmeta.zk_security import zk_security_from_settings

        from .config import ClientConfig
        from .tls import security_from_settings

        settings = dict(self.security)
        return ClientConfig(
            max_outstanding_adds=self.max_outstanding_adds,
            security=security_from_settings(settings) if settings else None,
            zk_security=zk_security_from_settings(settings) if settings else None,
        )

    def client(self) -> BookKeeper:
        from .sync import BookKeeper

        return BookKeeper(self.zk_servers, self.client_config())

    def worker_client(self) -> contextlib.AbstractContextManager[BookKeeper]:
        """This process's client for these options, made once and reused by every task the
        Python worker runs (Spark reuses workers). Closed at interpreter exit where Python runs
        its exit hooks; Spark's daemon-forked workers end with ``os._exit``, so there the bookie
        connections close with the process and ZooKeeper expires the session after its timeout."""
        return _worker_client(self)

    def check_batch(self) -> None:
        """A batch write versions itself only with both options (a stream uses its batch ids)."""
        if self.txn_app_id is not None and self.txn_version is None:
            raise IncorrectParameterError(
                "a batch write with option 'txnAppId' needs option 'txnVersion' too"
            )

    @property
    def txn(self) -> tuple[str, int] | None:
        if self.txn_app_id is None or self.txn_version is None:
            return None
        return self.txn_app_id, self.txn_version


def _int(raw: Mapping[str, str], key: str, default: int) -> int:
    value = raw.get(key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise IncorrectParameterError(f"option {key!r} must be an integer, got {value!r}") from None
    minimum = 0 if key == "txnVersion" else 1
    if number < minimum:
        raise IncorrectParameterError(f"option {key!r} must be at least {minimum}, got {number}")
    return number


def _digest(value: str) -> DigestType:
    try:
        return DigestType[value.strip().upper()]
    except KeyError:
        names = ", ".join(d.name for d in DigestType)
        raise IncorrectParameterError(f"option 'digestType' must be one of {names}, got {value!r}") from None


# One client per (cluster, client settings) per process: a ZooKeeper session and bookie
# connections cost more to open than a small task's whole write.
_clients: dict[tuple[object, ...], BookKeeper] = {}
_clients_lock = threading.Lock()


@contextlib.contextmanager
def _worker_client(opts: SinkOptions) -> Iterator[BookKeeper]:
    key = (opts.zk_servers, opts.max_outstanding_adds, opts.security)
    with _clients_lock:
        bk = _clients.get(key)
        if bk is None:
            if not _clients:
                atexit.register(close_worker_clients)
            bk = _clients[key] = opts.client()
    try:
        yield bk
    except (IncorrectParameterError, IllegalOpError):
        raise  # the input's fault, or the write's (aborted); the client is fine
    except BaseException:
        # The client may be what failed (its session expired, say): the next task starts afresh.
        with _clients_lock:
            if _clients.get(key) is bk:
                del _clients[key]
        with contextlib.suppress(Exception):
            bk.close()
        raise


def close_worker_clients() -> None:
    """Close this process's shared clients (at exit, or by a test)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for bk in clients:
        with contextlib.suppress(Exception):
            bk.close()


def new_write_id() -> str:
    return uuid.uuid4().hex


def as_entry(value: object, task: int, row: int) -> bytes:
    """A row's ``value`` as entry bytes: binary as is, strings in UTF-8; nothing else."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if value is None:
        raise IncorrectParameterError(f"partition {task}, row {row}: 'value' is null; an entry needs bytes")
    raise IncorrectParameterError(
        f"partition {task}, row {row}: 'value' is a {type(value).__name__}; use binary or string"
    )


def write_partition(
    opts: SinkOptions, write_id: str, task: int, values: Iterable[object]
) -> LogSegment | None:
    """Write ``values`` as one ledger of the log; None if there were none (no ledger is made).
    On failure the ledger is deleted (best effort; the commit or abort sweeps it otherwise)."""
    iterator = iter(values)
    first = next(iterator, _END)
    if first is _END:
        return None
    def append_rows(writer: SegmentWriter) -> None:
        writer.append(as_entry(first, task, 0))
        for row, value in enumerate(iterator, start=1):
            writer.append(as_entry(value, task, row))

    return _write_segment(opts, write_id, task, append_rows)


def write_partition_batches(
    opts: SinkOptions, write_id: str, task: int, batches: Iterable[Sequence[bytes]]
) -> LogSegment | None:
    """Like :func:`write_partition`, for values that come in batches (an Arrow batch's column):
    each batch goes to the client in one call, and is sent while the next is made."""
    iterator = (batch for batch in batches if len(batch) > 0)
    first = next(iterator, None)
    if first is None:
        return None

    def append_batches(writer: SegmentWriter) -> None:
        writer.append_batch(first)
        for batch in iterator:
            writer.append_batch(batch)

    return _write_segment(opts, write_id, task, append_batches)


def _write_segment(
    opts: SinkOptions, write_id: str, task: int, fill: Callable[[SegmentWriter], None]
) -> LogSegment:
    """One ledger of the log, filled by ``fill``; on failure the ledger is deleted (best effort;
    the commit or abort sweeps it otherwise)."""
    with opts.worker_client() as bk:
        logs = bk.logs(opts.logs_root)
        writer = logs.open_segment(opts.log, write_id, task, opts.segment)
        try:
            fill(writer)
            return writer.close()
        except BaseException:
            try:
                logs.discard(opts.log, writer)
            except Exception:  # the write's own error matters more; the job's abort sweeps
                log.warning("could not discard ledger %d of %s", writer.ledger_id, opts.log, exc_info=True)
            raise


_END = object()


def commit_write(
    opts: SinkOptions,
    write_id: str,
    segments: Sequence[LogSegment | None],
    *,
    overwrite: bool = False,
    txn: tuple[str, int] | None = None,
    shared_client: bool = False,
) -> CommitResult:
    """The driver's commit: the segments join the log (or replace it) in the order given.
    ``shared_client``: through this process's worker client (a Spark Python worker, which Spark
    reuses for the next job's or micro-batch's commit) instead of a session of its own."""
    with _client_for(opts, shared_client) as bk:
        return bk.logs(opts.logs_root).commit(
            opts.log, write_id, list(segments), overwrite=overwrite, txn=txn if txn is not None else opts.txn
        )


def abort_write(
    opts: SinkOptions, write_id: str, *, shared_client: bool = False, reusable: bool = False
) -> None:
    """The driver's abort: every ledger the write registered and did not commit goes, and a
    task of the write that opens its ledger later fails (its ledger deleted). ``reusable``: a
    retry of the write will use this write id again (a stream's batch), so nothing refuses it
    (:meth:`bkclient.named_log.NamedLogs.abort`)."""
    with _client_for(opts, shared_client) as bk:
        bk.logs(opts.logs_root).abort(opts.log, write_id, reusable=reusable)


def _client_for(opts: SinkOptions, shared: bool) -> contextlib.AbstractContextManager[BookKeeper]:
    return opts.worker_client() if shared else opts.client()
