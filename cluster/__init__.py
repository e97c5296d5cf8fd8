"""Cluster mode: the coordination (etcd, our own v3 client, and the Coordinator
interface), the cluster's metadata (routes, groups), the broker API over the wire
(BrokerService, RemoteBroker), the brokers' catalog sync and the proxies' routing BrokerAPI
(ClusterBroker).

docs/cluster.md describes what lives in etcd, why popmq has its own etcd client, and the
BrokerService.
"""

from popmq.cluster.broker_service import BrokerServicer, add_broker_service
from popmq.cluster.catalog_sync import CatalogSync
from popmq.cluster.cluster_broker import ClusterBroker
from popmq.cluster.coordination import (
    DEFAULT_SESSION_TTL_S,
    Coordinator,
    Entry,
    Member,
    MemberKind,
    Session,
    Snapshot,
)
from popmq.cluster.errors import (
    CompactedError,
    ConflictError,
    CoordinationArgumentError,
    CoordinationError,
    CoordinationUnavailableError,
    CorruptValueError,
    EtcdError,
    LeaseNotFoundError,
    MemberExistsError,
    SessionClosedError,
)
from popmq.cluster.etcd import EtcdClient, EtcdStatus, Lease, LeaseKeeper
from popmq.cluster.etcd_coordinator import EtcdCoordinator
from popmq.cluster.groups import GroupAdmin, GroupCache, GroupRecord, GroupRules
from popmq.cluster.local_coordinator import LocalCoordinator
from popmq.cluster.remote_broker import RemoteBroker
from popmq.cluster.routes import (
    QueueRef,
    RouteAdmin,
    RouteCache,
    RoutesConfig,
    Segment,
    TopicRoute,
)

__all__ = [  # noqa: RUF022 (plain sorted(), as tests/unit/test_public_names.py pins)
    "BrokerServicer",
    "CatalogSync",
    "ClusterBroker",
    "CompactedError",
    "ConflictError",
    "CoordinationArgumentError",
    "CoordinationError",
    "CoordinationUnavailableError",
    "Coordinator",
    "CorruptValueError",
    "DEFAULT_SESSION_TTL_S",
    "Entry",
    "EtcdClient",
    "EtcdCoordinator",
    "EtcdError",
    "EtcdStatus",
    "GroupAdmin",
    "GroupCache",
    "GroupRecord",
    "GroupRules",
    "Lease",
    "LeaseKeeper",
    "LeaseNotFoundError",
    "LocalCoordinator",
    "Member",
    "MemberExistsError",
    "MemberKind",
    "QueueRef",
    "RemoteBroker",
    "RouteAdmin",
    "RouteCache",
    "RoutesConfig",
    "Segment",
    "Session",
    "SessionClosedError",
    "Snapshot",
    "TopicRoute",
    "add_broker_service",
]
