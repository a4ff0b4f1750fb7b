"""Bookie configuration: BookKeeper key names, file < BK_ env < flags, strict validation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bookie.config import ConfigError, load_config, zk_servers_from_uri
from pybk.cmd_bookie import flag_overrides
from pybk.main import build_parser


def write_conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bk_server.conf"
    path.write_text(text)
    return path


def test_conf_file_with_bookkeeper_keys(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path,
        """
# comments and blank lines are ignored
bookiePort=3282
journalDirectories=/j1, /j2
ledgerDirectories=/l1,/l2
journalMaxGroupWaitMSec=1.5
journalSyncData=false
dbStorage_writeCacheMaxSizeMb=64
flushInterval=2000
httpServerEnabled=true
httpServerPort=8081
! another comment style
zkServers=zk1:2181,zk2:2181
""",
    )
    config = load_config(conf)
    assert config.port == 3282
    assert [str(d) for d in config.journal_dirs] == ["/j1", "/j2"]
    assert [str(d) for d in config.ledger_dirs] == ["/l1", "/l2"]
    assert config.http_enabled and config.http_port == 8081
    assert config.zk_servers == "zk1:2181,zk2:2181"
    assert config.storage_overrides == {
        "journal_max_group_wait_ms": 1.5,
        "journal_sync_data": False,
        "write_cache_max_size_mb": 64,
        "flush_interval_ms": 2000,
    }


def test_env_overrides_file_and_flags_override_env(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "bookiePort=1000\njournalQueueSize=5\n")
    env = {"BK_bookiePort": "2000", "BK_journalQueueSize": "7", "BK_HOME": "/opt/bk", "PATH": "/bin"}
    config = load_config(conf, env, {"bookiePort": "3000"})
    assert config.port == 3000
    assert config.storage_overrides["journal_queue_size"] == 7


def test_garbage_collection_keys(tmp_path: Path) -> None:
    defaults = load_config(None, {}, {})
    assert defaults.gc.wait_time_s == 600.0 and defaults.gc.verify_metadata
    config = load_config(write_conf(tmp_path, "gcWaitTime=5000\nverifyMetadataOnGC=false\n"))
    assert config.gc.wait_time_s == 5.0 and not config.gc.verify_metadata
    with pytest.raises(ConfigError, match="bad value '0' for gcWaitTime: must be >= 1000"):
        load_config(None, {"BK_gcWaitTime": "0"})


def test_compaction_keys(tmp_path: Path) -> None:
    defaults = load_config(None, {}, {})
    assert (defaults.gc.minor_threshold, defaults.gc.minor_interval_s) == (0.2, 3600)
    assert (defaults.gc.major_threshold, defaults.gc.major_interval_s) == (0.8, 86400)
    assert defaults.gc.rate_bytes == 1_000_000
    text = (
        "minorCompactionThreshold=0.1\nminorCompactionInterval=60\nmajorCompactionThreshold=0.5\n"
        "majorCompactionInterval=0\ncompactionRateByBytes=0\n"
    )
    config = load_config(write_conf(tmp_path, text))
    assert config.gc.minor_threshold == 0.1 and config.gc.minor_interval_s == 60
    assert config.gc.major_threshold == 0.5 and config.gc.major_interval_s == 0
    assert config.gc.rate_bytes == 0 and not config.gc.major_enabled
    with pytest.raises(ConfigError, match="minorCompactionThreshold: must be between 0 and 1"):
        load_config(None, {"BK_minorCompactionThreshold": "1.5"})
    above = r"minorCompactionThreshold=0\.9 is above majorCompactionThreshold=0\.8"
    with pytest.raises(ConfigError, match=above):
        load_config(None, {"BK_minorCompactionThreshold": "0.9"})
    # with the major pass off, a high minor threshold is fine (BookKeeper checks enabled passes only)
    assert load_config(None, {"BK_minorCompactionThreshold": "0.9", "BK_majorCompactionInterval": "0"})


def test_autorecovery_keys(tmp_path: Path) -> None:
    defaults = load_config(None, {}, {}).autorecovery
    assert (defaults.lost_bookie_delay_s, defaults.open_ledger_grace_s) == (0.0, 30.0)
    assert defaults.replication_rate_bytes == 0  # no limit
    text = ("lostBookieRecoveryDelay=600\nopenLedgerRereplicationGracePeriod=5000\n"
            "auditorPeriodicBookieCheckInterval=0\nreplicationRateByBytes=2000000\n")
    config = load_config(write_conf(tmp_path, text)).autorecovery
    assert (config.lost_bookie_delay_s, config.open_ledger_grace_s, config.check_interval_s) == (600, 5.0, 0)
    assert config.replication_rate_bytes == 2_000_000
    assert load_config(None, {"BK_replicationRateByBytes": "-1"}).autorecovery.replication_rate_bytes == -1
    with pytest.raises(ConfigError, match="replicationRateByBytes: must be >= -1"):
        load_config(None, {"BK_replicationRateByBytes": "-2"})


def test_single_journal_directory_key(tmp_path: Path) -> None:
    config = load_config(write_conf(tmp_path, "journalDirectory=/only\n"))
    assert [str(d) for d in config.journal_dirs] == ["/only"]


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("bookiePort=seventy", "bad value 'seventy' for bookiePort: expected an integer"),
        ("bookiePort=70000", "between 0 and 65535"),
        ("journalSyncData=yes please", "expected true or false"),
        ("journalMaxGroupWaitMSec=-1", "must be >= 0.0"),
        ("journalQueueSize=0", "must be >= 1"),
        ("ledgerDirectories= , ", "comma-separated list"),
        ("nosuchKey=1", "unknown configuration key 'nosuchKey'"),
        ("just some words", "expected key=value"),
        ("metadataServiceUri=http://x/ledgers", "expected zk"),
    ],
)
def test_bad_file_values_name_key_value_and_line(tmp_path: Path, line: str, fragment: str) -> None:
    conf = write_conf(tmp_path, "bookiePort=3181\n" + line + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(conf)
    assert fragment in str(info.value)
    if "metadataServiceUri" not in line:
        assert f"{conf}:2" in str(info.value)


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="environment variable BK_flushInterval"):
        load_config(None, {"BK_flushInterval": "often"})
    with pytest.raises(ConfigError, match="unknown configuration key 'bogusKey'"):
        load_config(None, {"BK_bogusKey": "1"})


def test_zookeeper_settings() -> None:
    assert load_config(None, {}, {"zkServers": "none"}).zk_servers is None
    assert load_config(None, {}, {}).zk_servers == "localhost:2181"
    uri = {"metadataServiceUri": "zk+hierarchical://a:2181;b:2182/ledgers"}
    assert load_config(None, {}, uri).zk_servers == "a:2181,b:2182"
    assert zk_servers_from_uri("zk://h:1/ledgers") == "h:1"
    with pytest.raises(ConfigError, match="only the /ledgers root"):
        zk_servers_from_uri("zk://h:1/other")


def test_duplicate_ledger_dirs_and_file_as_dir_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lists a directory twice"):
        load_config(None, {}, {"ledgerDirectories": f"{tmp_path},{tmp_path}/"})
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        load_config(None, {}, {"journalDirectories": str(afile)})


def test_missing_conf_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.conf")


def test_cli_flags_map_to_keys(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["bookie", "--zk", "none", "--port", "0", "--http-port", "0", "--data-dir", str(tmp_path),
         "--ledger-dirs", "/a,/b", "--add-port", "-1"]
    )  # fmt: skip
    overrides = flag_overrides(args)
    config = load_config(None, {}, overrides)
    assert config.zk_servers is None and config.port == 0 and config.add_port == -1
    assert config.http_enabled and config.http_port == 0
    assert config.journal_dirs == (tmp_path / "journal",)
    assert [str(d) for d in config.ledger_dirs] == ["/a", "/b"]
    assert config.bookie_id == "127.0.0.1:0"


def test_daemon_exits_2_with_a_clear_line_on_bad_config(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "journalMaxBackups=many\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pybk", "bookie", "--conf", str(conf), "--zk", "none"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "configuration error" in proc.stderr and "journalMaxBackups" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_storage_config_gets_dirs_and_only_the_keys_that_were_set(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path, "journalDirectory=/j\nledgerDirectories=/a,/b\ndbStorage_writeCacheMaxSizeMb=8\n"
    )
    storage = load_config(conf).storage_config()
    assert storage.journal_dirs == [Path("/j")]
    assert storage.ledger_dirs == [Path("/a"), Path("/b")]
    assert storage.write_cache_max_size_mb == 8
    assert storage.journal_sync_data is True  # the storage layer's default stands


def test_the_add_port_is_on_by_default_and_checked() -> None:
    assert load_config(None, {}, {}).add_port == 0  # a free port, advertised in the registration
    assert load_config(None, {}, {"bookieAddPort": "3182"}).add_port == 3182
    with pytest.raises(ConfigError, match="bookieAddPort"):
        load_config(None, {}, {"bookieAddPort": "-2"})
