"""The bookie's limits against unauthenticated load (``bookie.limits``) and their uses in the add
path: counting, per-peer shares, the adds-per-message check before decoding, sliced processing."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry
from tests.support.fake_bookie_core import FakeBookieCore

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2
from bookie.config import ConfigError, load_config
from bookie.errors import BookieError
from bookie.handlers import HandlerLimits
from bookie.handlers.add_batch import AddBatchProcessor
from bookie.handlers.add_entries import AddEntriesDecoder, TooManyAdds
from bookie.limits import (
    CURRENT_CALL,
    ConnectionCounter,
    LimitStats,
    ListenerLimits,
    PeerByteBudget,
    PeerLongPolls,
    QuietLog,
    peer_host,
)
from bookie.stats import RequestStats

S = bookie_pb2
KEY = b"k" * 20


def test_peer_host_of_asyncio_and_grpc_peers() -> None:
    assert peer_host(("127.0.0.2", 5000)) == "127.0.0.2"
    assert peer_host("ipv4:10.1.2.3:41000") == "10.1.2.3"
    assert peer_host("ipv6:[::1]:41000") == "::1"
    assert peer_host("unix:/tmp/socket") == "unix:/tmp/socket"


def test_connections_are_counted_in_total_and_per_peer() -> None:
    counter = ConnectionCounter(max_total=3, max_per_peer=2)
    assert [counter.admit("a"), counter.admit("a"), counter.admit("a")] == [None, None, "connections_per_ip"]
    assert counter.admit("b") is None
    assert counter.admit("c") == "connections"
    counter.release("a")
    assert counter.admit("c") is None


async def test_a_peer_holds_at_most_its_share_of_a_byte_budget() -> None:
    budget = PeerByteBudget(max_total=100, max_per_peer=40)
    await budget.acquire("hostile", 30)
    second = asyncio.ensure_future(budget.acquire("hostile", 30))  # 60 > its share of 40
    await asyncio.sleep(0.01)
    assert not second.done()
    await asyncio.wait_for(budget.acquire("other", 40), 1)  # others still get theirs
    budget.release("hostile", 30)
    await asyncio.wait_for(second, 1)
    assert budget.used == 70


async def test_a_reservation_beyond_the_share_is_granted_to_a_peer_holding_nothing() -> None:
    budget = PeerByteBudget(max_total=100, max_per_peer=40)
    await asyncio.wait_for(budget.acquire("a", 90), 1)  # a maximal frame always fits
    budget.release("a", 90)
    assert budget.used == 0


async def test_a_large_reservation_is_not_passed_by_small_ones_that_fit_sooner() -> None:
    # Answers of 10 bytes keep coming and going; one of 80 waits. Without a queue, every 10 bytes
    # given back went to the next small one, and the large one waited until its timeout.
    budget = PeerByteBudget(max_total=100, max_per_peer=100)
    for peer in "abcdefghi":
        assert budget.try_acquire(peer, 10)
    large = asyncio.ensure_future(budget.acquire("large", 80))
    await asyncio.sleep(0)
    assert not large.done()
    small = asyncio.ensure_future(budget.acquire("small", 10))
    await asyncio.sleep(0)
    assert not small.done()  # 10 fit, but the large one came first
    assert not budget.try_acquire("other", 10)
    for peer in "abcdefgh":  # 80 given back, one small answer at a time
        budget.release(peer, 10)
        assert not budget.try_acquire(peer, 10)
    await asyncio.wait_for(large, 1)  # its turn came at 20 used
    await asyncio.wait_for(small, 1)  # then the next in line
    assert budget.used == 100


async def test_a_reservation_held_back_by_its_own_share_does_not_hold_up_other_peers() -> None:
    budget = PeerByteBudget(max_total=100, max_per_peer=40)
    assert budget.try_acquire("greedy", 30)
    over = asyncio.ensure_future(budget.acquire("greedy", 20))  # waits for its own bytes
    behind = asyncio.ensure_future(budget.acquire("greedy", 5))  # fits its share, but comes after
    await asyncio.sleep(0)
    assert not over.done() and not behind.done()
    assert budget.try_acquire("other", 30)  # others pass them
    await asyncio.wait_for(budget.acquire("third", 30), 1)
    assert not budget.try_acquire("greedy", 1)  # but not the same peer: its own order holds
    budget.release("greedy", 30)
    await asyncio.wait_for(asyncio.gather(over, behind), 1)
    assert budget.used == 85 and budget.waiting == 0


async def test_nothing_to_reserve_needs_no_turn_and_leaves_no_trace() -> None:
    # An empty add-port frame reserves 0 bytes: it must not wait behind anyone, nor leave the
    # peer counted (a 0-byte release once found the peer's count already gone).
    budget = PeerByteBudget(max_total=100, max_per_peer=100)
    assert budget.try_acquire("a", 100)
    waiter = asyncio.ensure_future(budget.acquire("b", 50))
    await asyncio.sleep(0)
    assert budget.try_acquire("c", 0)
    called: list[int] = []
    budget.reserve_later("c", 0, lambda: called.append(0))
    await asyncio.sleep(0)
    assert called == [0] and budget.waiting == 1
    budget.release("c", 0)
    budget.release("a", 100)
    await asyncio.wait_for(waiter, 1)
    budget.release("b", 50)
    assert budget.used == 0 and budget.waiting == 0


async def test_a_reservation_given_up_gives_its_bytes_back_and_its_turn_away() -> None:
    budget = PeerByteBudget(max_total=100, max_per_peer=100)
    assert budget.try_acquire("a", 90)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(budget.acquire("large", 50), 0.01)  # never granted
    assert budget.try_acquire("b", 10)  # nothing waits before it any more
    # Granted, then cancelled before its task resumed: the bytes come back all the same.
    waiter = asyncio.ensure_future(budget.acquire("late", 50))
    await asyncio.sleep(0)
    budget.release("a", 90)
    assert budget.used == 60  # reserved for the waiter in its turn
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.used == 10


async def test_a_queued_reservation_calls_back_with_its_bytes_reserved() -> None:
    budget = PeerByteBudget(max_total=100, max_per_peer=100)
    assert budget.try_acquire("a", 100)
    called: list[str] = []
    first = budget.reserve_later("b", 60, lambda: called.append("first"))
    budget.reserve_later("c", 40, lambda: called.append("second"))
    budget.release("a", 100)
    assert budget.used == 100 and not called  # reserved now, called back soon (not inside release)
    await asyncio.sleep(0)
    assert called == ["first", "second"]
    first.cancel()  # after its callback: the bytes are the caller's
    assert budget.used == 100
    # Withdrawn between its grant and its callback: the bytes go back and nothing is called.
    budget.release("b", 60)
    budget.release("c", 40)
    assert budget.try_acquire("a", 100)
    gone = budget.reserve_later("d", 50, lambda: called.append("gone"))
    budget.release("a", 100)
    gone.cancel()
    await asyncio.sleep(0)
    assert budget.used == 0 and called == ["first", "second"]


def adds_message(count: int, payload: bytes) -> bytes:
    request = S.AddEntriesRequest()
    for entry_id in range(count):
        body = HEADER.pack(1, entry_id, -1, len(payload)) + b"d" * 8 + payload
        request.adds.add(ledger_id=1, entry_id=entry_id, master_key=KEY, body=body)
    return request.SerializeToString()


def test_decoder_refuses_a_message_over_the_adds_limit_before_decoding() -> None:
    decode = AddEntriesDecoder(max_adds=100)
    assert len(decode(adds_message(100, b"x")).request.adds) == 100
    with pytest.raises(TooManyAdds, match="more than 100 adds"):
        decode(adds_message(101, b"x"))
    with pytest.raises(TooManyAdds):
        decode(b"\x0a\x00" * 10_000_000)  # ten million empty adds: refused without decoding them


def test_decoder_counts_exactly_at_the_smallest_adds() -> None:
    # empty adds (2 bytes each): the smallest a message of that many adds can be
    decode = AddEntriesDecoder(max_adds=100)
    assert len(decode(b"\x0a\x00" * 100).request.adds) == 100
    with pytest.raises(TooManyAdds):
        decode(b"\x0a\x00" * 101)


def test_decoder_takes_few_adds_whose_payloads_are_full_of_newlines() -> None:
    # 0x0A starts every add on the wire, and is also "\n": payloads full of them must not count
    message = adds_message(5, b"\n" * 1000)
    assert len(AddEntriesDecoder(max_adds=100)(message).request.adds) == 5


class _Peer:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


def test_long_polls_are_limited_per_peer() -> None:
    registry = CollectorRegistry()
    polls = PeerLongPolls(max_per_peer=2, stats=LimitStats(registry))
    CURRENT_CALL.set(_Peer("ipv4:10.0.0.1:1000"))
    with polls.slot(), polls.slot():
        with pytest.raises(BookieError) as refused, polls.slot():
            pass
        assert refused.value.status == S.ETOOMANYREQUESTS
        CURRENT_CALL.set(_Peer("ipv4:10.0.0.2:1000"))
        with polls.slot():  # another peer is not locked out
            pass
    value = registry.get_sample_value(
        "bookkeeper_server_LIMIT_REJECTIONS_total", {"listener": "grpc", "limit": "long_polls_per_ip"}
    )
    assert value == 1.0


def test_quiet_log_logs_once_per_interval_then_says_how_many_it_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet = QuietLog(logging.getLogger("test.quiet"), interval_s=0.0)
    caplog.set_level(logging.WARNING)
    quiet.warning("bad %s", "one")
    assert caplog.messages == ["bad one"]
    slow = QuietLog(logging.getLogger("test.quiet"), interval_s=3600.0)
    for n in range(5):
        slow.warning("bad %d", n)
    assert caplog.messages == ["bad one", "bad 0"]


def test_limits_are_configuration_keys() -> None:
    config = load_config(
        overrides={"maxConnectionsPerIp": "4", "frameTimeoutMs": "1500", "maxAddsPerMessage": "7"}
    )
    assert config.limits == ListenerLimits(
        max_connections_per_peer=4, frame_timeout_s=1.5, max_adds_per_message=7
    )
    with pytest.raises(ConfigError, match="maxConnectionsPerIp"):
        load_config(overrides={"maxConnections": "10", "maxConnectionsPerIp": "11"})
    with pytest.raises(ConfigError, match="frameTimeoutMs"):
        load_config(overrides={"frameTimeoutMs": "0"})


async def test_a_batch_bigger_than_a_loop_turn_is_answered_in_order_with_few_messages() -> None:
    core = FakeBookieCore()
    processor = AddBatchProcessor(
        core, RequestStats(CollectorRegistry()), HandlerLimits(adds_per_loop_turn=10)
    )
    adds = []
    for entry_id in range(95):
        body = HEADER.pack(3, entry_id, -1, 1) + b"d" * 8 + b"p"
        key = KEY if entry_id % 2 == 0 else b""  # every odd add lacks its key
        adds.append(S.AddRequest(ledger_id=3, entry_id=entry_id, master_key=key, body=body))
    response = await processor.process(adds)
    assert [(r.entry_id, r.status) for r in response.results] == [
        (e, S.EOK if e % 2 == 0 else S.EUA) for e in range(95)
    ]
    assert sum(bool(r.message) for r in response.results) == 16  # the rest carry their status only
    assert max(core.add_calls) <= 10  # the core got the adds a slice at a time
    assert sorted(core.ledgers[3].entries) == list(range(0, 95, 2))
