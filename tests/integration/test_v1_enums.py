"""Every popmq.v1 enum read from a request, with a value the schema does not know.

proto3 enums are open: a client can send any int32. Each must be refused with
INVALID_ARGUMENT naming the field, never an internal error (an enum name lookup raises for
an unknown value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc

UNKNOWN = 999
_FILTER = messaging_pb2.FilterExpression(type=UNKNOWN, expression="*")  # type: ignore[arg-type]


@pytest.fixture
def stubs(endpoint: str) -> Iterator[tuple[Any, Any]]:
    with grpc.insecure_channel(endpoint) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name="orders", queues=1), timeout=10)
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name="g"), timeout=10)
        yield admin, messaging_pb2_grpc.MessagingServiceStub(channel)


CASES: list[tuple[str, Callable[[Any, Any], Any], str]] = [
    (
        "CreateTopic.message_type",
        lambda a, m: a.CreateTopic(
            admin_pb2.CreateTopicRequest(name="t2", queues=1, message_type=UNKNOWN)
        ),
        "message_type 999",
    ),
    (
        "CreateGroup.consume_from",
        lambda a, m: a.CreateGroup(admin_pb2.CreateGroupRequest(name="g2", consume_from=UNKNOWN)),
        "999",
    ),
    (
        "CreateGroup.subscriptions.filter.type",
        lambda a, m: a.CreateGroup(
            admin_pb2.CreateGroupRequest(
                name="g3", subscriptions=[admin_pb2.Subscription(topic="orders", filter=_FILTER)]
            )
        ),
        "999",
    ),
    (
        "UpdateGroup.consume_from",
        lambda a, m: a.UpdateGroup(admin_pb2.UpdateGroupRequest(name="g", consume_from=UNKNOWN)),
        "999",
    ),
    (
        "ResetOffsets.target",
        lambda a, m: a.ResetOffsets(
            admin_pb2.ResetOffsetsRequest(group="g", topic="orders", target=UNKNOWN)
        ),
        "target 999 is unknown: use one of RESET_TARGET_EARLIEST",
    ),
    (
        "Pop.filter.type",
        lambda a, m: m.Pop(messaging_pb2.PopRequest(group="g", topic="orders", filter=_FILTER)),
        "999",
    ),
    (
        "Heartbeat.mode",
        lambda a, m: m.Heartbeat(
            messaging_pb2.HeartbeatRequest(
                client_id="c", group="g", topics=["orders"], mode=UNKNOWN
            )
        ),
        "999",
    ),
    (
        "Heartbeat.strategy",
        lambda a, m: m.Heartbeat(
            messaging_pb2.HeartbeatRequest(
                client_id="c",
                group="g",
                topics=["orders"],
                mode=messaging_pb2.CONSUME_MODE_QUEUE_EXCLUSIVE,
                strategy=UNKNOWN,
            )
        ),
        "999",
    ),
]


@pytest.mark.parametrize(("field", "call", "expected"), CASES, ids=[c[0] for c in CASES])
def test_an_unknown_enum_value_is_invalid_argument_naming_it(
    stubs: tuple[Any, Any], field: str, call: Callable[[Any, Any], Any], expected: str
) -> None:
    admin, messaging = stubs
    with pytest.raises(grpc.RpcError) as info:
        call(admin, messaging)
    error: Any = info.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, error.details())
    assert expected in error.details(), (field, error.details())
