"""Which resource and action each RPC needs: the one table access control reads.

`TABLE` maps every RPC of popmq.v1 MessagingService and AdminService and of
apache.rocketmq.v2 MessagingService, by its full gRPC method name
("/popmq.v1.MessagingService/Pop"), to a `Rule`: called with a request message it returns
the checks (rule(request) -> list[Check]) the caller's policies must pass. For a streaming
RPC the rule applies to each request message of the stream (a PopStream ack needs only
the group, a pop the topic too). tests/unit/security/test_rpc_table.py fails when an RPC of those
services has no entry, and docs/security.md's table is this one, rendered by
`markdown_table()` (`python -m popmq.security.rpc_table` prints it; a test compares).

Rules are declared, not coded: each is a list of `Need`s, a resource type, the action(s)
and the request field naming the resource, so the table in the docs is the code.

The mapping follows RocketMQ 5's (DefaultAuthorizationContextBuilder) for
apache.rocketmq.v2, and the same reasoning for popmq.v1:

- Sending (half messages too), recalling, ending a transaction and taking its checks: PUB
  on the topic (RocketMQ checks only the
  first message's topic of a SendMessage; popmq checks every topic the request names).
- Receiving, acking, forwarding to the DLQ, offsets, assignment: SUB on the topic and the
  group. Change-invisible, nack, lease ack and renewal, heartbeat and termination: SUB on
  the group.
- QueryRoute: PUB or SUB on the topic (RocketMQ's own choice: producers and consumers
  both ask for routes, and a route reveals nothing but queues and addresses).
- Admin reads: GET (LIST for the lists, which need a policy on every topic or group);
  admin writes: CREATE, UPDATE, DELETE on the topic or group (an operator's commit,
  rollback or resume of a transaction: UPDATE on its topic); server info, cluster status,
  users and ACLs: the CLUSTER resource (users and ACLs are SUPER-only besides).

A receipt handle names its group: the broker signs the group id into each handle
(broker_core/pop/receipt.py: the MAC covers the body that packs group_id) and every use of
one (ack, nack, change-invisible, dead-letter, pop's piggybacked acks) refuses a handle
whose group is not the request's group (broker_core/pop/ack.py `resolve_handle`). A lease
token is kept per (group, token) (proxy/leases.py). So SUB on the request's group is what
using a handle or a lease token needs: a user cannot act on another group's deliveries by
naming a group it may SUB.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from popmq.grpc_calls.errors import Undecodable
from popmq.security.model import Action, Check, Resource, ResourceType

log = logging.getLogger(__name__)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
PUB, SUB, GET, LIST = Action.PUB, Action.SUB, Action.GET, Action.LIST
CREATE, UPDATE, DELETE = Action.CREATE, Action.UPDATE, Action.DELETE

V1_MESSAGING = "popmq.v1.MessagingService"
V1_ADMIN = "popmq.v1.AdminService"
V2_MESSAGING = "apache.rocketmq.v2.MessagingService"
SERVICES = (V1_MESSAGING, V1_ADMIN, V2_MESSAGING)
"""The services access control covers (health and reflection stay open)."""

UNMAPPED = (Check(Resource(CLUSTER), Action.ALL),)
"""What a method missing from the table needs: ALL on the cluster (only SUPER users, and
users granted ALL on the cluster, pass). Never reached for the services above."""


@dataclass(frozen=True, slots=True)
class Need:
    """One resource an RPC touches and the action it needs there.

    Attributes:
        type: TOPIC, GROUP or CLUSTER.
        actions: The action, then alternatives any one of which also passes.
        path: The request field holding the resource's name, dotted; a segment ending in
            "[]" is repeated (every entry is checked). "" for the cluster, and for a list
            (which needs the action on every resource of the type: a policy with pattern
            ANY).
        when: Apply only when this (message) field is set: one member of a oneof.
        optional: Apply only when the request names one (a non-empty name).
    """

    type: ResourceType
    actions: tuple[Action, ...]
    path: str = ""
    when: str = ""
    optional: bool = False

    def checks(self, request: Any) -> Iterator[Check]:
        if self.when and not _is_set(request, self.when):
            return
        action, *alternatives = self.actions
        if not self.path:
            yield Check(Resource(self.type), action, tuple(alternatives))
            return
        for name in _values(request, self.path.split(".")):
            if self.optional and not name:
                continue
            yield Check(Resource(self.type, name), action, tuple(alternatives))

    def describe(self) -> str:
        """This need in the docs' words: "TOPIC PUB or SUB (`topic.name`)"."""
        actions = " or ".join(a.value for a in self.actions)
        if self.type is CLUSTER:
            text = f"CLUSTER {actions}"
        elif not self.path:
            text = f"{self.type.value} {actions} on every {self.type.value.lower()}"
        else:
            text = f"{self.type.value} {actions} (`{self.path}`)"
        if self.optional:
            text += " if named"
        if self.when:
            text = f"`{self.when}`: {text}"
        return text


