"""Where a cluster proxy finds things: a topic's route (dead-letter topics included), the
broker and local queue behind a popmq.v1 global queue id and back, and the broker that
issued a handle.

Everything is a synchronous lookup over the route and group caches (no I/O), done on the
event loop on every request.

Dead-letter topics have no stored route. A group's messages are dead-lettered on the broker
that revived them, into that broker's own `%DLQ%<group>` (one queue), so the DLQ of a group
spans every broker: its route is derived, one queue per broker. It exists while its group
exists. Brokers are placed by their numbers (coordination/broker_numbers.py: given once,
never taken back), so a broker that joins takes the next global id and no existing id
moves; a broker not numbered yet (its first seconds) goes last, by name, until it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from popmq.broker_core import (
    DLQ_PREFIX,
    InvalidReceiptHandleError,
    NotFoundError,
    TopicInfo,
    check_name,
    issuer_of,
)
from popmq.broker_core.catalog import KIND_DLQ, KIND_NORMAL, KIND_RETRY, MESSAGE_TYPES
from popmq.broker_core.handles import named_issuers
from popmq.coordination.broker_numbers import by_number
from popmq.coordination.groups import GroupCache
from popmq.coordination.routes import QueueRef, RouteCache, Segment, TopicRoute

_KIND_CODES = {"normal": KIND_NORMAL, "dlq": KIND_DLQ, "retry": KIND_RETRY}


def topic_info(route: TopicRoute) -> TopicInfo:
    """A route as BrokerAPI reports a topic: its queues are the route's global queues.

    Topic ids are numbers each broker gives its own topics; the cluster has none, so 0.
    """
    return TopicInfo(
        name=route.topic,
        topic_id=0,
        queues=len(route.queues),
        message_type=MESSAGE_TYPES[route.message_type],
        kind=_KIND_CODES[route.kind],
        create_time_ms=route.create_time_ms,
        owner_group=route.owner_group,
    )


class Topology:
    """Routes, global queue ids and handle issuers over a RouteCache and a GroupCache."""

    def __init__(self, routes: RouteCache, groups: GroupCache) -> None:
        self.routes = routes
        self.groups = groups
        # The brokers of derived DLQ routes, recomputed when the route state changes:
        # (routes, live brokers, broker numbers) it was computed from -> broker names.
        self._dlq_key: tuple[object, object, object] | None = None
        self._dlq_brokers: tuple[str, ...] = ()
        # Derived DLQ routes by topic, for the current _dlq_brokers.
        self._dlq_routes: dict[str, TopicRoute] = {}

    def route(self, topic: str) -> TopicRoute:
        """The topic's route (a stored one, or a DLQ's derived one); NotFoundError if none."""
        route = self.routes.routes.get(topic)
        if route is not None:
            return route
        if topic.startswith(DLQ_PREFIX):
            return self._dlq_route(topic)
        check_name("topic", topic, allow_dlq=True)
        return self.routes.route(topic)  # raises NotFoundError naming the topic

    def info(self, topic: str) -> TopicInfo:
        return topic_info(self.route(topic))

    def _dlq_route(self, topic: str) -> TopicRoute:
        group = topic[len(DLQ_PREFIX) :]
        check_name("topic", topic, allow_dlq=True)
        if group not in self.groups.groups:
            raise NotFoundError(
                f"topic {topic!r} does not exist: group {group!r} does not exist",
                field="topic",
                value=topic,
            )
        brokers = self.dlq_brokers()
        route = self._dlq_routes.get(topic)
        if route is None:
            if not brokers:
                raise NotFoundError(f"topic {topic!r} has no broker yet", field="topic")
            route = TopicRoute(
                topic=topic,
                segments=tuple(Segment(b, 1) for b in brokers),
                kind="dlq",
                owner_group=group,
            )
            self._dlq_routes[topic] = route
        return route

    def dlq_brokers(self) -> tuple[str, ...]:
        """Every numbered broker by number, then the brokers a stored route names or that
        are live now and have no number yet, by name."""
        numbers = self.routes.broker_numbers
        key = (self.routes.routes, self.routes.live_brokers, numbers)
        if key != self._dlq_key:
            names = set(self.routes.live_brokers)
            for route in self.routes.routes.values():
                names.update(route.queue_counts)
            brokers = by_number(names, numbers)
            if brokers != self._dlq_brokers:
                self._dlq_brokers = brokers
                self._dlq_routes = {}
            self._dlq_key = key
        return self._dlq_brokers

    def readable(self, topic: str) -> Mapping[str, tuple[int, ...]]:
        """Broker -> local queue ids a pop may read: the route has READ, brokers live."""
        if topic in self.routes.routes:
            return self.routes.readable_queues(topic)
        return _live(self.route(topic), self.routes.live_brokers)

    def writable(self, topic: str) -> Mapping[str, tuple[int, ...]]:
        """Broker -> local queue ids a send may use: the route has WRITE, brokers live."""
        return self.routes.writable_queues(topic)

    def holders(self, topic: str) -> list[str]:
        """Every broker the topic's route names, live or not, by name."""
        return list(self.route(topic).queue_counts)

    def locate(self, topic: str, global_id: int) -> QueueRef:
        """The broker and local queue id of a global queue id (InvalidArgumentError naming
        the allowed range)."""
        return self.route(topic).queue(global_id)

    def global_id(self, topic: str, broker: str, local_id: int) -> int:
        """The global id of a broker's local queue of `topic`. A queue the route does not
        have (a retry queue's 0 reported for a retry copy; a route changed meanwhile) keeps
        its local id, as the broker reported it."""
        route = self.routes.routes.get(topic)
        try:
            if route is None:
                route = self.route(topic)
            return route.global_id(QueueRef(broker, local_id))
        except NotFoundError:
            return local_id

    def global_ids(self, topic: str, broker: str) -> tuple[int, ...]:
        """`global_id` of each of a broker's local queues of `topic`, by local id: a local id
        past them keeps its own, as `global_id` keeps it."""
        route = self.routes.routes.get(topic)
        try:
            if route is None:
                route = self.route(topic)
        except NotFoundError:
            return ()
        return route.global_ids(broker)

    def by_broker(self, topic: str, global_ids: Iterable[int]) -> dict[str, list[int]]:
        """Global ids grouped by broker, as local ids (InvalidArgumentError for one outside
        the topic)."""
        route = self.route(topic)
        grouped: dict[str, list[int]] = {}
        for global_id in global_ids:
            queue = route.queue(global_id)
            grouped.setdefault(queue.broker, []).append(queue.queue_id)
        return grouped


