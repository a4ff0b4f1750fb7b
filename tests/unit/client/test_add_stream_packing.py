"""A stream message of queued adds of several ledgers, and of serialized adds among them
(``add_stream.mixed_message``), parses on the bookie into the same adds, and lists its adds'
listeners and tokens in the order the bookie answers them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bkclient.add_stream import AddRequestEncoder, mixed_message
from bkclient.transport import AddListener
from bookie.handlers.add_entries import parse_add_entries

KEY = bytes(range(20))
ENCODERS = {ledger_id: AddRequestEncoder(ledger_id, KEY) for ledger_id in (1, 2, 3)}


class Slot:
    """A listener standing for one ledger's adds (never called here)."""

    def __init__(self, ledger_id: int) -> None:
        self.ledger_id = ledger_id

    def add_complete(self, *_: object) -> None:
        raise AssertionError("not called")

    def adds_completed(self, *_: object) -> None:
        raise AssertionError("not called")


@given(
    queue=st.lists(
        st.tuples(st.sampled_from([0, 1, 2, 3]), st.integers(0, 2**40), st.binary(max_size=40)),
        min_size=1,
        max_size=12,
    )
)
def test_a_mixed_message_is_its_adds_in_the_order_its_batch_lists_them(
    queue: list[tuple[int, int, bytes]],
) -> None:
    """Ledger 0 stands for an add queued serialized (of ledger 9); 1-3 for bodies of that ledger."""
    parts = [
        AddRequestEncoder(9, KEY).encode(entry_id, body) if ledger_id == 0 else body
        for ledger_id, entry_id, body in queue
    ]
    packers = [ENCODERS.get(ledger_id) for ledger_id, _, _ in queue]
    slots = {ledger_id: Slot(ledger_id) for ledger_id in (0, 1, 2, 3)}
    listeners: list[AddListener] = [slots[ledger_id] for ledger_id, _, _ in queue]
    tokens = [entry_id for _, entry_id, _ in queue]
    message, (ordered_listeners, ordered_tokens) = mixed_message(parts, packers, listeners, tokens)
    request = parse_add_entries(message).request
    assert request.count_ok
    adds = list(request.adds)
    expected = {(9 if ledger_id == 0 else ledger_id, entry_id, body) for ledger_id, entry_id, body in queue}
    assert len(adds) == len(queue)
    assert {(a.ledger_id, a.entry_id, a.body) for a in adds} == expected
    for add, listener, token in zip(adds, ordered_listeners, ordered_tokens, strict=True):
        assert isinstance(listener, Slot)
        assert (add.ledger_id, add.entry_id) == (9 if listener.ledger_id == 0 else listener.ledger_id, token)
    for ledger_id in (0, 1, 2, 3):  # each ledger's adds keep their queue order
        queued = [entry_id for lid, entry_id, _ in queue if lid == ledger_id]
        slot = slots[ledger_id]
        sent = [t for lst, t in zip(ordered_listeners, ordered_tokens, strict=True) if lst is slot]
        assert sent == queued
