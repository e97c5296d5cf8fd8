"""`popmq cluster status` against `popmq serve`: its one embedded broker, no etcd."""

from __future__ import annotations

import json

import pytest

from popmq import Admin, Producer
from popmq.cli.main import main
from tests.support.server_thread import ServerThread


def test_local_server_reports_itself_as_the_one_broker(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin, Producer(server.endpoint) as producer:
        admin.create_topic("orders", queues=3)
        producer.send("orders", b"a")
        producer.send("orders", b"b")
        status = admin.cluster_status()
    assert (status.mode, status.cluster, status.proxy) == ("local", "", server.endpoint)
    assert (status.proxies, status.proxies_stale, status.etcd) == ([], False, None)
    (broker,) = status.brokers
    assert (broker.name, broker.address) == ("broker-a", server.endpoint)
    assert (broker.live, broker.reachable, broker.error) == (True, True, "")
    assert broker.data_dir == str(server.data_dir.resolve())
    assert broker.store_bytes is not None and broker.store_bytes > 0
    assert broker.disk_free_bytes is not None and broker.disk_free_bytes > 0
    assert (broker.topics, broker.queues) == (1, 3)
    assert (broker.messages_sent, broker.messages_popped, broker.messages_acked) == (2, 0, 0)
    assert broker.lease_ttl_s is None and broker.epoch == 0


def test_cli_prints_the_local_broker_as_a_table_and_as_json(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "status", "--endpoint", server.endpoint]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"local server at {server.endpoint} (popmq serve: one broker, no etcd)")
    row = next(line for line in out.splitlines() if "broker-a" in line and "│" in line)
    assert server.endpoint in row and " up " in row
    assert f"data dir of broker-a: {server.data_dir.resolve()}" in out
    assert main(["cluster", "status", "--endpoint", server.endpoint, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["mode"] == "local"
    assert document["etcd"] is None
    assert [b["name"] for b in document["brokers"]] == ["broker-a"]
