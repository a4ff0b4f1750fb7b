"""ZooKeeper metadata for pybookkeeper: layout, ledger manager, registration, embedded ZooKeeper.

The names below are imported on first use (:mod:`bkproto.lazy_exports`): ``bkmeta.model`` or
``bkmeta.named_log`` alone do not import kazoo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkproto.lazy_exports import lazy_getattr

_EXPORTS = {
    "bkmeta.bookie_presence": ("BookiePresence",),
    "bkmeta.cluster": (
        "ClusterLayoutError", "ClusterNotInitializedError", "init_new_cluster", "nuke_existing_cluster",
        "read_instance_id",
    ),
    "bkmeta.cookie": (
        "Cookie", "CookieStore", "InvalidCookieError", "read_local_cookies", "verify_or_create_cookie",
    ),
    "bkmeta.layout": ("ZkLayout", "ledger_relative_path", "parse_ledger_relative_path"),
    "bkmeta.ledger_manager": ("LedgerManager", "LedgerWatcher", "ZkLedgerManager"),
    "bkmeta.metadata_client": ("MetadataClient",),
    "bkmeta.model": ("DigestType", "LedgerMetadata", "LedgerState", "Segment", "Versioned"),
    "bkmeta.registration": ("BookieIdInUseError", "BookieRegistration", "BookieServiceInfo", "BookieWatcher"),
    "bkmeta.replication_control": ("CorruptReplicationSettingError", "ReplicationControl"),
    "bkmeta.serde": ("CorruptLedgerMetadataError", "deserialize", "serialize"),
    "bkmeta.zk": ("SessionEvent", "ZkClient", "ZkClientConfig"),
}

if TYPE_CHECKING:
    from bkmeta.bookie_presence import BookiePresence
    from bkmeta.cluster import (
        ClusterLayoutError,
        ClusterNotInitializedError,
        init_new_cluster,
        nuke_existing_cluster,
        read_instance_id,
    )
    from bkmeta.cookie import (
        Cookie,
        CookieStore,
        InvalidCookieError,
        read_local_cookies,
        verify_or_create_cookie,
    )
    from bkmeta.layout import ZkLayout, ledger_relative_path, parse_ledger_relative_path
    from bkmeta.ledger_manager import LedgerManager, LedgerWatcher, ZkLedgerManager
    from bkmeta.metadata_client import MetadataClient
    from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment, Versioned
    from bkmeta.registration import BookieIdInUseError, BookieRegistration, BookieServiceInfo, BookieWatcher
    from bkmeta.replication_control import CorruptReplicationSettingError, ReplicationControl
    from bkmeta.serde import CorruptLedgerMetadataError, deserialize, serialize
    from bkmeta.zk import SessionEvent, ZkClient, ZkClientConfig
else:
    __getattr__ = lazy_getattr(__name__, _EXPORTS)

__all__ = [
    "BookieIdInUseError",
    "BookiePresence",
    "BookieRegistration",
    "BookieServiceInfo",
    "BookieWatcher",
    "ClusterLayoutError",
    "ClusterNotInitializedError",
    "Cookie",
    "CookieStore",
    "CorruptLedgerMetadataError",
    "CorruptReplicationSettingError",
    "DigestType",
    "InvalidCookieError",
    "LedgerManager",
    "LedgerMetadata",
    "LedgerState",
    "LedgerWatcher",
    "MetadataClient",
    "ReplicationControl",
    "Segment",
    "SessionEvent",
    "Versioned",
    "ZkClient",
    "ZkClientConfig",
    "ZkLayout",
    "ZkLedgerManager",
    "deserialize",
    "init_new_cluster",
    "ledger_relative_path",
    "nuke_existing_cluster",
    "parse_ledger_relative_path",
    "read_instance_id",
    "read_local_cookies",
    "serialize",
    "verify_or_create_cookie",
]
