"""`MetadataClient`: the one object the client library and the bookie daemon hold for ZooKeeper.

It owns the metadata store session (a :class:`ZkClient`; any ``bkmeta.store.MetadataStore``
when built directly, e.g. an in-memory one in the simulation), the :class:`ZkLedgerManager` and
the :class:`BookieWatcher` for one cluster (one ledgers root), and knows the cluster's instance id.
"""

from __future__ import annotations

import logging
from typing import Any

from bkmeta.cluster import init_new_cluster, read_instance_id
from bkmeta.cookie import CookieStore
from bkmeta.layout import ZkLayout
from bkmeta.ledger_manager import ZkLedgerManager
from bkmeta.registration import BookieRegistration, BookieServiceInfo, BookieWatcher
from bkmeta.replication_control import ReplicationControl
from bkmeta.store import MetadataStore
from bkmeta.zk import ZkClient, ZkClientConfig
from bkmeta.zk_security import zk_security_from_environ

log = logging.getLogger(__name__)


class MetadataClient:
    """Usage::

        async with await MetadataClient.connect("127.0.0.1:2181") as meta:
            ledger_id, versioned = await meta.ledger_manager.create_ledger(md)
            meta.bookie_watcher.writable_bookies()
    """

    def __init__(self, zk: MetadataStore, layout: ZkLayout) -> None:
        self.zk = zk
        self.layout = layout
        self.ledger_manager = ZkLedgerManager(zk, layout)
        self.bookie_watcher = BookieWatcher(zk, layout)
        self.replication_control = ReplicationControl(zk, layout)
        self.cookies = CookieStore(zk, layout)
        self.instance_id: str | None = None

    @classmethod
    async def connect(
        cls,
        zk_hosts: str,
        ledgers_root: str = "/ledgers",
        *,
        require_cluster: bool = True,
        watch_bookies: bool = True,
        **zk_options: Any,
    ) -> MetadataClient:
        """Connect to ZooKeeper. With ``require_cluster`` (default) a missing cluster raises
        ``ClusterNotInitializedError``; otherwise ``instance_id`` stays None until initialised.
        Without a ``security`` option the cluster's ZooKeeper identity comes from the environment
        (``bkmeta.zk_security.zk_security_from_environ``)."""
        if "security" not in zk_options:
            zk_options["security"] = zk_security_from_environ()
        zk = ZkClient(ZkClientConfig(hosts=zk_hosts, **zk_options))
        await zk.start()
        return await cls.over(
            zk, ledgers_root, require_cluster=require_cluster, watch_bookies=watch_bookies
        )

    @classmethod
    async def over(
        cls,
        store: MetadataStore,
        ledgers_root: str = "/ledgers",
        *,
        require_cluster: bool = True,
        watch_bookies: bool = True,
    ) -> MetadataClient:
        """Like :meth:`connect`, over a session already open (an in-memory one in the
        simulation); the client owns it from now on and closes it, also when this fails."""
        client = cls(store, ZkLayout(ledgers_root))
        try:
            if require_cluster:
                client.instance_id = await read_instance_id(store, client.layout)
            if watch_bookies:
                await client.bookie_watcher.start()
        except BaseException:
            await client.close()
            raise
        return client

    async def init_new_cluster(self) -> bool:
        """Create the cluster znodes if missing (idempotent); True if this call created them."""
        self.instance_id, created = await init_new_cluster(self.zk, self.layout)
        return created

    def bookie_registration(self, info: BookieServiceInfo) -> BookieRegistration:
        """A registration for a bookie on this session (call ``register()`` on it)."""
        return BookieRegistration(self.zk, info, self.layout)

    async def close(self) -> None:
        await self.bookie_watcher.close()
        await self.ledger_manager.close()
        await self.zk.close()

    async def __aenter__(self) -> MetadataClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
