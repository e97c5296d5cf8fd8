"""Cluster mode: the broker API over the wire (BrokerService, RemoteBroker), the brokers'
catalog sync, replication, the proxies' routing BrokerAPI (ClusterBroker) with its send
fault table, and the `popmq broker` and `popmq proxy` processes. The coordination they
agree through (etcd, the Coordinator interface) and what they agree on (topic routes, group
records) is its own package, popmq.coordination.

docs/cluster.md describes what lives in etcd, why popmq has its own etcd client, and the
BrokerService.
"""

from popmq.cluster.broker_service import BrokerServicer, add_broker_service
from popmq.cluster.catalog_sync import CatalogSync
from popmq.cluster.cluster_broker import ClusterBroker
from popmq.cluster.remote_broker import RemoteBroker

__all__ = [
    "BrokerServicer",
    "CatalogSync",
    "ClusterBroker",
    "RemoteBroker",
    "add_broker_service",
]
