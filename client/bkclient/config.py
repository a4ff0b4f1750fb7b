"""Client configuration: BookKeeper's ``ClientConfiguration`` keys that this client honours.

Defaults follow BookKeeper (``addEntryTimeoutSec`` = ``readEntryTimeoutSec`` = 5 s,
``speculativeReadTimeout`` = 2 s, ``explicitLacInterval`` off, ``throttle`` = 5000 outstanding adds)
unless a comment says why not. Every field is validated when the config is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from bkmeta.zk_security import ZkSecurity
from bkproto.errors import IncorrectParameterError

from .tls import ClientSecurity

MiB = 1024 * 1024

PLACEMENT_POLICIES = ("random", "rackaware")
MAX_ENTRY_SIZE_BYTES = 15 * MiB  # the bookies' nettyMaxFrameSizeBytes is capped the same


@dataclass(frozen=True, slots=True)
class ClientConfig:
    # Writes.
    add_entry_timeout_s: float = 5.0  # addEntryTimeoutSec: a bookie slower than this is replaced
    max_outstanding_adds: int = 5000  # throttle: adds sent and not yet completed, per handle
    max_outstanding_bytes: int = 64 * MiB  # payload bytes of those adds, per handle
    # Adds waiting for room under the two limits above, per handle. append() waits instead of
    # queueing; append_async() beyond this raises TooManyRequestsError rather than grow memory.
    max_waiting_adds: int = 100_000
    explicit_lac_interval_s: float = 0.0  # explicitLacInterval; 0 = off
    max_ensemble_changes: int = 1_000_000  # maxNumEnsembleChanges (BookKeeper: unbounded)
    # Largest entry body (32-byte header + digest + payload) a bookie accepts: the bookies'
    # nettyMaxFrameSizeBytes. A bigger payload is refused by append() before anything is sent.
    max_entry_size_bytes: int = 5 * MiB
    # Reads.
    read_entry_timeout_s: float = 5.0  # readEntryTimeoutSec
    speculative_read_timeout_s: float = 2.0  # speculativeReadTimeout; 0 = no speculative reads
    read_batch_max_entries: int = 1000  # range reads: entries per ReadEntries call
    read_batch_max_bytes: int = 4 * MiB
    long_poll_timeout_s: float = 10.0  # tailing: how long one LAC long poll parks on a bookie
    # Placement.
    placement_policy: str = "random"  # "random" (DefaultEnsemblePlacementPolicy) or "rackaware"
    min_racks_per_write_quorum: int = 2  # minNumRacksPerWriteQuorum
    enforce_min_racks_per_write_quorum: bool = False  # enforceMinNumRacksPerWriteQuorum
    # Bookie connections.
    # Add-stream pacing, per bookie. A bookie is behind when at least ``bookie_behind_min_adds``
    # adds queued for it while its previous message was out. Then one message is out at a time
    # (``bookie_max_inflight_messages``): while it is, the next fills up, so the bookie gets about
    # one message per round trip whatever the rate, and the per-message CPU (far above an
    # entry's) is paid as rarely as the latency allows; and at most one message leaves per
    # ``bookie_min_batch_interval_s`` (0: no limit), or a bookie that answers fast would be sent a
    # message per round trip, a few entries each. While it keeps up (adds trickle in, a lone add),
    # up to ``bookie_max_inflight_messages_keeping_up`` messages are out and none is held back, so
    # an add (and the LAC it carries to tailing readers) does not wait for the previous one's
    # round trip. Measurements: docs/performance.md ("The add-stream window", and issue 32's
    # latency rows).
    bookie_max_inflight_messages: int = 1
    bookie_max_inflight_messages_keeping_up: int = 2
    bookie_min_batch_interval_s: float = 0.003
    bookie_behind_min_adds: int = 16
    bookie_max_batch_bytes: int = 4 * MiB  # entry bytes per add-stream message
    # Send adds over a bookie's add port (plain TCP, ``bkproto.add_port``) when its registration
    # advertises one; False keeps every call on gRPC (e.g. behind a gRPC-only proxy).
    bookie_use_add_port: bool = True
    metadata_timeout_s: float = 10.0  # zkTimeout: the ZooKeeper session timeout
    # TLS and credentials towards the bookies (``bkclient.tls``); None: BookKeeper.connect reads
    # them from the environment (BK_<key>, PYBK_CLIENT_CONF), plaintext if nothing is set there.
    security: ClientSecurity | None = None
    # The cluster's ZooKeeper identity (``bkmeta.zk_security``); None: from the environment too.
    zk_security: ZkSecurity | None = None

    def __post_init__(self) -> None:
        positive = {
            "add_entry_timeout_s": self.add_entry_timeout_s,
            "max_outstanding_adds": self.max_outstanding_adds,
            "max_outstanding_bytes": self.max_outstanding_bytes,
            "max_waiting_adds": self.max_waiting_adds,
            "max_ensemble_changes": self.max_ensemble_changes,
            "max_entry_size_bytes": self.max_entry_size_bytes,
            "read_entry_timeout_s": self.read_entry_timeout_s,
            "read_batch_max_entries": self.read_batch_max_entries,
            "read_batch_max_bytes": self.read_batch_max_bytes,
            "long_poll_timeout_s": self.long_poll_timeout_s,
            "min_racks_per_write_quorum": self.min_racks_per_write_quorum,
            "bookie_max_inflight_messages": self.bookie_max_inflight_messages,
            "bookie_max_inflight_messages_keeping_up": self.bookie_max_inflight_messages_keeping_up,
            "bookie_behind_min_adds": self.bookie_behind_min_adds,
            "bookie_max_batch_bytes": self.bookie_max_batch_bytes,
            "metadata_timeout_s": self.metadata_timeout_s,
        }
        for name, value in positive.items():
            if value <= 0:
                raise IncorrectParameterError(f"ClientConfig.{name} must be > 0, got {value!r}")
        if self.max_entry_size_bytes > MAX_ENTRY_SIZE_BYTES:
            raise IncorrectParameterError(
                f"ClientConfig.max_entry_size_bytes must be <= {MAX_ENTRY_SIZE_BYTES} (an entry must fit"
                f" in one 16 MiB add-stream message), got {self.max_entry_size_bytes}"
            )
        for name, value in {
            "explicit_lac_interval_s": self.explicit_lac_interval_s,
            "speculative_read_timeout_s": self.speculative_read_timeout_s,
            "bookie_min_batch_interval_s": self.bookie_min_batch_interval_s,
        }.items():
            if value < 0:
                raise IncorrectParameterError(f"ClientConfig.{name} must be >= 0, got {value!r}")
        if self.placement_policy not in PLACEMENT_POLICIES:
            raise IncorrectParameterError(
                f"ClientConfig.placement_policy must be one of {PLACEMENT_POLICIES}, "
                f"got {self.placement_policy!r}"
            )
