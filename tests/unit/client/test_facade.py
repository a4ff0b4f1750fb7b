"""BookKeeper facade against in-memory metadata and bookies (see tests/support/write_world.py)."""

from __future__ import annotations

import pytest
from tests.support.write_world import WriteWorld, make_world

from bkclient import BookKeeper, DigestType, WriteAdvHandle, WriteHandle
from bkclient.config import ClientConfig
from bkproto.errors import (
    ClientClosedError,
    IncorrectParameterError,
    LedgerExistsError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)


def client(bookies: int = 4) -> tuple[BookKeeper, WriteWorld]:
    world = make_world(bookies=bookies)
    return BookKeeper(world.ctx, owns_metadata=False), world


async def test_create_ledger_records_metadata_on_registered_bookies() -> None:
    bk, _ = client()
    wh = await bk.create_ledger(3, 2, 2, DigestType.CRC32C, b"pw", {"app": b"x"})
    assert isinstance(wh, WriteHandle)
    md = await bk.ledger_metadata(wh.ledger_id)
    assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (3, 2, 2)
    assert md.password == b"pw" and md.digest_type == DigestType.CRC32C
    assert dict(md.custom_metadata) == {"app": b"x"}
    assert set(md.last_ensemble) <= {"b0", "b1", "b2", "b3"}
    assert len(set(md.last_ensemble)) == 3
    assert await wh.append(b"hello") == 0
    await wh.close()
    assert await bk.is_closed(wh.ledger_id)
    assert await bk.list_ledgers() == [wh.ledger_id]


async def test_ack_quorum_defaults_to_write_quorum_and_quorums_are_checked() -> None:
    bk, _ = client()
    wh = await bk.create_ledger(3, 3)
    assert wh.metadata.ack_quorum_size == 3
    with pytest.raises(IncorrectParameterError):
        await bk.create_ledger(2, 3, 2)
    with pytest.raises(NotEnoughBookiesError):
        await bk.create_ledger(5, 2, 2)


async def test_create_adv_with_a_chosen_ledger_id() -> None:
    bk, _ = client()
    wh = await bk.create_ledger_adv(3, 2, 2, ledger_id=4242)
    assert isinstance(wh, WriteAdvHandle)
    assert wh.ledger_id == 4242
    with pytest.raises(LedgerExistsError):
        await bk.create_ledger_adv(3, 2, 2, ledger_id=4242)


async def test_open_with_wrong_password_is_refused() -> None:
    bk, _ = client()
    wh = await bk.create_ledger(3, 2, 2, password=b"right")
    await wh.append(b"x")
    await wh.close()
    with pytest.raises(UnauthorizedAccessError):
        await bk.open_ledger(wh.ledger_id, password=b"wrong")
    rh = await bk.open_ledger(wh.ledger_id, password=b"right", recovery=False)
    assert rh.last_add_confirmed == 0
    assert rh.is_closed


async def test_delete_and_closed_client() -> None:
    bk, _ = client()
    wh = await bk.create_ledger(3, 2, 2)
    await bk.delete_ledger(wh.ledger_id)
    assert await bk.list_ledgers() == []
    await bk.close()
    with pytest.raises(ClientClosedError):
        await bk.create_ledger(3, 2, 2)


async def test_closing_the_client_fails_pending_adds_and_stops_handles() -> None:
    bk, world = client()
    wh = await bk.create_ledger(3, 2, 2)
    for bookie in world.bookies.values():
        bookie.mode = "hold"
    pending = wh.append_async(b"never acked")
    await bk.close()
    with pytest.raises(ClientClosedError):
        await pending
    with pytest.raises(ClientClosedError):
        await wh.append(b"more")


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("max_entry_size_bytes", 16 * 1024 * 1024, "must be <= 15728640"),
        ("max_entry_size_bytes", 0, "must be > 0"),
        ("add_entry_timeout_s", -1.0, "must be > 0"),
        ("speculative_read_timeout_s", -0.5, "must be >= 0"),
        ("placement_policy", "nearest", "must be one of"),
    ],
)
def test_client_config_names_the_bad_field(field: str, value: object, why: str) -> None:
    with pytest.raises(IncorrectParameterError, match=f"ClientConfig.{field} {why}"):
        ClientConfig(**{field: value})  # type: ignore[arg-type]
