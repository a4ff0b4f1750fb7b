"""``gcexplain BOOKIE [--limit N]``: for every entry log of a bookie, why garbage collection has
not reclaimed it (``bookie.gc.explain``): its age, size, live bytes and share, the ledgers that pin
it, the reason (the next run, a threshold and by how much, compaction suspended or paused for
disk space), and what would free it. Sorted by reclaimable bytes, largest first; ``--json`` gives
every field. Asked of the bookie over its HTTP admin endpoint (``GET /api/v1/bookie/gc_explain``),
found through its registration in ZooKeeper."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from bkclient.tls import ClientSecurity, admin_get, security_from_environ
from pybk.arg_types import non_negative
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED, bookie_id

ROUTE = "/api/v1/bookie/gc_explain"
HTTP_TIMEOUT_S = 120.0  # it reads every entry log's ledger map


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "gcexplain", help="explain why each entry log of a bookie is still on disk"
    )
    parser.add_argument("bookie", type=bookie_id, help="the bookie (host:port)")
    parser.add_argument("--limit", type=non_negative, default=20,
                        help="entry logs to print (default 20; --json: all)")
    parser.set_defaults(run=run)


def _fetch(host: str, port: int, security: ClientSecurity | None) -> list[dict[str, Any]]:
    data = json.loads(admin_get(host, port, ROUTE, security, HTTP_TIMEOUT_S))
    if not isinstance(data, list):
        raise ValueError(f"unexpected answer {data!r}")
    return data


def _line(r: dict[str, Any]) -> str:
    pins = ", ".join(f"{p['ledger_id']}{'' if p['state'] == 'live' else '(' + p['state'] + ')'}:{p['bytes']}"
                     for p in r["pinned_by"][:5])
    more = f" +{len(r['pinned_by']) - 5}" if len(r["pinned_by"]) > 5 else ""
    frees = r["would_free_it"]
    hint = ""
    if frees.get("delete_ledgers"):
        hint = (f"\n    frees it: delete ledgers {frees['delete_ledgers']}, or a majorCompactionThreshold"
                f" above {frees['or_threshold_above']}")
    elif frees.get("next_gc_run_collects_ledgers"):
        hint = f"\n    the next run collects deleted ledgers {frees['next_gc_run_collects_ledgers']}"
    return (f"{r['log_file']}: {r['reclaimable_bytes']} reclaimable of {r['size_bytes']} bytes, live"
            f" {r['live_share']:.1%}, age {r['age_s']:.0f} s\n    pinned by: {pins or 'nothing'}{more}\n"
            f"    why: {r['why']}{hint}")


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata()
    info = meta.bookie_watcher.all_bookies().get(args.bookie)
    if info is None:
        ctx.emit({"error": "not registered"}, f"bookie {args.bookie} is not registered")
        return EXIT_FAILED
    if info.http_host is None or info.http_port is None:
        ctx.emit({"error": "no HTTP endpoint"}, f"bookie {args.bookie} registered no HTTP endpoint"
                 " (start it with --http-port)")
        return EXIT_FAILED
    url = f"{info.http_host}:{info.http_port}{ROUTE}"
    try:
        # TLS and credentials as every client's (PYBK_CLIENT_CONF, BK_<key>: bkclient.tls)
        logs = await asyncio.to_thread(_fetch, info.http_host, info.http_port, security_from_environ())
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        ctx.emit({"error": f"{url}: {exc}"}, f"{url}: {exc}")
        return EXIT_FAILED
    reclaimable = sum(r["reclaimable_bytes"] for r in logs)
    head = f"{args.bookie}: {len(logs)} entry logs, {reclaimable} bytes reclaimable"
    text = "\n".join([head, *(_line(r) for r in logs[: max(0, args.limit)])])
    ctx.emit({"bookie_id": args.bookie, "reclaimable_bytes": reclaimable, "entry_logs": logs}, text)
    return 0
