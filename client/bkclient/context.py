"""What every handle and operation of one client shares: metadata access, bookie connections,
configuration, placement policy, the event loop they all run on and the clock they read."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bkmeta.clock import Clock, LoopClock

from .bookie_client import BookieClientOptions, grpc_connector
from .config import ClientConfig
from .placement import BookieRacks, PlacementPolicy, make_placement
from .tls import security_from_environ
from .transport import BookieAddress, BookieConnection, BookieConnectionPool, BookieConnector

if TYPE_CHECKING:
    from bkmeta import MetadataClient
    from bkmeta.ledger_manager import LedgerManager
    from bkmeta.registration import BookieWatcher


def pool_for(
    watcher: BookieWatcher | None, config: ClientConfig, connector: BookieConnector | None = None
) -> BookieConnectionPool:
    """A connection pool resolving bookie ids through the registration's service info; its
    connections are ``connector``'s (tests, the simulation) or else gRPC ones tuned by ``config``."""

    def resolve(bookie_id: str) -> BookieAddress | None:
        if watcher is None:
            return None
        info = watcher.all_bookies().get(bookie_id)
        if info is None:
            return None
        return BookieAddress(info.grpc_target, info.add_target, info.add_port_reads, info.tls)

    if connector is None:
        connector = grpc_connector(
            BookieClientOptions(
                max_inflight_messages=config.bookie_max_inflight_messages,
                max_inflight_messages_keeping_up=config.bookie_max_inflight_messages_keeping_up,
                min_batch_interval_s=config.bookie_min_batch_interval_s,
                behind_min_adds=config.bookie_behind_min_adds,
                max_batch_bytes=config.bookie_max_batch_bytes,
                default_timeout_s=config.read_entry_timeout_s,
                use_add_port=config.bookie_use_add_port,
                security=config.security,
            )
        )
    return BookieConnectionPool(connector, resolve)


@dataclass
class ClientContext:
    metadata: MetadataClient
    pool: BookieConnectionPool
    config: ClientConfig
    placement: PlacementPolicy
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)
    clock: Clock = field(default_factory=LoopClock)  # every time reading of the client

    @classmethod
    def create(
        cls,
        metadata: MetadataClient,
        config: ClientConfig | None = None,
        clock: Clock | None = None,
        connector: BookieConnector | None = None,
    ) -> ClientContext:
        """The context of a client on ``metadata``; bookie connections from ``connector``
        (default: gRPC to the addresses the bookies registered). Without ``config.security``, TLS
        settings and credentials come from the environment (``BK_<key>``, ``PYBK_CLIENT_CONF``:
        ``bkclient.tls.security_from_environ``)."""
        config = config or ClientConfig()
        if config.security is None:
            config = dataclasses.replace(config, security=security_from_environ())
        placement = make_placement(
            config.placement_policy,
            config.min_racks_per_write_quorum,
            config.enforce_min_racks_per_write_quorum,
        )
        ctx = cls(metadata, pool_for(metadata.bookie_watcher, config, connector), config, placement)
        if clock is not None:
            ctx.clock = clock
        return ctx

    @property
    def ledger_manager(self) -> LedgerManager:
        return self.metadata.ledger_manager

    @property
    def bookie_watcher(self) -> BookieWatcher:
        return self.metadata.bookie_watcher

    def bookie(self, bookie_id: str) -> BookieConnection:
        return self.pool.get(bookie_id)

    def writable_bookie_racks(self) -> BookieRacks:
        """Writable bookies now registered, with their racks: the placement policy's choice set."""
        return {bookie_id: info.rack for bookie_id, info in self.bookie_watcher.writable_bookies().items()}
