"""Packed adds (``AddEntriesRequest.packed``) are decided and answered exactly as the same adds sent
one ``AddRequest`` each, in the documented order (the ``adds`` first, then each group's); a
malformed group is refused whole with a reason and fails none of its neighbours; the decoder
counts packed adds against ``maxAddsPerMessage``; the add port's refusal answers them."""

from __future__ import annotations

import asyncio
from itertools import groupby
from operator import attrgetter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from tests.support.storage_helpers import KEY, OTHER_KEY, InMemoryHost, add_all, add_op, body

from bkproto.v1 import bookie_pb2
from bookie.api import AddOp, AddResult
from bookie.bookie import Bookie
from bookie.handlers.add_batch import AddBatchProcessor, _all_ok_in_a_row
from bookie.handlers.add_entries import AddEntriesDecoder, TooManyAdds, _count_adds, parse_add_entries
from bookie.handlers.add_message import MessageAdds, PackedMessage, packed_only, request_ops, unpack_group
from bookie.handlers.common import HandlerLimits
from bookie.security import refused_add_response
from bookie.stats import RequestStats

MAX_ENTRY_BYTES = 200
# How one add differs from a good one of its ledger (mostly not at all).
FAULTS = ["none"] * 5 + ["header", "short", "negative", "oversize"]


def add_body(ledger_id: int, entry_id: int, fault: str) -> tuple[int, bytes]:
    """The entry id and body an add of ``fault`` carries."""
    if fault == "header":
        return entry_id, body(ledger_id, entry_id + 1)
    if fault == "short":
        return entry_id, b"short"
    if fault == "negative":
        return -entry_id - 1, body(ledger_id, -entry_id - 1)
    if fault == "oversize":
        return entry_id, body(ledger_id, entry_id, payload=b"x" * MAX_ENTRY_BYTES)
    return entry_id, body(ledger_id, entry_id)


# A group: ledger (1 known with KEY, 3 known with OTHER_KEY, 4 unknown), key, recovery, its adds.
group_specs = st.tuples(
    st.sampled_from([1, 1, 3, 4]),
    st.sampled_from([KEY, KEY, KEY, OTHER_KEY, b""]),
    st.booleans(),
    st.lists(st.tuples(st.integers(1, 30), st.sampled_from(FAULTS)), min_size=0, max_size=7),
)


def requests_of(specs: list[tuple[int, bytes, bool, list[tuple[int, str]]]], singles: int) -> tuple[
    bookie_pb2.AddEntriesRequest, bookie_pb2.AddEntriesRequest
]:
    """The same adds as a message with the first ``singles`` groups per add and the rest packed,
    and as a message of per-add adds (in the packed one's answer order: the per-add ones come
    first there too)."""
    packed, per_add = bookie_pb2.AddEntriesRequest(), bookie_pb2.AddEntriesRequest()
    for index, (ledger_id, key, recovery, adds) in enumerate(specs):
        flags = bookie_pb2.RECOVERY_ADD if recovery else 0
        pairs = [add_body(ledger_id, entry_id, fault) for entry_id, fault in adds]
        elements = [
            bookie_pb2.AddRequest(ledger_id=ledger_id, entry_id=e, master_key=key, body=b, flags=flags)
            for e, b in pairs
        ]
        per_add.adds.extend(elements)
        if index < singles:
            packed.adds.extend(elements)
        else:
            packed.packed.add(
                ledger_id=ledger_id, master_key=key, flags=flags, entry_ids=[e for e, _ in pairs],
                body_sizes=[len(b) for _, b in pairs], bodies=b"".join(b for _, b in pairs),
            )
    return packed, per_add


async def prepared(read_only: bool) -> Bookie:
    bookie = InMemoryHost().bookie()
    await bookie.start()
    await add_all(bookie, [add_op(1, 0), add_op(3, 0, key=OTHER_KEY)])
    bookie.set_write_mode(read_only)
    return bookie


def processor(bookie: Bookie, slice_size: int) -> AddBatchProcessor:
    limits = HandlerLimits(max_entry_bytes=MAX_ENTRY_BYTES, adds_per_loop_turn=slice_size)
    return AddBatchProcessor(bookie, RequestStats(CollectorRegistry()), limits)


