"""What must hold before a bookie's cookie is deleted (``cookie_delete``, ``bookieformat -d``).

A cookie is what keeps a bookie from serving directories that lost their data. Without it, the
bookie id starts afresh: empty directories get a new cookie and the bookie registers as if
nothing happened. So a cookie may go only when the bookie is stopped (its registration gone)
and, unless the operator insists, when no ledger still counts on a replica there: those
replicas would be silently missing, and neither autorecovery nor ``listunderreplicated`` would
see it, because the bookie is registered again.
"""

from __future__ import annotations

from bkclient import BookKeeperAdmin
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import shell_client

SAMPLE = 5  # ledger ids named in a refusal


async def running_reason(ctx: ShellContext, bookie_id: str) -> str | None:
    """Why the cookie must stay because the bookie runs, or None."""
    meta = await ctx.metadata()
    if await meta.bookie_watcher.is_registered(bookie_id):
        return f"bookie {bookie_id} is registered, so it is running: stop it first"
    return None


async def ledgers_naming(ctx: ShellContext, bookie_id: str) -> list[int]:
    """The ledgers whose ensembles name ``bookie_id`` (a scan of all ledger metadata)."""
    async with await shell_client(ctx) as bk:
        named = await BookKeeperAdmin(bk).ledgers_by_bookie()
    return sorted(named.get(bookie_id, ()))


def still_named(bookie_id: str, ledgers: list[int]) -> str:
    sample = ", ".join(map(str, ledgers[:SAMPLE])) + (", ..." if len(ledgers) > SAMPLE else "")
    return (
        f"{len(ledgers)} ledger(s) still have replicas on {bookie_id} ({sample}); without its"
        " cookie the bookie could rejoin empty while they count on it. Re-replicate them first:"
        f" `pybk shell recover {bookie_id}` or `pybk shell decommissionbookie --bookieid {bookie_id}`"
    )
