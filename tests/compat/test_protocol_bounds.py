"""apache.rocketmq.v2 requests that are hostile, out of range or from one client's dialect.

Bounded inputs (route endpoints), every enum read from the wire, ChangeInvisibleDuration of
0 s (what the Node.js PushConsumer sends), the x-mq-namespace header, and the retry policy
each client language is told. Against the real server, with popmq's generated stubs.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import time
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import duration_pb2

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq._gen.apache.rocketmq.v2.service_pb2_grpc import MessagingServiceStub
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.proxy.rocketmq import telemetry
from tests.compat.test_protocol import (
    message,
    messages_of,
    meta,
    receive,
    receive_request,
    resource,
    run,
    send,
)
from tests.support.logs import logged_errors
from tests.support.server_thread import ServerThread

Code = pb.Code


@pytest.fixture
def topics(server: ServerThread) -> None:
    async def create() -> None:
        await server.broker.create_topic("orders", 2)
        await server.broker.create_topic("wide", 1024)

    server.call(create)


@pytest.fixture
def no_error_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fails the test if anything (the server runs in this process) logs at ERROR."""
    with caplog.at_level(logging.WARNING):
        yield
    assert logged_errors(caplog.records) == []


def _endpoints(count: int, host: str = "10.0.0.1") -> pb.Endpoints:
    return pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host=host, port=8081 + i) for i in range(count)]
    )


# -- QueryRoute / QueryAssignment endpoints -------------------------------------------------