def answer(response: bookie_pb2.AddEntriesResponse) -> list[tuple[int, int, int, str]]:
    return [(r.status, r.ledger_id, r.entry_id, r.message) for r in response.results]


@settings(max_examples=120, deadline=None)
@given(
    specs=st.lists(group_specs, min_size=1, max_size=4),
    singles=st.integers(0, 2),
    slice_size=st.sampled_from([2, 3, 5, 4096]),
    read_only=st.sampled_from([False, False, True]),
)
def test_packed_adds_are_decided_and_answered_as_the_same_adds_one_by_one(
    specs: list[tuple[int, bytes, bool, list[tuple[int, str]]]],
    singles: int,
    slice_size: int,
    read_only: bool,
) -> None:
    packed, per_add = requests_of(specs, singles)
    decoded = parse_add_entries(packed.SerializeToString()).request
    plain = parse_add_entries(per_add.SerializeToString()).request
    assert len(decoded.adds) == len(plain.adds)
    if packed.packed:
        assert isinstance(decoded.adds, MessageAdds)
        assert decoded.adds.ops() == (request_ops(plain.adds), {})
        assert list(decoded.adds) == list(plain.adds)
        assert list(decoded.adds.ids()) == [(a.ledger_id, a.entry_id) for a in plain.adds]

    async def both() -> list[Any]:
        seen: list[Any] = []
        for adds in (decoded.adds, plain.adds):
            bookie = await prepared(read_only)
            response = await processor(bookie, slice_size).process(adds)
            seen.append((answer(response), await stored(bookie)))
        return seen

    got, expected = asyncio.run(both())
    assert got == expected


async def stored(bookie: Bookie) -> list[Any]:
    seen: list[Any] = []
    for ledger_id in (1, 3, 4):
        try:
            seen.append((ledger_id, await bookie.list_entries(ledger_id)))
        except Exception as exc:  # the status of a ledger the adds never reached
            seen.append((ledger_id, type(exc).__name__))
    return seen


def group(ledger_id: int, entry_ids: list[int], sizes: list[int] | None = None, bodies: bytes | None = None,
          key: bytes = KEY) -> bookie_pb2.PackedAdds:
    parts = [body(ledger_id, e) for e in entry_ids]
    return bookie_pb2.PackedAdds(
        ledger_id=ledger_id, master_key=key, entry_ids=entry_ids,
        body_sizes=[len(p) for p in parts] if sizes is None else sizes,
        bodies=b"".join(parts) if bodies is None else bodies,
    )


async def test_a_malformed_group_is_refused_whole_and_fails_none_of_its_neighbours() -> None:
    bookie = await prepared(read_only=False)
    request = bookie_pb2.AddEntriesRequest()
    request.adds.add(ledger_id=1, entry_id=1, master_key=KEY, body=body(1, 1))
    request.packed.append(group(1, [2, 3]))
    request.packed.append(group(1, [4, 5, 6], sizes=[len(body(1, 4))] * 2))  # a size missing
    short = group(1, [7, 8])
    short.bodies = short.bodies[:-1]  # a byte short of the sizes
    request.packed.append(short)
    request.packed.append(group(1, [9]))
    adds = parse_add_entries(request.SerializeToString()).request.adds
    response = await processor(bookie, 4096).process(adds)
    statuses = [(r.entry_id, r.status) for r in response.results]
    eok, bad = bookie_pb2.EOK, bookie_pb2.EBADREQ
    assert statuses == [(1, eok), (2, eok), (3, eok)] + [(e, bad) for e in range(4, 9)] + [(9, eok)]
    messages = [r.message for r in response.results]
    assert messages[3] == "packed adds of ledger 1: 3 entry ids but 2 body sizes"
    size = 2 * len(body(1, 7))
    assert messages[6] == (
        f"packed adds of ledger 1: the 2 body sizes add up to {size} bytes but the bodies hold {size - 1}"
    )
    assert await bookie.list_entries(1) == [(0, 3), (9, 9)]


