"""The operator's switches for autorecovery, where BookKeeper keeps them (its
``ZkLedgerUnderreplicationManager``), so that its shell and ours work on the same cluster:

- ``<root>/underreplication/disable``: while this znode exists, no ledger is re-replicated
  (``shell autorecovery --disable``, for maintenance such as a rolling restart);
- ``<root>/underreplication/lostBookieRecoveryDelay``: the delay in seconds, as decimal text.
  The auditor writes its configured value there when the znode is absent; from then on the znode
  wins, so ``shell lostbookierecoverydelay --set`` changes it for the whole cluster at runtime.

Watches are ZooKeeper's one-shot watches (see :meth:`bkmeta.store.MetadataStore.wrap_watcher`). Pass the same
watcher object on every read: kazoo keeps one entry per object and path, so re-reading never piles
up watchers on a znode that does not change.
"""

from __future__ import annotations

from bkmeta.layout import ZkLayout
from bkmeta.model import Versioned
from bkmeta.store import MetadataStore, Watcher, ZkNodeExistsError, ZkNoNodeError
from bkmeta.update_loop import VersionedUpdateLoop
from bkproto.errors import IncorrectParameterError, MetadataStoreError

DISABLE_ZNODE = "disable"
LOST_BOOKIE_RECOVERY_DELAY_ZNODE = "lostBookieRecoveryDelay"
MAX_DELAY_S = 2**31 - 1  # BookKeeper keeps it in a Java int


class CorruptReplicationSettingError(MetadataStoreError):
    """The delay znode holds something other than a number of seconds."""

    retriable = False


def check_delay(seconds: int) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= MAX_DELAY_S:
        raise IncorrectParameterError(
            f"lostBookieRecoveryDelay must be a whole number of seconds between 0 and {MAX_DELAY_S},"
            f" got {seconds!r}"
        )


class ReplicationControl:
    def __init__(self, zk: MetadataStore, layout: ZkLayout) -> None:
        self._zk = zk
        self.disable_path = f"{layout.underreplication}/{DISABLE_ZNODE}"
        self.delay_path = f"{layout.underreplication}/{LOST_BOOKIE_RECOVERY_DELAY_ZNODE}"
        self.auditor_path = layout.auditor_leader

    async def auditor(self) -> str | None:
        """The leading autorecovery's id (``host:pid``), or None when none leads."""
        try:
            data, _ = await self._zk.get(self.auditor_path)
        except ZkNoNodeError:
            return None
        return data.decode(errors="replace")

    # -- enable / disable ----------------------------------------------------------------------

    async def is_enabled(self, watch: Watcher | None = None) -> bool:
        """False while re-replication is disabled; ``watch`` fires when that may have changed."""
        return await self._zk.exists(self.disable_path, watch=watch) is None

    async def disable(self) -> bool:
        """Disable re-replication; False if it already was."""
        try:
            await self._zk.create(self.disable_path, b"", makepath=True)
        except ZkNodeExistsError:
            return False
        return True

    async def enable(self) -> bool:
        """Enable re-replication; False if it already was."""
        try:
            await self._zk.delete(self.disable_path)
        except ZkNoNodeError:
            return False
        return True

    # -- lostBookieRecoveryDelay ---------------------------------------------------------------

    async def lost_bookie_delay(self, watch: Watcher | None = None) -> int | None:
        """The cluster's delay in seconds, or None while it has never been set; ``watch`` fires
        when it is written (even with the same value) or created."""
        try:
            data, _ = await self._zk.get(self.delay_path, watch=watch)
        except ZkNoNodeError:
            # Watch for its creation; if it was created in between, that watch is set: read it.
            if watch is not None and await self._zk.exists(self.delay_path, watch=watch) is not None:
                return await self.lost_bookie_delay(watch)
            return None
        return _parse_delay(self.delay_path, data)

    async def set_lost_bookie_delay(self, seconds: int) -> None:
        check_delay(seconds)
        value = str(seconds).encode()
        try:
            await self._zk.set(self.delay_path, value)
        except ZkNoNodeError:
            try:
                await self._zk.create(self.delay_path, value, makepath=True)
            except ZkNodeExistsError:  # created meanwhile: ours is the later word
                await self._zk.set(self.delay_path, value)

    async def trigger_audit(self) -> int | None:
        """Write the delay again with its own value, which the leading autorecovery takes as
        "re-replicate every lost bookie now" (BookKeeper's ``triggerAudit``); returns that value,
        or None when the cluster has none yet. The write is versioned, so a concurrent ``--set``
        is never undone: on a conflict the new value is read and written back."""
        path = self.delay_path

        async def read() -> Versioned[int]:
            data, stat = await self._zk.get(path)
            return Versioned(_parse_delay(path, data), stat.version)

        async def write(seconds: int, version: int) -> Versioned[int]:
            stat = await self._zk.set(path, str(seconds).encode(), version=version)
            return Versioned(seconds, stat.version)

        loop = VersionedUpdateLoop(path, read, write, lambda _: True, lambda seconds: seconds)
        try:
            return (await loop.run()).value
        except ZkNoNodeError:
            return None

    async def initialize_lost_bookie_delay(self, seconds: int) -> bool:
        """Write ``seconds`` unless the cluster already has a delay; True if written now."""
        check_delay(seconds)
        try:
            await self._zk.create(self.delay_path, str(seconds).encode(), makepath=True)
        except ZkNodeExistsError:
            return False
        return True


def _parse_delay(path: str, data: bytes) -> int:
    try:
        seconds = int(data.decode("ascii").strip())
        check_delay(seconds)
    except (UnicodeDecodeError, ValueError, IncorrectParameterError) as exc:
        raise CorruptReplicationSettingError(f"{path} holds {data[:40]!r}, not a delay in seconds") from exc
    return seconds
