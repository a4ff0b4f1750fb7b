"""The add path's per-batch fast paths decide exactly as the per-entry code they stand in front of:
the core's check of a batch (``Bookie._accept_whole``), the write cache's put of a batch
(``WriteCacheHalf.put_all``) and the add-stream decoder's count of adds (``AddEntriesDecoder``)."""

from __future__ import annotations

import asyncio
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.storage_helpers import KEY, OTHER_KEY, InMemoryHost, add_all, add_op, body

from bkproto.entry_format import HEADER
from bkproto.v1 import bookie_pb2
from bookie.api import AddOp
from bookie.bookie import Bookie
from bookie.errors import BookieError
from bookie.handlers.add_answer import append_all_ok
from bookie.handlers.add_entries import (
    AddEntriesDecoder,
    TooManyAdds,
    _count_adds,
    _count_fields,
    _equal_adds,
)
from bookie.storage.write_cache import WriteCacheHalf

# How one op of a generated batch differs from a good add of its ledger (mostly not at all).
FAULTS = ["none"] * 6 + ["header", "short", "negative", "key_size", "other_key", "recovery", "ledger"]


def faulty_op(ledger_id: int, entry_id: int, fault: str, lac: int) -> AddOp:
    if fault == "header":
        return AddOp(ledger_id, entry_id, KEY, body(ledger_id, entry_id + 1))
    if fault == "short":
        return AddOp(ledger_id, entry_id, KEY, b"short")
    if fault == "negative":
        return AddOp(ledger_id, -entry_id - 1, KEY, body(ledger_id, -entry_id - 1))
    if fault == "key_size":
        return AddOp(ledger_id, entry_id, b"k" * 7, body(ledger_id, entry_id))
    if fault == "other_key":
        return add_op(ledger_id, entry_id, lac, key=OTHER_KEY)
    if fault == "ledger":  # an op of another ledger in the batch
        return add_op(ledger_id + 10, entry_id, lac)
    return add_op(ledger_id, entry_id, lac, recovery=fault == "recovery")


async def outcome(bookie: Bookie, batches: list[list[AddOp]]) -> list[Any]:
    """What clients and readers see of ``batches`` added in turn: statuses, messages, entries, LACs."""
    seen: list[Any] = []
    for ops in batches:
        seen.append([(r.status, r.message) for r in await bookie.add_entries(ops)])
    for ledger_id in (1, 2, 3, 4, 11, 12, 13, 14):
        try:
            entries = await bookie.list_entries(ledger_id)
            seen.append((ledger_id, entries, bookie.last_add_confirmed(ledger_id)))
        except BookieError as exc:
            seen.append((ledger_id, exc.status))
    return seen


async def prepared(read_only: bool, per_op_only: bool) -> Bookie:
    """A bookie that knows ledger 1 (KEY), ledger 2 (KEY, fenced), ledger 3 (OTHER_KEY), not 4."""
    bookie = InMemoryHost().bookie()
    await bookie.start()
    await add_all(bookie, [add_op(1, 0), add_op(2, 0), add_op(3, 0, key=OTHER_KEY)])
    await bookie.fence(2, KEY)
    if per_op_only:
        bookie._accept_whole = lambda *_: False  # type: ignore[method-assign]
    bookie.set_write_mode(read_only)
    return bookie


batch_specs = st.lists(
    st.tuples(
        st.integers(1, 4),  # ledger
        st.lists(
            st.tuples(st.integers(1, 6), st.sampled_from(FAULTS), st.integers(-1, 5)), min_size=1, max_size=6
        ),
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(specs=batch_specs, read_only=st.sampled_from([False, False, False, True]))
def test_the_core_decides_a_batch_as_the_per_op_check_does(
    specs: list[tuple[int, list[tuple[int, str, int]]]], read_only: bool
) -> None:
    batches = [[faulty_op(ledger, entry, fault, lac) for entry, fault, lac in ops] for ledger, ops in specs]

    async def both() -> tuple[list[Any], list[Any]]:
        fast, slow = await prepared(read_only, False), await prepared(read_only, True)
        try:
            return await outcome(fast, batches), await outcome(slow, batches)
        finally:
            await fast.close()
            await slow.close()

    fast_seen, slow_seen = asyncio.run(both())
    assert fast_seen == slow_seen


async def test_a_good_batch_of_one_ledger_is_decided_whole() -> None:
    bookie = await prepared(read_only=False, per_op_only=False)
    try:
        ops = [add_op(4, entry_id, entry_id - 1) for entry_id in range(5)]
        accepted: list[AddOp] = []
        updates: list[Any] = []
        lacs: dict[int, int] = {}
        assert bookie._accept_whole(ops, accepted, updates, lacs)
        assert accepted == ops
        assert [u.ledger_id for u in updates] == [4]  # the new ledger's master key
        assert lacs == {4: 3}
        assert not bookie._accept_whole([add_op(2, 1)], [], [], {})  # fenced: per op
    finally:
        await bookie.close()


# ---- the write cache ------------------------------------------------------------------------


put_batches = st.lists(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 8), st.integers(0, 40)), min_size=0, max_size=8),
    min_size=1,
    max_size=4,
)


@given(batches=put_batches)
def test_put_all_keeps_the_half_as_puts_one_by_one_do(batches: list[list[tuple[int, int, int]]]) -> None:
    whole, each = WriteCacheHalf(), WriteCacheHalf()
    for batch in batches:
        ops = [AddOp(ledger, entry, KEY, bytes([entry]) * (32 + extra)) for ledger, entry, extra in batch]
        whole.put_all(ops)
        for op in ops:
            each.put(op.ledger_id, op.entry_id, op.body)
    assert whole.ledgers == each.ledgers
    assert whole.last_entries == each.last_entries
    stored = sum(len(b) for entries in each.ledgers.values() for b in entries.values())
    assert whole.size == each.size == stored