async def test_a_group_without_its_key_or_over_the_size_limit_is_refused_add_by_add() -> None:
    bookie = await prepared(read_only=False)
    request = bookie_pb2.AddEntriesRequest()
    request.packed.append(group(1, [1, 2], key=b""))
    big = [body(1, 3), body(1, 4, payload=b"x" * MAX_ENTRY_BYTES), body(1, 5)]
    request.packed.add(ledger_id=1, master_key=KEY, entry_ids=[3, 4, 5], body_sizes=list(map(len, big)),
                       bodies=b"".join(big))
    adds = parse_add_entries(request.SerializeToString()).request.adds
    response = await processor(bookie, 4096).process(adds)
    eua, eok, bad = bookie_pb2.EUA, bookie_pb2.EOK, bookie_pb2.EBADREQ
    statuses = [(r.entry_id, r.status) for r in response.results]
    assert statuses == [(1, eua), (2, eua), (3, eok), (4, bad), (5, eok)]
    assert response.results[0].message == "add of entry 1 of ledger 1 without a master key"
    assert "exceeds the 200-byte limit" in response.results[3].message
    assert await bookie.list_entries(1) == [(0, 0), (3, 3), (5, 5)]


# ---- the decoder's count --------------------------------------------------------------------------


@given(
    specs=st.lists(
        st.tuples(st.booleans(), st.integers(0, 40), st.integers(0, 3)), min_size=0, max_size=6
    ),
    limit=st.integers(0, 60),
)
def test_the_count_of_adds_counts_each_packed_add_and_an_empty_group_as_one(
    specs: list[tuple[bool, int, int]], limit: int
) -> None:
    request = bookie_pb2.AddEntriesRequest()
    expected = 0
    for per_add, count, size in specs:
        if per_add:
            for entry_id in range(count):
                request.adds.add(ledger_id=1, entry_id=entry_id, master_key=KEY, body=b"b" * size)
            expected += count
        else:
            request.packed.add(ledger_id=1, master_key=KEY, entry_ids=range(count), body_sizes=[size] * count,
                               bodies=b"b" * size * count)
            expected += max(1, count)
    data = request.SerializeToString()
    assert min(_count_adds(data, limit), limit + 1) == min(expected, limit + 1)
    decode = AddEntriesDecoder(max_adds=limit)
    if expected > limit:
        with pytest.raises(TooManyAdds):
            decode(data)
    else:
        assert len(decode(data).request.adds) == sum(count for _, count, _ in specs)


def test_a_group_of_countless_empty_adds_is_refused_before_it_is_parsed() -> None:
    """A million zero-size adds are 8 MB of entry ids: counted by the field's length alone."""
    request = bookie_pb2.AddEntriesRequest()
    request.packed.add(ledger_id=1, master_key=KEY, entry_ids=range(1_000_000), body_sizes=[0] * 1_000_000)
    with pytest.raises(TooManyAdds, match="more than 100000 adds"):
        AddEntriesDecoder(max_adds=100_000)(request.SerializeToString())
    empty_groups = bookie_pb2.AddEntriesRequest(packed=[bookie_pb2.PackedAdds()] * 300)
    with pytest.raises(TooManyAdds):
        AddEntriesDecoder(max_adds=100)(empty_groups.SerializeToString())


# ---- the add port's refusal -----------------------------------------------------------------------


def test_a_refused_caller_gets_eua_for_every_add_packed_or_not_in_answer_order() -> None:
    request = bookie_pb2.AddEntriesRequest()
    request.packed.append(group(2, [5, 6]))
    request.adds.add(ledger_id=1, entry_id=1, master_key=KEY, body=body(1, 1))
    request.packed.append(group(1, [7]))
    for message in (request, parse_add_entries(request.SerializeToString()).request):
        response = refused_add_response(message, "not allowed")
        order = [(1, 1), (2, 5), (2, 6), (1, 7)]  # the per-add one first, then the groups'
        assert [(r.status, r.ledger_id, r.entry_id, r.message) for r in response.results] == [
            (bookie_pb2.EUA, ledger_id, entry_id, "not allowed") for ledger_id, entry_id in order
        ]


# ---- reading packed groups without protobuf ----------------------------------------------------------


