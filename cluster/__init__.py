"""Cluster mode: the cluster's metadata (routes, groups), the broker API over the wire
(BrokerService, RemoteBroker), the brokers' catalog sync, replication, the proxies' routing
BrokerAPI (ClusterBroker) with its send fault table, and the `popmq broker` and `popmq
proxy` processes. The coordination they agree through (etcd, the Coordinator interface) is
its own package, popmq.coordination.

docs/cluster.md describes what lives in etcd, why popmq has its own etcd client, and the
BrokerService.
"""

from popmq.cluster.broker_service import BrokerServicer, add_broker_service
from popmq.cluster.catalog_sync import CatalogSync
from popmq.cluster.cluster_broker import ClusterBroker
from popmq.cluster.groups import GroupAdmin, GroupCache, GroupRecord, GroupRules
from popmq.cluster.remote_broker import RemoteBroker
from popmq.cluster.routes import (
    QueueRef,
    RouteAdmin,
    RouteCache,
    RoutesConfig,
    Segment,
    TopicRoute,
)

__all__ = [
    "BrokerServicer",
    "CatalogSync",
    "ClusterBroker",
    "GroupAdmin",
    "GroupCache",
    "GroupRecord",
    "GroupRules",
    "QueueRef",
    "RemoteBroker",
    "RouteAdmin",
    "RouteCache",
    "RoutesConfig",
    "Segment",
    "TopicRoute",
    "add_broker_service",
]
