"""A hook on a client's choice of replacement bookies, for tests that act at that moment (pause or
resume a bookie, let the client die)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bkclient.placement import PlacementPolicy


def on_replacement_picked(placement: PlacementPolicy, action: Callable[[str], None]) -> None:
    """Call ``action(bookie_id)`` each time ``placement`` (a client's ``ctx.placement``) picks a
    bookie to take a failed one's place (a writer's or a recovery's ensemble change), right after
    the pick: from then on the client sends that slot's adds to it. Recovery writes its picks to
    the metadata only when it closes the ledger, so the metadata cannot tell a test this moment."""
    real_replace = placement.replace_bookie

    def replace_then_act(*args: Any, **kwargs: Any) -> str:
        chosen = real_replace(*args, **kwargs)
        action(chosen)
        return chosen

    placement.replace_bookie = replace_then_act  # type: ignore[method-assign]