@given(
    groups=st.lists(
        st.tuples(
            st.integers(-(2**63), 2**63 - 1),
            st.binary(max_size=24),
            st.integers(0, 2**32 - 1),
            st.integers(0, 2**32 - 1),
            st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.binary(max_size=20)), max_size=6),
            st.integers(-2, 2),  # bytes added to or cut from the bodies: a malformed group
        ),
        min_size=1,
        max_size=4,
    ),
    count_ok=st.booleans(),
)
def test_a_message_of_packed_groups_is_read_as_protobuf_reads_it(
    groups: list[tuple[int, bytes, int, int, list[tuple[int, bytes]], int]], count_ok: bool
) -> None:
    request = bookie_pb2.AddEntriesRequest(count_ok=count_ok)
    for ledger_id, key, flags, write_flags, adds, skew in groups:
        bodies = b"".join(b for _, b in adds)
        bodies = bodies + b"x" * skew if skew >= 0 else bodies[:skew]
        request.packed.add(
            ledger_id=ledger_id, master_key=key, flags=flags, write_flags=write_flags,
            entry_ids=[e for e, _ in adds], body_sizes=[len(b) for _, b in adds], bodies=bodies,
        )
    data = request.SerializeToString()
    assert packed_only(data) == protobuf_read(data)  # fields in order, as serializers write them: taken


def protobuf_read(data: bytes) -> PackedMessage:
    """What protobuf's parse of a message of packed groups gives, as :func:`packed_only` gives it."""
    message = bookie_pb2.AddEntriesRequest.FromString(data)
    assert not message.adds
    return PackedMessage([unpack_group(group) for group in message.packed], message.count_ok)


VALID = bookie_pb2.AddEntriesRequest(packed=[
    bookie_pb2.PackedAdds(
        ledger_id=300, master_key=KEY, flags=1, entry_ids=[1, 2], body_sizes=[3, 2], bodies=b"abcde"
    ),
    bookie_pb2.PackedAdds(ledger_id=-5, entry_ids=[2**40], body_sizes=[0]),
], count_ok=True).SerializeToString()


@settings(max_examples=600)
@given(
    data=st.one_of(
        st.binary(max_size=80),
        st.binary(max_size=60).map(lambda b: b"\x12" + b),
        st.binary(max_size=60).map(lambda b: VALID + b"\x18" + b),  # a flag, then anything
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255), st.integers(1, len(VALID))).map(
            lambda c: (VALID[: c[0]] + bytes([c[1]]) + VALID[c[0] + 1 :])[: c[2]]  # one byte changed, cut
        ),
    )
)
def test_any_bytes_the_fast_read_takes_protobuf_parses_alike(data: bytes) -> None:
    read = packed_only(data)
    if read is not None:
        assert read == protobuf_read(data)


def test_a_message_the_fast_read_does_not_take_goes_through_protobuf() -> None:
    group = bookie_pb2.PackedAdds(ledger_id=1, master_key=KEY, entry_ids=[3], body_sizes=[4], bodies=b"body")
    out_of_order = group.SerializeToString()
    out_of_order = out_of_order[2:] + out_of_order[:2]  # the ledger id field moved to the end
    data = b"\x12" + bytes([len(out_of_order)]) + out_of_order
    assert packed_only(data) is None
    (op,), refused = parse_add_entries(data).request.adds.ops()
    assert (op.ledger_id, op.entry_id, op.master_key, op.body, refused) == (1, 3, KEY, b"body", {})


# ---- the all-EOK answer of several ledgers ------------------------------------------------------


