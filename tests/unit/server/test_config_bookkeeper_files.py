"""BookKeeper's and Pulsar's stock configuration files load unchanged; BookKeeper keys we do not use
are accepted and listed, real typos are refused with a suggestion; --print-config says where each
value came from."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.config import KEYS, ConfigError, load_config
from bookie.config_report import effective_settings, render_text, server_config
from bookie.config_sources import ignored_line
from bookie.storage.kv import RocksKeyValueStorage, RocksTuning

DATA = Path(__file__).resolve().parents[2] / "data"
BK_SERVER_CONF = DATA / "bk_server.conf"
PULSAR_CONF = DATA / "pulsar_bookkeeper.conf"


def test_stock_files_keep_their_license_headers() -> None:
    for path in (BK_SERVER_CONF, PULSAR_CONF):
        assert "Licensed to the Apache Software Foundation (ASF)" in path.read_text()[:400]


def test_bookkeeper_stock_file_loads_with_its_values() -> None:
    config = load_config(BK_SERVER_CONF, {}, {"zkServers": "none"})
    assert config.port == 3181
    assert [str(d) for d in config.journal_dirs] == ["/tmp/bk-txn"]
    assert [str(d) for d in config.ledger_dirs] == ["/tmp/bk-data"]
    assert not config.http_enabled and config.http_port == 8080
    assert "httpServerClass" in config.ignored  # a Java class name: accepted, not used


def test_pulsar_stock_file_loads_with_its_values() -> None:
    config = load_config(PULSAR_CONF, {}, {})
    assert [str(d) for d in config.journal_dirs] == ["data/bookkeeper/journal"]  # journalDirectory
    assert config.zk_timeout_ms == 30_000 and config.zk_servers == "localhost:2181"
    assert config.gc.wait_time_s == 900.0 and config.gc.major_threshold == 0.5
    assert config.max_entry_bytes == 5_253_120
    # empty values (advertisedAddress=, metadataServiceUri=, dbStorage_writeCacheMaxSizeMb=) mean unset
    assert config.advertised_address == "127.0.0.1"
    assert "write_cache_max_size_mb" not in config.storage_overrides
    # RocksDB options reach the storage configuration
    storage = config.storage_config()
    assert (storage.rocksdb_write_buffer_mb, storage.rocksdb_block_size) == (64, 65536)
    assert storage.rocksdb_bloom_bits_per_key == 10 and storage.rocksdb_block_cache_bytes is None
    assert storage.journal_remove_pages_from_cache  # journalRemoveFromPageCache, BookKeeper's name
    assert {"numAddWorkerThreads", "ledgerStorageClass", "statsProviderClass"} <= set(config.ignored)
    assert (storage.read_worker_threads, storage.max_pending_reads_per_thread) == (8, 2500)
    assert config.ignored["allowLoopback"].where == f"{PULSAR_CONF}:69"
    line = ignored_line(config.ignored)
    assert "numAddWorkerThreads" in line and "\n" not in line


def test_key_unknown_to_bookkeeper_too_is_refused_with_line_and_suggestion(tmp_path: Path) -> None:
    conf = tmp_path / "bk_server.conf"
    conf.write_text("bookiePort=3181\njournalMaxGroupWaitMsec=2\n")
    with pytest.raises(ConfigError) as info:
        load_config(conf)
    assert str(info.value) == (
        f"{conf}:2: unknown configuration key 'journalMaxGroupWaitMsec'"
        " (did you mean 'journalMaxGroupWaitMSec'?)"
    )
    with pytest.raises(ConfigError, match=r"BK_numReadWorkerThread: .*did you mean 'numReadWorkerThreads'"):
        load_config(None, {"BK_numReadWorkerThread": "8"})
    with pytest.raises(ConfigError) as far:
        load_config(None, {}, {"qwertyuiop": "1"})
    assert "did you mean" not in str(far.value)


def test_later_alias_wins_and_the_other_is_dropped(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("journalDirectories=/a\njournalDirectory=/b\n")
    config = load_config(conf)
    assert [str(d) for d in config.journal_dirs] == ["/b"]
    assert "journalDirectories" not in config.settings
    config = load_config(conf, {}, {"journalDirectories": "/c"})
    assert [str(d) for d in config.journal_dirs] == ["/c"]


def test_empty_value_in_a_later_layer_unsets_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("bookiePort=4000\n")
    assert load_config(conf, {"BK_bookiePort": ""}).port == 3181


def test_print_config_names_each_source(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("# header\nbookiePort=4000\nnumAddWorkerThreads=8\n")
    config = load_config(conf, {"BK_gcWaitTime": "7000"}, {"zkServers": "none"})
    rows = {row.key: row for row in effective_settings(config)}
    assert set(KEYS) <= set(rows)
    assert (rows["bookiePort"].value, rows["bookiePort"].source) == ("4000", f"{conf}:2")
    assert rows["gcWaitTime"].source == "environment variable BK_gcWaitTime"
    assert (rows["zkServers"].value, rows["zkServers"].source) == ("none", "command line")
    assert (rows["diskCheckInterval"].value, rows["diskCheckInterval"].source) == ("10000", "default")
    assert rows["journalSyncData"].value == "true"
    assert not rows["numAddWorkerThreads"].used and rows["numAddWorkerThreads"].source.startswith("ignored")
    # the text output, cut at its comments, is a configuration file giving the same configuration
    again = tmp_path / "again.conf"
    again.write_text("".join(line.split(" # ")[0] + "\n" for line in render_text(rows.values()).splitlines()))
    reloaded = load_config(again)
    assert reloaded.storage_config() == config.storage_config()  # now set explicitly, same values
    assert dataclasses.replace(reloaded, storage_overrides=config.storage_overrides) == config
    assert server_config(config)["bookiePort"] == "4000"


def test_print_config_command(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("bookiePort=4001\n")
    out = subprocess.run(
        [sys.executable, "-m", "pybk.main", "bookie", "--conf", str(conf), "--zk", "none", "--print-config",
         "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    rows = {row["key"]: row for row in json.loads(out)}
    assert rows["bookiePort"] == {"key": "bookiePort", "value": "4001", "source": f"{conf}:1", "used": True}


def test_rocksdb_options_reach_rocksdb(tmp_path: Path) -> None:
    tuning = RocksTuning(block_cache_bytes=16 << 20, write_buffer_bytes=8 << 20, block_size=16384,
                         bloom_bits_per_key=10)
    store = RocksKeyValueStorage(tmp_path / "index", tuning=tuning)
    store.close()
    options = next((tmp_path / "index").glob("OPTIONS-*")).read_text()
    assert "write_buffer_size=8388608" in options
    assert "block_size=16384" in options
    assert "bloomfilter" in options.lower()


def test_compaction_max_time_keys() -> None:
    env = {"BK_majorCompactionMaxTimeMillis": "1500", "BK_minorCompactionMaxTimeMillis": "0"}
    config = load_config(None, env)
    assert config.gc.major_max_time_s == 1.5
    assert config.gc.minor_max_time_s == -1.0  # 0 or less: no limit, as in BookKeeper
