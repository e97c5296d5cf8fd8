"""A stored user: its record, the rules of its fields and policies, and how it changes.

One record per user holds the user and its policies (RocketMQ keeps a user and its ACL
apart; one record makes a grant one compare-and-set, and a delete takes the policies
with it). Both stores (store.py) keep the same JSON value: in local mode in the broker's
`meta` family, in cluster mode at `users/<access key>` in etcd.

The secret is stored as given: the signature check (HMAC-SHA1 of the request's date with
the secret as key, RocketMQ's scheme) needs it. It is never returned by an admin RPC:
those show `fingerprint`, the first 16 hex digits of its SHA-256, which tells two secrets
apart and reveals nothing useful about a strong one.

Everything here is pure: the change functions take the current record (or None) and
return the new one (or None to delete), so each store applies them its own way (under a
lock, or in a compare-and-set loop).
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from popmq.broker_core import (
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    check_count,
)
from popmq.security.acl import describe_policy
from popmq.security.model import (
    Action,
    Decision,
    Pattern,
    Policy,
    ResourceType,
    User,
    UserType,
)

SCHEMA_VERSION = 1
"""The record schema this code writes and reads; a reader skips a newer one."""
MAX_ACCESS_KEY_CHARS = 64
ACCESS_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")
ACCESS_KEY_ALLOWED = f"1..{MAX_ACCESS_KEY_CHARS} of letters, digits, '_', '.', '-'"
MIN_SECRET_CHARS = 8
MAX_SECRET_CHARS = 256
MAX_POLICIES = 256
"""Policies of one user: each request of the user is checked against all of them."""
MAX_SOURCE_CIDRS = 32
CONCRETE_ACTIONS = frozenset(Action) - {Action.ALL}


def check_access_key(access_key: str) -> str:
    """An access key: it appears in the `authorization` header (split at ',' and '=') and
    in etcd paths, so only letters, digits, '_', '.' and '-'."""
    if (
        not isinstance(access_key, str)
        or not 0 < len(access_key) <= MAX_ACCESS_KEY_CHARS
        or not ACCESS_KEY_PATTERN.match(access_key)
    ):
        raise InvalidArgumentError(
            f"access key {access_key!r} is invalid: use {ACCESS_KEY_ALLOWED}",
            field="access_key",
            value=access_key,
            allowed=ACCESS_KEY_ALLOWED,
        )
    return access_key


def check_secret_key(secret_key: str) -> str:
    """A secret: 8..256 printable characters, no space at either end (a copy-paste slip)."""
    allowed = f"{MIN_SECRET_CHARS}..{MAX_SECRET_CHARS} printable characters"
    if not isinstance(secret_key, str) or not (
        MIN_SECRET_CHARS <= len(secret_key) <= MAX_SECRET_CHARS
    ):
        length = len(secret_key) if isinstance(secret_key, str) else "no"
        raise InvalidArgumentError(
            f"secret key has {length} characters: use {allowed}",
            field="secret_key",
            allowed=allowed,
        )
    if not secret_key.isprintable() or secret_key != secret_key.strip():
        raise InvalidArgumentError(
            f"secret key must be {allowed} with no space at either end",
            field="secret_key",
            allowed=allowed,
        )
    return secret_key


def fingerprint(secret_key: str) -> str:
    """What admin RPCs show of a secret: the first 16 hex digits of its SHA-256
    (`printf %s "$SECRET" | sha256sum | cut -c1-16`)."""
    return hashlib.sha256(secret_key.encode()).hexdigest()[:16]


def check_policy(policy: Policy, *, for_revoke: bool = False) -> Policy:
    """The policy checked and in its one stored form: ALL alone when it is among the
    actions, CIDRs as networks ("10.1.2.3" -> "10.1.2.3/32"), sorted, without repeats.

    With `for_revoke`, no actions is allowed (it revokes the whole policy).
    """
    kind, pattern, name = policy.resource_type, policy.pattern, policy.name
    if not isinstance(kind, ResourceType):
        raise InvalidArgumentError(
            f"resource type {kind!r} is not one of {', '.join(t.value for t in ResourceType)}",
            field="policy.resource_type",
            value=kind,
        )
    if not isinstance(pattern, Pattern):
        raise InvalidArgumentError(
            f"pattern {pattern!r} is not one of {', '.join(p.value for p in Pattern)}",
            field="policy.pattern",
            value=pattern,
        )
    if kind is ResourceType.CLUSTER and (pattern is not Pattern.ANY or name):
        raise InvalidArgumentError(
            "a CLUSTER policy covers the one cluster: give pattern ANY and no name",
            field="policy.pattern",
            value=f"{pattern.value} {name!r}",
            allowed="ANY, no name",
        )
    if pattern is Pattern.ANY and name:
        raise InvalidArgumentError(
            f"pattern ANY takes no name (got {name!r}): use LITERAL or PREFIXED for a name",
            field="policy.name",
            value=name,
        )
    if pattern is not Pattern.ANY:
        _check_policy_name(name, pattern)
    actions = frozenset(policy.actions)
    if not all(isinstance(a, Action) for a in actions):
        raise InvalidArgumentError(
            f"actions {sorted(map(str, actions))} must be of {', '.join(a.value for a in Action)}",
            field="policy.actions",
        )
    if not actions and not for_revoke:
        raise InvalidArgumentError(
            f"a policy needs at least one action of {', '.join(a.value for a in Action)}",
            field="policy.actions",
        )
    if Action.ALL in actions or actions == CONCRETE_ACTIONS:
        actions = frozenset({Action.ALL})
    if not isinstance(policy.decision, Decision):
        raise InvalidArgumentError(
            f"decision {policy.decision!r} is not ALLOW or DENY", field="policy.decision"
        )
    return dataclasses.replace(
        policy, actions=actions, source_cidrs=check_cidrs(policy.source_cidrs)
    )


def _check_policy_name(name: str, pattern: Pattern) -> None:
    allowed = f"1..{MAX_NAME_LENGTH} of letters, digits, '%', '_', '-'"
    if not name or len(name) > MAX_NAME_LENGTH or not NAME_PATTERN.match(name):
        what = "prefix" if pattern is Pattern.PREFIXED else "name"
        raise InvalidArgumentError(
            f"policy {what} {name!r} is invalid: use {allowed} (pattern ANY for every name)",
            field="policy.name",
            value=name,
            allowed=allowed,
        )


def check_cidrs(cidrs: Iterable[str]) -> tuple[str, ...]:
    """Source networks, each an IPv4 or IPv6 CIDR or a single address, in canonical form."""
    given = list(cidrs)
    check_count("source_cidrs", len(given), MAX_SOURCE_CIDRS)
    networks: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    for cidr in given:
        try:
            networks.add(_unmapped(ipaddress.ip_network(cidr, strict=True)))
        except (TypeError, ValueError) as error:
            raise InvalidArgumentError(
                f"source CIDR {cidr!r} is not a network ({error}): use e.g. 10.0.0.0/8, "
                "192.168.1.7 or fd00::/8, with no host bits set",
                field="policy.source_cidrs",
                value=cidr,
                allowed="IPv4 or IPv6 CIDRs",
            ) from None
    ordered = sorted(networks, key=lambda n: (n.version, n.network_address, n.prefixlen))
    return tuple(str(n) for n in ordered)


_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def _unmapped(
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """An IPv4-mapped IPv6 network (::ffff:10.0.0.0/104) as the IPv4 network it means: peers
    are matched in their IPv4 form (acl.source_ip), so the mapped form would never match."""
    if (
        isinstance(network, ipaddress.IPv6Network)
        and network.prefixlen >= _MAPPED.prefixlen
        and network.subnet_of(_MAPPED)
    ):
        mapped = network.network_address.ipv4_mapped
        assert mapped is not None
        return ipaddress.IPv4Network((mapped, network.prefixlen - _MAPPED.prefixlen))
    return network


def policy_key(policy: Policy) -> tuple[ResourceType, Pattern, str, Decision, tuple[str, ...]]:
    """What tells a user's policies apart: all but the actions. A grant with the key of an
    existing policy adds its actions to it; a revoke names a policy by its key."""
    return (
        policy.resource_type,
        policy.pattern,
        policy.name,
        policy.decision,
        policy.source_cidrs,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UserRecord:
    """A stored user and its policies.

    Attributes:
        access_key: The user's name, as it signs requests.
        secret_key: Its secret, as given (HMAC needs it); never shown by admin RPCs.
        user_type: SUPER (not checked against policies) or NORMAL.
        enabled: A disabled user's requests are refused.
        policies: Its ACL, in grant order (the order does not affect decisions).
        create_time_ms: When it was created (Unix ms).
        update_time_ms: When it or its policies last changed (Unix ms).
    """

    access_key: str
    secret_key: str
    user_type: UserType = UserType.NORMAL
    enabled: bool = True
    policies: tuple[Policy, ...] = ()
    create_time_ms: int = 0
    update_time_ms: int = 0

    def __repr__(self) -> str:  # never the secret, wherever a record is printed
        return (
            f"UserRecord(access_key={self.access_key!r}, user_type={self.user_type.value}, "
            f"enabled={self.enabled}, policies={len(self.policies)}, "
            f"fingerprint={self.fingerprint!r})"
        )

    @property
    def user(self) -> User:
        return User(self.access_key, self.secret_key, self.user_type, self.enabled)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.secret_key)

    def to_value(self) -> dict[str, Any]:
        """The JSON object both stores keep."""
        return {
            "schema": SCHEMA_VERSION,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "user_type": self.user_type.value,
            "enabled": self.enabled,
            "create_time_ms": self.create_time_ms,
            "update_time_ms": self.update_time_ms,
            "policies": [
                {
                    "resource_type": p.resource_type.value,
                    "pattern": p.pattern.value,
                    "name": p.name,
                    "actions": sorted(a.value for a in p.actions),
                    "decision": p.decision.value,
                    "source_cidrs": list(p.source_cidrs),
                }
                for p in self.policies
            ],
        }

    @classmethod
    def from_value(cls, access_key: str, value: Mapping[str, Any]) -> UserRecord | None:
        """Decode a stored record; None for a deletion marker (cluster mode). ValueError
        when it is not a record this version reads (unknown fields are ignored)."""
        try:
            schema = _typed(value["schema"], int)
            if schema > SCHEMA_VERSION:
                raise ValueError(
                    f"schema {schema} is newer than this popmq's {SCHEMA_VERSION}: upgrade"
                )
            if value.get("deleted") is True:
                return None
            if value["access_key"] != access_key:
                raise ValueError(f"its access key {value['access_key']!r} is not {access_key!r}")
            return cls(
                access_key=access_key,
                secret_key=_typed(value["secret_key"], str),
                user_type=UserType(value["user_type"]),
                enabled=_typed(value["enabled"], bool),
                create_time_ms=_typed(value["create_time_ms"], int),
                update_time_ms=_typed(value["update_time_ms"], int),
                policies=tuple(
                    Policy(
                        ResourceType(p["resource_type"]),
                        Pattern(p["pattern"]),
                        _typed(p["name"], str),
                        frozenset(Action(a) for a in p["actions"]),
                        Decision(p["decision"]),
                        tuple(_typed(c, str) for c in p["source_cidrs"]),
                    )
                    for p in value["policies"]
                ),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"user record {access_key!r} is malformed: {error!r}") from error


def _typed(value: Any, kind: type[Any]) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{value!r} is not a {kind.__name__}")
    return value


# -- changes (pure: current record -> new record, or None to delete) ---------------------------


def _not_found(access_key: str) -> NotFoundError:
    return NotFoundError(
        f"user {access_key!r} does not exist", field="access_key", value=access_key
    )


def created(
    current: UserRecord | None,
    *,
    access_key: str,
    secret_key: str,
    user_type: UserType,
    enabled: bool,
    now_ms: int,
) -> UserRecord:
    if current is not None:
        raise AlreadyExistsError(f"user {access_key!r} already exists")
    return UserRecord(
        access_key=access_key,
        secret_key=secret_key,
        user_type=user_type,
        enabled=enabled,
        create_time_ms=now_ms,
        update_time_ms=now_ms,
    )


def updated(
    current: UserRecord | None,
    access_key: str,
    *,
    secret_key: str | None,
    user_type: UserType | None,
    enabled: bool | None,
    now_ms: int,
) -> UserRecord:
    if current is None:
        raise _not_found(access_key)
    return dataclasses.replace(
        current,
        secret_key=current.secret_key if secret_key is None else secret_key,
        user_type=current.user_type if user_type is None else user_type,
        enabled=current.enabled if enabled is None else enabled,
        update_time_ms=now_ms,
    )


def deleted(current: UserRecord | None, access_key: str) -> None:
    if current is None:
        raise _not_found(access_key)


def granted(
    current: UserRecord | None, access_key: str, policy: Policy, *, now_ms: int
) -> UserRecord:
    """`policy` added to the user's ACL: merged into the policy with its key, if any."""
    if current is None:
        raise _not_found(access_key)
    key = policy_key(policy)
    policies = list(current.policies)
    for i, existing in enumerate(policies):
        if policy_key(existing) == key:
            actions = existing.actions | policy.actions
            if Action.ALL in actions or actions == CONCRETE_ACTIONS:
                actions = frozenset({Action.ALL})
            if actions == existing.actions:
                return current  # granted already: nothing to write
            policies[i] = dataclasses.replace(existing, actions=actions)
            break
    else:
        if len(policies) >= MAX_POLICIES:
            raise InvalidArgumentError(
                f"user {access_key!r} has {len(policies)} policies: at most {MAX_POLICIES} "
                "are allowed (use PREFIXED or ANY patterns to cover more names)",
                field="policy",
                allowed=f"<= {MAX_POLICIES} policies a user",
            )
        policies.append(policy)
    return dataclasses.replace(current, policies=tuple(policies), update_time_ms=now_ms)


