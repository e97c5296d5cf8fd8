"""Per-request limits: a request's size is checked before any work proportional to it, and
every answer that carries messages fits a client's default 4 MiB receive limit.

Each test is a finding of the hardening review: before the limits, one request of these
froze the server for seconds or built an answer no default client could read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc
from popmq.broker_core import validation

INVALID = grpc.StatusCode.INVALID_ARGUMENT
MiB = 1024 * 1024
SANITY_S = 5.0
"""A refused request answers long before this even on a loaded machine (it took 17-97 s
before the sizes were checked first)."""


@pytest.fixture
def channel(endpoint: str) -> Iterator[grpc.Channel]:
    # A channel with gRPC's default limits, as an official client or grpcurl has.
    with grpc.insecure_channel(endpoint) as channel:
        admin_pb2_grpc.AdminServiceStub(channel).CreateTopic(
            admin_pb2.CreateTopicRequest(name="wide", queues=1024)
        )
        yield channel


def _refused(call, request) -> tuple[grpc.StatusCode, str, float]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=60)
    return info.value.code(), info.value.details(), time.monotonic() - started


def test_heartbeat_with_a_huge_topic_list_is_refused_before_any_topic_is_looked_at(
    channel: grpc.Channel,
) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    request = messaging_pb2.HeartbeatRequest(client_id="c", group="g", topics=["wide"] * 20_000)
    code, details, took = _refused(stub.Heartbeat, request)
    assert code == INVALID
    assert "topics has 20000 entries" in details and "at most 64" in details
    assert took < SANITY_S


def test_send_of_more_than_1024_messages_is_refused_naming_the_limit(
    channel: grpc.Channel,
) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    message = messaging_pb2.OutgoingMessage(topic="wide", body=b"x")
    code, details, took = _refused(
        stub.SendMessages, messaging_pb2.SendMessagesRequest(messages=[message] * 200_000)
    )
    assert code == INVALID
    assert details == "messages has 200000 messages: at most 1024 are allowed in one request"
    assert took < SANITY_S
    # The limit itself is allowed.
    answer = stub.SendMessages(
        messaging_pb2.SendMessagesRequest(messages=[message] * 1024), timeout=60
    )
    assert len(answer.results) == 1024


def test_send_of_more_than_4_mib_of_bodies_is_refused(channel: grpc.Channel) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    body = b"x" * (MiB + 1)
    request = messaging_pb2.SendMessagesRequest(
        messages=[messaging_pb2.OutgoingMessage(topic="wide", body=body)] * 4
    )
    code, details, _ = _refused(stub.SendMessages, request)
    assert code == INVALID
    assert "4194308 body bytes: at most 4194304 (4 MiB)" in details


def test_a_request_over_the_servers_receive_limit_is_refused_by_grpc(
    channel: grpc.Channel,
) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    # 9 MiB of properties: past MAX_REQUEST_BYTES, which no valid send needs.
    big = {f"k{i}": "v" * 16_000 for i in range(1)}
    request = messaging_pb2.SendMessagesRequest(
        messages=[messaging_pb2.OutgoingMessage(topic="wide", body=b"x", properties=big)] * 600
    )
    assert request.ByteSize() > validation.MAX_REQUEST_BYTES
    code, _, _ = _refused(stub.SendMessages, request)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    ("method", "request_"),
    [
        ("Ack", messaging_pb2.AckRequest(group="g", receipt_handles=["h"] * 1025)),
        (
            "Pop",
            messaging_pb2.PopRequest(group="g", topic="wide", ack_receipt_handles=["h"] * 1025),
        ),
        ("AckLease", messaging_pb2.AckLeaseRequest(group="g", lease_tokens=["t"] * 1025)),
        (
            "CommitOffset",
            messaging_pb2.CommitOffsetRequest(
                group="g",
                topic="wide",
                offsets=[messaging_pb2.QueueOffset(queue_id=0, offset=0)] * 1025,
            ),
        ),
        (
            "QueryAssignment",
            messaging_pb2.QueryAssignmentRequest(
                client_id="c", group="g", topic="wide", held_queue_ids=list(range(100_000))
            ),
        ),
        (
            "AwaitMessages",
            messaging_pb2.AwaitMessagesRequest(
                topic="wide",
                positions=[messaging_pb2.QueueOffset(queue_id=0, offset=0)] * 100_000,
            ),
        ),
    ],
)
def test_lists_longer_than_their_limit_are_refused_before_any_entry_is_used(
    channel: grpc.Channel, method: str, request_: object
) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    code, details, took = _refused(getattr(stub, method), request_)
    assert code == INVALID
    assert "at most" in details
    assert took < SANITY_S


def test_group_settings_with_too_many_entries_are_refused(channel: grpc.Channel) -> None:
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    subscription = admin_pb2.Subscription(topic="wide")
    code, details, _ = _refused(
        admin.CreateGroup,
        admin_pb2.CreateGroupRequest(name="g", subscriptions=[subscription] * 5000),
    )
    assert code == INVALID and "subscriptions has 5000 entries: at most 1024" in details
    code, details, _ = _refused(
        admin.ResetOffsets,
        admin_pb2.ResetOffsetsRequest(group="g", topic="wide", offsets={q: 0 for q in range(2000)}),
    )
    assert code == INVALID and "offsets has 2000 entries" in details


def test_the_largest_message_is_received_by_a_client_with_default_limits(
    channel: grpc.Channel,
) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    body = b"b" * validation.MAX_BODY_BYTES
    props = {f"p{i:03}": "v" * 120 for i in range(127)}  # close to the 16 KiB allowance
    stub.SendMessages(
        messaging_pb2.SendMessagesRequest(
            messages=[
                messaging_pb2.OutgoingMessage(
                    topic="wide",
                    body=body,
                    properties=props,
                    keys=[f"key-{i:03}".ljust(120, "k") for i in range(32)],
                    tag="t" * 127,
                )
            ]
        ),
        timeout=60,
    )
    popped = stub.Pop(messaging_pb2.PopRequest(group="g", topic="wide"), timeout=60)
    assert len(popped.messages) == 1 and popped.messages[0].body == body
    assert popped.ByteSize() < 4 * MiB


def test_a_pop_stops_before_the_message_that_would_pass_4_mib(channel: grpc.Channel) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name="big", queues=1))
    for n in range(3):
        stub.SendMessages(
            messaging_pb2.SendMessagesRequest(
                messages=[messaging_pb2.OutgoingMessage(topic="big", body=bytes([n]) * (2 * MiB))]
            ),
            timeout=60,
        )
    got: list[bytes] = []
    sizes: list[int] = []
    for _ in range(3):
        answer = stub.Pop(
            messaging_pb2.PopRequest(group="g", topic="big", max_messages=32), timeout=60
        )
        sizes.append(answer.ByteSize())
        got.extend(m.body[:1] for m in answer.messages)
        stub.Ack(
            messaging_pb2.AckRequest(
                group="g", receipt_handles=[m.receipt_handle for m in answer.messages]
            ),
            timeout=60,
        )
    assert got == [b"\x00", b"\x01", b"\x02"]  # one a pop, in order, none skipped
    assert max(sizes) < 4 * MiB
    # Pull and peek answers are bounded the same way.
    pulled = stub.PullMessages(
        messaging_pb2.PullMessagesRequest(topic="big", queue_id=0, offset=0), timeout=60
    )
    assert [m.offset for m in pulled.messages] == [0] and pulled.next_offset == 1
    peeked = admin.PeekMessages(
        admin_pb2.PeekMessagesRequest(topic="big", max_messages=3), timeout=60
    )
    assert len(peeked.messages) == 1 and peeked.ByteSize() < 4 * MiB


def test_requests_of_small_methods_over_1_mib_are_refused_before_they_are_parsed(
    channel: grpc.Channel,
) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    request = messaging_pb2.CommitOffsetRequest(
        group="g", topic="wide", offsets=[messaging_pb2.QueueOffset(queue_id=1, offset=1)] * 300_000
    )
    assert validation.MAX_SMALL_REQUEST_BYTES < request.ByteSize() < validation.MAX_REQUEST_BYTES
    code, details, took = _refused(stub.CommitOffset, request)
    assert code == INVALID
    assert details == (
        f"request is {request.ByteSize()} bytes: at most 1048576 are allowed in one "
        "popmq.v1.CommitOffsetRequest message"
    )
    assert took < SANITY_S
