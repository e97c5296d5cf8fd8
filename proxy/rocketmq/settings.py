"""The Telemetry settings handshake: a client reports its settings, the server completes them.

RocketMQ's proxy answers a client's first TelemetryCommand{settings} with the same settings
merged with what the server decides: producers get their send retry policy, body size limit
and message-type validation; consumers get the group's retry policy (max attempts and the
backoff list, or for Node.js clients its exponential equivalent: `retry_policy`), the
receive batch size, the long-polling timeout and the fifo flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.broker_core import MAX_BODY_BYTES
from popmq.proxy.rocketmq.codes import Code, ProtocolError, UnsupportedError
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.convert import duration

CONSUMER_TYPES = (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER)


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """What the settings reply tells consumers of one group."""

    max_delivery_attempts: int
    retry_backoff_ms: tuple[int, ...]
    fifo: bool


def check_client_settings(settings: pb.Settings, config: RocketMQConfig) -> None:
    """Refuse settings the handshake cannot complete, saying what is expected.

    The topic lists are bounded first: each topic is checked, and a consumer's are looked
    up at every heartbeat.
    """
    limit = config.max_settings_topics
    for field, count in (
        ("publishing.topics", len(settings.publishing.topics)),
        ("subscription.subscriptions", len(settings.subscription.subscriptions)),
    ):
        if count > limit:
            raise ProtocolError(
                Code.BAD_REQUEST, f"{field} lists {count} topics: at most {limit} are allowed"
            )
    kind = settings.client_type
    if kind in (pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER):
        raise UnsupportedError("lite consumers are not supported by popmq")
    if kind != pb.PRODUCER and kind not in CONSUMER_TYPES:
        raise ProtocolError(
            Code.UNRECOGNIZED_CLIENT_TYPE,
            f"client_type {kind} is not one of PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER, "
            "PULL_CONSUMER",
        )
    which = settings.WhichOneof("pub_sub")
    if which is None:
        raise ProtocolError(
            Code.BAD_REQUEST, "settings carry neither publishing (producer) nor subscription"
        )
    expected = "publishing" if kind == pb.PRODUCER else "subscription"
    if which != expected:
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"a {pb.ClientType.Name(kind)} must send {expected} settings, not {which}",
        )
    if which == "subscription" and not settings.subscription.HasField("group"):
        raise ProtocolError(Code.ILLEGAL_CONSUMER_GROUP, "subscription settings need a group")


def producer_reply(settings: pb.Settings, config: RocketMQConfig) -> pb.Settings:
    """A producer's settings completed with the send retry policy and body limit."""
    reply = pb.Settings()
    reply.CopyFrom(settings)
    initial, longest, multiplier = config.producer_backoff_s
    reply.backoff_policy.CopyFrom(
        pb.RetryPolicy(
            max_attempts=config.producer_max_attempts,
            exponential_backoff=pb.ExponentialBackoff(
                initial=duration(initial), max=duration(longest), multiplier=multiplier
            ),
        )
    )
    reply.publishing.max_body_size = MAX_BODY_BYTES
    reply.publishing.validate_message_type = True
    reply.metric.CopyFrom(pb.Metric(on=False))
    return reply


def retry_policy(policy: GroupPolicy, language: int) -> pb.RetryPolicy:
    """The group's redelivery backoff in the form the client's language implements.

    RocketMQ's proxy announces the group's customized backoff (the delay-level list), which
    the Java, Go, C# and Python clients implement (Python implements only that one). The
    Node.js client implements only exponential backoff: given a customized one it keeps no
    policy and retries with delay 0. So Node.js clients get the exponential backoff that
    starts at the group's first delay and reaches its last one at the list's end. Node.js
    reads only the whole seconds of each duration, so both ends are whole seconds, at least 1.
    """
    delays_ms = policy.retry_backoff_ms or (1000,)
    if language != pb.NODE_JS:
        return pb.RetryPolicy(
            max_attempts=policy.max_delivery_attempts,
            customized_backoff=pb.CustomizedBackoff(next=[duration(ms / 1000) for ms in delays_ms]),
        )
    first = max(1, math.ceil(delays_ms[0] / 1000))
    last = max(first, math.ceil(max(delays_ms) / 1000))
    steps = len(delays_ms) - 1
    multiplier = (last / first) ** (1 / steps) if steps else 1.0
    return pb.RetryPolicy(
        max_attempts=policy.max_delivery_attempts,
        exponential_backoff=pb.ExponentialBackoff(
            initial=duration(first), max=duration(last), multiplier=round(multiplier, 3)
        ),
    )


def consumer_reply(
    settings: pb.Settings, policy: GroupPolicy, config: RocketMQConfig, max_batch: int
) -> pb.Settings:
    """A consumer's settings completed with its group's retry policy and receive timings."""
    reply = pb.Settings()
    reply.CopyFrom(settings)
    reply.backoff_policy.CopyFrom(retry_policy(policy, settings.user_agent.language))
    sub = reply.subscription
    sub.fifo = policy.fifo
    sub.receive_batch_size = min(config.receive_batch_size, max_batch)
    sub.long_polling_timeout.CopyFrom(duration(config.max_long_polling_s))
    reply.metric.CopyFrom(pb.Metric(on=False))
    return reply