@dataclass(frozen=True, slots=True)
class Rule:
    """What one RPC needs: every need's checks, for one request message."""

    needs: tuple[Need, ...]
    note: str = ""

    def __call__(self, request: Any) -> list[Check]:
        checks: list[Check] = []
        for need in self.needs:
            for check in need.checks(request):
                if check not in checks:  # a batch to one topic is one check
                    checks.append(check)
        return checks

    def describe(self) -> str:
        return "; ".join(need.describe() for need in self.needs) or "nothing (any user)"


def _is_set(message: Any, path: str) -> bool:
    for field in path.split("."):
        if not message.HasField(field):
            return False
        message = getattr(message, field)
    return True


def _values(message: Any, segments: Sequence[str]) -> list[str]:
    if not segments:
        return [str(message)]
    head, rest = segments[0], segments[1:]
    if head.endswith("[]"):
        found: list[str] = []
        for item in getattr(message, head[:-2]):
            found.extend(_values(item, rest))
        return found
    return _values(getattr(message, head), rest)


def need(
    kind: ResourceType,
    *actions: Action,
    path: str = "",
    when: str = "",
    optional: bool = False,
) -> Need:
    return Need(kind, actions, path, when, optional)


def rule(*needs: Need, note: str = "") -> Rule:
    return Rule(needs, note)


def _sub(topic: str, group: str, *, when: str = "") -> tuple[Need, Need]:
    """SUB on a topic and a group (receiving, acking: RocketMQ's newSubContexts)."""
    return need(TOPIC, SUB, path=topic, when=when), need(GROUP, SUB, path=group, when=when)


_BODIES = "returns message bodies: SUB, as receiving does (GET is for metadata)"
_CLUSTER_ADMIN = "SUPER users only (the servicer refuses NORMAL ones whatever they are granted)"

_V1_MESSAGING: dict[str, Rule] = {
    "SendMessages": rule(need(TOPIC, PUB, path="messages[].topic")),
    "SendStream": rule(need(TOPIC, PUB, path="send.messages[].topic"), note="per request"),
    "Pop": rule(
        *_sub("topic", "group"),
        note="ack_receipt_handles are the group's (handles are bound to their group)",
    ),
    "PopStream": rule(
        *_sub("pop.topic", "pop.group", when="pop"),
        need(GROUP, SUB, path="ack.group", when="ack"),
        note="per request; a cancel needs nothing",
    ),
    "Ack": rule(need(GROUP, SUB, path="group")),
    "ChangeInvisibleTime": rule(need(GROUP, SUB, path="group")),
    "Nack": rule(need(GROUP, SUB, path="group")),
    "RecallMessage": rule(need(TOPIC, PUB, path="topic")),
    "PullMessages": rule(need(TOPIC, SUB, path="topic"), note="reads by offset, no group"),
    "CommitOffset": rule(
        need(TOPIC, SUB, UPDATE, path="topic"), need(GROUP, SUB, UPDATE, path="group")
    ),
    "GetOffset": rule(need(TOPIC, SUB, GET, path="topic"), need(GROUP, SUB, GET, path="group")),
    "GetOffsetsAtTime": rule(need(TOPIC, SUB, GET, path="topic")),
    "LeasePop": rule(*_sub("topic", "group")),
    "AckLease": rule(need(GROUP, SUB, path="group"), note="lease tokens are kept per group"),
    "RenewLease": rule(need(GROUP, SUB, path="group")),
    "Heartbeat": rule(need(GROUP, SUB, path="group"), need(TOPIC, SUB, path="topics[]")),
    "QueryAssignment": rule(*_sub("topic", "group")),
    "NotifyClientTermination": rule(need(GROUP, SUB, path="group")),
    "AwaitMessages": rule(need(TOPIC, SUB, path="topic")),
    "EndTransaction": rule(need(TOPIC, PUB, path="topic")),
    "TransactionChecks": rule(
        need(TOPIC, PUB, path="topics[]"),
        note="checks carry the half messages of the topics: their producers see them",
    ),
}

