"""``pybk verify`` end to end on a real cluster: a short run finds nothing wrong with a sound
cluster, and the same run against a deliberately broken bookie reports the loss (its honesty).

CI runs these on every change: one fixed seed, one random seed (printed, so a failure can be
replayed with ``pybk verify --seed N``), and two broken-bookie runs: bookies that ignore fencing,
and bookies that acknowledge without journaling (caught by killing every bookie at once).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tests.support.verify_runs import run_verify

from bookie.breakage import BREAK_ENV, CONFIRM_ENV, CONFIRMATION, SKIP_FENCE_CHECK, SKIP_JOURNAL

pytestmark = pytest.mark.integration

FIXED_SEED = 28
RUN_SECONDS = "25"
BROKEN_RUN_SECONDS = "20"  # a broken bookie is caught within the first fault or two


@pytest.mark.parametrize("seed", [FIXED_SEED, random.SystemRandom().randrange(2**31)])
def test_short_run_loses_nothing_on_a_sound_cluster(tmp_path: Path, seed: int) -> None:
    print(f"pybk verify seed {seed}")
    outcome = run_verify(tmp_path / "run", "--time", RUN_SECONDS, "--seed", str(seed))
    summary = outcome.summary
    assert outcome.returncode == 0, f"seed {seed}: {summary.get('violations')}\n{outcome.stderr[-3000:]}"
    assert summary["ok"] is True and summary["seed"] == seed
    assert summary["rounds"] >= 1 and sum(summary["faults_by_kind"].values()) >= 1
    assert summary["acknowledged"] > 0 and summary["reads"]["final"] >= summary["acknowledged"]
    assert summary["lost"] == summary["divergent"] == summary["crashes"] == 0


def test_a_bookie_that_ignores_fencing_is_caught(tmp_path: Path) -> None:
    # Every bookie accepts normal adds to fenced ledgers: a writer whose ledger a recovery opener
    # closed keeps being acknowledged past the close point. verify must say so and exit 1.
    broken = {BREAK_ENV: SKIP_FENCE_CHECK, CONFIRM_ENV: CONFIRMATION}
    outcome = run_verify(
        tmp_path / "run", "--time", BROKEN_RUN_SECONDS, "--seed", str(FIXED_SEED), "--recover-every", "1",
        "--faults", "pause-writer", env=broken,
    )
    summary = outcome.summary
    assert outcome.returncode == 1, outcome.stderr[-3000:]
    assert summary["ok"] is False
    assert summary["acked_after_fence"] > 0 and summary["truncated"] > 0
    kinds = {v["kind"] for v in summary["violations"]}
    assert {"acked-after-fence", "truncated"} <= kinds
    assert summary["histories"], "a violation comes with the history around it"


def test_a_bookie_that_acknowledges_without_journaling_is_caught(tmp_path: Path) -> None:
    # Every bookie answers adds without journaling them; kill -9 of every bookie at once then
    # loses acknowledged entries (a sound bookie loses none: kill-all-bookies destroys no disk).
    broken = {BREAK_ENV: SKIP_JOURNAL, CONFIRM_ENV: CONFIRMATION}
    outcome = run_verify(
        tmp_path / "run", "--time", BROKEN_RUN_SECONDS, "--seed", str(FIXED_SEED),
        "--faults", "kill-all-bookies", "--rate", "300", env=broken,
    )
    summary = outcome.summary
    assert outcome.returncode == 1, outcome.stderr[-3000:]
    assert summary["faults_by_kind"].get("kill-all-bookies", 0) >= 1
    assert summary["lost"] + summary["truncated"] > 0, summary["violations"]
