"""Access control: may this principal do what these checks ask? (RocketMQ's ACL 2.0 model.)

A SUPER user passes every check. A NORMAL user passes a check when its policies allow
the check's action (or one of its alternatives) on the check's resource from the
caller's address:

1. A policy *matches* when its resource type is ANY or the resource's type; its pattern
   is LITERAL and its name is the resource's name, or PREFIXED and the resource's name
   starts with it, or ANY; its actions hold the action (or ALL); and it has no source
   CIDRs or one of them holds the caller's IP.
2. Among the matching policies the most specific wins: a named type (TOPIC, GROUP,
   CLUSTER) before ANY; LITERAL before PREFIXED before ANY; a longer prefix before a
   shorter one.
3. At equal specificity DENY wins (RocketMQ meant this too, but its comparator let ALLOW
   win until apache/rocketmq#9784: popmq does not copy that).
4. No matching policy: denied.

A disabled user is refused whatever its policies say; an unknown one too. The refusal is
a PermissionDeniedError naming the user, the action and the resource: "user 'app' may not
SUB group 'billing': no policy allows it".

Everything here is pure and synchronous (it runs on the event loop for every request):
one pass over the user's policies per action checked, and the caller's IP is parsed only
when a matching policy names source CIDRs.
"""

from __future__ import annotations

import functools
import ipaddress
import urllib.parse
from collections.abc import Iterable, Sequence

