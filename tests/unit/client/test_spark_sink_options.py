"""The Spark sink's boundary checks: options as Spark hands them over (lower-cased strings), the
``value`` column, and row values. Each refusal must name what was wrong."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from bkclient import DigestType, IncorrectParameterError, MetadataStoreError
from bkclient.spark_sink import SinkOptions, as_entry
from bkmeta.named_log import LogCommit, LogSegment, check_log_name, check_write_id

BASE = {"zkservers": "zk1:2181,zk2:2181/chroot"}


def test_defaults_and_case_insensitive_keys() -> None:
    opts = SinkOptions.parse({**BASE, "path": "events"})
    assert opts.zk_servers == "zk1:2181,zk2:2181/chroot" and opts.log == "events"
    seg = opts.segment
    assert (seg.ensemble, seg.write_quorum, seg.ack_quorum, seg.digest) == (2, 2, 2, DigestType.CRC32C)
    assert opts.txn is None and opts.logs_root == "/pybk/logs"
    spelled = SinkOptions.parse({"ZKSERVERS": "zk:1", "Log": "x", "EnsembleSize": "5", "writequorumsize": "3",
                                 "ackQuorumSize": "2", "digestType": "hmac", "password": "pw",
                                 "txnAppId": "app", "txnVersion": "0"})
    assert spelled.segment.ensemble == 5 and spelled.segment.digest == DigestType.HMAC
    assert spelled.segment.password == b"pw" and spelled.txn == ("app", 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"log": "x"}, "'zkServers'"),
        ({**BASE}, "option 'log'"),
        ({**BASE, "log": "a", "path": "b"}, "disagree"),
        ({**BASE, "log": "a/b"}, "log name 'a/b' is invalid"),
        ({**BASE, "log": "x", "ensemble": "3"}, "unknown bookkeeper option 'ensemble'"),
        ({**BASE, "log": "x", "ensembleSize": "three"}, "'ensembleSize' must be an integer"),
        ({**BASE, "log": "x", "ackQuorumSize": "0"}, "'ackQuorumSize' must be at least 1"),
        ({**BASE, "log": "x", "ensembleSize": "1"}, "ensemble >= write quorum >= ack quorum"),
        ({**BASE, "log": "x", "digestType": "md5"}, "'digestType' must be one of CRC32, HMAC, CRC32C, DUMMY"),
        ({**BASE, "log": "x", "txnVersion": "3"}, "'txnVersion' needs option 'txnAppId'"),
        ({**BASE, "log": "x", "txnVersion": "-1", "txnAppId": "a"}, "'txnVersion' must be at least 0"),
        ({**BASE, "log": "x", "txnVersion": "1", "txnAppId": " "}, "'txnAppId' must not be empty"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(IncorrectParameterError, match=message):
        SinkOptions.parse(options)


def test_row_values() -> None:
    assert as_entry(b"\x00\xff", 0, 0) == b"\x00\xff"
    assert as_entry(bytearray(b"ab"), 0, 0) == b"ab"
    assert as_entry("é", 0, 0) == "é".encode()
    with pytest.raises(IncorrectParameterError, match="partition 3, row 7: 'value' is null"):
        as_entry(None, 3, 7)
    with pytest.raises(IncorrectParameterError, match="'value' is a int; use binary or string"):
        as_entry(5, 0, 1)


def test_value_column_must_be_binary_or_string() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

    from bkclient.spark import value_index

    assert value_index(StructType([StructField("k", IntegerType()), StructField("value", BinaryType())])) == 1
    assert value_index(StructType([StructField("value", StringType())])) == 0
    with pytest.raises(IncorrectParameterError, match="column 'value' is int"):
        value_index(StructType([StructField("value", IntegerType())]))
    with pytest.raises(IncorrectParameterError, match="no 'value' column in struct<id:int>"):
        value_index(StructType([StructField("id", IntegerType())]))


def test_log_names_and_segment_records() -> None:
    for good in ("a", "events.2026-11_v1", "A" * 200):
        assert check_log_name(good) == good
    for bad in ("", ".hidden", "-x", "a b", "a/b", "A" * 201, "zookeeper\n"):
        with pytest.raises(IncorrectParameterError, match="log name"):
            check_log_name(bad)
    segs = (LogSegment(2**40, 3, 99, "w-1", 4), LogSegment(7, 1, 0, "w-1", 0))
    commit = LogCommit("0000000003-w-1", "w-1", segs)
    assert LogCommit.from_bytes(commit.node, commit.to_bytes(), "/x") == commit
    with pytest.raises(MetadataStoreError, match="unreadable log commit at /x"):
        LogCommit.from_bytes("n", b'{"write_id": "w", "segments": [{"ledger_id": 1}]}', "/x")
    for bad in ("", "a/b", "x" * 101):
        with pytest.raises(IncorrectParameterError, match="write id"):
            check_write_id(bad)


def test_txn_app_id_alone_is_for_streams() -> None:
    opts = SinkOptions.parse({**BASE, "log": "x", "txnAppId": "q1"})
    assert opts.txn_app_id == "q1" and opts.txn is None
    with pytest.raises(IncorrectParameterError, match="needs option 'txnVersion' too"):
        opts.check_batch()
    SinkOptions.parse({**BASE, "log": "x", "txnAppId": "q1", "txnVersion": "2"}).check_batch()


def test_security_options_name_files_and_survive_pickling(tmp_path: Path) -> None:
    digest = tmp_path / "zk-digest"
    digest.write_text("cluster:pw\n")
    token = tmp_path / "token"
    token.write_text("tok\n")
    options = {**BASE, "log": "x", "clienttruststore": "/pki/ca.pem", "clientauthtokenfile": str(token),
               "zkenablesecurity": "true", "zkdigestauthfile": str(digest)}  # as Spark lower-cases them
    opts = pickle.loads(pickle.dumps(SinkOptions.parse(options)))  # options travel to executors
    config = opts.client_config()
    assert config.security is not None and config.zk_security is not None
    assert (config.security.trust_path, config.security.token) == (Path("/pki/ca.pem"), "tok")
    assert (config.zk_security.user, config.zk_security.enable_acls) == ("cluster", True)
    assert SinkOptions.parse({**BASE, "log": "x"}).client_config().security is None  # the environment's
