"""Requests ``ZkClient`` builds itself for plain paths are the ones kazoo's own calls build.

``ZkClient`` skips kazoo's builders (their path normalising) when a path is already what that
normalising would make of it; these compare the two request objects, field by field."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient, TransactionRequest
from kazoo.protocol.paths import normpath
from kazoo.protocol.serialization import Create
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from bkmeta.store import CREATE_EPHEMERAL_SEQUENTIAL, TransactionOp
from bkmeta.zk import _transaction
from bkmeta.zk_connection import BatchingKazooClient, is_plain_path

OPS: list[TransactionOp] = [
    ("create", "/ledgers/00/0000/L0001", b"meta", -1),
    (CREATE_EPHEMERAL_SEQUENTIAL, "/ledgers/idgen/ID-", b"", -1),
    ("set", "/ledgers/00/0000/L0001", b"closed", 3),
    ("delete", "/ledgers/idgen/ID-0000000007", b"", -1),
    ("check", "/ledgers/LAYOUT", b"", 0),
]


def _kazoo_transaction(client: Any) -> Any:
    txn = TransactionRequest(client)
    txn.create(OPS[0][1], OPS[0][2])
    txn.create(OPS[1][1], OPS[1][2], ephemeral=True, sequence=True)
    txn.set_data(OPS[2][1], OPS[2][2], OPS[2][3])
    txn.delete(OPS[3][1], OPS[3][3])
    txn.check(OPS[4][1], OPS[4][3])
    return txn.operations


@pytest.mark.parametrize("acl", [None, [make_digest_acl("pybk", "secret", all=True)]])
def test_a_transaction_of_plain_paths_is_the_one_kazoo_builds(acl: Any) -> None:
    client = KazooClient(hosts="127.0.0.1:1", default_acl=acl)
    ours = _transaction(OPS, client.default_acl or OPEN_ACL_UNSAFE)
    assert list(ours.operations) == _kazoo_transaction(client)
    assert ours.serialize() == type(ours)(_kazoo_transaction(client)).serialize()


def test_a_plain_create_is_the_one_kazoo_builds() -> None:
    client = BatchingKazooClient(hosts="127.0.0.1:1")
    sent: list[Any] = []
    client._call = lambda request, result, schedule_wake=None: sent.append(request)  # type: ignore[method-assign]
    client.create_async("/ledgers/00/0000/L0042", b"meta")
    client.create_async("/ledgers/idgen/ID-", b"", sequence=True)
    assert sent == [
        Create("/ledgers/00/0000/L0042", b"meta", OPEN_ACL_UNSAFE, 0),
        Create("/ledgers/idgen/ID-", b"", OPEN_ACL_UNSAFE, 2),
    ]


@pytest.mark.parametrize(
    ("path", "plain"),
    [("/a", True), ("/ledgers/00/0000/L0001", True), ("a", False), ("/", False), ("/a/", False),
     ("//a", False), ("/a//b", False), ("/./a", False), ("/a/..", False), ("/a/.b", False)],
)
def test_a_path_is_plain_only_when_kazoo_would_leave_it_as_it_is(path: str, plain: bool) -> None:
    assert is_plain_path(path) is plain
    if plain:
        assert normpath(path) == path
