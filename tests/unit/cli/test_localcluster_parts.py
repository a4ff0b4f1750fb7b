"""Unit tests of ``pybk localcluster``'s parts: the layout (ports, dirs, commands), one child
process's lifecycle (with tiny real processes) and the banner. The whole cluster is tested in
tests/integration/test_localcluster.py."""

from __future__ import annotations

import asyncio
import io
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from pybk.localcluster.banner import READY_LINE, render_banner
from pybk.localcluster.child import ChildProcess, ChildSpec
from pybk.localcluster.cluster import LocalCluster, StartupError, run_until_signalled
from pybk.localcluster.layout import ClusterLayout, LayoutError
from pybk.localcluster.steps import SelfCheckResult, self_check_quorums
from pybk.main import build_parser


def test_layout_ports_and_dirs(tmp_path: Path) -> None:
    layout = ClusterLayout(data_dir=tmp_path, bookies=3, zk_port=2181, base_port=3181)
    assert [layout.bookie_address(i) for i in range(3)] == [
        "127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"
    ]
    assert [layout.http_port(i) for i in range(3)] == [3281, 3282, 3283]
    assert [layout.add_port(i) for i in range(3)] == [3381, 3382, 3383]
    assert 3383 in layout.all_bookie_ports()
    assert layout.metrics_url(1) == "http://127.0.0.1:3282/metrics"
    dirs = {layout.journal_dir(i) for i in range(3)} | {layout.ledger_dir(i) for i in range(3)}
    assert len(dirs) == 6 and all(d.is_relative_to(tmp_path) for d in dirs)


