"""ClusterStatus.problems: what `popmq cluster status` reports as unhealthy (and exits 5 on)."""

from __future__ import annotations

from popmq._gen.popmq.v1 import admin_pb2
from popmq.sdk.cluster_status import ClusterStatus


def _status(**fields: object) -> ClusterStatus:
    return ClusterStatus.from_proto(admin_pb2.GetClusterStatusResponse(**fields))  # type: ignore[arg-type]


def test_a_healthy_cluster_has_no_problems() -> None:
    status = _status(
        mode=admin_pb2.CLUSTER_MODE_CLUSTER,
        brokers=[admin_pb2.BrokerStatus(name="b1", live=True, reachable=True)],
        etcd=admin_pb2.EtcdClusterStatus(
            endpoints=[admin_pb2.EtcdEndpointStatus(endpoint="e:2379", reachable=True)]
        ),
    )
    assert status.problems == []


def test_each_unhealthy_part_is_one_line() -> None:
    status = _status(
        mode=admin_pb2.CLUSTER_MODE_CLUSTER,
        brokers=[
            admin_pb2.BrokerStatus(name="b1", live=True, reachable=True),
            admin_pb2.BrokerStatus(name="b2", live=True, reachable=False, error="timed out"),
            admin_pb2.BrokerStatus(name="b3", live=False, error="not registered in etcd now"),
        ],
        proxies_stale=True,
        etcd=admin_pb2.EtcdClusterStatus(
            endpoints=[
                admin_pb2.EtcdEndpointStatus(endpoint="e1:2379", reachable=True),
                admin_pb2.EtcdEndpointStatus(endpoint="e2:2379", error="connection refused"),
            ]
        ),
    )
    assert status.problems == [
        "broker b2 is unreachable: timed out",
        "broker b3 is down (not registered): not registered in etcd now",
        "etcd endpoint e2:2379 is unreachable: connection refused",
        "the proxy list is stale: etcd did not answer",
    ]


def test_local_mode_has_no_etcd_to_miss() -> None:
    status = _status(
        mode=admin_pb2.CLUSTER_MODE_LOCAL,
        brokers=[admin_pb2.BrokerStatus(name="local", live=True, reachable=True)],
    )
    assert status.etcd is None
    assert status.problems == []
