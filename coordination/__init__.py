"""Coordination: what every popmq process in a cluster agrees through, and `popmq serve`
uses in memory.

- `Coordinator` (coordinator.py): member sessions (lease, keepalive, loss, re-registration
  with a new epoch), metadata with compare-and-set, entries that expire, list-then-watch
  snapshots; the key layout under `/popmq/<cluster>/`.
- Its two implementations: `LocalCoordinator` (one process, in memory) and
  `EtcdCoordinator` over popmq's own asyncio etcd v3 client (etcd.py).
- `CoordinationError` and its subclasses (errors.py), each also in popmq's `PopMQError`
  families; the write-with-id and delete-with-marker helpers of cluster metadata
  (metadata.py); cluster mode's settings sections (config.py).

What the processes of a cluster agree on lives here too, beside how they agree on it: the
topic routes (routes.py: `TopicRoute`, `RouteAdmin`, the proxies' `RouteCache`) and the
group records (groups.py: `GroupRecord`, `GroupAdmin`, `GroupCache`) under `topics/` and
`groups/`, which proxies write and route by and every broker follows (its catalog sync).

It imports only broker_core (errors, names and value types) and the generated etcd stubs,
so the proxy, the broker process, the proxies' cluster routing and the CLI all build on it
without importing each other.
"""

from popmq.coordination.coordinator import (
    DEFAULT_SESSION_TTL_S,
    Coordinator,
    Entry,
    Member,
    MemberKind,
    Session,
    Snapshot,
)
from popmq.coordination.errors import (
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
from popmq.coordination.etcd_coordinator import EtcdCoordinator
from popmq.coordination.groups import GroupAdmin, GroupCache, GroupRecord, GroupRules
from popmq.coordination.local_coordinator import LocalCoordinator
from popmq.coordination.routes import (
    QueueRef,
    RouteAdmin,
    RouteCache,
    RoutesConfig,
    Segment,
    TopicRoute,
)

__all__ = [  # noqa: RUF022 (plain sorted(), as tests/unit/test_public_names.py pins)
    "CompactedError",
    "ConflictError",
    "CoordinationArgumentError",
    "CoordinationError",
    "CoordinationUnavailableError",
    "Coordinator",
    "CorruptValueError",
    "DEFAULT_SESSION_TTL_S",
    "Entry",
    "EtcdCoordinator",
    "EtcdError",
    "GroupAdmin",
    "GroupCache",
    "GroupRecord",
    "GroupRules",
    "LeaseNotFoundError",
    "LocalCoordinator",
    "Member",
    "MemberExistsError",
    "MemberKind",
    "QueueRef",
    "RouteAdmin",
    "RouteCache",
    "RoutesConfig",
    "Segment",
    "Session",
    "SessionClosedError",
    "Snapshot",
    "TopicRoute",
]
