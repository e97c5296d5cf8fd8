"""Users and their access policies, as the admin API takes and returns them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from popmq._gen.popmq.v1 import admin_pb2
from popmq.sdk.errors import InvalidArgumentError
from popmq.sdk.types import datetime_from_timestamp, enum_suffix

__all__ = [
    "Policy",
    "User",
]

RESOURCE_TYPES = ("topic", "group", "cluster", "any")
"""What a policy can cover: topics, groups, the cluster (server info, users, policies), or
all of them."""
PATTERNS = ("literal", "prefixed", "any")
ACTIONS = ("pub", "sub", "create", "update", "delete", "get", "list", "all")
DECISIONS = ("allow", "deny")
USER_TYPES = ("normal", "super")


def _choice(name: str, value: str, allowed: Sequence[str]) -> str:
    lowered = value.lower() if isinstance(value, str) else value
    if lowered not in allowed:
        raise InvalidArgumentError(f"{name} {value!r} is not one of {', '.join(allowed)}")
    return str(lowered)


@dataclass(frozen=True, slots=True)
class Policy:
    """One entry of a user's access control list (RocketMQ's ACL 2.0 policy).

    Of the policies matching a request the most specific decides (a named resource type
    before ``"any"``; ``"literal"`` before ``"prefixed"`` before ``"any"``; a longer prefix
    first); ``"deny"`` wins a tie; no match refuses (docs/security.md).

    Attributes:
        resource_type: ``"topic"``, ``"group"``, ``"cluster"`` or ``"any"``.
        name: The topic or group name (``"literal"``), or its prefix (``"prefixed"``);
            ``""`` for pattern ``"any"`` and for the cluster.
        pattern: ``"literal"``, ``"prefixed"`` or ``"any"``; ``""`` (the default):
            ``"literal"`` with a name, ``"any"`` without.
        actions: Of ``"pub"``, ``"sub"``, ``"create"``, ``"update"``, ``"delete"``,
            ``"get"``, ``"list"``, ``"all"``. Empty only to revoke a whole policy.
        decision: ``"allow"`` or ``"deny"``.
        source_cidrs: It applies only to requests from these networks (IPv4 or IPv6
            CIDRs, or addresses); empty: from anywhere.
    """

    resource_type: str
    name: str = ""
    pattern: str = ""
    actions: tuple[str, ...] = ()
    decision: str = "allow"
    source_cidrs: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        resource: str,
        actions: Sequence[str] = (),
        *,
        deny: bool = False,
        source_cidrs: Sequence[str] = (),
    ) -> Policy:
        """A policy from RocketMQ-style resource text, as ``popmq acl grant`` takes it.

        ``"topic:orders"`` (literal), ``"topic:orders-*"`` (prefixed), ``"topic:*"`` (every
        topic); the same with ``"group:"`` or ``"any:"`` (topics and groups alike);
        ``"cluster"``; ``"*"`` (everything).
        """
        text = resource.strip()
        if text in ("*", "any:*"):
            return cls("any", "", "any", tuple(actions), _deny(deny), tuple(source_cidrs))
        if text.lower() == "cluster":
            return cls("cluster", "", "any", tuple(actions), _deny(deny), tuple(source_cidrs))
        kind, sep, name = text.partition(":")
        if not sep or kind.lower() not in ("topic", "group", "any") or not name:
            raise InvalidArgumentError(
                f"resource {resource!r} is not TYPE:NAME, TYPE:PREFIX*, TYPE:*, cluster or *"
                " (TYPE: topic, group or any)"
            )
        pattern = "literal"
        if name == "*":
            pattern, name = "any", ""
        elif name.endswith("*"):
            pattern, name = "prefixed", name[:-1]
        return cls(kind.lower(), name, pattern, tuple(actions), _deny(deny), tuple(source_cidrs))

    def to_proto(self) -> admin_pb2.Policy:
        """The wire form; a value outside the allowed ones raises InvalidArgumentError."""
        kind = _choice("resource_type", self.resource_type, RESOURCE_TYPES)
        pattern = _choice("pattern", self.pattern, ("", *PATTERNS))
        actions = [_choice("action", a, ACTIONS) for a in self.actions]
        decision = _choice("decision", self.decision, DECISIONS)
        return admin_pb2.Policy(
            resource_type=f"RESOURCE_TYPE_{kind.upper()}",
            pattern=f"RESOURCE_PATTERN_{(pattern or 'unspecified').upper()}",
            name=self.name,
            actions=[f"ACTION_{a.upper()}" for a in actions],
            decision=f"DECISION_{decision.upper()}",
            source_cidrs=list(self.source_cidrs),
        )

    @classmethod
    def from_proto(cls, policy: admin_pb2.Policy) -> Policy:
        """Build a policy from its wire form."""
        return cls(
            resource_type=enum_suffix(
                admin_pb2.ResourceType.Name, policy.resource_type, "RESOURCE_TYPE_"
            ),
            name=policy.name,
            pattern=enum_suffix(
                admin_pb2.ResourcePattern.Name, policy.pattern, "RESOURCE_PATTERN_"
            ),
            actions=tuple(enum_suffix(admin_pb2.Action.Name, a, "ACTION_") for a in policy.actions),
            decision=enum_suffix(
                admin_pb2.Decision.Name, policy.decision or admin_pb2.DECISION_ALLOW, "DECISION_"
            ),
            source_cidrs=tuple(policy.source_cidrs),
        )

    @property
    def resource(self) -> str:
        """The resource as ``Policy.of`` reads it: ``"topic:orders-*"``, ``"cluster"``."""
        if self.resource_type == "cluster":
            return "cluster"
        pattern = self.pattern or ("literal" if self.name else "any")
        if self.resource_type == "any" and pattern == "any":
            return "*"
        suffix = {"any": "*", "prefixed": "*"}.get(pattern, "")
        return f"{self.resource_type}:{self.name}{suffix}"


def _deny(deny: bool) -> str:
    return "deny" if deny else "allow"


@dataclass(frozen=True, slots=True)
class User:
    """A user of the server's access control (its secret is never returned).

    Attributes:
        access_key: The access key the user signs requests with.
        user_type: ``"normal"`` (checked against its policies) or ``"super"`` (not checked;
            may manage users and policies).
        enabled: A disabled user's requests are refused.
        secret_fingerprint: The first 16 hex digits of the SHA-256 of its secret key:
            compare with ``printf %s "$SECRET" | sha256sum | cut -c1-16``.
        policy_count: Number of policies in its access control list.
        create_time: When it was created (UTC).
        update_time: When it or its policies last changed (UTC).
    """

    access_key: str
    user_type: str
    enabled: bool
    secret_fingerprint: str
    policy_count: int
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_proto(cls, user: admin_pb2.User) -> User:
        """Build a user from its wire form."""
        return cls(
            access_key=user.access_key,
            user_type=enum_suffix(admin_pb2.UserType.Name, user.user_type, "USER_TYPE_"),
            enabled=user.enabled,
            secret_fingerprint=user.secret_fingerprint,
            policy_count=user.policy_count,
            create_time=datetime_from_timestamp(user.create_time),
            update_time=datetime_from_timestamp(user.update_time),
        )
