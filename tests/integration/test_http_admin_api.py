"""BookKeeper's HTTP admin API on a real bookie and a real ``pybk autorecovery`` process over a
real ZooKeeper: every endpoint answers with BookKeeper's paths, methods and shapes (or an
explicit 501 with the reason), errors are JSON (404, 405 with Allow, 413, 400), and with
authentication on, every state-changing call is refused to the unauthenticated (401) and to a
caller without the admin right (403) on both processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.admin_http import AdminApi, autorecovery_process
from tests.support.bookies import BookieFactory, BookieProcess
from tests.support.recover_cluster import new_cluster
from tests.support.security import TOKENS, SecurityMaterial

from bkclient import BookKeeper

pytestmark = pytest.mark.integration

PASSWORD = b"admin-api"


def api(bookie: BookieProcess) -> AdminApi:
    assert bookie.http_port is not None
    return AdminApi(bookie.http_port)


async def _ledger(zk_hosts: str, entries: list[bytes], ensemble: int = 2) -> int:
    async with await BookKeeper.connect(zk_hosts) as bk:
        writer = await bk.create_ledger(ensemble=ensemble, write_quorum=ensemble, password=PASSWORD)
        for entry in entries:
            await writer.append(entry)
        await writer.close()
        return writer.ledger_id


async def test_every_bookie_endpoint_answers_in_bookkeepers_shape(
    zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 2)
    ledger_id = await _ledger(zk_hosts, [b"first", b"second", b"third"])
    http = api(bookies[0])
    call = asyncio.to_thread

    assert (await call(http.get, "/heartbeat")).text == "OK\n"
    assert "bookkeeper_server_" in (await call(http.get, "/metrics")).text
    assert (await call(http.get, "/api/v1/bookie/is_ready")).status == 200
    assert (await call(http.get, "/api/v1/config/server_config")).json()["zkServers"] == zk_hosts

    # ledgers
    assert (await call(http.get, "/api/v1/ledger/list")).json() == {str(ledger_id): None}
    listed = (await call(http.get, "/api/v1/ledger/list?print_metadata=true")).json()
    assert listed[str(ledger_id)]["state"] == "CLOSED"
    assert (await call(http.get, "/api/v1/ledger/list?print_metadata=true&page=2")).json() == {}
    metadata = (await call(http.get, f"/api/v1/ledger/metadata?ledger_id={ledger_id}")).json()
    assert metadata[str(ledger_id)]["last_entry_id"] == 2
    assert sorted(metadata[str(ledger_id)]["segments"][0]["bookies"]) == sorted(b.bookie_id for b in bookies)
    assert metadata[str(ledger_id)]["has_password"] is True and "password" not in metadata[str(ledger_id)]
    read = f"/api/v1/ledger/read?ledger_id={ledger_id}"
    assert (await call(http.get, read)).json() == {"0": "first", "1": "second", "2": "third"}
    assert (await call(http.get, read + "&start_entry_id=1&end_entry_id=1")).json() == {"1": "second"}
    assert (await call(http.get, read + "&page=1&start_entry_id=2")).json() == {"2": "third"}
    assert (await call(http.get, read + "&start_entry_id=2&end_entry_id=1")).status == 400

    # the cluster
    writable = (await call(http.get, "/api/v1/bookie/list_bookies?type=rw")).json()
    assert writable == {b.bookie_id: None for b in bookies}
    named = (await call(http.get, "/api/v1/bookie/list_bookies?type=rw&print_hostnames=true")).json()
    assert set(named.values()) == {"127.0.0.1"}
    assert (await call(http.get, "/api/v1/bookie/list_bookies?type=ro")).json() == {}
    info = (await call(http.get, "/api/v1/bookie/list_bookie_info")).json()
    assert set(info) == {*(b.bookie_id for b in bookies), "clusterInfo"}
    assert info["clusterInfo"]["total"] == sum(info[b.bookie_id]["total"] for b in bookies) > 0
    assert (await call(http.get, "/api/v1/bookie/cluster_info")).json() == {
        "auditorElected": False, "auditorId": "", "clusterUnderReplicated": False,
        "ledgerReplicationEnabled": True, "totalBookiesCount": 2, "writableBookiesCount": 2,
        "readonlyBookiesCount": 0, "unavailableBookiesCount": 0,
    }

    # this bookie
    assert (await call(http.get, "/api/v1/bookie/sanity")).json() == {"passed": True, "readOnly": False}
    disk = (await call(http.get, "/api/v1/bookie/list_disk_file")).json()
    assert set(disk) == {"journal files", "entrylog files", "index files"}
    assert disk["journal files"].endswith(".txn")
    indexes = await call(http.get, "/api/v1/bookie/list_disk_file?file_type=index")
    assert set(indexes.json()) == {"index files"}
    info_self = (await call(http.get, "/api/v1/bookie/info")).json()
    assert info_self["totalSpace"] >= info_self["freeSpace"] > 0
    assert (await call(http.get, "/api/v1/bookie/last_log_mark")).json()["journals"]
    assert (await call(http.get, "/api/v1/bookie/state")).json()["readOnly"] is False
    assert (await call(http.get, "/api/v1/bookie/gc")).json() == {"is_in_force_gc": "false"}
    assert (await call(http.get, "/api/v1/bookie/gc_details")).status == 200
    for method, path in (("PUT", "/api/v1/bookie/expand_storage"),
                         ("GET", "/api/v1/bookie/entry_location_compact"),
                         ("PUT", "/api/v1/bookie/entry_location_compact"),
                         ("PUT", "/api/v1/config/server_config")):
        reply = await call(http.call, method, path)
        assert reply.status == 501 and reply.json()["error"], (path, reply)

    # a read-only bookie is not sanity-checked, as in BookKeeper
    assert (await call(http.call, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": True})).status == 200
    assert (await call(http.get, "/api/v1/bookie/sanity")).json() == {"passed": False, "readOnly": True}
    assert (await call(http.call, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": False})).status == 200

    # delete, then it is gone
    assert (await call(http.call, "DELETE", f"/api/v1/ledger/delete?ledger_id={ledger_id}")).json() == {
        "ledger_id": ledger_id, "deleted": True}
    gone = await call(http.get, f"/api/v1/ledger/metadata?ledger_id={ledger_id}")
    assert gone.status == 404 and "error" in gone.json()
    assert (await call(http.call, "DELETE", f"/api/v1/ledger/delete?ledger_id={ledger_id}")).status == 404


async def test_errors_are_json_with_the_right_status(zk_hosts: str, bookie_factory: BookieFactory) -> None:
    (bookie,) = await new_cluster(zk_hosts, bookie_factory, 1)
    http = api(bookie)
    call = asyncio.to_thread

    unknown = await call(http.get, "/api/v1/no/such/thing")
    assert unknown.status == 404 and "/api/v1/no/such/thing" in unknown.json()["error"]
    elsewhere = await call(http.get, "/api/v1/autorecovery/who_is_auditor")
    assert elsewhere.status == 404 and "pybk autorecovery" in elsewhere.json()["error"]

    wrong = await call(http.call, "POST", "/api/v1/bookie/state/readonly")
    assert wrong.status == 405 and set(wrong.headers["Allow"].split(",")) == {"GET", "PUT"}
    assert "POST" in wrong.json()["error"]
    assert (await call(http.call, "DELETE", "/api/v1/ledger/list")).headers["Allow"] == "GET"

    too_big = await call(http.call, "PUT", "/api/v1/bookie/state/readonly", raw=b"x" * 70_000)
    assert too_big.status == 413 and "error" in too_big.json()

    for path in ("/api/v1/ledger/metadata", "/api/v1/ledger/metadata?ledger_id=abc",
                 "/api/v1/ledger/read?ledger_id=-1", "/api/v1/bookie/list_bookies?type=xx",
                 "/api/v1/bookie/list_disk_file?file_type=xx"):
        reply = await call(http.get, path)
        assert reply.status == 400 and reply.json()["error"], (path, reply)
    for body in (b"not json", b"[1]", b'{"readOnly": "maybe"}'):
        reply = await call(http.call, "PUT", "/api/v1/bookie/state/readonly", raw=body)
        assert reply.status == 400 and reply.json()["error"], (body, reply)
    assert (await call(http.get, "/api/v1/ledger/read?ledger_id=424242")).status == 404
    assert (await call(http.get, "/heartbeat")).text == "OK\n"  # and it serves on


async def test_every_autorecovery_endpoint_on_the_autorecovery_process(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    bookies = await new_cluster(zk_hosts, bookie_factory, 3)
    conf = {"lostBookieRecoveryDelay": "3600"}  # nothing is copied unless asked for here
    with autorecovery_process(zk_hosts, tmp_path / "autorecovery.log", conf) as port:
        http = AdminApi(port)
        call = asyncio.to_thread
        auditor = (await call(http.until, "GET", "/api/v1/autorecovery/who_is_auditor", 200)).json()
        assert set(auditor) == {"Auditor"} and auditor["Auditor"]
        assert (await call(http.get, "/heartbeat")).text == "OK\n"

        # the switch, and an audit refused while it is off
        assert (await call(http.get, "/api/v1/autorecovery/status")).json() == {"enabled": True}
        off = await call(http.call, "PUT", "/api/v1/autorecovery/status?enabled=false")
        assert off.json() == {"enabled": False}
        refused = await call(http.call, "PUT", "/api/v1/autorecovery/trigger_audit")
        assert refused.status == 409 and "disabled" in refused.json()["error"]
        assert (await call(http.call, "PUT", "/api/v1/autorecovery/status", {"enabled": True})).json() == {
            "enabled": True}
        assert (await call(http.call, "PUT", "/api/v1/autorecovery/status")).status == 400
        triggered = await call(http.call, "PUT", "/api/v1/autorecovery/trigger_audit")
        assert (triggered.status, triggered.text) == (200, "Successfully triggered audit")

        # the delay
        delay = "/api/v1/autorecovery/lost_bookie_recovery_delay"
        assert (await call(http.get, delay)).text == "lostBookieRecoveryDelay value: 3600"
        assert (await call(http.call, "PUT", delay, {"delay_seconds": 3000})).text == (
            "Success set lostBookieRecoveryDelay to 3000")
        assert (await call(http.get, delay)).text == "lostBookieRecoveryDelay value: 3000"
        assert (await call(http.call, "PUT", delay, {"delay_seconds": -1})).status == 400

        # a stopped bookie leaves a ledger short of a replica
        under = "/api/v1/autorecovery/list_under_replicated_ledger"
        none = await call(http.get, under)
        assert none.status == 404 and none.json()["error"] == "No under replicated ledgers found"
        ledger_id = await _ledger(zk_hosts, [b"a", b"b"], ensemble=2)
        async with await BookKeeper.connect(zk_hosts) as bk:
            ensemble = (await bk.ledger_metadata(ledger_id)).segments[0].bookies
            lost = next(b for b in bookies if b.bookie_id in ensemble)
            await asyncio.to_thread(lost.stop)
            await bk.ctx.bookie_watcher.wait_for(lambda w: lost.bookie_id not in w.all_bookies(), 30.0)
        assert (await call(http.get, under)).json() == [ledger_id]
        assert (await call(http.get, under + "?printmissingreplica=true")).json() == {
            str(ledger_id): [lost.bookie_id]}
        assert (await call(http.get, f"{under}?missingreplica={lost.bookie_id}")).json() == [ledger_id]
        assert (await call(http.get, f"{under}?excludingmissingreplica={lost.bookie_id}")).status == 404

        # recover it, then decommission the bookie for good
        bad = await call(http.call, "PUT", "/api/v1/autorecovery/bookie", {"bookie_src": "not a list"})
        assert bad.status == 400 and bad.json()["error"]
        recover = await call(http.call, "PUT", "/api/v1/autorecovery/bookie",
                             {"bookie_src": [lost.bookie_id]})
        assert (recover.status, recover.text) == (200, "Success send recover request command")
        await call(http.until, "GET", under, 404)
        alive = next(b for b in bookies if b.running)
        still_there = await call(http.call, "PUT", "/api/v1/autorecovery/decommission",
                                 {"bookie_src": alive.bookie_id})
        assert still_there.status == 409 and "still registered" in still_there.json()["error"]
        keep_cookie = await call(http.call, "PUT", "/api/v1/autorecovery/bookie",
                                 {"bookie_src": [alive.bookie_id], "delete_cookie": True})
        assert keep_cookie.status == 409 and "still registered" in keep_cookie.json()["error"]
        decommission = await call(http.call, "PUT", "/api/v1/autorecovery/decommission",
                                  {"bookie_src": lost.bookie_id})
        assert (decommission.status, decommission.text) == (
            200, f"Success send decommission Bookie command {lost.bookie_id}")
        # the job deletes its cookie last: then the cluster no longer counts it
        await call(api(alive).until, "GET", "/api/v1/bookie/cluster_info", 200,
                   lambda r: r.json()["totalBookiesCount"] == 2)
        wrong = await call(http.get, "/api/v1/autorecovery/trigger_audit")
        assert wrong.status == 405 and wrong.headers["Allow"] == "PUT"


async def test_with_authentication_every_state_changing_call_needs_an_administrator(
    zk_hosts: str, bookie_factory: BookieFactory, tmp_path: Path
) -> None:
    material = SecurityMaterial.create(tmp_path / "pki")
    conf = material.bookie_conf(mtls=False)
    await new_cluster(zk_hosts, bookie_factory, 0)
    bookie = await asyncio.to_thread(bookie_factory, zk=zk_hosts, conf=conf,
                                     grpc_credentials=material.health_credentials())
    bookie_api = AdminApi(bookie.http_port or 0, material.ca)
    bookie_calls = [
        ("PUT", "/api/v1/config/server_config"), ("DELETE", "/api/v1/ledger/delete?ledger_id=1"),
        ("PUT", "/api/v1/bookie/gc"), ("PUT", "/api/v1/bookie/gc/suspend_compaction"),
        ("PUT", "/api/v1/bookie/gc/resume_compaction"), ("PUT", "/api/v1/bookie/state/readonly"),
        ("PUT", "/api/v1/bookie/expand_storage"), ("PUT", "/api/v1/bookie/entry_location_compact"),
        ("GET", "/api/v1/bookie/sanity"),  # it writes a ledger
    ]
    autorecovery_calls = [
        ("PUT", "/api/v1/autorecovery/status?enabled=false"), ("PUT", "/api/v1/autorecovery/bookie"),
        ("PUT", "/api/v1/autorecovery/trigger_audit"),
        ("PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay"),
        ("PUT", "/api/v1/autorecovery/decommission"),
    ]
    with autorecovery_process(zk_hosts, tmp_path / "autorecovery.log", conf) as port:
        autorecovery_api = AdminApi(port, material.ca)
        for http, calls in ((bookie_api, bookie_calls), (autorecovery_api, autorecovery_calls)):
            for method, path in calls:
                nobody = await asyncio.to_thread(http.as_caller(None).call, method, path)
                assert nobody.status == 401 and nobody.json()["error"].startswith("EUA"), (path, nobody)
                reader = await asyncio.to_thread(http.as_caller(TOKENS["reader"]).call, method, path)
                assert reader.status == 403 and "admin" in reader.json()["error"], (path, reader)
            # a reader may look; an administrator may change
            assert (await asyncio.to_thread(http.as_caller(TOKENS["reader"]).get, "/heartbeat")).status == 200
        admin = autorecovery_api.as_caller(TOKENS["admin"])
        switched = await asyncio.to_thread(admin.call, "PUT", "/api/v1/autorecovery/status?enabled=false")
        assert switched.json() == {"enabled": False}
        assert (await asyncio.to_thread(admin.get, "/api/v1/autorecovery/status")).json() == {
            "enabled": False}
        missing = await asyncio.to_thread(bookie_api.as_caller(TOKENS["admin"]).call, "DELETE",
                                          "/api/v1/ledger/delete?ledger_id=1")
        assert missing.status == 404  # past the guard: there is no such ledger