def test_query_route_refuses_more_endpoint_addresses_than_the_limit(
    server: ServerThread, topics: None, no_error_logs: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        for count in (17, 5000):
            began = time.monotonic()
            route = await s.QueryRoute(
                sv.QueryRouteRequest(topic=resource("wide"), endpoints=_endpoints(count)),
                metadata=meta(),
                timeout=30,
            )
            assert route.status.code == Code.BAD_REQUEST
            assert f"lists {count} addresses: at most 16 are allowed" in route.status.message
            assert not route.message_queues
            assert time.monotonic() - began < 10  # refused, not built (5,000 took 5 s)
        assignment = await s.QueryAssignment(
            sv.QueryAssignmentRequest(
                topic=resource("wide"), group=resource("g"), endpoints=_endpoints(17)
            ),
            metadata=meta(),
        )
        assert assignment.status.code == Code.BAD_REQUEST
        assert "at most 16" in assignment.status.message

    run(server, scenario)


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        (_endpoints(1, host=""), "addresses[0].host '' is invalid"),
        (_endpoints(1, host="a" * 254), "addresses[0].host"),
        (_endpoints(16, host="a" * 65), "hosts take 1040 characters in all: at most 1024"),
        (_endpoints(1, host="bad host\n"), "addresses[0].host 'bad host\\n' is invalid"),
        (pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="h", port=0)]), "port 0"),
        (pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="h", port=70000)]), "1..65535"),
        (pb.Endpoints(scheme=77, addresses=[pb.Address(host="h", port=1)]), "scheme 77"),  # type: ignore[arg-type]
    ],
)
def test_query_route_refuses_malformed_endpoints(
    server: ServerThread, topics: None, endpoints: pb.Endpoints, expected: str
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        route = await s.QueryRoute(
            sv.QueryRouteRequest(topic=resource("orders"), endpoints=endpoints), metadata=meta()
        )
        assert route.status.code == Code.BAD_REQUEST
        assert expected in route.status.message

    run(server, scenario)


def test_query_route_answer_grows_with_queues_not_with_what_the_client_sends(
    server: ServerThread, topics: None
) -> None:
    # The longest allowed list (16 hosts of 64 characters), padded with 64 KiB of unknown
    # fields.
    padded = _endpoints(16, host="h" * 64)
    raw = padded.SerializeToString() + b"\xfa\x3e\x80\x80\x04" + b"x" * 65536  # field 999
    sent = pb.Endpoints.FromString(raw)
    assert sent.ByteSize() > 65536

    async def scenario(s: MessagingServiceStub) -> None:
        route = await s.QueryRoute(
            sv.QueryRouteRequest(topic=resource("wide"), endpoints=sent), metadata=meta()
        )
        assert route.status.code == Code.OK
        assert len(route.message_queues) == 1024
        echoed = route.message_queues[0].broker.endpoints
        assert [a.host for a in echoed.addresses] == ["h" * 64] * 16
        assert echoed.ByteSize() == padded.ByteSize()  # the unknown fields are not echoed
        # Per queue: the bounded broker entry and a few fields, whatever the request held.
        assert route.ByteSize() < 1024 * (padded.ByteSize() + 128)

    run(server, scenario)


# -- other client-controlled counts ----------------------------------------------------------


def test_counts_a_client_controls_are_bounded_before_any_work(
    server: ServerThread, topics: None, no_error_logs: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        many = [message("orders", b"x", message_id=f"c{i}") for i in range(1025)]
        sent = await send(s, *many)
        assert sent.status.code == Code.BAD_REQUEST
        assert "messages has 1025 entries: at most 1024 are allowed" in sent.status.message
        assert not sent.entries  # the answer does not grow with what was refused
        acks = await s.AckMessage(
            sv.AckMessageRequest(
                group=resource("g"),
                topic=resource("orders"),
                entries=[sv.AckMessageEntry(receipt_handle="x")] * 1025,
            ),
            metadata=meta(),
        )
        assert acks.status.code == Code.BAD_REQUEST
        assert "entries has 1025 entries: at most 1024 are allowed" in acks.status.message
        request = receive_request("g", "orders", expression=" || ".join(["t"] * 2000))
        (frame,) = await receive(s, request)
        assert frame.status.code == Code.ILLEGAL_FILTER_EXPRESSION
        assert "9996 characters long: at most 4096 are allowed" in frame.status.message

        call = s.Telemetry(metadata=meta("many-topics"))
        await call.write(
            sv.TelemetryCommand(
                settings=pb.Settings(
                    client_type=pb.PRODUCER,
                    publishing=pb.Publishing(topics=[resource(f"t{i}") for i in range(1025)]),
                )
            )
        )
        reply = await call.read()
        assert reply.status.code == Code.BAD_REQUEST
        assert "publishing.topics lists 1025 topics: at most 1024" in reply.status.message
        call.cancel()
        # Its end processed before the loop closes (else grpc's poller may call back into
        # a closed loop, an ERROR log that failed this test now and then).
        assert await call.code() == grpc.StatusCode.CANCELLED

    run(server, scenario)


def test_the_gzip_bodies_of_one_send_inflate_to_64_mib_in_all(
    server: ServerThread, topics: None
) -> None:
    bomb = gzip.compress(bytes(33 * 1024 * 1024))  # about 33 KB each

    async def scenario(s: MessagingServiceStub) -> None:
        one = await send(s, message("orders", bomb, message_id="g1", encoding=pb.GZIP))
        assert one.status.code == Code.OK, one.status.message
        two = await send(
            s,
            message("orders", bomb, message_id="g2", encoding=pb.GZIP),
            message("orders", bomb, message_id="g3", encoding=pb.GZIP),
        )
        assert two.status.code == Code.MESSAGE_BODY_TOO_LARGE
        assert "messages[1].body inflates to more than" in two.status.message
        assert "may inflate to 67108864 bytes in all" in two.status.message

    run(server, scenario)


# -- enums read from the wire ---------------------------------------------------------------


@pytest.mark.parametrize("value", [12345, -1, 99])
def test_an_unknown_message_type_is_a_bad_request_not_an_internal_error(
    server: ServerThread, topics: None, no_error_logs: None, value: int
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        response = await send(s, message("orders", b"x", message_id="m1", message_type=value))
        assert response.status.code == Code.BAD_REQUEST
        assert f"messages[0].message_type {value} is unknown" in response.status.message
        assert response.entries[0].status.code == Code.BAD_REQUEST

    run(server, scenario)


def test_every_other_enum_from_the_wire_with_an_unknown_value_is_refused_by_name(
    server: ServerThread, topics: None, no_error_logs: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        encoded = await send(s, message("orders", b"x", message_id="m2", encoding=42))
        assert encoded.status.code == Code.BAD_REQUEST
        assert "body_encoding 42 is unknown: use IDENTITY or GZIP" in encoded.status.message

        beat = await s.Heartbeat(sv.HeartbeatRequest(client_type=777), metadata=meta())  # type: ignore[arg-type]
        assert beat.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
        assert "client_type 777 is unknown" in beat.status.message

        offset = await s.QueryOffset(
            sv.QueryOffsetRequest(
                message_queue=pb.MessageQueue(topic=resource("orders"), id=0),
                query_offset_policy=55,  # type: ignore[arg-type]
            ),
            metadata=meta(),
        )
        assert offset.status.code == Code.BAD_REQUEST
        assert "query_offset_policy 55 is unknown" in offset.status.message

        request = receive_request("g", "orders")
        request.filter_expression.type = 66  # type: ignore[assignment]
        (frame,) = await receive(s, request)
        assert frame.status.code == Code.ILLEGAL_FILTER_EXPRESSION
        assert "filter type 66 is unknown" in frame.status.message

        call = s.Telemetry(metadata=meta("enum-client"))
        await call.write(
            sv.TelemetryCommand(
                settings=pb.Settings(
                    client_type=888,  # type: ignore[arg-type]
                    publishing=pb.Publishing(topics=[resource("orders")]),
                )
            )
        )
        reply = await call.read()
        assert reply.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
        assert "client_type 888" in reply.status.message
        call.cancel()

    run(server, scenario)


# -- ChangeInvisibleDuration of 0 s ---------------------------------------------------------


def test_change_invisible_duration_of_0s_makes_the_message_visible_at_once(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        await send(s, message("orders", b"a", message_id="z1"))
        (first,) = messages_of(await receive(s, receive_request("g", "orders", invisible_s=600)))
        assert first.system_properties.delivery_attempt == 1
        changed = await s.ChangeInvisibleDuration(
            sv.ChangeInvisibleDurationRequest(
                group=resource("g"),
                topic=resource("orders"),
                receipt_handle=first.system_properties.receipt_handle,
                invisible_duration={"seconds": 0},
                message_id="z1",
            ),
            metadata=meta(),
        )
        assert changed.status.code == Code.OK, changed.status.message
        # Delivered again well before the 600 s it was received for, one attempt later.
        began = time.monotonic()
        (again,) = messages_of(await receive(s, receive_request("g", "orders", wait_s=20)))
        assert time.monotonic() - began < 20
        assert again.system_properties.message_id == "z1"
        assert again.system_properties.delivery_attempt == 2
        negative = await s.ChangeInvisibleDuration(
            sv.ChangeInvisibleDurationRequest(
                group=resource("g"),
                topic=resource("orders"),
                receipt_handle=again.system_properties.receipt_handle,
                invisible_duration={"seconds": -1},
            ),
            metadata=meta(),
        )
        assert negative.status.code == Code.ILLEGAL_INVISIBLE_TIME
        assert "invisible_duration -1s is below the minimum 0s" in negative.status.message

    run(server, scenario)


def test_popmq_v1_change_invisible_time_of_0s_makes_the_message_visible_at_once(
    server: ServerThread, topics: None
) -> None:
    def seconds(value: int) -> duration_pb2.Duration:
        return duration_pb2.Duration(seconds=value)

    with grpc.insecure_channel(server.endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        stub.SendMessages(
            messaging_pb2.SendMessagesRequest(
                messages=[messaging_pb2.OutgoingMessage(topic="orders", body=b"v1")]
            ),
            timeout=10,
        )

        def pop(invisible_s: int) -> list[messaging_pb2.ReceivedMessage]:
            response = stub.Pop(
                messaging_pb2.PopRequest(
                    group="g1",
                    topic="orders",
                    invisible_duration=seconds(invisible_s),
                    long_polling_timeout=seconds(10),
                ),
                timeout=30,
            )
            return list(response.messages)

        (first,) = pop(600)
        changed = stub.ChangeInvisibleTime(
            messaging_pb2.ChangeInvisibleTimeRequest(
                group="g1", receipt_handle=first.receipt_handle, invisible_duration=seconds(0)
            ),
            timeout=10,
        )
        assert changed.receipt_handle
        (again,) = pop(30)
        assert again.message_id == first.message_id
        assert again.delivery_attempt == 2


# -- the x-mq-namespace header --------------------------------------------------------------


def test_a_namespace_is_refused_on_every_rpc_whether_header_or_resource(
    server: ServerThread, topics: None, no_error_logs: None
) -> None:
    namespaced = (*meta("ns-client"), ("x-mq-namespace", "tenant-a"))
    refusal = "namespace 'tenant-a' (x-mq-namespace) is not supported"
    queue = pb.MessageQueue(topic=resource("orders"), id=0)

    async def scenario(s: MessagingServiceStub) -> None:
        await send(s, message("orders", b"plain", message_id="n1"))
        unary = [
            (s.QueryRoute, sv.QueryRouteRequest(topic=resource("orders"))),
            (s.Heartbeat, sv.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER)),
            (
                s.QueryAssignment,
                sv.QueryAssignmentRequest(topic=resource("orders"), group=resource("g")),
            ),
            (
                s.AckMessage,
                sv.AckMessageRequest(
                    group=resource("g"),
                    topic=resource("orders"),
                    entries=[sv.AckMessageEntry(receipt_handle="x")],
                ),
            ),
            (
                s.ChangeInvisibleDuration,
                sv.ChangeInvisibleDurationRequest(
                    group=resource("g"),
                    topic=resource("orders"),
                    receipt_handle="x",
                    invisible_duration={"seconds": 1},
                ),
            ),
            (
                s.ForwardMessageToDeadLetterQueue,
                sv.ForwardMessageToDeadLetterQueueRequest(
                    group=resource("g"), topic=resource("orders"), receipt_handle="x"
                ),
            ),
            (s.GetOffset, sv.GetOffsetRequest(group=resource("g"), message_queue=queue)),
            (s.QueryOffset, sv.QueryOffsetRequest(message_queue=queue)),
            (s.NotifyClientTermination, sv.NotifyClientTerminationRequest()),
            (
                s.SendMessage,
                sv.SendMessageRequest(messages=[message("orders", b"x", message_id="n2")]),
            ),
        ]
        for method, request in unary:
            response = await method(request, metadata=namespaced)
            assert response.status.code == Code.BAD_REQUEST, method
            assert refusal in response.status.message, method
        # The consumer that named its namespace only in the header reads nothing.
        frames = [
            f async for f in s.ReceiveMessage(receive_request("g", "orders"), metadata=namespaced)
        ]
        assert [f.status.code for f in frames] == [Code.BAD_REQUEST]
        assert refusal in frames[0].status.message
        pull = sv.PullMessageRequest(
            group=resource("g"),
            message_queue=queue,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=1,
        )
        frames = [f async for f in s.PullMessage(pull, metadata=namespaced)]
        assert [f.status.code for f in frames] == [Code.BAD_REQUEST]
        call = s.Telemetry(metadata=namespaced)
        await call.write(
            sv.TelemetryCommand(
                settings=pb.Settings(
                    client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[resource("orders")])
                )
            )
        )
        reply = await call.read()
        assert reply.status.code == Code.BAD_REQUEST and refusal in reply.status.message
        # In a resource, without the header: the same code, the same words.
        field = await s.QueryRoute(
            sv.QueryRouteRequest(topic=pb.Resource(resource_namespace="tenant-a", name="orders")),
            metadata=meta(),
        )
        assert field.status.code == Code.BAD_REQUEST
        assert "namespace 'tenant-a' (the topic's resource_namespace) is not supported" in (
            field.status.message
        )
        # Nothing was consumed: the message is still there for the un-namespaced consumer.
        (plain,) = messages_of(await receive(s, receive_request("g", "orders")))
        assert plain.body == b"plain"

    run(server, scenario)


def test_a_refused_telemetry_call_reads_the_first_frame_so_the_client_sees_the_refusal(
    server: ServerThread, topics: None, no_error_logs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client that writes its settings late (here 0.3 s after it opened the call) still
    # reads the refusal: the server ends the call only after it read that first frame.
    # Before, the call had ended by then, and the write failed (INTERNAL "Internal error
    # from Core" when the end arrived during the write) instead of showing the status.
    # A client that sends nothing gets the refusal after REFUSAL_READ_S (lowered here, and
    # still well past the late client's write).
    monkeypatch.setattr(telemetry, "REFUSAL_READ_S", 1.5)
    namespaced = (*meta("late-client"), ("x-mq-namespace", "tenant-a"))
    refusal = "namespace 'tenant-a' (x-mq-namespace) is not supported"

    async def scenario(s: MessagingServiceStub) -> None:
        call = s.Telemetry(metadata=namespaced)
        await asyncio.sleep(0.3)
        await call.write(sv.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER)))
        reply = await call.read()
        assert reply.status.code == Code.BAD_REQUEST and refusal in reply.status.message
        assert await call.code() == grpc.StatusCode.OK
        silent = s.Telemetry(metadata=namespaced)
        began = time.monotonic()
        reply = await silent.read()
        assert reply.status.code == Code.BAD_REQUEST and refusal in reply.status.message
        assert time.monotonic() - began >= 1.4

    run(server, scenario)


# -- the retry policy each client language is told ----------------------------------------


@pytest.mark.parametrize("language", [pb.JAVA, pb.PYTHON, pb.GOLANG, pb.DOT_NET, pb.NODE_JS])
def test_each_client_language_gets_a_retry_policy_it_implements_with_nonzero_delays(
    server: ServerThread, topics: None, language: int
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        call = s.Telemetry(metadata=meta(f"lang-{language}"))
        await call.write(
            sv.TelemetryCommand(
                settings=pb.Settings(
                    client_type=pb.PUSH_CONSUMER,
                    user_agent=pb.UA(language=language, version="5.0.0"),  # type: ignore[arg-type]
                    subscription=pb.Subscription(
                        group=resource("retry-group"),
                        subscriptions=[
                            pb.SubscriptionEntry(
                                topic=resource("orders"),
                                expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                            )
                        ],
                    ),
                )
            )
        )
        reply = await call.read()
        call.cancel()
        assert reply.status.code == Code.OK
        policy = reply.settings.backoff_policy
        assert policy.max_attempts == 17
        if language == pb.NODE_JS:
            # The Node.js client implements only exponential backoff, reading whole seconds.
            assert policy.WhichOneof("strategy") == "exponential_backoff"
            backoff = policy.exponential_backoff
            assert backoff.initial.seconds == 1 and backoff.initial.nanos == 0
            assert backoff.max.seconds == 7200
            assert backoff.multiplier > 1
        else:
            # RocketMQ's default: the group's delay list (Python implements only this one).
            assert policy.WhichOneof("strategy") == "customized_backoff"
            delays = [d.ToMilliseconds() for d in policy.customized_backoff.next]
            assert delays[:3] == [1000, 5000, 10000] and delays[-1] == 7_200_000

    run(server, scenario)
