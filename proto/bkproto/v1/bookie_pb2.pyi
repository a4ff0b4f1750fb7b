from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EOK: _ClassVar[StatusCode]
    ENOLEDGER: _ClassVar[StatusCode]
    ENOENTRY: _ClassVar[StatusCode]
    EBADREQ: _ClassVar[StatusCode]
    EIO: _ClassVar[StatusCode]
    EUA: _ClassVar[StatusCode]
    EBADVERSION: _ClassVar[StatusCode]
    EFENCED: _ClassVar[StatusCode]
    EREADONLY: _ClassVar[StatusCode]
    ETOOMANYREQUESTS: _ClassVar[StatusCode]
    EUNKNOWNLEDGERSTATE: _ClassVar[StatusCode]

class AddFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADD_FLAG_NONE: _ClassVar[AddFlag]
    RECOVERY_ADD: _ClassVar[AddFlag]

class WriteFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WRITE_FLAG_NONE: _ClassVar[WriteFlag]
    DEFERRED_SYNC: _ClassVar[WriteFlag]

class ReadFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_FLAG_NONE: _ClassVar[ReadFlag]
    FENCE_LEDGER: _ClassVar[ReadFlag]
    ENTRY_PIGGYBACK: _ClassVar[ReadFlag]

class BookieInfoFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BOOKIE_INFO_NONE: _ClassVar[BookieInfoFlag]
    TOTAL_DISK_CAPACITY: _ClassVar[BookieInfoFlag]
    FREE_DISK_SPACE: _ClassVar[BookieInfoFlag]
EOK: StatusCode
ENOLEDGER: StatusCode
ENOENTRY: StatusCode
EBADREQ: StatusCode
EIO: StatusCode
EUA: StatusCode
EBADVERSION: StatusCode
EFENCED: StatusCode
EREADONLY: StatusCode
ETOOMANYREQUESTS: StatusCode
EUNKNOWNLEDGERSTATE: StatusCode
ADD_FLAG_NONE: AddFlag
RECOVERY_ADD: AddFlag
WRITE_FLAG_NONE: WriteFlag
DEFERRED_SYNC: WriteFlag
READ_FLAG_NONE: ReadFlag
FENCE_LEDGER: ReadFlag
ENTRY_PIGGYBACK: ReadFlag
BOOKIE_INFO_NONE: BookieInfoFlag
TOTAL_DISK_CAPACITY: BookieInfoFlag
FREE_DISK_SPACE: BookieInfoFlag

class AddRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "master_key", "body", "flags", "write_flags")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    WRITE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    flags: int
    write_flags: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., body: _Optional[bytes] = ..., flags: _Optional[int] = ..., write_flags: _Optional[int] = ...) -> None: ...

class AddResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "entry_id", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    entry_id: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class PackedAdds(_message.Message):
    __slots__ = ("ledger_id", "master_key", "flags", "write_flags", "entry_ids", "body_sizes", "bodies")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    WRITE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    BODY_SIZES_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    flags: int
    write_flags: int
    entry_ids: _containers.RepeatedScalarFieldContainer[int]
    body_sizes: _containers.RepeatedScalarFieldContainer[int]
    bodies: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., flags: _Optional[int] = ..., write_flags: _Optional[int] = ..., entry_ids: _Optional[_Iterable[int]] = ..., body_sizes: _Optional[_Iterable[int]] = ..., bodies: _Optional[bytes] = ...) -> None: ...

class AddEntriesRequest(_message.Message):
    __slots__ = ("adds", "packed", "count_ok")
    ADDS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    COUNT_OK_FIELD_NUMBER: _ClassVar[int]
    adds: _containers.RepeatedCompositeFieldContainer[AddRequest]
    packed: _containers.RepeatedCompositeFieldContainer[PackedAdds]
    count_ok: bool
    def __init__(self, adds: _Optional[_Iterable[_Union[AddRequest, _Mapping]]] = ..., packed: _Optional[_Iterable[_Union[PackedAdds, _Mapping]]] = ..., count_ok: _Optional[bool] = ...) -> None: ...

