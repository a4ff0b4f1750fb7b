"""When autorecovery re-replicates a lost bookie: the delay, the operator's overrides and the
several-bookies rule, as BookKeeper's auditor applies them (on a made-up clock)."""

from __future__ import annotations

from autorecovery.lost_bookies import LostBookieClock

A, B, C = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"


def test_a_lost_bookie_waits_the_delay_then_stays_due_until_back() -> None:
    clock = LostBookieClock()
    first = clock.observe({A}, 100.0, 60.0)
    assert first.gone == (A,) and first.due == frozenset() and first.next_due_in_s == 60.0
    assert clock.observe({A}, 130.0, 60.0).next_due_in_s == 30.0
    due = clock.observe({A}, 160.0, 60.0)
    assert due.due == {A} and due.next_due_in_s is None
    assert clock.observe({A}, 500.0, 60.0).due == {A}  # its copies are retried
    back = clock.observe(set(), 510.0, 60.0)
    assert back.back == (A,) and back.due == frozenset()
    assert clock.observe({A}, 520.0, 60.0).due == frozenset()  # gone again: a fresh wait


def test_audit_now_makes_every_waiting_bookie_due() -> None:
    clock = LostBookieClock()
    clock.observe({A}, 100.0, 3600.0)
    assert clock.observe({A}, 110.0, 3600.0, audit_now=True).due == {A}
    assert clock.observe({A}, 120.0, 3600.0).due == {A}  # and it stays due


def test_a_new_delay_restarts_the_wait_of_waiting_bookies_only() -> None:
    clock = LostBookieClock()
    clock.observe({A}, 0.0, 60.0)
    clock.observe({A}, 70.0, 60.0)  # A is due
    clock.observe({A, B}, 4000.0, 3600.0)  # B waits; (A, due, is one bookie: no several rule)
    changed = clock.observe({A, B}, 5000.0, 1800.0, delay_changed=True)
    assert changed.due == {A}  # A is not put back to waiting
    assert changed.next_due_in_s == 1800.0  # B waits the new delay from the change, not from 4000
    assert clock.observe({A, B}, 6800.0, 1800.0).due == {A, B}


def test_several_waiting_bookies_are_due_at_once_but_due_ones_do_not_count() -> None:
    clock = LostBookieClock()
    clock.observe({A}, 0.0, 60.0)
    clock.observe({A}, 60.0, 60.0)  # A is due, its copy may take hours
    lone = clock.observe({A, B}, 100.0, 60.0)  # B alone waits: a rolling restart
    assert lone.due == {A} and lone.several_lost == 0
    together = clock.observe({A, B, C}, 110.0, 60.0)  # B and C both waiting: no more waiting
    assert together.due == {A, B, C} and together.several_lost == 2


def test_the_grace_of_open_ledgers_counts_from_when_a_bookie_was_first_seen_gone() -> None:
    clock = LostBookieClock()
    clock.observe({A}, 100.0, 3600.0)
    clock.observe({A}, 200.0, 3600.0, audit_now=True)
    assert clock.gone_for(A, 230.0) == 130.0  # an audit now does not cut an open ledger's grace
    clock.reset()
    assert clock.gone_for(A, 230.0) == 0.0
