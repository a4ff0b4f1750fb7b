"""The pybookkeeper client library: asyncio first, with a blocking facade in ``bkclient.sync``.

    from bkclient import BookKeeper, DigestType
    async with await BookKeeper.connect("127.0.0.1:2181") as bk:
        wh = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        await wh.append(b"payload")
        await wh.close()

Every error raised is a :class:`BKError` subclass with BookKeeper's code, re-exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkproto.errors import (
    AddQuorumTimeoutError,
    BadRequestError,
    BKError,
    BookieIOError,
    BookieUnavailableError,
    ClientClosedError,
    DigestMismatchError,
    DuplicateEntryIdError,
    IllegalOpError,
    IncorrectParameterError,
    LedgerClosedError,
    LedgerExistsError,
    LedgerFencedError,
    LedgerRecoveryError,
    MetadataStoreError,
    MetadataVersionError,
    NoBookieAvailableError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadError,
    ReadOnlyBookieError,
    TimeoutError,
    TooManyRequestsError,
    UnauthorizedAccessError,
    UnexpectedConditionError,
    UnknownLedgerStateError,
    WriteError,
)
from bkproto.lazy_exports import lazy_getattr

# Imported on first use (the client's modules pull in gRPC and kazoo): a process that imports
# one light module, such as a Spark worker unpickling ``bkclient.spark``'s data source, does not
# pay for the whole client.
_EXPORTS = {
    "bkmeta.model": ("DigestType", "LedgerMetadata", "LedgerState", "Segment"),
    "bkclient.admin": ("BookKeeperAdmin", "Decommission", "FragmentPlan", "LedgerRecovery"),
    "bkclient.bookkeeper": ("BookKeeper",),
    "bkclient.config": ("ClientConfig",),
    "bkclient.entry": ("LastConfirmedAndEntry", "LedgerEntry"),
    "bkclient.read_handle": ("ReadHandle",),
    "bkclient.write_adv_handle": ("WriteAdvHandle",),
    "bkclient.write_handle": ("WriteHandle",),
}

if TYPE_CHECKING:
    from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment

    from .admin import BookKeeperAdmin, Decommission, FragmentPlan, LedgerRecovery
    from .bookkeeper import BookKeeper
    from .config import ClientConfig
    from .entry import LastConfirmedAndEntry, LedgerEntry
    from .read_handle import ReadHandle
    from .write_adv_handle import WriteAdvHandle
    from .write_handle import WriteHandle
else:
    __getattr__ = lazy_getattr(__name__, _EXPORTS)

__all__ = [
    "AddQuorumTimeoutError",
    "BKError",
    "BadRequestError",
    "BookKeeper",
    "BookKeeperAdmin",
    "BookieIOError",
    "BookieUnavailableError",
    "ClientClosedError",
    "ClientConfig",
    "Decommission",
    "DigestMismatchError",
    "DigestType",
    "DuplicateEntryIdError",
    "FragmentPlan",
    "IllegalOpError",
    "IncorrectParameterError",
    "LastConfirmedAndEntry",
    "LedgerClosedError",
    "LedgerEntry",
    "LedgerExistsError",
    "LedgerFencedError",
    "LedgerMetadata",
    "LedgerRecovery",
    "LedgerRecoveryError",
    "LedgerState",
    "MetadataStoreError",
    "MetadataVersionError",
    "NoBookieAvailableError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "ReadError",
    "ReadHandle",
    "ReadOnlyBookieError",
    "Segment",
    "TimeoutError",
    "TooManyRequestsError",
    "UnauthorizedAccessError",
    "UnexpectedConditionError",
    "UnknownLedgerStateError",
    "WriteAdvHandle",
    "WriteError",
    "WriteHandle",
]
