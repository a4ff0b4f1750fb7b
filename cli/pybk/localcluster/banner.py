"""What ``pybk localcluster`` prints once the cluster is up: what runs where and how to use it."""

from __future__ import annotations

import textwrap

from pybk.localcluster.layout import ClusterLayout
from pybk.localcluster.steps import SelfCheckResult, self_check_quorums

READY_LINE = "pybk local cluster is up"


def python_snippet(zk_hosts: str, bookies: int) -> str:
    ensemble, write_quorum, ack_quorum = self_check_quorums(bookies)
    return textwrap.dedent(
        f"""\
        import asyncio
        from bkclient import BookKeeper

        async def main() -> None:
            async with await BookKeeper.connect("{zk_hosts}") as bk:
                wh = await bk.create_ledger(ensemble={ensemble}, write_quorum={write_quorum}, \
ack_quorum={ack_quorum}, password=b"pw")
                await wh.append(b"hello, bookkeeper")
                await wh.close()
                rh = await bk.open_ledger(wh.ledger_id, password=b"pw")
                async for entry in rh.read(0, rh.last_add_confirmed):
                    print(wh.ledger_id, entry.entry_id, entry.data)

        asyncio.run(main())"""
    )


def render_banner(
    layout: ClusterLayout,
    bookie_ids: list[str],
    self_check: SelfCheckResult | None,
    *,
    cluster_created: bool,
    temporary_data: bool,
) -> str:
    ensemble, write_quorum, ack_quorum = self_check_quorums(layout.bookies)
    zk = layout.zk_hosts
    lines = [
        f"{READY_LINE}: ZooKeeper + {layout.bookies} bookie(s), data in {layout.data_dir}",
        "",
        f"  {'ZooKeeper':<12} {zk:<21}  log {layout.log_dir / 'zookeeper.log'}",
    ]
    for index, bookie_id in enumerate(bookie_ids):
        lines.append(
            f"  {f'bookie-{index}':<12} {bookie_id:<21}  add port {layout.add_port(index)}"
            f"  metrics {layout.metrics_url(index)}"
            f"  log {layout.log_dir / f'bookie-{index}.log'}"
        )
    if layout.autorecovery:
        lines.append(
            f"  {'autorecovery':<12} {'watches the bookies':<21}"
            f"  metrics {layout.autorecovery_metrics_url}  log {layout.log_dir / 'autorecovery.log'}"
        )
    lines.append(f"  {'cluster':<12} {'initialised now' if cluster_created else 'existing metadata kept'}")
    if self_check is not None:
        lines.append(
            f"  {'self-check':<12} wrote and read back {self_check.entries} entries of an "
            f"E={self_check.ensemble} Qw={self_check.write_quorum} Qa={self_check.ack_quorum} ledger "
            f"in {self_check.elapsed_s:.2f} s"
        )
    curl = f"curl -s {layout.metrics_url(0)}"
    lines += ["", "Try it (in another terminal):"]
    if layout.client_conf is not None:
        tls_dir = layout.client_conf.parent
        lines.append(f"  export PYBK_CLIENT_CONF={layout.client_conf}  # TLS: clients and tools read it")
        curl = (f"curl -s --cacert {tls_dir / 'ca.pem'} --cert {tls_dir / 'client.pem'}"
                f" --key {tls_dir / 'client.key'} {layout.metrics_url(0)}")
    lines += [
        f"  pybk shell --zk {zk} listbookies",
        f"  pybk shell --zk {zk} simpletest -e {ensemble} -w {write_quorum} -a {ack_quorum} -n 100",
        f"  pybk shell --zk {zk} listledgers -m",
        f"  {curl} | grep -v '^#' | head",
        "",
        "From Python:",
        textwrap.indent(python_snippet(zk, layout.bookies), "  "),
        "",
    ]
    if temporary_data:
        lines.append("Press Ctrl-C to stop. The data is in a temporary directory, removed on exit "
                     "(use --data-dir to keep it).")
    else:
        lines.append(f"Press Ctrl-C to stop. The data stays in {layout.data_dir}: run again with "
                     f"--data-dir {layout.data_dir} to get the same cluster back.")
    return "\n".join(lines)