@given(
    runs=st.lists(
        st.tuples(st.integers(0, 2**40), st.lists(st.integers(0, 2**40), min_size=1, max_size=30)),
        min_size=1,
        max_size=4,
    )
)
def test_an_all_ok_answer_of_several_ledgers_is_the_answer_built_result_by_result(
    runs: list[tuple[int, list[int]]],
) -> None:
    """Built per run of one ledger when each run's ids ascend; otherwise nothing is answered."""
    ops = [AddOp(ledger_id, entry_id, KEY, b"") for ledger_id, ids in runs for entry_id in sorted(ids)]
    if len(runs) > 1 and runs[0][1]:
        ops.append(ops[0])  # the first ledger again, with an id lower than its run's last or equal
    outcomes = [AddResult(bookie_pb2.EOK)] * len(ops)
    built, expected = bookie_pb2.AddEntriesResponse(), bookie_pb2.AddEntriesResponse()
    for op in ops:
        expected.results.add(ledger_id=op.ledger_id, entry_id=op.entry_id)
    runs_of_ops = [[op.entry_id for op in run] for _, run in groupby(ops, key=attrgetter("ledger_id"))]
    ascending = all(ids == sorted(ids) for ids in runs_of_ops)
    assert _all_ok_in_a_row(built, ops, outcomes) == ascending
    if ascending:
        assert built.SerializeToString() == expected.SerializeToString()
    else:
        assert not built.results


# ---- the leading successes answered as a count ----------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(
    specs=st.lists(group_specs, min_size=1, max_size=4),
    singles=st.integers(0, 2),
    slice_size=st.sampled_from([2, 3, 5, 4096]),
)
def test_with_count_ok_the_leading_all_ok_slices_are_a_count_and_the_rest_as_without_it(
    specs: list[tuple[int, bytes, bool, list[tuple[int, str]]]], singles: int, slice_size: int
) -> None:
    request, _ = requests_of(specs, singles)
    request.count_ok = True
    decoded = parse_add_entries(request.SerializeToString()).request
    assert decoded.count_ok

    async def both() -> list[bookie_pb2.AddEntriesResponse]:
        answers = []
        for count_ok in (True, False):
            bookie = await prepared(read_only=False)
            answers.append(await processor(bookie, slice_size).process(decoded.adds, count_ok))
        return answers

    counted, plain = asyncio.run(both())
    statuses = [r.status for r in plain.results]
    leading = 0  # the adds of the slices, from the first, whose adds all succeeded
    while leading < len(statuses) and not any(statuses[leading : leading + slice_size]):
        leading = min(leading + slice_size, len(statuses))
    assert plain.ok_count == 0
    assert counted.ok_count == leading
    assert answer(counted) == answer(plain)[leading:]


async def test_a_failure_ends_the_count_and_every_add_after_it_has_its_own_result() -> None:
    """Slices of two: [ok ok] [ok fenced-key] [ok ok]: the first slice is counted; the second
    and the third, although all OK, are answered add by add (a count follows no result)."""
    bookie = await prepared(read_only=False)
    request = bookie_pb2.AddEntriesRequest(count_ok=True)
    request.packed.append(group(1, [1, 2, 3]))
    request.packed.append(group(3, [1], key=KEY))  # ledger 3 has OTHER_KEY: EUA
    request.packed.append(group(1, [4, 5]))
    adds = parse_add_entries(request.SerializeToString()).request.adds
    response = await processor(bookie, 2).process(adds, count_ok=True)
    eok, eua = bookie_pb2.EOK, bookie_pb2.EUA
    assert response.ok_count == 2
    assert [(r.status, r.ledger_id, r.entry_id) for r in response.results] == [
        (eok, 1, 3), (eua, 3, 1), (eok, 1, 4), (eok, 1, 5)
    ]
    assert await bookie.list_entries(1) == [(0, 5)]


async def test_an_all_ok_message_with_count_ok_is_answered_by_its_count_alone() -> None:
    bookie = await prepared(read_only=False)
    for first, count_ok, slice_size in ((1, True, 4096), (4, True, 2), (7, False, 4096)):
        groups = [group(1, [first, first + 1, first + 2]), group(3, [first], key=OTHER_KEY)]
        request = bookie_pb2.AddEntriesRequest(packed=groups, count_ok=count_ok)
        adds = parse_add_entries(request.SerializeToString()).request.adds
        response = await processor(bookie, slice_size).process(adds, count_ok)
        if count_ok:
            assert (response.ok_count, len(response.results)) == (4, 0)
        else:  # without the flag: as before it, one result per add
            assert response.ok_count == 0
            expected = [(1, 7), (1, 8), (1, 9), (3, 7)]
            assert answer(response) == [(bookie_pb2.EOK, ledger, entry, "") for ledger, entry in expected]
    assert await bookie.list_entries(1) == [(0, 9)]
