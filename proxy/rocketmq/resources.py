"""Topics, queues, groups and filters as v2 requests name them, looked up with v2 codes.

Several RPCs name the same things (a topic, one of its queues, a group, a filter), and each
answers a missing or malformed one with the same apache.rocketmq.v2 Code; the lookups live
here so every handler asks them the same way. Reads only, on the server's event loop: the
catalog lookups (a topic's settings, a group's) are synchronous metadata lookups; a topic's
queue offsets are an async read of the broker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from popmq import broker_core  # its exported checks and limits
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.broker_core import (
    BrokerAPI,
    GroupInfo,
    NotFoundError,
    QueueStats,
    RecordFilter,
    TopicInfo,
    parse_filter,
)
from popmq.proxy.rocketmq import convert, settings
from popmq.proxy.rocketmq.codes import Code, ProtocolError

_FILTER_TYPES = {pb.FILTER_TYPE_UNSPECIFIED: "tag", pb.TAG: "tag", pb.SQL: "sql"}


def parsed_filter(expression: pb.FilterExpression) -> tuple[str, str, RecordFilter]:
    """(filter_type, expression, parsed filter): the v2 filter type as broker_core names it,
    parsed by broker_core, whose errors name the field ("filter_expression") that
    codes.FIELD_CODES maps to ILLEGAL_FILTER_EXPRESSION."""
    kind = _FILTER_TYPES.get(expression.type)
    if kind is None:
        raise ProtocolError(
            Code.ILLEGAL_FILTER_EXPRESSION,
            f"filter type {expression.type} is unknown: use TAG or SQL",
        )
    return kind, expression.expression, parse_filter(expression.expression, kind)


def check_filter(expression: pb.FilterExpression) -> tuple[str, str]:
    """(filter_type, expression) for the broker, refused early (parsed_filter)."""
    kind, text, _ = parsed_filter(expression)
    return kind, text


class Resources:
    """The broker's topics and groups, and this proxy's place in routes, for v2 handlers.

    Args:
        broker: The broker whose catalog is read; its name (server_info) is the Broker
            name of routes and assignments, the name its receipt handles carry.
        address: This server's HOST:PORT, for routes of clients that name none.
        peers: The HOST:PORT of every proxy of the cluster (cluster mode; None for one
            server), listed in routes so clients can move to another proxy.
    """

    def __init__(
        self,
        broker: BrokerAPI,
        address: Callable[[], str],
        peers: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self._broker = broker
        self._address = address
        self._peers = peers
        self._broker_name = broker.server_info().broker_name

    def broker_entry(self, requested: pb.Endpoints) -> pb.Broker:
        """The broker of routes: where clients reach this proxy (the address they used, checked
        and bounded, else the listen address); in cluster mode, every proxy of the cluster."""
        where = convert.client_endpoints(requested)
        if where is None:
            where = convert.endpoints(self._address())
        if self._peers is not None:
            where = convert.with_peers(where, self._peers())
        return convert.broker(where, self._broker_name)

    def topic_info(self, name: str) -> TopicInfo:
        """The topic's settings (its queue count, message type); TOPIC_NOT_FOUND when it
        does not exist. A metadata lookup (BrokerAPI.topic_info), so it stays synchronous."""
        try:
            return self._broker.topic_info(name)
        except NotFoundError as exc:
            raise ProtocolError(Code.TOPIC_NOT_FOUND, str(exc)) from exc

    async def topic(self, name: str) -> tuple[TopicInfo, list[QueueStats]]:
        """The topic and its queues' offsets, read from the broker; TOPIC_NOT_FOUND when it
        does not exist."""
        try:
            return await self._broker.get_topic(name)
        except NotFoundError as exc:
            raise ProtocolError(Code.TOPIC_NOT_FOUND, str(exc)) from exc

    @staticmethod
    def queue_id(info: TopicInfo, queue: pb.MessageQueue) -> int:
        """The id of `queue` in topic `info`; BAD_REQUEST when the topic has no such queue."""
        broker_core.check_queue_id(info.name, info.queues, queue.id)
        return queue.id

    def policy(self, group: str) -> settings.GroupPolicy:
        """The retry policy and fifo flag of a group (its defaults if it does not exist yet)."""
        info: GroupInfo | None
        try:
            info = self._broker.get_group(group)
        except NotFoundError:
            info = None
        if info is None:
            defaults = self._broker.server_info().groups
            attempts = defaults.max_delivery_attempts
            backoff = tuple(round(s * 1000) for s in defaults.retry_backoff_s)
            fifo = False
        else:
            attempts, backoff = info.max_delivery_attempts, info.retry_backoff_ms
            fifo = self._broker.group_settings(group).fifo
        return settings.GroupPolicy(attempts, backoff, fifo)
