"""What a shell command gets: the connection settings, a lazily connected metadata client, and
output helpers that honour ``--json`` (one JSON object on stdout)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from bkmeta import ClusterLayoutError, ClusterNotInitializedError, MetadataClient
from bkproto.errors import MetadataStoreError

# How long a command waits for ZooKeeper before giving up with exit code 3.
ZK_CONNECT_TIMEOUT_S = 5.0


class ZooKeeperUnreachableError(MetadataStoreError):
    """No ZooKeeper session could be established (the shell exits with code 3)."""


@dataclass
class ShellContext:
    zk_hosts: str
    ledgers_root: str = "/ledgers"
    as_json: bool = False
    zk_given: bool = True  # False: --zk was not passed (a command may use the bookie's zkServers)
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    _metadata: MetadataClient | None = None

    async def metadata(self, require_cluster: bool = True, watch_bookies: bool = True) -> MetadataClient:
        """The metadata client, connected on first use (and closed by the shell)."""
        if self._metadata is None:
            try:
                self._metadata = await MetadataClient.connect(
                    self.zk_hosts,
                    self.ledgers_root,
                    require_cluster=require_cluster,
                    watch_bookies=watch_bookies,
                    connect_timeout_s=ZK_CONNECT_TIMEOUT_S,
                )
            except (ClusterNotInitializedError, ClusterLayoutError):
                raise
            except MetadataStoreError as e:
                raise ZooKeeperUnreachableError(f"ZooKeeper at {self.zk_hosts} is unreachable: {e}") from e
        return self._metadata

    def emit(self, data: dict[str, Any], text: str) -> None:
        """Print ``data`` as JSON with ``--json``, otherwise ``text``."""
        if self.as_json:
            print(json.dumps(data, sort_keys=True), file=self.out)
        else:
            print(text, file=self.out)

    def warn(self, message: str) -> None:
        """On stderr only: the command goes on, and ``--json`` output stays one object."""
        print(f"warning: {message}", file=self.err)

    def error(self, message: str) -> None:
        if self.as_json:
            print(json.dumps({"error": message}), file=self.out)
        print(f"error: {message}", file=self.err)

    async def close(self) -> None:
        if self._metadata is not None:
            await self._metadata.close()
            self._metadata = None
