"""One leader among a cluster's autorecovery processes (BookKeeper's auditor election).

The leader holds one ephemeral znode, ``<ledgers root>/underreplication/auditorelection/leader``,
whose content is its id. The others watch it and try again when it goes: when the leader closes,
or when its ZooKeeper session expires. A leader whose own session expires stops being one at
once (:meth:`LeaderElection.lost` fires), before anyone else can take over, so two processes never
act as leader together.
"""

from __future__ import annotations

import asyncio
import logging

from kazoo.protocol.states import EventType, WatchedEvent

from bkmeta.zk import SessionEvent, ZkClient, ZkNodeExistsError, ZkNoNodeError
from bkproto.errors import MetadataStoreError

log = logging.getLogger(__name__)

_RETRY_S = 1.0  # after a ZooKeeper error while campaigning


class LeaderElection:
    def __init__(self, zk: ZkClient, path: str, identity: str) -> None:
        self._zk = zk
        self._path = path
        self._identity = identity.encode()
        self._leading = False
        self._changed = asyncio.Event()  # a watch fired or the session changed: look again
        self._lost = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        return self._leading

    async def start(self) -> None:
        self._zk.add_session_listener(self._on_session)

    async def close(self) -> None:
        """Step down (the znode goes, so another process takes over at once)."""
        self._zk.remove_session_listener(self._on_session)
        if self._leading:
            self._leading = False
            try:
                await self._zk.delete(self._path)
            except (ZkNoNodeError, MetadataStoreError) as exc:
                log.info("leader znode %s not deleted (%s); it goes with the session", self._path, exc)

    async def lead(self) -> None:
        """Return once this process is the leader."""
        while not self._leading:
            self._changed.clear()
            try:
                await self._zk.create(self._path, self._identity, ephemeral=True, makepath=True)
            except ZkNodeExistsError:
                if not await self._watch_holder():
                    continue  # gone meanwhile: try again now
                await self._changed.wait()
                continue
            except MetadataStoreError as exc:
                log.warning("cannot campaign for leadership at %s: %s; retrying", self._path, exc)
                await asyncio.sleep(_RETRY_S)
                continue
            self._lost = asyncio.Event()
            self._leading = True
            log.info("leading autorecovery (%s)", self._path)

    async def lost(self) -> None:
        """Return once this process stopped being the leader (its session expired)."""
        await self._lost.wait()

    async def _watch_holder(self) -> bool:
        """Watch the leader znode; False if it is already gone."""
        def on_event(event: WatchedEvent) -> None:
            if event.type == EventType.DELETED:
                self._changed.set()

        try:
            stat = await self._zk.exists(self._path, watch=self._zk.wrap_watcher(on_event))
        except MetadataStoreError as exc:
            log.warning("cannot watch %s: %s; retrying", self._path, exc)
            await asyncio.sleep(_RETRY_S)
            return False
        return stat is not None

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED and self._leading:
            log.warning("autorecovery leadership lost: the ZooKeeper session expired")
            self._leading = False
            self._lost.set()
        if event in (SessionEvent.EXPIRED, SessionEvent.NEW_SESSION):
            self._changed.set()  # the watch went with the session: campaign again
