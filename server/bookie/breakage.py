"""Deliberate breakage, for tests that prove a checker can see a broken bookie (``pybk verify``'s
honesty test). Never for anything else.

A breakage is switched on only when *both* environment variables are set: the list of
breakages in ``PYBK_TEST_ONLY_BREAK_BOOKIE`` and, in ``PYBK_TEST_ONLY_BREAK_BOOKIE_CONFIRM``,
the exact sentence :data:`CONFIRMATION`; no configuration key or flag reaches it. A bookie that
runs broken says so in its log at start-up, as a warning.

Breakages:

* ``skip-fence-check``: accept normal adds to a fenced ledger, so a writer keeps getting
  acknowledgements after a recovery opener closed its ledger (BookKeeper issue 2614's outcome).
* ``skip-journal``: acknowledge adds once they are in the write cache, without journaling them,
  so a crash loses every acknowledged entry not yet flushed to the entry logs. (Acknowledging
  before the journal's *fsync* alone cannot be seen by killing processes: the OS page cache
  outlives them. That needs a power cut, which ``pybk verify`` does not simulate.)
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

BREAK_ENV = "PYBK_TEST_ONLY_BREAK_BOOKIE"
CONFIRM_ENV = "PYBK_TEST_ONLY_BREAK_BOOKIE_CONFIRM"
CONFIRMATION = "I want a bookie that loses acknowledged data"
SKIP_FENCE_CHECK = "skip-fence-check"
SKIP_JOURNAL = "skip-journal"
KNOWN = frozenset({SKIP_FENCE_CHECK, SKIP_JOURNAL})


def deliberate_breakage() -> frozenset[str]:
    """The breakages this process was asked for (empty unless confirmed; unknown names ignored)."""
    asked = {name.strip() for name in os.environ.get(BREAK_ENV, "").split(",") if name.strip()}
    if not asked:
        return frozenset()
    if os.environ.get(CONFIRM_ENV) != CONFIRMATION:
        log.warning("%s is set but %s does not confirm it: the bookie runs unbroken", BREAK_ENV, CONFIRM_ENV)
        return frozenset()
    chosen = frozenset(asked & KNOWN)
    if chosen:
        log.warning("THIS BOOKIE IS DELIBERATELY BROKEN FOR A TEST (%s): it loses acknowledged data",
                    ", ".join(sorted(chosen)))
    return chosen
