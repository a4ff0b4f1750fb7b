"""``lastmark``: every registered bookie's journal LastLogMark (journal id, offset): how far the
journal has been checkpointed into ledger storage; a restart replays only what follows it. A bookie
with several journal dirs has one mark per journal, each printed with its dir.

BookKeeper's command reads the local bookie's files; here each bookie is asked over its HTTP admin
endpoint (``GET /api/v1/bookie/last_log_mark``), found through its registration in ZooKeeper.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from bkclient.tls import ClientSecurity, admin_get, security_from_environ
from bkmeta import BookieServiceInfo
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_FAILED

ROUTE = "/api/v1/bookie/last_log_mark"
HTTP_TIMEOUT_S = 10.0


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "lastmark", help="print each bookie's journal last log mark"
    )
    parser.set_defaults(run=run)


def _fetch(host: str, port: int, security: ClientSecurity | None) -> dict[str, Any]:
    data = json.loads(admin_get(host, port, ROUTE, security, HTTP_TIMEOUT_S))
    if not isinstance(data, dict):
        raise ValueError(f"unexpected answer {data!r}")
    return data


async def _mark(info: BookieServiceInfo) -> dict[str, Any]:
    result: dict[str, Any] = {"bookie_id": info.bookie_id}
    if info.http_host is None or info.http_port is None:
        result["error"] = "the bookie registered no HTTP endpoint (start it with --http-port)"
        return result
    try:
        # TLS and credentials as every client's (PYBK_CLIENT_CONF, BK_<key>: bkclient.tls)
        data = await asyncio.to_thread(_fetch, info.http_host, info.http_port, security_from_environ())
        result.update(journal_id=int(data["journal_id"]), offset=int(data["offset"]))
        journals = data.get("journals")
        if journals is not None:
            result["journals"] = [
                {
                    "journal_dir": str(j["journal_dir"]),
                    "journal_id": int(j["journal_id"]),
                    "offset": int(j["offset"]),
                }
                for j in journals
            ]
    except (OSError, ValueError, KeyError, TypeError) as exc:  # URLError and HTTPError are OSErrors
        result["error"] = f"{info.http_host}:{info.http_port}{ROUTE}: {exc}"
    return result


def _describe(mark: dict[str, Any]) -> str:
    if "error" in mark:
        return f"unavailable ({mark['error']})"
    journals = mark.get("journals") or []
    if len(journals) <= 1:
        return f"LastLogMark: journal {mark['journal_id']}, offset {mark['offset']}"
    return "LastLogMark: " + "; ".join(
        f"journal {j['journal_id']}, offset {j['offset']} in {j['journal_dir']}" for j in journals
    )


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    meta = await ctx.metadata()
    bookies = sorted(meta.bookie_watcher.all_bookies().values(), key=lambda b: b.bookie_id)
    marks = list(await asyncio.gather(*(_mark(b) for b in bookies)))
    lines = [f"{m['bookie_id']}: {_describe(m)}" for m in marks] or ["no bookie is registered"]
    ctx.emit({"bookies": marks}, "\n".join(lines))
    return EXIT_FAILED if any("error" in m for m in marks) else 0
