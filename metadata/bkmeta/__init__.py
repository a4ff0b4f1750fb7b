"""ZooKeeper metadata for pybookkeeper: layout, ledger manager, registration, embedded ZooKeeper."""

from bkmeta.bookie_presence import BookiePresence
from bkmeta.cluster import (
    ClusterLayoutError,
    ClusterNotInitializedError,
    init_new_cluster,
    nuke_existing_cluster,
    read_instance_id,
)
from bkmeta.cookie import Cookie, CookieStore, InvalidCookieError, read_local_cookies, verify_or_create_cookie
from bkmeta.layout import ZkLayout, ledger_relative_path, parse_ledger_relative_path
from bkmeta.ledger_manager import LedgerManager, LedgerWatcher, ZkLedgerManager
from bkmeta.metadata_client import MetadataClient
from bkmeta.model import DigestType, LedgerMetadata, LedgerState, Segment, Versioned
from bkmeta.registration import BookieIdInUseError, BookieRegistration, BookieServiceInfo, BookieWatcher
from bkmeta.replication_control import CorruptReplicationSettingError, ReplicationControl
from bkmeta.serde import CorruptLedgerMetadataError, deserialize, serialize
from bkmeta.zk import SessionEvent, ZkClient, ZkClientConfig

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
