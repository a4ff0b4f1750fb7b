"""One leader among a cluster's autorecovery processes (BookKeeper's auditor election).

The leader holds one ephemeral znode, ``<ledgers root>/underreplication/auditorelection/leader``,
whose content is its id. The others watch it and try again when it goes: when the leader closes,
or when its ZooKeeper session expires.

A leader steps down (:meth:`LeaderElection.lost` returns) as soon as it cannot be sure it still
holds the znode: when its connection drops (its session may expire unseen, and a successor take
over, before it hears of it; Curator's LeaderLatch does the same), and when the znode is deleted.
Once reconnected with the same session and the znode still its own, it leads again. It only ever
deletes the znode if its own session created it.
"""

from __future__ import annotations

import asyncio
import logging

from bkmeta.store import EventType, MetadataStore, SessionEvent, WatchEvent, ZkNodeExistsError
from bkproto.errors import MetadataStoreError

log = logging.getLogger(__name__)

_RETRY_S = 1.0  # after a ZooKeeper error while campaigning


class LeaderElection:
    def __init__(self, zk: MetadataStore, path: str, identity: str) -> None:
        self._zk = zk
        self._path = path
        self._identity = identity.encode()
        self._leading = False
        self.terms = 0  # times this process became the leader
        self._changed = asyncio.Event()  # a watch fired or the session changed: look again
        self._lost = asyncio.Event()
        self._watching: asyncio.Task[bool] | None = None  # the leader's watch on its own znode

    @property
    def is_leader(self) -> bool:
        return self._leading

    async def start(self) -> None:
        self._zk.add_session_listener(self._on_session)

    async def close(self) -> None:
        """Step down; the znode goes at once if this session holds it, so another process takes
        over without waiting for a session expiry."""
        self._zk.remove_session_listener(self._on_session)
        self._step_down(None)
        if self._watching is not None:
            self._watching.cancel()
        try:
            await self._zk.delete_own_ephemeral(self._path)
        except MetadataStoreError as exc:
            log.info("leader znode %s not deleted (%s); it goes with the session", self._path, exc)

    async def lead(self) -> None:
        """Return once this process is the leader."""
        while not self._leading:
            self._changed.clear()
            try:
                await self._zk.create(self._path, self._identity, ephemeral=True, makepath=True)
            except ZkNodeExistsError:
                if await self._holds_it():  # reconnected with the same session
                    self._become_leader()
                    continue
                if await self._watch():
                    await self._changed.wait()
                continue
            except MetadataStoreError as exc:
                log.warning("cannot campaign for leadership at %s: %s; retrying", self._path, exc)
                await asyncio.sleep(_RETRY_S)
                continue
            self._become_leader()

    async def lost(self) -> None:
        """Return once this process stopped being the leader."""
        await self._lost.wait()

    def _become_leader(self) -> None:
        self._lost = asyncio.Event()
        self._leading = True
        self.terms += 1
        log.info("leading autorecovery (%s)", self._path)
        # while leading, the same watch tells it that someone deleted the znode
        self._changed.clear()
        self._watching = asyncio.create_task(self._watch(), name="autorecovery-leader-watch")

    def _step_down(self, why: str | None) -> None:
        if self._leading:
            if why is not None:
                log.warning("autorecovery leadership given up: %s", why)
            self._leading = False
            self._lost.set()

    async def _holds_it(self) -> bool:
        try:
            _, stat = await self._zk.get(self._path)
        except MetadataStoreError:
            return False
        return bool(stat.ephemeralOwner == self._zk.session_id)

    async def _watch(self) -> bool:
        """Watch the znode (deleted: campaign again, or step down if leading); False if it is
        already gone."""
        def on_event(event: WatchEvent) -> None:
            if event.type == EventType.DELETED:
                self._step_down("the leader znode was deleted")
                self._changed.set()

        try:
            stat = await self._zk.exists(self._path, watch=self._zk.wrap_watcher(on_event))
        except MetadataStoreError as exc:
            log.warning("cannot watch %s: %s; retrying", self._path, exc)
            await asyncio.sleep(_RETRY_S)
            return False
        if stat is None:
            self._step_down("the leader znode is gone")
        return stat is not None

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.DISCONNECTED, SessionEvent.EXPIRED):
            self._step_down(f"ZooKeeper session {event.value}")
        self._changed.set()  # reconnected or a new session: campaign again (the watch may be gone)