from popmq.broker_core import PermissionDeniedError
from popmq.security.model import (
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
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_PATTERN_RANK = {Pattern.LITERAL: 0, Pattern.PREFIXED: 1, Pattern.ANY: 2}


@functools.lru_cache(maxsize=4096)
def source_ip(source: str) -> IPAddress | None:
    """The IP of a caller's address as grpc reports it, or None when it has none.

    Accepts "ipv4:10.0.0.7:5555", "ipv6:[::1]:5555" (grpc writes the brackets
    percent-encoded: "ipv6:%5B::1%5D:5555"), a bare IP, or "HOST:PORT" / "[V6]:PORT".
    An IPv4 address mapped into IPv6 (a dual-stack listener's "::ffff:10.0.0.7") is
    returned as the IPv4 address, so IPv4 CIDRs match it. "unix:..." and anything else
    without an IP give None: only policies without source CIDRs match such a caller.
    Cached: a connection's calls share one peer string, and parsing costs 10-20 us a call
    (bench/security_cost.py).
    """
    text = source
    if text.startswith(("ipv4:", "ipv6:")):
        text = urllib.parse.unquote(text[5:])
    ip = _parse_ip(text)
    if ip is None and text.startswith("["):
        end = text.find("]")
        ip = _parse_ip(text[1:end]) if end > 0 else None
    if ip is None and text.count(":") == 1:
        ip = _parse_ip(text.partition(":")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def network(cidr: str) -> IPNetwork:
    """A policy's source CIDR as a network (cached: policies are checked on every request).

    Raises ValueError for text that is not a network; policies are checked when stored
    (store.check_policy), so a stored one always parses.
    """
    return ipaddress.ip_network(cidr, strict=False)


def resource_matches(policy: Policy, resource: Resource) -> bool:
    """Whether the policy's resource (type and pattern) covers `resource`."""
    if policy.resource_type is not ResourceType.ANY and policy.resource_type is not resource.type:
        return False
    if policy.pattern is Pattern.ANY:
        return True
    if policy.pattern is Pattern.LITERAL:
        return resource.name == policy.name
    return bool(policy.name) and resource.name.startswith(policy.name)


def specificity(policy: Policy) -> tuple[int, int, int]:
    """The policy's rank: smaller is more specific (wins)."""
    return (
        1 if policy.resource_type is ResourceType.ANY else 0,
        _PATTERN_RANK[policy.pattern],
        -len(policy.name) if policy.pattern is Pattern.PREFIXED else 0,
    )


class _Source:
    """The caller's address, its IP parsed on first need."""

    __slots__ = ("_ip", "_parsed", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._parsed = False
        self._ip: IPAddress | None = None

    def within(self, cidrs: Iterable[str]) -> bool:
        if not self._parsed:
            self._ip = source_ip(self.text)
            self._parsed = True
        ip = self._ip
        return ip is not None and any(ip in network(cidr) for cidr in cidrs)


def decide(
    policies: Iterable[Policy], resource: Resource, action: Action, source: str | _Source
) -> tuple[Decision | None, Policy | None]:
    """The decision of the most specific policy matching (`resource`, `action`, `source`)
    and that policy; (None, None) when none matches. DENY wins a tie."""
    where = source if isinstance(source, _Source) else _Source(source)
    best: Policy | None = None
    best_rank: tuple[int, int, int] = (0, 0, 0)
    for policy in policies:
        if action not in policy.actions and Action.ALL not in policy.actions:
            continue
        if not resource_matches(policy, resource):
            continue
        rank = specificity(policy)
        if best is not None and rank > best_rank:
            continue
        if best is not None and rank == best_rank and policy.decision is not Decision.DENY:
            continue
        if policy.source_cidrs and not where.within(policy.source_cidrs):
            continue
        best, best_rank = policy, rank
    return (None, None) if best is None else (best.decision, best)


def allowed(policies: Sequence[Policy], check: Check, source: str | _Source) -> bool:
    """Whether `policies` allow `check` from `source` (any one of its actions suffices)."""
    return any(
        decide(policies, check.resource, action, source)[0] is Decision.ALLOW
        for action in check.actions
    )


def authorize(
    principal: Principal,
    user: User | None,
    policies: Sequence[Policy],
    checks: Sequence[Check],
) -> None:
    """Raise PermissionDeniedError unless `principal` may do every one of `checks`.

    Args:
        principal: Who calls. A SUPER principal passes (the root user, or anonymous when
            authentication is off).
        user: The principal's user as stored now (None: unknown). Its current type and
            state count: a user made SUPER passes, a disabled one is refused.
        policies: The user's policies.
        checks: What the request needs (rpc_table.checks).
    """
    if principal.is_super:
        return
    name = principal.access_key
    if user is None:
        raise PermissionDeniedError(f"user {name!r} does not exist (it was deleted?)")
    if not user.enabled:
        raise PermissionDeniedError(f"user {name!r} is disabled")
    if user.user_type is UserType.SUPER:
        return
    source = _Source(principal.source)
    for check in checks:
        if allowed(policies, check, source):
            continue
        _, deny = decide(policies, check.resource, check.action, source)
        reason = (
            f"policy {describe_policy(deny)} denies it"
            if deny is not None and deny.decision is Decision.DENY
            else "no policy allows it"
        )
        raise PermissionDeniedError(f"user {name!r} may not {describe_check(check)}: {reason}")


def describe_resource(resource: Resource) -> str:
    """ "topic 'orders'", "group 'billing'", "the cluster", "every topic" (a list check)."""
    if resource.type is ResourceType.CLUSTER:
        return "the cluster"
    kind = resource.type.value.lower()
    if not resource.name:
        return f"every {kind}"
    return f"{kind} {resource.name!r}"


def describe_check(check: Check) -> str:
    """ "SUB group 'billing'", "PUB or SUB topic 'orders'"."""
    actions = " or ".join(action.value for action in check.actions)
    return f"{actions} {describe_resource(check.resource)}"


def describe_policy(policy: Policy) -> str:
    """One policy in words: "DENY SUB on topics prefixed 'tmp-' from 10.0.0.0/8"."""
    actions = ",".join(sorted(action.value for action in policy.actions))
    return f"{policy.decision.value} {actions} on {describe_policy_resource(policy)}" + (
        f" from {', '.join(policy.source_cidrs)}" if policy.source_cidrs else ""
    )


def describe_policy_resource(policy: Policy) -> str:
    """What a policy covers: "topic 'orders'", "groups prefixed 'billing-'", "every topic",
    "the cluster", "anything named 'x'", "everything"."""
    if policy.resource_type is ResourceType.CLUSTER:
        return "the cluster"
    if policy.resource_type is ResourceType.ANY:
        return {
            Pattern.ANY: "everything",
            Pattern.PREFIXED: f"anything prefixed {policy.name!r}",
            Pattern.LITERAL: f"anything named {policy.name!r}",
        }[policy.pattern]
    kind = policy.resource_type.value.lower()
    return {
        Pattern.ANY: f"every {kind}",
        Pattern.PREFIXED: f"{kind}s prefixed {policy.name!r}",
        Pattern.LITERAL: f"{kind} {policy.name!r}",
    }[policy.pattern]