cache_steps = st.lists(
    st.tuples(
        st.sampled_from(["put_all with crcs", "put_all", "put", "drop", "absorbed"]),
        st.lists(st.tuples(st.integers(1, 3), st.integers(0, 5), st.integers(0, 3)), max_size=5),
    ),
    max_size=8,
)


@given(steps=cache_steps)
def test_a_kept_crc_is_always_its_body_s(steps: list[tuple[str, list[tuple[int, int, int]]]]) -> None:
    half = WriteCacheHalf()
    for step, batch in steps:
        ops = [AddOp(ledger, entry, KEY, bytes([entry, variant]) * 20) for ledger, entry, variant in batch]
        if step == "put_all with crcs":
            half.put_all(ops, [crc32c.crc32c(op.body) for op in ops])
        elif step == "put_all":
            half.put_all(ops)
        elif step == "put":
            for op in ops:
                half.put(op.ledger_id, op.entry_id, op.body)
        elif step == "drop":
            for op in ops:
                half.drop_ledger(op.ledger_id)
        else:  # a failed flush's half takes back the newer entries over its own
            newer = WriteCacheHalf()
            newer.put_all(ops, [crc32c.crc32c(op.body) for op in ops])
            half = half.absorb(newer)
        for ledger_id, crcs in half.crcs.items():
            for entry_id, crc in crcs.items():
                assert crc == crc32c.crc32c(half.ledgers[ledger_id][entry_id])


# ---- the decoder's count of adds --------------------------------------------------------------


def message(sizes: list[int], entry_base: int, count_ok: bool = False) -> bytes:
    request = bookie_pb2.AddEntriesRequest(count_ok=count_ok)
    for index, size in enumerate(sizes):
        entry_id = entry_base + index
        request.adds.add(ledger_id=7, entry_id=entry_id, master_key=KEY,
                         body=HEADER.pack(7, entry_id, -1, size) + b"\n" * size)
    return request.SerializeToString()


@given(
    sizes=st.one_of(
        st.lists(st.integers(0, 20_000), max_size=12),
        st.tuples(st.integers(0, 300), st.integers(1, 40)).map(lambda sc: [sc[0]] * sc[1]),  # equal adds
    ),
    entry_base=st.sampled_from([0, 100, 16_380, 2**40]),
    limit=st.integers(0, 50),
    count_ok=st.booleans(),  # a top-level field that is not an add, after them
)
def test_the_count_of_adds_is_the_field_walk_s(
    sizes: list[int], entry_base: int, limit: int, count_ok: bool
) -> None:
    data = message(sizes, entry_base, count_ok)
    expected = min(len(sizes), limit + 1)
    assert min(_count_adds(data, limit), limit + 1) == _count_fields(data, limit) == expected


@given(data=st.binary(max_size=64), limit=st.integers(0, 10))
def test_the_count_of_adds_of_any_bytes_agrees_with_the_field_walk(data: bytes, limit: int) -> None:
    try:
        expected: int | None = _count_fields(data, limit)
    except (ValueError, Exception):
        expected = None
    try:
        got: int | None = min(_count_adds(data, limit), limit + 1)
    except Exception:
        got = None
    if expected is not None:  # bytes the general walk counts, the fast count counts alike
        assert got == expected


def test_a_message_of_equal_adds_over_the_limit_is_refused() -> None:
    decode = AddEntriesDecoder(max_adds=3)
    assert len(decode(message([50] * 3, 0)).request.adds) == 3
    for count_ok in (False, True):  # the strided count, with the flag after the adds or not
        assert _equal_adds(message([50] * 3, 1, count_ok)) == 3
    with pytest.raises(TooManyAdds):
        decode(message([50] * 4, 0))
    with pytest.raises(TooManyAdds):
        decode(message([50] * 4, 0, count_ok=True))
    with pytest.raises(TooManyAdds):
        decode(message([50, 51, 50, 50], 0))  # not equal: counted add by add


# ---- the all-EOK answer -------------------------------------------------------------------------


@given(
    ledger_id=st.one_of(st.integers(0, 300), st.integers(0, 2**63 - 1)),
    entry_ids=st.one_of(
        st.tuples(st.integers(0, 20_000), st.integers(1, 400)).map(lambda fc: list(range(fc[0], sum(fc)))),
        st.tuples(st.integers(0, 2**63 - 1000), st.integers(1, 400)).map(
            lambda fc: list(range(fc[0], sum(fc)))
        ),
        st.tuples(st.integers(0, 5000), st.integers(1, 300)).map(  # striped: two of every three ids
            lambda fc: [e for e in range(fc[0], fc[0] + fc[1]) if e % 3 != 1]
        ),
        st.lists(st.integers(0, 2**63 - 1), max_size=50).map(sorted),
    ),
    before=st.integers(0, 2),
)
def test_an_all_ok_answer_is_the_answer_built_result_by_result(
    ledger_id: int, entry_ids: list[int], before: int
) -> None:
    built, expected = bookie_pb2.AddEntriesResponse(), bookie_pb2.AddEntriesResponse()
    for response in (built, expected):  # results already in the answer (an earlier slice's) stay
        for index in range(before):
            response.results.add(status=bookie_pb2.EFENCED, ledger_id=9, entry_id=index, message="m")
    append_all_ok(built, ledger_id, entry_ids)
    for entry_id in entry_ids:
        expected.results.add(ledger_id=ledger_id, entry_id=entry_id)
    assert built == expected
    assert built.SerializeToString() == expected.SerializeToString()
