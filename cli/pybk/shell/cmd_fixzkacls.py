"""``fixzkacls``: give every znode of the cluster the cluster's ACL (``zkEnableSecurity``).

ZooKeeper ACLs belong to each znode and are never inherited, and BookKeeper has no tool to
re-ACL a cluster made before security was turned on. This walks the ledgers root and the named
logs' root (``/pybk``) and sets, on each znode, the ACL that gives the cluster's digest identity
(``zkDigestAuthFile``, from the environment: ``BK_zkDigestAuthFile`` or ``PYBK_CLIENT_CONF``)
every permission and nobody else any. It needs the ADMIN permission on each znode, which an open
(world) ACL grants. Run it once every bookie and client is configured with the credentials:
those without lose access at once.
"""

from __future__ import annotations

import argparse
from typing import Any

from bkmeta.named_log import LOGS_ROOT
from bkmeta.zk import ZkClient, ZkNoNodeError
from bkmeta.zk_security import zk_security_from_environ
from pybk.shell.context import ShellContext
from pybk.shell.ledger_view import EXIT_USAGE


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "fixzkacls", help="set the cluster's ZooKeeper ACL on every znode of an existing cluster"
    )
    parser.set_defaults(run=run)


async def run(ctx: ShellContext, args: argparse.Namespace) -> int:
    security = zk_security_from_environ()
    if security is None or not security.enable_acls:
        ctx.error("fixzkacls needs zkEnableSecurity=true and zkDigestAuthFile (BK_<key> or PYBK_CLIENT_CONF)")
        return EXIT_USAGE
    meta = await ctx.metadata(watch_bookies=False)
    zk = meta.zk
    if not isinstance(zk, ZkClient):  # ACLs are ZooKeeper's: only a real session has them
        ctx.error("fixzkacls needs a ZooKeeper session")
        return EXIT_USAGE
    roots = [ctx.ledgers_root, LOGS_ROOT.rsplit("/", 1)[0] or LOGS_ROOT]
    fixed = 0
    for root in roots:
        fixed += await _fix_tree(zk, root, security.acl)
    ctx.emit({"znodes": fixed, "roots": roots},
             f"set the cluster's ACL on {fixed} znodes under {', '.join(roots)}")
    return 0


async def _fix_tree(zk: ZkClient, root: str, acl: list[Any]) -> int:
    """Children first (a parent closed to us first would hide its children), breadth by stack."""
    fixed = 0
    pending = [root]
    order: list[str] = []
    while pending:
        path = pending.pop()
        try:
            children = await zk.get_children(path)
        except ZkNoNodeError:
            continue  # gone meanwhile (an ephemeral), or a root this cluster never made
        order.append(path)
        pending.extend(f"{path.rstrip('/')}/{child}" for child in children)
    for path in reversed(order):
        try:
            await zk.set_acls(path, acl)
        except ZkNoNodeError:
            continue
        fixed += 1
    return fixed