_V1_ADMIN: dict[str, Rule] = {
    "CreateTopic": rule(need(TOPIC, CREATE, path="name")),
    "UpdateTopic": rule(need(TOPIC, UPDATE, path="name")),
    "GetTopic": rule(need(TOPIC, GET, path="name")),
    "ListTopics": rule(need(TOPIC, LIST)),
    "DeleteTopic": rule(need(TOPIC, DELETE, path="name")),
    "PurgeTopic": rule(need(TOPIC, DELETE, path="name")),
    "CreateGroup": rule(
        need(GROUP, CREATE, path="name"),
        need(TOPIC, SUB, path="subscriptions[].topic"),
        note="a subscription is to a topic the user may SUB",
    ),
    "UpdateGroup": rule(
        need(GROUP, UPDATE, path="name"),
        need(TOPIC, SUB, path="set_subscriptions[].topic"),
        note="a subscription is to a topic the user may SUB",
    ),
    "GetGroup": rule(need(GROUP, GET, path="name")),
    "ListGroups": rule(need(GROUP, LIST)),
    "DeleteGroup": rule(need(GROUP, DELETE, path="name")),
    "GetGroupLag": rule(
        need(GROUP, GET, path="group"), need(TOPIC, GET, path="topic", optional=True)
    ),
    "InspectGroup": rule(
        need(GROUP, GET, path="group"),
        need(TOPIC, GET, path="topic", optional=True),
        note="a group's runtime view (held polls, in flight, revive lag, FIFO heads) reads "
        "like its lag: message ids and offsets, no bodies",
    ),
    "GetMessageHistory": rule(
        need(TOPIC, GET, path="topic"),
        need(GROUP, GET, path="group", optional=True),
        note="steps, times and offsets of one message, no body",
    ),
    "ResetOffsets": rule(
        need(GROUP, UPDATE, path="group"),
        need(TOPIC, SUB, path="topic"),
        note="moving a group back re-reads the topic",
    ),
    "PeekMessages": rule(
        need(TOPIC, SUB, path="topic"),
        need(GROUP, GET, path="group", optional=True),
        note=_BODIES,
    ),
    "QueryMessage": rule(need(TOPIC, SUB, path="topic"), note=_BODIES),
    "QueryMessagesByKey": rule(need(TOPIC, SUB, path="topic"), note=_BODIES),
    "RedriveDeadLetters": rule(need(GROUP, UPDATE, path="group")),
    "ListTransactions": rule(
        need(TOPIC, LIST), note="a list, of one topic or all: LIST on every topic"
    ),
    "ResolveTransaction": rule(need(TOPIC, UPDATE, path="topic")),
    "ResumeTransaction": rule(need(TOPIC, UPDATE, path="topic")),
    "GetHalfMessage": rule(need(TOPIC, SUB, path="topic"), note=_BODIES),
    "GetServerInfo": rule(need(CLUSTER, GET)),
    "GetClusterStatus": rule(need(CLUSTER, GET)),
    "CreateUser": rule(need(CLUSTER, UPDATE), note=_CLUSTER_ADMIN),
    "UpdateUser": rule(need(CLUSTER, UPDATE), note=_CLUSTER_ADMIN),
    "DeleteUser": rule(need(CLUSTER, UPDATE), note=_CLUSTER_ADMIN),
    "GetUser": rule(need(CLUSTER, GET), note=_CLUSTER_ADMIN),
    "ListUsers": rule(need(CLUSTER, GET), note=_CLUSTER_ADMIN),
    "GrantPolicy": rule(need(CLUSTER, UPDATE), note=_CLUSTER_ADMIN),
    "RevokePolicy": rule(need(CLUSTER, UPDATE), note=_CLUSTER_ADMIN),
    "ListPolicies": rule(need(CLUSTER, GET), note=_CLUSTER_ADMIN),
}

