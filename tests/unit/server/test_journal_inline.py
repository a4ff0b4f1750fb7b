"""A batch that finds the journal idle is written and synced on the loop's thread, without the
two thread hand-offs of the writer thread; everything else keeps the writer thread's group commit.
Either way a batch is durable, in order, before its submit returns, and a failed write fails it."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from tests.support.storage_helpers import add_all, add_op, lac_body, make_bookie, make_config

from bkproto.v1 import bookie_pb2
from bookie.api import LogMark
from bookie.errors import BookieError
from bookie.storage import journal as journal_module
from bookie.storage.health import StorageHealth
from bookie.storage.journal import Journal, JournalSettings
from bookie.storage.journal_format import RecordType, record
from bookie.storage.stats import StorageStats

MIB = 1 << 20


async def started(tmp_path: Path, queue_size: int = 10_000, max_file_bytes: int = 64 * MIB) -> Journal:
    settings = JournalSettings(
        tmp_path / "current", MIB, max_file_bytes, 5, queue_size, 0.002, 512 * 1024, False, True
    )
    journal = Journal(settings, StorageStats(CollectorRegistry()), StorageHealth())
    assert list(journal.replay(LogMark(0, 0))) == []  # makes the directory; a fresh journal
    journal.start(asyncio.get_running_loop())
    return journal


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Journal]:
    journal = await started(tmp_path)
    yield journal
    await journal.close()


def to_the_thread(journal: Journal, *ids: int) -> Coroutine[Any, Any, LogMark]:
    """A submit of a fence record per id, kept off the loop."""
    parts = [fence(i) for i in ids]
    return journal.submit(parts, sum(map(len, parts)), len(parts), keep_loop_free=True)


def step_now(coro: Coroutine[Any, Any, LogMark]) -> asyncio.Future[LogMark]:
    """Run ``coro``'s first step now, then each later one when what it awaits is done: as the
    add port runs a batch, in the loop turn that read its message (``add_pipeline._Batch``)."""
    result: asyncio.Future[LogMark] = asyncio.get_running_loop().create_future()

    def step(_: object = None) -> None:
        try:
            awaited = coro.send(None)
        except StopIteration as stop:
            result.set_result(stop.value)
            return
        except BaseException as exc:
            result.set_exception(exc)
            return
        awaited._asyncio_future_blocking = False
        awaited.add_done_callback(step)

    step()
    return result


def writers(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that write each group, in order, from now on."""
    names: list[str] = []
    write_synced = journal._write_synced

    def recorded(data: bytes) -> None:
        names.append(threading.current_thread().name)
        write_synced(data)

    monkeypatch.setattr(journal, "_write_synced", recorded)
    return names


def fence(i: int, size: int = 8) -> bytes:
    return record(RecordType.FENCE, i.to_bytes(size, "big"))


def replayed(journal: Journal) -> list[int]:
    return [int.from_bytes(payload, "big") for _, payload, _ in journal.replay(LogMark(0, 0))]


