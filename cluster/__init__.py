"""Cluster mode's proxy side: how a `popmq proxy` routes over the brokers.

The broker API over the wire (`RemoteBroker`, its connections in broker_pool.py), the
routing BrokerAPI of a proxy (`ClusterBroker`: topology, pops across brokers, gathered
admin, reads from a shard's followers in follower_reads.py), its send path
(cluster_send.py: the fault table in fault_tolerance.py, which retries go where in
send_outcome.py, where recent sends went in in_doubt.py), `popmq cluster status`
(status.py) and the `popmq proxy` process (proxy_server.py). The broker process it routes
to is popmq.broker; what the processes agree through (etcd, the Coordinator interface) and
on (topic routes, group records) is popmq.coordination.

docs/coordination.md describes what lives in etcd and why popmq has its own etcd client,
docs/broker-service.md the BrokerService.
"""

from popmq.cluster.cluster_broker import ClusterBroker
from popmq.cluster.remote_broker import RemoteBroker

__all__ = ["ClusterBroker", "RemoteBroker"]