class AddEntriesResponse(_message.Message):
    __slots__ = ("results", "ok_count")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    OK_COUNT_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AddResponse]
    ok_count: int
    def __init__(self, results: _Optional[_Iterable[_Union[AddResponse, _Mapping]]] = ..., ok_count: _Optional[int] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "flags", "master_key", "previous_lac", "timeout_ms")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_LAC_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    flags: int
    master_key: bytes
    previous_lac: int
    timeout_ms: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., flags: _Optional[int] = ..., master_key: _Optional[bytes] = ..., previous_lac: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "entry_id", "body", "max_lac", "lac_update_timestamp", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    MAX_LAC_FIELD_NUMBER: _ClassVar[int]
    LAC_UPDATE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    entry_id: int
    body: bytes
    max_lac: int
    lac_update_timestamp: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., body: _Optional[bytes] = ..., max_lac: _Optional[int] = ..., lac_update_timestamp: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReadStreamRequest(_message.Message):
    __slots__ = ("request_id", "read", "stride_poll", "read_entries", "cancel")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    STRIDE_POLL_FIELD_NUMBER: _ClassVar[int]
    READ_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    read: ReadRequest
    stride_poll: StridePollRequest
    read_entries: ReadEntriesRequest
    cancel: bool
    def __init__(self, request_id: _Optional[int] = ..., read: _Optional[_Union[ReadRequest, _Mapping]] = ..., stride_poll: _Optional[_Union[StridePollRequest, _Mapping]] = ..., read_entries: _Optional[_Union[ReadEntriesRequest, _Mapping]] = ..., cancel: _Optional[bool] = ...) -> None: ...

class ReadStreamResponse(_message.Message):
    __slots__ = ("request_id", "read", "stride_poll", "read_entries")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    STRIDE_POLL_FIELD_NUMBER: _ClassVar[int]
    READ_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    read: ReadResponse
    stride_poll: StridePollResponse
    read_entries: ReadEntriesResponse
    def __init__(self, request_id: _Optional[int] = ..., read: _Optional[_Union[ReadResponse, _Mapping]] = ..., stride_poll: _Optional[_Union[StridePollResponse, _Mapping]] = ..., read_entries: _Optional[_Union[ReadEntriesResponse, _Mapping]] = ...) -> None: ...

class StridePollRequest(_message.Message):
    __slots__ = ("ledger_id", "first_entry_id", "stride", "max_count", "max_bytes", "timeout_ms", "standing")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    STANDING_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry_id: int
    stride: int
    max_count: int
    max_bytes: int
    timeout_ms: int
    standing: bool
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., stride: _Optional[int] = ..., max_count: _Optional[int] = ..., max_bytes: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., standing: _Optional[bool] = ...) -> None: ...

class StridePollResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "first_entry_id", "stride", "bodies", "max_lac", "message", "more")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    MAX_LAC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    first_entry_id: int
    stride: int
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    max_lac: int
    message: str
    more: bool
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., stride: _Optional[int] = ..., bodies: _Optional[_Iterable[bytes]] = ..., max_lac: _Optional[int] = ..., message: _Optional[str] = ..., more: _Optional[bool] = ...) -> None: ...

class ReadEntriesRequest(_message.Message):
    __slots__ = ("ledger_id", "first_entry_id", "max_count", "max_bytes", "stride")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry_id: int
    max_count: int
    max_bytes: int
    stride: int
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., max_count: _Optional[int] = ..., max_bytes: _Optional[int] = ..., stride: _Optional[int] = ...) -> None: ...

class ReadEntriesResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "first_entry_id", "bodies", "max_lac", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    MAX_LAC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    first_entry_id: int
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    max_lac: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., bodies: _Optional[_Iterable[bytes]] = ..., max_lac: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReadLacRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class ReadLacResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "lac_body", "last_entry_body", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAC_BODY_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_BODY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    lac_body: bytes
    last_entry_body: bytes
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., lac_body: _Optional[bytes] = ..., last_entry_body: _Optional[bytes] = ..., message: _Optional[str] = ...) -> None: ...

class WriteLacRequest(_message.Message):
    __slots__ = ("ledger_id", "lac", "master_key", "body")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    lac: int
    master_key: bytes
    body: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., lac: _Optional[int] = ..., master_key: _Optional[bytes] = ..., body: _Optional[bytes] = ...) -> None: ...

class WriteLacResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ForceLedgerRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class ForceLedgerResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class GetBookieInfoRequest(_message.Message):
    __slots__ = ("requested",)
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    requested: int
    def __init__(self, requested: _Optional[int] = ...) -> None: ...

class GetBookieInfoResponse(_message.Message):
    __slots__ = ("status", "total_disk_capacity", "free_disk_space", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DISK_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    FREE_DISK_SPACE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    total_disk_capacity: int
    free_disk_space: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., total_disk_capacity: _Optional[int] = ..., free_disk_space: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class GetListOfEntriesOfLedgerRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class EntryRange(_message.Message):
    __slots__ = ("first", "last")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class GetListOfEntriesOfLedgerResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "ranges", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    ranges: _containers.RepeatedCompositeFieldContainer[EntryRange]
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[EntryRange, _Mapping]]] = ..., message: _Optional[str] = ...) -> None: ...