def revoked(
    current: UserRecord | None, access_key: str, policy: Policy, *, now_ms: int
) -> UserRecord:
    """The user's policy with `policy`'s key without `policy.actions` (all of them when
    it names none, or ALL); the policy goes when no action is left."""
    if current is None:
        raise _not_found(access_key)
    key = policy_key(policy)
    policies = list(current.policies)
    for i, existing in enumerate(policies):
        if policy_key(existing) != key:
            continue
        if not policy.actions or Action.ALL in policy.actions:
            del policies[i]
            break
        held = CONCRETE_ACTIONS if Action.ALL in existing.actions else existing.actions
        if not held & policy.actions:
            raise NotFoundError(
                f"user {access_key!r}'s policy {describe_policy(existing)} does not grant "
                f"{', '.join(sorted(a.value for a in policy.actions))}",
                field="policy.actions",
            )
        left = held - policy.actions
        if left:
            policies[i] = dataclasses.replace(existing, actions=left)
        else:
            del policies[i]
        break
    else:
        shown = dataclasses.replace(policy, actions=frozenset({Action.ALL}))
        what = describe_policy(shown).replace(" ALL on ", " policy on ", 1)
        raise NotFoundError(f"user {access_key!r} has no {what}", field="policy")
    return dataclasses.replace(current, policies=tuple(policies), update_time_ms=now_ms)
