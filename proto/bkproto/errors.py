"""One error vocabulary for the whole project, keyed by BookKeeper's codes.

Two code spaces meet here, as in BookKeeper:

* client codes (``BKException.Code``: negative ints such as -101 for a fenced ledger), carried by
  every :class:`BKError` subclass as ``code``;
* bookie status codes (``StatusCode`` in ``bookie.proto``: 402 ENOLEDGER ... 507), returned on the
  wire and mapped to a client error by :func:`error_for_status`.

Subclasses register themselves with the ``@_register`` decorator (kazoo's pattern), so
``BKError.for_code(code)`` finds the class for any code and a new error is one small class.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

from bkproto.v1 import bookie_pb2

_REGISTRY: dict[int, type[BKError]] = {}
_E = TypeVar("_E", bound="type[BKError]")


def _register(cls: _E) -> _E:
    code = cls.code
    if code in _REGISTRY:
        raise RuntimeError(f"BK error code {code} registered twice")
    _REGISTRY[code] = cls
    return cls


class BKError(Exception):
    """Base of every pybookkeeper error. ``code`` is BookKeeper's client code."""

    code: ClassVar[int] = -999
    retriable: ClassVar[bool] = False
    default_message: ClassVar[str] = "unexpected condition"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.default_message)

    @property
    def message(self) -> str:
        return str(self.args[0])

    @staticmethod
    def for_code(code: int, message: str | None = None) -> BKError:
        """The error registered for ``code`` (``UnexpectedConditionError`` if unknown)."""
        cls = _REGISTRY.get(code, UnexpectedConditionError)
        return cls(message)


@_register
class UnexpectedConditionError(BKError):
    """Something that should not happen happened."""

    code = -999


@_register
class ReadError(BKError):
    """Entries could not be read from any replica."""

    code = -1
    retriable = True
    default_message = "error while reading ledger"


@_register
class NoBookieAvailableError(BKError):
    """No bookie answered."""

    code = -3
    retriable = True
    default_message = "no bookie available"


@_register
class DigestMismatchError(BKError):
    """An entry's digest did not verify: the data is corrupt or the password/digest type is wrong."""

    code = -5
    default_message = "entry digest does not match"


@_register
class NotEnoughBookiesError(BKError):
    """Fewer usable bookies than the ensemble needs."""

    code = -6
    retriable = True
    default_message = "not enough non-faulty bookies available"


@_register
class NoSuchLedgerError(BKError):
    """The ledger does not exist (on the bookie or in metadata)."""

    code = -7
    default_message = "no such ledger exists"


@_register
class BookieUnavailableError(BKError):
    """A bookie could not be reached."""

    code = -8
    retriable = True
    default_message = "bookie handle is not available"


@_register
class MetadataStoreError(BKError):
    """The metadata store (ZooKeeper) failed or could not be reached."""

    code = -9
    retriable = True
    default_message = "error while using ZooKeeper"


@_register
class LedgerRecoveryError(BKError):
    """Ledger recovery could not complete."""

    code = -10
    retriable = True
    default_message = "error while recovering ledger"


@_register
class LedgerClosedError(BKError):
    """The ledger is closed: no more writes."""

    code = -11
    default_message = "attempt to write to a closed ledger"


@_register
class WriteError(BKError):
    """An add could not reach its quorum."""

    code = -12
    retriable = True
    default_message = "write failed on bookie"


@_register
class NoSuchEntryError(BKError):
    """The entry does not exist."""

    code = -13
    default_message = "no such entry"


@_register
class IncorrectParameterError(BKError, ValueError):
    """An argument was invalid."""

    code = -14
    default_message = "incorrect parameter input"


@_register
class MetadataVersionError(BKError):
    """A compare-and-set lost: the metadata changed since it was read."""

    code = -17
    default_message = "bad ledger metadata version"


@_register
class ClientClosedError(BKError):
    """The client was closed."""

    code = -19
    default_message = "BookKeeper client is closed"


@_register
class LedgerExistsError(BKError):
    """A ledger with this id already exists."""

    code = -20
    default_message = "ledger existed"


@_register
class AddQuorumTimeoutError(BKError):
    """Adds did not reach the ack quorum in time."""

    code = -21
    retriable = True
    default_message = "add entry quorum wait timed out"


@_register
class DuplicateEntryIdError(BKError):
    """An entry id was written twice through a ledger-adv handle."""

    code = -22
    default_message = "attempted to add duplicate entry id"


@_register
class TimeoutError(BKError):  # BookKeeper's name; exported as bkclient.TimeoutError
    """An operation did not complete in time."""

    code = -23
    retriable = True
    default_message = "bookie operation timeout"


@_register
class IllegalOpError(BKError):
    """The operation is not allowed in this state."""

    code = -100
    default_message = "invalid operation"


@_register
class LedgerFencedError(BKError):
    """The ledger was fenced by a recovering reader: this writer can no longer add."""

    code = -101
    default_message = "ledger has been fenced off; some other client must have opened it to read"


@_register
class UnauthorizedAccessError(BKError):
    """Wrong password (master key) for the ledger."""

    code = -102
    default_message = "attempted to access ledger using the wrong password"


@_register
class ReadOnlyBookieError(BKError):
    """A write went to a read-only bookie."""

    code = -104
    retriable = True
    default_message = "attempting to write on read-only bookie"


@_register
class TooManyRequestsError(BKError):
    """The bookie is overloaded (its write cache is full); retry later."""

    code = -105
    retriable = True
    default_message = "too many requests to the same bookie"


@_register
class BadRequestError(BKError):
    """The bookie rejected a malformed request."""

    code = -110
    default_message = "bad request"


@_register
class BookieIOError(BKError):
    """The bookie hit an I/O error."""

    code = -111
    retriable = True
    default_message = "bookie I/O error"


@_register
class UnknownLedgerStateError(BKError):
    """The bookie cannot tell the ledger's state (BookKeeper's EUNKNOWNLEDGERSTATE)."""

    code = -112
    retriable = True
    default_message = "bookie does not know the ledger's state"


S = bookie_pb2.StatusCode
_STATUS_TO_ERROR: dict[int, type[BKError]] = {
    S.ENOLEDGER: NoSuchLedgerError,
    S.ENOENTRY: NoSuchEntryError,
    S.EBADREQ: BadRequestError,
    S.EIO: BookieIOError,
    S.EUA: UnauthorizedAccessError,
    S.EBADVERSION: BadRequestError,
    S.EFENCED: LedgerFencedError,
    S.EREADONLY: ReadOnlyBookieError,
    S.ETOOMANYREQUESTS: TooManyRequestsError,
    S.EUNKNOWNLEDGERSTATE: UnknownLedgerStateError,
}


def error_for_status(status: int, message: str = "") -> BKError:
    """Translate a bookie ``StatusCode`` (not EOK) into the matching client error."""
    cls = _STATUS_TO_ERROR.get(status, UnexpectedConditionError)
    name = S.Name(status) if status in S.values() else str(status)
    return cls(f"{name}: {message}" if message else None)
