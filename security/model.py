"""Who a request is, and what access control speaks of (RocketMQ's ACL 2.0 model).

- `User`: an access key, its secret, SUPER or NORMAL, enabled or not. SUPER users are not
  checked against policies.
- `Policy`: one entry of a user's access control list: a resource (type and pattern), the
  actions it covers, ALLOW or DENY, and optional source CIDRs.
- `Check`: what one request needs: an action on a resource.
- `Principal`: who the current request is (set by authentication for the duration of a
  call; `current_principal()` reads it).

Evaluation (docs/security.md): among a user's policies that match the check (resource,
action, source address), the most specific wins: a named type before ANY, LITERAL before
PREFIXED before ANY, a longer prefix before a shorter; at equal specificity DENY wins;
no match denies. (RocketMQ meant DENY to win a tie; its comparator let ALLOW win until
apache/rocketmq#9784. popmq does not copy that.)
"""

from __future__ import annotations

import contextvars
import enum
from dataclasses import dataclass, field


class UserType(enum.StrEnum):
    SUPER = "SUPER"
    """Not checked against policies: may do anything, including user and ACL admin."""
    NORMAL = "NORMAL"


class ResourceType(enum.StrEnum):
    ANY = "ANY"
    CLUSTER = "CLUSTER"
    """The server itself: its configuration, users and ACLs, cluster status."""
    TOPIC = "TOPIC"
    GROUP = "GROUP"


class Pattern(enum.StrEnum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"
    ANY = "ANY"


class Action(enum.StrEnum):
    PUB = "PUB"
    SUB = "SUB"
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    GET = "GET"
    LIST = "LIST"
    ALL = "ALL"
    """In a policy: every action above."""


class Decision(enum.StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"


@dataclass(frozen=True, slots=True)
class User:
    access_key: str
    secret_key: str = field(repr=False)
    """Never in a repr (a user logged, or shown in a traceback, keeps its secret)."""
    user_type: UserType = UserType.NORMAL
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource a request touches: a topic, a group, or the cluster (name "")."""

    type: ResourceType
    name: str = ""


@dataclass(frozen=True, slots=True)
class Policy:
    """One entry of a user's ACL."""

    resource_type: ResourceType
    pattern: Pattern
    name: str
    """The literal name, or the prefix (PREFIXED); "" for the ANY pattern."""
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW
    source_cidrs: tuple[str, ...] = ()
    """The policy applies only to requests from these networks; () applies to all."""


@dataclass(frozen=True, slots=True)
class Check:
    """What a request needs: `action` on `resource` (or one of `alternatives` instead)."""

    resource: Resource
    action: Action
    alternatives: tuple[Action, ...] = ()
    """Other actions any one of which also satisfies the check: RocketMQ's QueryRoute
    needs PUB or SUB on its topic, a query of messages SUB or GET. () for most checks."""

    @property
    def actions(self) -> tuple[Action, ...]:
        """`action` and its alternatives: the check passes when any of them is allowed."""
        return (self.action, *self.alternatives)


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of the current request."""

    access_key: str
    """"" for an anonymous caller (authentication off)."""
    user_type: UserType
    source: str
    """The peer's address (an IP, for source CIDRs), as grpc reports it."""

    @property
    def is_super(self) -> bool:
        return self.user_type is UserType.SUPER


ANONYMOUS_SUPER = Principal("", UserType.SUPER, "")
"""Who a request is when authentication is off: not checked (as today)."""

_CURRENT: contextvars.ContextVar[Principal] = contextvars.ContextVar(
    "popmq_principal", default=ANONYMOUS_SUPER
)


def current_principal() -> Principal:
    """The caller of the request being served (ANONYMOUS_SUPER when authentication is off)."""
    return _CURRENT.get()


def set_principal(principal: Principal) -> contextvars.Token[Principal]:
    """Make `principal` the caller of the code that runs in this context (a call's task)."""
    return _CURRENT.set(principal)
