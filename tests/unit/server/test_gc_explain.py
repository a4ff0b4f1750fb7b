"""``gcexplain``'s verdicts on made-up entry logs: which ledgers pin a log, why it stays, and the
fewest deletions that would let compaction take it."""

from __future__ import annotations

import dataclasses

from bookie.gc.explain import GcState, explain, summary
from bookie.storage.log_garbage import LogFacts

STATE = GcState(minor_threshold=0.2, major_threshold=0.5, minor_enabled=True, major_enabled=True,
                next_run_in_s=600, next_minor_in_s=3600, next_major_in_s=86400,
                minor_suspended_by_operator=False, major_suspended_by_operator=False,
                minor_paused_for_disk=False, major_paused_for_disk=False, rate_bytes=1000)


def _log(log_id: int, ledgers: dict[int, int], stored: set[int], *, current: bool = False) -> LogFacts:
    size = sum(ledgers.values()) + 100  # the log's header and ledger map
    return LogFacts(log_id, "/d", size, 0.0, ledgers, frozenset(stored), current=current)


def test_a_log_above_the_threshold_names_its_pins_and_the_fewest_deletions_that_free_it() -> None:
    (report,) = explain([_log(1, {1: 500, 2: 200, 3: 300}, {1, 2, 3})], {1, 2}, STATE, now=10.0)
    pins = [(p["ledger_id"], p["state"]) for p in report["pinned_by"]]
    assert pins == [(1, "live"), (2, "live"), (3, "deleted")]
    assert report["live_bytes"] == 700 and report["live_share"] == 0.7
    assert report["verdict"] == "above_threshold" and "by 0.200" in report["why"]
    assert report["would_free_it"] == {"delete_ledgers": [1], "or_threshold_above": 0.7}
    assert report["reclaimable_bytes"] == 1100 - 700


def test_verdicts_follow_the_thresholds_the_schedule_and_the_switches() -> None:
    logs = [_log(1, {1: 100, 9: 900}, {1, 9}), _log(2, {1: 300, 9: 700}, {1}), _log(3, {9: 10}, set()),
            _log(4, {1: 10}, {1}, current=True)]
    reports = {r["log_id"]: r for r in explain(logs, {1}, STATE, now=10.0)}
    assert reports[1]["verdict"] == "waiting_minor"
    assert "copying its 100 live bytes takes 0 s" in reports[1]["why"]
    assert reports[1]["would_free_it"] == {"next_gc_run_collects_ledgers": [9]}
    assert reports[2]["verdict"] == "waiting_major"
    assert reports[3]["verdict"] == "next_gc_run" and reports[3]["reclaimable_bytes"] == 110
    assert reports[4]["verdict"] == "being_written" and reports[4]["reclaimable_bytes"] == 0
    suspended = dataclasses.replace(STATE, minor_suspended_by_operator=True, major_paused_for_disk=True)
    reports = {r["log_id"]: r for r in explain(logs, {1}, suspended, now=10.0)}
    assert reports[1]["verdict"] == "minor_suspended" and reports[2]["verdict"] == "major_paused_for_disk"
    assert summary(explain(logs, {1}, STATE, now=10.0)) == (10.0, 1100 - 100 + 1100 - 300 + 110)


def test_an_open_pinning_ledger_is_named_open() -> None:
    (report,) = explain([_log(1, {1: 500, 2: 200}, {1, 2})], {1, 2}, STATE, now=10.0, open_ledgers={2})
    assert [(p["ledger_id"], p["state"]) for p in report["pinned_by"]] == [(1, "live"), (2, "open")]