_V2_MESSAGING: dict[str, Rule] = {
    "QueryRoute": rule(need(TOPIC, PUB, SUB, path="topic.name")),
    "Heartbeat": rule(
        need(GROUP, SUB, path="group.name", optional=True),
        note="RocketMQ checks consumers only; popmq registers any group a heartbeat names",
    ),
    "SendMessage": rule(
        need(TOPIC, PUB, path="messages[].topic.name"),
        note="RocketMQ checks the first message's topic only",
    ),
    "QueryAssignment": rule(*_sub("topic.name", "group.name")),
    "ReceiveMessage": rule(*_sub("message_queue.topic.name", "group.name")),
    "AckMessage": rule(*_sub("topic.name", "group.name")),
    "ForwardMessageToDeadLetterQueue": rule(*_sub("topic.name", "group.name")),
    "PullMessage": rule(*_sub("message_queue.topic.name", "group.name")),
    "UpdateOffset": rule(
        need(TOPIC, SUB, UPDATE, path="message_queue.topic.name"),
        need(GROUP, SUB, UPDATE, path="group.name"),
    ),
    "GetOffset": rule(
        need(TOPIC, SUB, GET, path="message_queue.topic.name"),
        need(GROUP, SUB, GET, path="group.name"),
    ),
    "QueryOffset": rule(need(TOPIC, SUB, GET, path="message_queue.topic.name")),
    "EndTransaction": rule(need(TOPIC, PUB, path="topic.name")),
    "Telemetry": rule(
        need(TOPIC, PUB, path="settings.publishing.topics[].name", when="settings.publishing"),
        need(GROUP, SUB, path="settings.subscription.group.name", when="settings.subscription"),
        need(
            TOPIC,
            SUB,
            path="settings.subscription.subscriptions[].topic.name",
            when="settings.subscription",
        ),
        note="per command; only a settings command needs anything",
    ),
    "NotifyClientTermination": rule(need(GROUP, SUB, path="group.name", optional=True)),
    "ChangeInvisibleDuration": rule(need(GROUP, SUB, path="group.name")),
    "RecallMessage": rule(need(TOPIC, PUB, path="topic.name")),
    "SyncLiteSubscription": rule(*_sub("topic.name", "group.name")),
}

TABLE: Mapping[str, Rule] = types.MappingProxyType(
    {
        f"/{service}/{method}": entry
        for service, entries in (
            (V1_MESSAGING, _V1_MESSAGING),
            (V1_ADMIN, _V1_ADMIN),
            (V2_MESSAGING, _V2_MESSAGING),
        )
        for method, entry in entries.items()
    }
)
"""Full gRPC method name -> its rule."""


_warned: set[str] = set()
"""Unmapped methods already logged (the gate calls `checks` on the event loop only)."""


def checks(method: str, request: object) -> Sequence[Check]:
    """What a call of `method` ("/pkg.Service/Method") with `request` needs.

    A body that did not parse (`Undecodable`: its handler answers INVALID_ARGUMENT and
    touches nothing) needs nothing. Any other request is checked, a generated message or
    not: SendMessages and SendStream requests are read by proxy/send_request.py into objects
    with the same field names. A method missing from the table needs UNMAPPED (ALL on the
    cluster).
    """
    entry = TABLE.get(method)
    if entry is None:
        if method not in _warned:
            _warned.add(method)  # once per method: a scanner must not flood the log
            log.warning("no access rule for %s: it needs ALL on the cluster", method)
        return UNMAPPED
    if isinstance(request, Undecodable):
        return ()
    return entry(request)


def markdown_table() -> str:
    """The table as docs/security.md shows it (between its rpc-table markers)."""
    lines = ["| RPC | Needs | Note |", "|---|---|---|"]
    for method, entry in TABLE.items():
        service, _, name = method[1:].partition("/")
        short = {V1_MESSAGING: "v1", V1_ADMIN: "v1 admin", V2_MESSAGING: "v2"}[service]
        lines.append(f"| {short} `{name}` | {entry.describe()} | {entry.note} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
