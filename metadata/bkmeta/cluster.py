"""Cluster bootstrap and teardown: ``initnewcluster`` and ``nukeexistingcluster``.

A cluster is the ledgers root holding ``LAYOUT`` (``"2\\n<ManagerFactoryClass>:<version>"``),
``INSTANCEID`` (a UUID), ``available``, ``available/readonly`` and ``cookies``, created in one ZooKeeper
multi so a half-initialised cluster never exists.
"""

from __future__ import annotations

import contextlib
import logging
import uuid

from bkmeta.layout import ZkLayout
from bkmeta.store import MetadataStore, ZkNodeExistsError, ZkNoNodeError
from bkproto.errors import IncorrectParameterError, MetadataStoreError

log = logging.getLogger(__name__)

LAYOUT_FORMAT_VERSION = 2
LEDGER_MANAGER_FACTORY = "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
LEDGER_MANAGER_VERSION = 1
LAYOUT_DATA = f"{LAYOUT_FORMAT_VERSION}\n{LEDGER_MANAGER_FACTORY}:{LEDGER_MANAGER_VERSION}".encode()


class ClusterLayoutError(MetadataStoreError):
    """The ledgers root holds a different or unknown cluster: refusing to touch it."""

    retriable = False


class ClusterNotInitializedError(MetadataStoreError):
    """No cluster at the ledgers root: run ``pybk shell initnewcluster`` first."""

    retriable = False


def parse_layout(data: bytes) -> tuple[int, str, int]:
    """(layout format version, manager factory class, manager version) from a LAYOUT znode."""
    try:
        text = data.decode()
        version_line, manager_line = text.strip().split("\n", 1)
        factory, _, manager_version = manager_line.strip().rpartition(":")
        return int(version_line), factory, int(manager_version)
    except ValueError as e:
        raise ClusterLayoutError(f"unreadable LAYOUT znode: {data!r}") from e


async def _parent_paths(zk: MetadataStore, root: str) -> None:
    parent = root.rsplit("/", 1)[0]
    if parent:
        await zk.ensure_path(parent)


async def init_new_cluster(zk: MetadataStore, layout: ZkLayout | None = None) -> tuple[str, bool]:
    """Create the cluster znodes. Returns ``(instance_id, created)``; ``created`` is False when the
    same kind of cluster already exists (idempotent). A different layout raises ``ClusterLayoutError``."""
    layout = layout or ZkLayout()
    existing = await zk.exists(layout.layout)
    if existing is not None:
        data, _ = await zk.get(layout.layout)
        _, factory, version = parse_layout(data)
        if (factory, version) != (LEDGER_MANAGER_FACTORY, LEDGER_MANAGER_VERSION):
            raise ClusterLayoutError(
                f"{layout.root} already holds a cluster with layout {factory}:{version}; "
                "refusing to overwrite it (nuke it first if it is really unwanted)"
            )
        # Re-create any missing well-known node (older or partial tooling) without touching data.
        for path in (layout.available, layout.readonly, layout.cookies):
            await zk.ensure_path(path)
        instance_id = await read_instance_id(zk, layout)
        return instance_id, False

    root_stat = await zk.exists(layout.root)
    if root_stat is not None and root_stat.numChildren > 0:
        children = await zk.get_children(layout.root)
        raise ClusterLayoutError(
            f"{layout.root} exists without a LAYOUT but holds {sorted(children)[:5]}: "
            "refusing to initialise a cluster over unknown data"
        )
    instance_id = str(uuid.uuid4())
    ops: list[tuple[str, str, bytes, int]] = []
    if root_stat is None:
        await _parent_paths(zk, layout.root)
        ops.append(("create", layout.root, b"", -1))
    ops += [
        ("create", layout.layout, LAYOUT_DATA, -1),
        ("create", layout.instance_id, instance_id.encode(), -1),
        ("create", layout.available, b"", -1),
        ("create", layout.readonly, b"", -1),
        ("create", layout.cookies, b"", -1),
    ]
    try:
        await zk.multi(ops)
    except ZkNodeExistsError:
        # Someone initialised concurrently (or our own multi was retried after a connection loss):
        # accept it if it is the same kind of cluster.
        return (await init_new_cluster(zk, layout))[0], False
    log.info("initialised cluster at %s with instance id %s", layout.root, instance_id)
    return instance_id, True


async def read_instance_id(zk: MetadataStore, layout: ZkLayout | None = None) -> str:
    layout = layout or ZkLayout()
    try:
        data, _ = await zk.get(layout.instance_id)
    except ZkNoNodeError as e:
        raise ClusterNotInitializedError(
            f"no cluster at {layout.root} ({layout.instance_id} missing): run `pybk shell initnewcluster`"
        ) from e
    return data.decode()


async def nuke_existing_cluster(
    zk: MetadataStore, layout: ZkLayout | None = None, *, force: bool = False, instance_id: str | None = None
) -> bool:
    """Delete the whole ledgers root. Needs ``force`` or the matching ``instance_id``; refuses while
    bookies are registered. Returns False if there was nothing to delete."""
    layout = layout or ZkLayout()
    if not force and instance_id is None:
        raise IncorrectParameterError("nukeexistingcluster needs --force or the cluster's instance id")
    if await zk.exists(layout.root) is None:
        return False
    if instance_id is not None and not force:
        actual = await read_instance_id(zk, layout)
        if actual != instance_id:
            raise ClusterLayoutError(f"instance id mismatch: cluster is {actual}, given {instance_id}")
    bookies = await _registered_bookies(zk, layout)
    if bookies:
        raise ClusterLayoutError(f"bookies are still registered ({', '.join(bookies[:5])}): stop them first")
    await zk.delete_recursive(layout.root)
    log.info("deleted cluster at %s", layout.root)
    return True


async def _registered_bookies(zk: MetadataStore, layout: ZkLayout) -> list[str]:
    out: list[str] = []
    for path in (layout.available, layout.readonly):
        with contextlib.suppress(ZkNoNodeError):
            out += [c for c in await zk.get_children(path) if c != "readonly"]
    return sorted(out)
