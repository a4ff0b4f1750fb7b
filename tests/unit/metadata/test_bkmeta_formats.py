"""Cookie and bookie-registration znode formats."""

from __future__ import annotations

import pytest

from bkmeta.cookie import Cookie, InvalidCookieError
from bkmeta.registration import BookieServiceInfo
from bkproto.v1 import metadata_pb2


def test_cookie_text_is_bookkeepers_format() -> None:
    cookie = Cookie("10.0.0.1:3181", ("/j1", "/j2"), ("/l1", "/l2"), "abc-123")
    # Layout version 5, then TextFormat of CookieFormat; ledgerDirs is "<count>\t<dir>\t<dir>".
    assert cookie.to_bytes() == (
        b'5\nbookieHost: "10.0.0.1:3181"\njournalDir: "/j1,/j2"\n'
        b'ledgerDirs: "2\\t/l1\\t/l2"\ninstanceId: "abc-123"\n'
    )
    assert Cookie.from_bytes(cookie.to_bytes(), "x") == cookie


def test_cookie_without_instance_id_round_trips() -> None:
    cookie = Cookie("h:1", ("/j",), ("/l",), None)
    assert b"instanceId" not in cookie.to_bytes()
    assert Cookie.from_bytes(cookie.to_bytes(), "x") == cookie


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage", b"5\nnot text format", b'5\nbookieHost: "h"\njournalDir: "/j"\nledgerDirs: "3\\t/l"\n'],
)
def test_bad_cookie_names_where(data: bytes) -> None:
    with pytest.raises(InvalidCookieError, match="/data/current/VERSION"):
        Cookie.from_bytes(data, "/data/current/VERSION")


def test_cookie_differences_name_fields() -> None:
    a = Cookie("h:1", ("/j",), ("/l1", "/l2"), "i")
    b = Cookie("h:1", ("/j",), ("/l1",), "other")
    diffs = a.differences(b)
    assert len(diffs) == 2 and diffs[0].startswith("ledger_dirs") and diffs[1].startswith("instance_id")


def test_service_info_round_trip() -> None:
    info = BookieServiceInfo("b1:3181", "10.0.0.5", 3181, "10.0.0.5", 8080, rack="/dc1/rack2")
    back = BookieServiceInfo.from_bytes("b1:3181", info.to_bytes())
    assert back == info and back.properties["rack"] == "/dc1/rack2"
    assert back.grpc_target == "10.0.0.5:3181"


def test_service_info_without_http_or_add_port() -> None:
    info = BookieServiceInfo.for_address("127.0.0.1", 3181)
    back = BookieServiceInfo.from_bytes(info.bookie_id, info.to_bytes())
    assert back.http_host is None and back.http_port is None and back.rack == "/default-rack"
    assert back.add_port is None and back.add_target is None  # clients send adds over gRPC


def test_service_info_advertises_the_add_port_on_the_grpc_host() -> None:
    info = BookieServiceInfo.for_address("10.0.0.5", 3181, add_port=3182)
    msg = metadata_pb2.BookieServiceInfoFormat.FromString(info.to_bytes())
    endpoints = {e.id: (e.host, e.port, e.protocol) for e in msg.endpoints}
    assert endpoints["add"] == ("10.0.0.5", 3182, "pybk-add-v1")
    back = BookieServiceInfo.from_bytes(info.bookie_id, info.to_bytes())
    assert back.add_port == 3182 and back.add_target == "10.0.0.5:3182"
    msg.endpoints[[e.id for e in msg.endpoints].index("add")].protocol = "pybk-add-v9"
    assert BookieServiceInfo.from_bytes(info.bookie_id, msg.SerializeToString()).add_port is None
    assert "read" not in endpoints and not back.add_port_reads  # a bookie that serves no reads there


def test_service_info_says_whether_the_add_port_serves_the_read_stream() -> None:
    info = BookieServiceInfo.for_address("10.0.0.5", 3181, add_port=3182, add_port_reads=True)
    msg = metadata_pb2.BookieServiceInfoFormat.FromString(info.to_bytes())
    endpoints = {e.id: (e.host, e.port, e.protocol) for e in msg.endpoints}
    assert endpoints["read"] == ("10.0.0.5", 3182, "pybk-read-v1")
    assert BookieServiceInfo.from_bytes(info.bookie_id, info.to_bytes()).add_port_reads
    msg.endpoints[[e.id for e in msg.endpoints].index("read")].protocol = "pybk-read-v9"
    assert not BookieServiceInfo.from_bytes(info.bookie_id, msg.SerializeToString()).add_port_reads


@pytest.mark.parametrize("data", [b"", b"\xff\xff\xff"])
def test_empty_or_unreadable_registration_falls_back_to_id(data: bytes) -> None:
    # Older BookKeeper bookies register with empty data: the id is the address.
    info = BookieServiceInfo.from_bytes("192.168.1.9:3181", data)
    assert (info.grpc_host, info.grpc_port) == ("192.168.1.9", 3181)
