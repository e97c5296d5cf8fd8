"""Cluster mode: the coordination (etcd, our own v3 client, and the Coordinator
interface) and the broker API over the wire (BrokerService, RemoteBroker).

docs/cluster.md describes what lives in etcd, why popmq has its own etcd client, and the
BrokerService.
"""

from popmq.cluster.broker_service import BrokerServicer, add_broker_service
from popmq.cluster.coordination import (
    DEFAULT_SESSION_TTL_S,
    Coordinator,
    Entry,
    EtcdCoordinator,
    LocalCoordinator,
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
