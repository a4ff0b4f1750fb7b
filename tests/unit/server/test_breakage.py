"""A deliberately broken bookie needs both environment variables, the second word for word."""

from __future__ import annotations

import pytest

from bookie.breakage import (
    BREAK_ENV,
    CONFIRM_ENV,
    CONFIRMATION,
    SKIP_FENCE_CHECK,
    SKIP_JOURNAL,
    deliberate_breakage,
)


def test_nothing_is_broken_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BREAK_ENV, raising=False)
    monkeypatch.delenv(CONFIRM_ENV, raising=False)
    assert deliberate_breakage() == frozenset()


@pytest.mark.parametrize("confirm", [None, "", "yes", CONFIRMATION.lower()])
def test_asking_without_the_exact_confirmation_breaks_nothing(
    monkeypatch: pytest.MonkeyPatch, confirm: str | None
) -> None:
    monkeypatch.setenv(BREAK_ENV, SKIP_FENCE_CHECK)
    if confirm is None:
        monkeypatch.delenv(CONFIRM_ENV, raising=False)
    else:
        monkeypatch.setenv(CONFIRM_ENV, confirm)
    assert deliberate_breakage() == frozenset()


def test_confirmed_breakages_are_the_known_ones_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BREAK_ENV, f"{SKIP_FENCE_CHECK}, {SKIP_JOURNAL},no-such-thing")
    monkeypatch.setenv(CONFIRM_ENV, CONFIRMATION)
    assert deliberate_breakage() == {SKIP_FENCE_CHECK, SKIP_JOURNAL}