async def test_a_lone_small_batch_is_synced_on_the_loops_thread(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = writers(journal, monkeypatch)
    mark = await journal.submit([fence(1)], len(fence(1)), 1)
    assert names == [threading.current_thread().name]
    assert mark == journal.written_mark and journal.outstanding == 0
    await journal.close()
    assert replayed(journal) == [1]


async def test_batches_behind_an_outstanding_one_go_to_the_writer_thread_in_order(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = writers(journal, monkeypatch)
    big = fence(0, journal_module._INLINE_MAX_BYTES + 1)  # over the inline size: the writer thread's
    batches = [[big]] + [[fence(i)] for i in range(1, 50)]
    marks = await asyncio.gather(*(journal.submit(parts, len(parts[0]), 1) for parts in batches))
    assert names and set(names) == {"bookie-journal"}
    assert len(names) < len(batches)  # grouped: the small ones queued while the big one synced
    positions = [(mark.journal_id, mark.offset) for mark in marks]
    assert positions == sorted(positions) and marks[-1] == journal.written_mark
    await journal.close()
    assert replayed(journal) == list(range(50))


async def test_a_large_batch_goes_to_the_writer_thread_even_when_the_journal_is_idle(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = writers(journal, monkeypatch)
    big = fence(7, journal_module._INLINE_MAX_BYTES)
    await journal.submit([big], len(big), 1)
    assert names == ["bookie-journal"]


async def test_the_first_batch_after_a_busy_moment_waits_for_the_idle_time(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "_INLINE_AFTER_IDLE_S", 0.5)  # no room for a slow box's hiccup
    monkeypatch.setattr(journal_module, "_INLINE_MAX_SYNC_S", 60.0)  # nor for a slow disk's
    names = writers(journal, monkeypatch)
    await journal.submit([fence(1)], len(fence(1)), 1)
    await journal.submit([fence(2)], len(fence(2)), 1)  # at once: the journal was busy a moment ago
    await asyncio.sleep(0.6)
    await journal.submit([fence(3)], len(fence(3)), 1)
    loop_thread = threading.current_thread().name
    assert names == [loop_thread, "bookie-journal", loop_thread]
    await journal.close()
    assert replayed(journal) == [1, 2, 3]


async def test_a_failed_inline_write_fails_its_batch_and_every_later_one(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal, "_write", no_space)
    with pytest.raises(BookieError, match=r"journal write failed: .*No space left") as failed:
        await journal.submit([fence(1)], len(fence(1)), 1)
    assert failed.value.status == bookie_pb2.EIO
    assert journal._health.journal_failure is not None
    with pytest.raises(BookieError, match="journal failed"):
        await journal.submit([fence(2)], len(fence(2)), 1)


async def test_a_slow_last_sync_keeps_batches_on_the_writer_thread(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that has just taken long to sync must not stall the loop, which serves reads."""
    names = writers(journal, monkeypatch)
    journal._last_sync_s = journal_module._INLINE_MAX_SYNC_S * 2
    await journal.submit([fence(1)], len(fence(1)), 1)
    assert names == ["bookie-journal"]


async def test_a_caller_with_work_waiting_on_the_loop_keeps_the_sync_off_it(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = writers(journal, monkeypatch)
    await journal.submit([fence(1)], len(fence(1)), 1, keep_loop_free=True)
    assert names == ["bookie-journal"]


async def test_a_bookie_with_a_parked_long_poll_syncs_off_the_loop_so_the_poll_is_answered_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tailing reader's long poll, woken by an add's LAC, must not wait behind that add's sync."""
    monkeypatch.setattr(journal_module, "_INLINE_AFTER_IDLE_S", 0.0)  # every lone add could go inline
    monkeypatch.setattr(journal_module, "_INLINE_MAX_SYNC_S", 60.0)  # whatever the disk's speed
    async with make_bookie(make_config(tmp_path)) as bookie:
        names = writers(bookie.storage.journals[0], monkeypatch)
        loop_thread = threading.current_thread().name
        await add_all(bookie, [add_op(8, 0)])
        assert names == [loop_thread]  # no reader: the lone add is synced on the loop
        waiter = asyncio.create_task(bookie.wait_for_lac(8, -1, 30.0))
        await asyncio.sleep(0)
        await add_all(bookie, [add_op(8, 1, 0)])
        assert names[1:] == ["bookie-journal"]
        assert await waiter == 0
        waiter = asyncio.create_task(bookie.wait_for_lac(8, 0, 30.0))
        await asyncio.sleep(0)
        await bookie.write_lac(8, 1, add_op(8, 0).master_key, lac_body(8, 1))  # an explicit LAC too
        assert names[2:] == ["bookie-journal"]
        assert await waiter == 1
        await add_all(bookie, [add_op(8, 2, 1)])  # no reader parked any more
        assert names[3:] == [loop_thread]


async def test_a_queued_barrier_keeps_the_next_batch_off_the_loop(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``force`` barrier has no records, but the writer thread works on the file for it: a
    batch written inline meanwhile would race the thread for the file's offset."""
    monkeypatch.setattr(journal_module, "_INLINE_AFTER_IDLE_S", 0.5)
    monkeypatch.setattr(journal_module, "_INLINE_MAX_SYNC_S", 60.0)
    names = writers(journal, monkeypatch)
    await journal.submit([fence(1)], len(fence(1)), 1)  # inline: the journal was idle
    barrier = asyncio.ensure_future(journal.submit([], 0, 0))
    await asyncio.sleep(0)  # the barrier is queued: the journal was busy a moment ago
    journal._idle_since = 0.0  # and now it looks idle for long, with the barrier still queued
    await journal.submit([fence(2)], len(fence(2)), 1)
    await barrier
    assert names[0] == threading.current_thread().name and set(names[1:]) == {"bookie-journal"}
    await journal.close()
    assert replayed(journal) == [1, 2]


async def test_a_batch_that_waited_for_room_is_not_passed_by_a_later_one(tmp_path: Path) -> None:
    """Backpressure (journalQueueSize) must keep submit order: a later batch's entries may need
    the earlier batch's master-key record before them at replay."""
    journal = await started(tmp_path, queue_size=2)
    try:
        submitted = [
            step_now(journal.submit([fence(1), fence(2)], 2 * len(fence(1)), 2, keep_loop_free=True))
        ]
        # no room for this one: it waits for the first batch's completion
        submitted.append(
            step_now(journal.submit([fence(3), fence(4)], 2 * len(fence(3)), 2, keep_loop_free=True))
        )
        complete = journal._complete

        def then_a_later_batch(*args: Any) -> None:
            complete(*args)  # room now, but the waiting batch's task has not run yet
            if len(submitted) == 2:
                submitted.append(step_now(to_the_thread(journal, 5)))

        journal._complete = then_a_later_batch  # type: ignore[method-assign]
        await asyncio.wait_for(asyncio.gather(*submitted), 10)
    finally:
        await journal.close()
    assert replayed(journal) == [1, 2, 3, 4, 5]


async def test_a_batch_that_would_roll_the_file_over_goes_to_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await started(tmp_path, max_file_bytes=MIB)
    try:
        names = writers(journal, monkeypatch)
        big = fence(0, MIB - 1024)
        await journal.submit([big], len(big), 1)  # on the thread: over the inline size
        journal._idle_since = journal._last_sync_s = 0.0  # idle, on a quick disk
        await journal.submit([fence(1, 2048)], len(fence(1, 2048)), 1)  # crosses the file's end
        assert names == ["bookie-journal", "bookie-journal"]
        assert journal.written_mark.journal_id == 2
    finally:
        await journal.close()


async def test_a_write_across_two_journals_syncs_on_their_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One after the other on the loop, two syncs would take twice as long as side by side."""
    config = make_config(tmp_path, journal_dirs=[tmp_path / "j0", tmp_path / "j1"])
    async with make_bookie(config) as bookie:
        j0, j1 = bookie.storage.journals
        names = [writers(j0, monkeypatch), writers(j1, monkeypatch)]
        await add_all(bookie, [add_op(2, 0), add_op(3, 0)])  # ledger 2 in j0, ledger 3 in j1
        assert names == [["bookie-journal-0"], ["bookie-journal-1"]]
        await add_all(bookie, [add_op(2, 1)])  # one journal: the loop may sync it
        assert len(names[0]) == 2