def _live(route: TopicRoute, live: Mapping[str, object]) -> Mapping[str, tuple[int, ...]]:
    if not route.readable:
        return {}
    ids: dict[str, list[int]] = {}
    for queue in route.queues:
        if queue.broker in live:
            ids.setdefault(queue.broker, []).append(queue.queue_id)
    return {broker: tuple(v) for broker, v in sorted(ids.items())}


def issuers(handles: Sequence[str]) -> list[str | InvalidReceiptHandleError]:
    """`issuer` of each receipt handle, in order, a handle's error as its value: checked
    together when all are well-formed (handles.named_issuers), one by one otherwise."""
    names = named_issuers(handles)
    if names is not None:
        return list(names)
    found: list[str | InvalidReceiptHandleError] = []
    for handle in handles:
        try:
            found.append(issuer(handle))
        except InvalidReceiptHandleError as error:
            found.append(error)
    return found


def one_issuer(found: Sequence[str | InvalidReceiptHandleError]) -> str | None:
    """The broker named by every entry of `found` (`issuers`' answer) when there is one
    (the usual ack: one pop's handles, routed whole); None otherwise (route by index)."""
    only = found[0] if found else None
    if isinstance(only, str) and found.count(only) == len(found):
        return only
    return None


def issuer(handle: str, what: str = "receipt handle") -> str:
    """The broker that issued a receipt or recall handle (InvalidReceiptHandleError when it
    is malformed or predates handles naming their broker: no proxy can route it)."""
    try:
        name = issuer_of(handle)
    except ValueError as error:  # InvalidArgumentError is a ValueError
        raise InvalidReceiptHandleError(str(error)) from error
    if name is None:
        raise InvalidReceiptHandleError(
            f"{what} was issued before handles named their broker; only the embedded "
            "server (`popmq serve`) that issued it can take it, not a cluster proxy"
        )
    return name
