"""Security of popmq's servers: TLS, authentication, access control, protected mode, audit.

Every server process uses it: `popmq serve` and `popmq proxy` (their listeners, the gate in
front of both protocols, users and policies, audit), `popmq broker` and a shard's replicas
(their listeners, a gate that admits only the proxies' signed calls, protected mode), and a
cluster proxy's connections to its brokers (TLS, signing). It imports broker_core (errors),
coordination (the cluster's users and policies live in the coordinator) and grpc_calls (how
the gate ends a refused call), never the proxy: a front end gives the gate what only it
knows (the RocketMQ dialect of refusals, proxy/rocketmq/refusals.py).

docs/security.md describes the threat model and how each part works.
"""

from popmq.security.config import SecurityConfig
from popmq.security.model import (
    ANONYMOUS_SUPER,
    Action,
    Check,
    Decision,
    Pattern,
    Policy,
    Principal,
    Resource,
    ResourceType,
    User,
    UserType,
    current_principal,
    set_principal,
)

__all__ = [
    "ANONYMOUS_SUPER",
    "Action",
    "Check",
    "Decision",
    "Pattern",
    "Policy",
    "Principal",
    "Resource",
    "ResourceType",
    "SecurityConfig",
    "User",
    "UserType",
    "current_principal",
    "set_principal",
]