def test_layout_commands_are_accepted_by_pybk(tmp_path: Path) -> None:
    layout = ClusterLayout(data_dir=tmp_path, bookies=2, zk_port=2999, base_port=4100)
    zk = layout.zookeeper_spec()
    assert zk.argv[1:4] == ("-m", "pybk", "zookeeper")
    bookie = layout.bookie_spec(1)
    assert bookie.argv[1:4] == ("-m", "pybk", "bookie")
    parser = build_parser()
    for spec in (zk, bookie):
        parser.parse_args(list(spec.argv[3:]))  # exits (fails the test) on an unknown flag
    recovery = ClusterLayout(data_dir=tmp_path, bookies=2, zk_port=2999, base_port=4100,
                             autorecovery=True).autorecovery_spec()
    assert recovery.argv[1:4] == ("-m", "pybk", "autorecovery")
    parser.parse_args(list(recovery.argv[3:]))
    assert recovery.argv[recovery.argv.index("--http-port") + 1] == "4199"  # just below the HTTP range
    assert recovery.env == {"BK_bindAddress": "127.0.0.1"}
    argv = list(bookie.argv)
    assert argv[argv.index("--port") + 1] == "4101"
    assert argv[argv.index("--http-port") + 1] == "4201"
    assert argv[argv.index("--add-port") + 1] == "4301"
    assert argv[argv.index("--zk") + 1] == "127.0.0.1:2999"
    assert argv[argv.index("--bind") + 1] == "127.0.0.1"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bookies": 0}, "--bookies"),
        ({"bookies": 101}, "--bookies"),
        ({"bookies": 100, "autorecovery": True}, "at most 99 bookies"),  # bookie 99's port
        ({"zk_port": 70000}, "--zk-port"),
        ({"base_port": 65500}, "--base-port"),
        ({"base_port": 65400}, "--base-port"),  # room for gRPC and HTTP, none for the add ports
        ({"zk_port": 3282, "base_port": 3181}, "collides"),
        ({"zk_port": 3383, "base_port": 3181}, "collides"),  # bookie 2's add port
        ({"zk_port": 3280, "base_port": 3181, "autorecovery": True}, "autorecovery port"),
    ],
)
def test_layout_rejects_impossible_clusters(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        ClusterLayout(data_dir=tmp_path, **kwargs)


def test_busy_ports_finds_a_listener(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        base = port + 1 if port < 60000 else 20000
        layout = ClusterLayout(data_dir=tmp_path, bookies=1, zk_port=port, base_port=base)
        assert port in layout.busy_ports()
        if port > 2000:  # the autorecovery port (base + 99) is checked only when it runs
            kwargs: dict[str, Any] = {"data_dir": tmp_path, "zk_port": port - 50, "base_port": port - 99}
            assert port not in ClusterLayout(bookies=1, **kwargs).busy_ports()
            assert port in ClusterLayout(bookies=1, autorecovery=True, **kwargs).busy_ports()
    assert port not in layout.busy_ports()


def test_self_check_quorums_fit_small_clusters() -> None:
    assert self_check_quorums(1) == (1, 1, 1)
    assert self_check_quorums(2) == (2, 2, 2)
    assert self_check_quorums(5) == (3, 2, 2)


def python_child(tmp_path: Path, name: str, code: str) -> ChildProcess:
    return ChildProcess(ChildSpec(name, (sys.executable, "-c", code), tmp_path / "logs" / f"{name}.log"))


async def test_child_output_goes_to_its_log_and_exit_code_is_reported(tmp_path: Path) -> None:
    child = python_child(tmp_path, "talker", "import sys; print('hello from child'); sys.exit(3)")
    await child.start()
    assert await child.wait() == 3
    log_text = (tmp_path / "logs" / "talker.log").read_text()
    assert "hello from child" in log_text
    assert "starting:" in log_text
    expected = f"talker (pid {child.pid}) exited with code 3; its log is {child.spec.log_path}"
    assert child.describe_exit() == expected


async def test_child_stop_uses_sigterm_first(tmp_path: Path) -> None:
    child = python_child(tmp_path, "sleeper", "import time; time.sleep(60)")
    await child.start()
    assert child.running()
    code = await child.stop(grace_s=10)
    assert code == -15
    assert "SIGTERM" in child.describe_exit()


async def test_child_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = python_child(tmp_path, "stubborn", code)
    await child.start()
    log_path = tmp_path / "logs" / "stubborn.log"
    # The handler must be installed before SIGTERM is sent (the log's header echoes the code,
    # so look for the printed line itself).
    while "ready" not in log_path.read_text().splitlines():  # noqa: ASYNC110 - polling a file
        await asyncio.sleep(0.05)
    assert await child.stop(grace_s=0.5) == -9


async def test_phase_fails_fast_when_a_watched_child_dies(tmp_path: Path) -> None:
    layout = ClusterLayout(data_dir=tmp_path, bookies=1)
    cluster = LocalCluster(layout, out=io.StringIO())
    dying = python_child(tmp_path, "dying", "import sys; sys.exit(7)")
    await dying.start()
    never = asyncio.get_running_loop().create_future()
    with pytest.raises(StartupError, match=r"dying \(pid \d+\) exited with code 7"):
        await cluster._phase("something that never happens", never, 60.0, [dying])
    assert never.cancelled()


def test_banner_tells_where_everything_is(tmp_path: Path) -> None:
    layout = ClusterLayout(data_dir=tmp_path, bookies=2, zk_port=2182, base_port=4000)
    text = render_banner(
        layout, ["127.0.0.1:4000", "127.0.0.1:4001"], SelfCheckResult(5, 2, 2, 2, 10, 0.1),
        cluster_created=True, temporary_data=False,
    )
    assert text.startswith(READY_LINE)
    for needle in ("127.0.0.1:2182", "127.0.0.1:4001", "http://127.0.0.1:4101/metrics",
                   "pybk shell --zk 127.0.0.1:2182 listbookies", "BookKeeper.connect(\"127.0.0.1:2182\")",
                   f"--data-dir {tmp_path}", str(tmp_path / "logs" / "bookie-1.log")):
        assert needle in text


def test_banner_lists_autorecovery_when_it_runs(tmp_path: Path) -> None:
    layout = ClusterLayout(data_dir=tmp_path, bookies=1, zk_port=2182, base_port=4000, autorecovery=True)
    text = render_banner(layout, ["127.0.0.1:4000"], None, cluster_created=False, temporary_data=True)
    assert "http://127.0.0.1:4099/metrics" in text and str(tmp_path / "logs" / "autorecovery.log") in text
    plain = ClusterLayout(data_dir=tmp_path, bookies=1, zk_port=2182, base_port=4000)
    assert "4099" not in render_banner(plain, ["127.0.0.1:4000"], None, cluster_created=False,
                                               temporary_data=True)


class ScriptedCluster(LocalCluster):
    """A LocalCluster whose start is scripted; close() is recorded instead of stopping processes."""

    def __init__(self, layout: ClusterLayout, start_error: Exception | None) -> None:
        super().__init__(layout, out=io.StringIO())
        self.start_error = start_error
        self.starting = asyncio.Event()
        self.closed = False

    async def start(self) -> None:
        self.starting.set()
        if self.start_error is not None:
            raise self.start_error
        await asyncio.Event().wait()  # a start-up that never finishes

    async def close(self) -> None:
        self.closed = True

    def output(self) -> str:
        assert isinstance(self.out, io.StringIO)
        return self.out.getvalue()


async def test_stop_during_start_up_aborts_it_and_still_closes(tmp_path: Path) -> None:
    cluster = ScriptedCluster(ClusterLayout(data_dir=tmp_path, bookies=1), None)
    stop = asyncio.Event()
    ready: list[LocalCluster] = []
    task = asyncio.ensure_future(run_until_signalled(cluster, stop, ready.append))
    await cluster.starting.wait()
    stop.set()
    assert await task == 0
    assert cluster.closed and not ready
    assert "interrupted during start-up" in cluster.output()


async def test_failed_start_exits_1_with_the_reason_and_closes(tmp_path: Path) -> None:
    cluster = ScriptedCluster(ClusterLayout(data_dir=tmp_path, bookies=1), StartupError("bookie-0 died"))
    ready: list[LocalCluster] = []
    assert await run_until_signalled(cluster, asyncio.Event(), ready.append) == 1
    assert cluster.closed and not ready
    assert "failed to start: bookie-0 died" in cluster.output()


async def test_phase_reports_a_child_that_died_before_it_began(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterLayout(data_dir=tmp_path, bookies=1), out=io.StringIO())
    dead = python_child(tmp_path, "dead", "import sys; sys.exit(4)")
    await dead.start()
    await dead.wait()
    never = asyncio.get_running_loop().create_future()
    with pytest.raises(StartupError, match=r"dead \(pid \d+\) exited with code 4"):
        await cluster._phase("anything", never, 3600.0, [dead])
