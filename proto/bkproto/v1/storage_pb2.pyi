from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class LedgerData(_message.Message):
    __slots__ = ("exists", "fenced", "masterKey", "explicitLac", "limbo")
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    MASTERKEY_FIELD_NUMBER: _ClassVar[int]
    EXPLICITLAC_FIELD_NUMBER: _ClassVar[int]
    LIMBO_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    fenced: bool
    masterKey: bytes
    explicitLac: bytes
    limbo: bool
    def __init__(self, exists: _Optional[bool] = ..., fenced: _Optional[bool] = ..., masterKey: _Optional[bytes] = ..., explicitLac: _Optional[bytes] = ..., limbo: _Optional[bool] = ...) -> None: ...
