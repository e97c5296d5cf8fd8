"""The apache.rocketmq.v2 service on the wire: codes, stream order, settings, handles.

These tests speak the protocol with popmq's generated stubs (the same wire schema the
official clients use, pinned by test_schema.py) against the real server, to check details a
client library hides: status codes inside responses with gRPC OK, frame order of streams,
the settings reply, and what happens to receipt handles.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc
import pytest

from popmq import Producer, SimpleConsumer
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq._gen.apache.rocketmq.v2.service_pb2_grpc import MessagingServiceStub
from popmq.broker_core.config import BrokerConfig, LongPollingConfig
from popmq.broker_core.types import GroupSettings
from tests.old_handles import old_recall_handle, old_receipt_handle, renamed
from tests.support.server_thread import ServerThread
from tests.support.waiting import until

T = TypeVar("T")
Code = pb.Code


def meta(client_id: str = "test-client-1") -> tuple[tuple[str, str], ...]:
    return (("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"))


@asynccontextmanager
async def stub(server: ServerThread) -> AsyncIterator[MessagingServiceStub]:
    async with grpc.aio.insecure_channel(server.endpoint) as channel:
        yield MessagingServiceStub(channel)


def run(server: ServerThread, scenario: Callable[[MessagingServiceStub], Awaitable[T]]) -> T:
    async def main() -> T:
        async with stub(server) as s:
            return await scenario(s)

    return asyncio.run(main())


def resource(name: str) -> pb.Resource:
    return pb.Resource(name=name)


def message(
    topic: str,
    body: bytes,
    *,
    message_id: str,
    tag: str | None = None,
    keys: tuple[str, ...] = (),
    group: str | None = None,
    deliver_at_s: int | None = None,
    properties: dict[str, str] | None = None,
    encoding: int = pb.IDENTITY,
    message_type: int = pb.MESSAGE_TYPE_UNSPECIFIED,
) -> pb.Message:
    props = pb.SystemProperties(
        message_id=message_id,
        keys=keys,
        born_host="10.1.2.3",
        body_encoding=encoding,
        message_type=message_type,
    )
    props.born_timestamp.FromMilliseconds(1_700_000_000_123)
    if tag is not None:
        props.tag = tag
    if group is not None:
        props.message_group = group
    if deliver_at_s is not None:
        props.delivery_timestamp.seconds = deliver_at_s
    return pb.Message(
        topic=resource(topic), body=body, system_properties=props, user_properties=properties
    )


def receive_request(
    group: str,
    topic: str,
    *,
    batch: int = 32,
    invisible_s: int = 30,
    wait_s: int | None = 5,
    auto_renew: bool = False,
    expression: str = "*",
) -> sv.ReceiveMessageRequest:
    request = sv.ReceiveMessageRequest(
        group=resource(group),
        message_queue=pb.MessageQueue(topic=resource(topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=expression),
        batch_size=batch,
        auto_renew=auto_renew,
    )
    if not auto_renew:
        request.invisible_duration.seconds = invisible_s
    if wait_s is not None:
        request.long_polling_timeout.seconds = wait_s
    return request


async def receive(
    s: MessagingServiceStub,
    request: sv.ReceiveMessageRequest,
    *,
    client_id: str = "test-client-1",
    deadline_s: float = 30,
) -> list[sv.ReceiveMessageResponse]:
    frames = []
    async for frame in s.ReceiveMessage(request, metadata=meta(client_id), timeout=deadline_s):
        frames.append(frame)
    return frames


def messages_of(frames: list[sv.ReceiveMessageResponse]) -> list[pb.Message]:
    return [f.message for f in frames if f.HasField("message")]


async def send(s: MessagingServiceStub, *messages: pb.Message) -> sv.SendMessageResponse:
    response: sv.SendMessageResponse = await s.SendMessage(
        sv.SendMessageRequest(messages=messages), metadata=meta()
    )
    return response


@pytest.fixture
def topics(server: ServerThread) -> None:
    async def create() -> None:
        broker = server.broker
        await broker.create_topic("orders", 4)
        await broker.create_topic("fifo-orders", 4, message_type="fifo")
        await broker.create_topic("mixed", 2, message_type="mixed")

    server.call(create)


# -- routes and assignments ---------------------------------------------------------------


def test_query_route_lists_the_topics_queues_at_the_address_the_client_used(
    server: ServerThread, topics: None
) -> None:
    host, port = server.endpoint.split(":")
    asked = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])

    async def scenario(s: MessagingServiceStub) -> None:
        route = await s.QueryRoute(
            sv.QueryRouteRequest(topic=resource("fifo-orders"), endpoints=asked), metadata=meta()
        )
        assert route.status.code == Code.OK
        assert [q.id for q in route.message_queues] == [0, 1, 2, 3]
        for queue in route.message_queues:
            assert queue.permission == pb.READ_WRITE
            assert queue.broker.name == "broker-a"  # the broker's name, as in its handles
            assert queue.broker.id == 0  # clients send only to the master
            assert queue.broker.endpoints == asked
            assert list(queue.accept_message_types) == [pb.FIFO]
        mixed = await s.QueryRoute(sv.QueryRouteRequest(topic=resource("mixed")), metadata=meta())
        # Without endpoints in the request the route names this server's listen address.
        assert mixed.message_queues[0].broker.endpoints.addresses[0].port == int(port)
        assert set(mixed.message_queues[0].accept_message_types) == {
            pb.NORMAL,
            pb.FIFO,
            pb.DELAY,
            pb.TRANSACTION,  # half messages (test_protocol_transactions.py)
        }
        missing = await s.QueryRoute(sv.QueryRouteRequest(topic=resource("nope")), metadata=meta())
        assert missing.status.code == Code.TOPIC_NOT_FOUND
        assert "nope" in missing.status.message
        bad = await s.QueryRoute(
            sv.QueryRouteRequest(topic=resource("bad topic!")), metadata=meta()
        )
        assert bad.status.code == Code.ILLEGAL_TOPIC

    run(server, scenario)


def test_query_assignment_gives_one_all_queues_assignment(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        response = await s.QueryAssignment(
            sv.QueryAssignmentRequest(topic=resource("orders"), group=resource("billing")),
            metadata=meta(),
        )
        assert response.status.code == Code.OK
        assert [a.message_queue.id for a in response.assignments] == [-1]
        assert response.assignments[0].message_queue.permission == pb.READ_WRITE

    run(server, scenario)


# -- telemetry ----------------------------------------------------------------------------


def test_telemetry_completes_consumer_settings_from_the_group_and_stays_open(
    server: ServerThread, topics: None
) -> None:
    server.call(
        lambda: server.broker.create_group_with_settings(
            "fifo-billing",
            max_delivery_attempts=5,
            retry_backoff_s=[2, 4],
            settings=GroupSettings(fifo=True),
        )
    )

    async def scenario(s: MessagingServiceStub) -> None:
        call = s.Telemetry(metadata=meta("consumer-1"))
        settings = pb.Settings(
            client_type=pb.PUSH_CONSUMER,
            subscription=pb.Subscription(
                group=resource("fifo-billing"),
                subscriptions=[
                    pb.SubscriptionEntry(
                        topic=resource("fifo-orders"),
                        expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                    )
                ],
            ),
        )
        settings.request_timeout.seconds = 3
        await call.write(sv.TelemetryCommand(settings=settings))
        reply = await call.read()
        assert reply.status.code == Code.OK
        got = reply.settings
        assert got.backoff_policy.max_attempts == 5
        assert [d.seconds for d in got.backoff_policy.customized_backoff.next] == [2, 4]
        assert got.subscription.fifo is True
        assert got.subscription.receive_batch_size == 32
        assert got.subscription.long_polling_timeout.seconds == 20
        assert got.HasField("metric")
        assert [e.topic.name for e in got.subscription.subscriptions] == ["fifo-orders"]
        # The stream stays open for server-to-client commands...
        pending = asyncio.ensure_future(call.read())
        done, _ = await asyncio.wait([pending], timeout=0.3)
        assert not done
        # ...until the client says goodbye: then the server completes it.
        bye = await s.NotifyClientTermination(
            sv.NotifyClientTerminationRequest(group=resource("fifo-billing")),
            metadata=meta("consumer-1"),
        )
        assert bye.status.code == Code.OK
        assert await asyncio.wait_for(pending, 10) is grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK

    run(server, scenario)


def test_telemetry_completes_producer_settings_and_refuses_incomplete_ones(
    server: ServerThread,
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        call = s.Telemetry(metadata=meta("producer-1"))
        await call.write(
            sv.TelemetryCommand(
                settings=pb.Settings(
                    client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[resource("a")])
                )
            )
        )
        reply = await call.read()
        assert reply.status.code == Code.OK
        policy = reply.settings.backoff_policy
        assert policy.max_attempts == 3
        assert policy.exponential_backoff.initial.ToMilliseconds() == 10
        assert policy.exponential_backoff.max.ToMilliseconds() == 1000
        assert policy.exponential_backoff.multiplier == 2
        assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024 - 64 * 1024
        assert reply.settings.publishing.validate_message_type is True
        await call.write(sv.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER)))
        refused = await call.read()
        assert refused.status.code == Code.BAD_REQUEST
        assert "publishing" in refused.status.message
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF

    run(server, scenario)


# -- send and receive ---------------------------------------------------------------------


def test_receive_streams_status_messages_then_delivery_timestamp_with_properties_kept(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        sent = await send(
            s,
            message(
                "fifo-orders",
                b"first",
                message_id="01AAAA0000000000000000000000000001",
                tag="TagA",
                keys=("order-1", "user-7"),
                group="order-1",
                properties={"region": "eu"},
            ),
            message("fifo-orders", b"second", message_id="01AAAA02", group="order-2"),
        )
        assert sent.status.code == Code.OK
        assert [e.message_id for e in sent.entries] == [
            "01AAAA0000000000000000000000000001",
            "01AAAA02",
        ]
        frames = await receive(s, receive_request("billing", "fifo-orders"))
        kinds = [f.WhichOneof("content") for f in frames]
        assert kinds == ["status", "message", "message", "delivery_timestamp"]
        assert frames[0].status.code == Code.OK
        assert abs(frames[-1].delivery_timestamp.ToMilliseconds() - time.time() * 1000) < 60_000
        by_id = {m.system_properties.message_id: m for m in messages_of(frames)}
        first = by_id["01AAAA0000000000000000000000000001"]
        props = first.system_properties
        assert first.body == b"first"
        assert props.tag == "TagA"
        assert sorted(props.keys) == ["order-1", "user-7"]
        assert dict(first.user_properties) == {"region": "eu"}
        assert props.message_group == "order-1"
        assert props.message_type == pb.FIFO
        assert props.born_host == "10.1.2.3"
        assert props.born_timestamp.ToMilliseconds() == 1_700_000_000_123
        assert props.delivery_attempt == 1
        assert props.receipt_handle
        assert props.body_encoding == pb.IDENTITY
        assert props.body_digest.type == pb.MD5
        assert props.body_digest.checksum == hashlib.md5(b"first").hexdigest().upper()
        assert 29 <= props.invisible_duration.seconds <= 30
        entry = sent.entries[0]
        assert props.queue_offset == entry.offset
        assert 0 <= props.queue_id < 4

    run(server, scenario)


def test_an_empty_receive_answers_message_not_found_after_the_minimum_long_poll(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        started = time.monotonic()
        # long_polling_timeout 0 is raised to RocketMQ's minimum (5 s), as its proxy does.
        frames = await receive(s, receive_request("billing", "orders", wait_s=0), deadline_s=10)
        waited = time.monotonic() - started
        assert [f.WhichOneof("content") for f in frames] == ["status", "delivery_timestamp"]
        assert frames[0].status.code == Code.MESSAGE_NOT_FOUND
        assert 4.5 <= waited < 9.5
        short = await receive(s, receive_request("billing", "orders"), deadline_s=2)
        assert short[0].status.code == Code.ILLEGAL_POLLING_TIME
        assert "deadline" in short[0].status.message

    run(server, scenario)


def test_receive_errors_carry_rocketmq_codes_with_grpc_ok(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        cases = [
            (receive_request("billing", "missing"), Code.TOPIC_NOT_FOUND),
            (receive_request("bad group!", "orders"), Code.ILLEGAL_CONSUMER_GROUP),
            (receive_request("billing", "orders", invisible_s=0), Code.ILLEGAL_INVISIBLE_TIME),
            (
                receive_request("billing", "orders", expression="A||"),
                Code.ILLEGAL_FILTER_EXPRESSION,
            ),
            (receive_request("billing", "orders", batch=0), Code.BAD_REQUEST),
        ]
        for request, code in cases:
            call = s.ReceiveMessage(request, metadata=meta(), timeout=10)
            frames = [f async for f in call]
            assert [f.status.code for f in frames] == [code], request
            assert frames[0].status.message
            assert await call.code() == grpc.StatusCode.OK
        no_id = s.ReceiveMessage(receive_request("billing", "orders"), timeout=10)
        assert [f.status.code async for f in no_id] == [Code.CLIENT_ID_REQUIRED]

    run(server, scenario)


def test_send_errors_carry_rocketmq_codes(server: ServerThread, topics: None) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        cases = [
            (
                message("orders", b"x" * (4 * 1024 * 1024 - 64 * 1024 + 1), message_id="m1"),
                Code.MESSAGE_BODY_TOO_LARGE,
            ),
            (message("orders", b"", message_id="m2"), Code.MESSAGE_BODY_EMPTY),
            (message("nope", b"x", message_id="m3"), Code.TOPIC_NOT_FOUND),
            (message("orders", b"x", message_id=""), Code.ILLEGAL_MESSAGE_ID),
            (message("orders", b"x", message_id="m4", tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
            (message("orders", b"x", message_id="m5", keys=(" ",)), Code.ILLEGAL_MESSAGE_KEY),
            (
                message("orders", b"x", message_id="m6", group="g"),
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            ),
            (
                message("fifo-orders", b"x", message_id="m7", group="g" * 65),
                Code.ILLEGAL_MESSAGE_GROUP,
            ),
            (
                message("mixed", b"x", message_id="m8", deliver_at_s=int(time.time()) + 30 * 86400),
                Code.ILLEGAL_DELIVERY_TIME,
            ),
            (
                message("orders", b"x", message_id="m9", message_type=pb.TRANSACTION),
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            ),
            (message("orders", b"x", message_id="m9b", message_type=pb.LITE), Code.UNSUPPORTED),
            (
                message("orders", b"x", message_id="m10", properties={"": "v"}),
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
            ),
            (
                message("orders", b"not gzip", message_id="m11", encoding=pb.GZIP),
                Code.MESSAGE_CORRUPTED,
            ),
            (
                message("orders", b"x", message_id="m12", properties={" ": "v"}),
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
            ),
            (
                message(
                    "orders", b"x", message_id="m13", properties={f"p{i}": "v" for i in range(129)}
                ),
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
            ),
            (
                message("orders", b"x", message_id="m14", keys=tuple(f"k{i}" for i in range(33))),
                Code.ILLEGAL_MESSAGE_KEY,
            ),
            (message("orders", b"x", message_id="m15", tag=""), Code.ILLEGAL_MESSAGE_TAG),
            (message("orders", b"x", message_id="m16", tag="t" * 128), Code.ILLEGAL_MESSAGE_TAG),
            (message("bad topic!", b"x", message_id="m17"), Code.ILLEGAL_TOPIC),
            (message("rmq_sys_x", b"x", message_id="m18"), Code.ILLEGAL_TOPIC),
        ]
        for msg, code in cases:
            response = await send(s, msg)
            assert response.status.code == code, (msg.system_properties.message_id, response)
            assert [e.status.code for e in response.entries] == [code]

    run(server, scenario)


def test_v2_errors_say_core_s_true_limits(server: ServerThread, topics: None) -> None:
    """The v2 front end calls broker_core's checks, so its messages name the real limits
    (the body limit is 4 MiB - 64 KiB, which the v2 copy used to call 4 MiB)."""

    async def scenario(s: MessagingServiceStub) -> None:
        big = await send(s, message("orders", b"x" * (4 * 1024 * 1024), message_id="t1"))
        assert big.status.code == Code.MESSAGE_BODY_TOO_LARGE
        assert big.status.message == (
            "messages[0].body is 4194304 bytes: at most 4128768 (4 MiB - 64 KiB) are allowed"
        )
        empty = await send(s, message("orders", b"", message_id="t2"))
        assert empty.status.code == Code.MESSAGE_BODY_EMPTY
        assert "1 to 4128768 bytes" in empty.status.message
        late = await send(
            s,
            message("mixed", b"x", message_id="t3", deliver_at_s=int(time.time()) + 30 * 86400),
        )
        assert late.status.code == Code.ILLEGAL_DELIVERY_TIME
        assert "(max_delay_s) ahead is allowed" in late.status.message
        frames = await receive(s, receive_request("billing", "orders", invisible_s=0))
        assert frames[0].status.code == Code.ILLEGAL_INVISIBLE_TIME
        assert frames[0].status.message == "invisible_duration 0s is below the minimum 1s"
        frames = await receive(s, receive_request("billing", "orders", batch=0))
        assert frames[0].status.code == Code.BAD_REQUEST
        assert frames[0].status.message == "batch_size 0 is below the minimum 1"
        frames = await receive(s, receive_request("billing", "orders", expression="x" * 5000))
        assert frames[0].status.code == Code.ILLEGAL_FILTER_EXPRESSION
        assert "at most 4096 are allowed" in frames[0].status.message

    run(server, scenario)


def test_a_gzip_body_is_stored_compressed_and_delivered_decoded(
    server: ServerThread, topics: None
) -> None:
    body = b"compressible " * 1000

    async def scenario(s: MessagingServiceStub) -> None:
        sent = await send(
            s, message("orders", gzip.compress(body), message_id="gz1", encoding=pb.GZIP)
        )
        assert sent.status.code == Code.OK
        (got,) = messages_of(await receive(s, receive_request("v2-readers", "orders")))
        assert got.body == body
        assert got.system_properties.body_encoding == pb.IDENTITY

    run(server, scenario)
    with SimpleConsumer(server.endpoint, group="sdk-readers", topic="orders") as consumer:
        (received,) = consumer.receive(wait_s=5)
    assert received.body == body  # the SDK decodes the zlib body popmq stored


# -- ack, change invisible duration, release ----------------------------------------------


def test_ack_and_change_invisible_duration_handles(server: ServerThread, topics: None) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        await send(s, message("orders", b"a", message_id="h1"))
        (msg,) = messages_of(await receive(s, receive_request("billing", "orders")))
        old = msg.system_properties.receipt_handle
        changed = await s.ChangeInvisibleDuration(
            sv.ChangeInvisibleDurationRequest(
                group=resource("billing"),
                topic=resource("orders"),
                receipt_handle=old,
                invisible_duration={"seconds": 60},
                message_id="h1",
            ),
            metadata=meta(),
        )
        assert changed.status.code == Code.OK
        assert changed.receipt_handle and changed.receipt_handle != old

        def ack(handle: str) -> sv.AckMessageRequest:
            return sv.AckMessageRequest(
                group=resource("billing"),
                topic=resource("orders"),
                entries=[sv.AckMessageEntry(message_id="h1", receipt_handle=handle)],
            )

        stale = await s.AckMessage(ack(old), metadata=meta())
        assert stale.status.code == Code.INVALID_RECEIPT_HANDLE
        assert stale.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
        forged = await s.AckMessage(ack("not-a-handle"), metadata=meta())
        assert forged.status.code == Code.INVALID_RECEIPT_HANDLE
        fresh = await s.AckMessage(ack(changed.receipt_handle), metadata=meta())
        assert fresh.status.code == Code.OK
        assert fresh.entries[0].status.code == Code.OK
        suspend = await s.ChangeInvisibleDuration(
            sv.ChangeInvisibleDurationRequest(
                group=resource("billing"),
                topic=resource("orders"),
                receipt_handle=changed.receipt_handle,
                invisible_duration={"seconds": 60},
                suspend=True,
            ),
            metadata=meta(),
        )
        assert suspend.status.code == Code.UNSUPPORTED

    run(server, scenario)


def test_a_receive_records_its_x_mq_client_id_as_the_deliveries_holder(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        await send(s, message("orders", b"a", message_id="c1"))
        (msg,) = messages_of(
            await receive(s, receive_request("billing", "orders"), client_id="10.0.0.1@42#1")
        )
        assert msg.system_properties.message_id == "c1"

    run(server, scenario)

    async def inspect() -> tuple[list[tuple[str, str]], list[tuple[str, int]]]:
        view = await server.broker.inspect_group("billing", "orders")
        rows = [(r.message_id, r.client_id) for r in view.inflight]
        return rows, [(c.client_id, c.count) for c in view.consumers]

    assert server.call(inspect) == ([("c1", "10.0.0.1@42#1")], [("10.0.0.1@42#1", 1)])


def test_handles_name_the_broker_another_brokers_are_refused_old_ones_still_work(
    server: ServerThread, topics: None
) -> None:
    """What a proxy in front of several brokers routes by: the name before the "."."""

    async def scenario(s: MessagingServiceStub) -> None:
        await send(s, message("orders", b"a", message_id="n1"))
        await send(s, message("orders", b"b", message_id="n2"))
        received = messages_of(await receive(s, receive_request("billing", "orders", batch=2)))
        handles = {
            m.system_properties.message_id: m.system_properties.receipt_handle for m in received
        }
        assert all(h.startswith("broker-a.") for h in handles.values())

        def ack(message_id: str, handle: str) -> sv.AckMessageRequest:
            return sv.AckMessageRequest(
                group=resource("billing"),
                topic=resource("orders"),
                entries=[sv.AckMessageEntry(message_id=message_id, receipt_handle=handle)],
            )

        foreign = await s.AckMessage(ack("n1", renamed(handles["n1"], "broker-b")), metadata=meta())
        assert foreign.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
        assert foreign.entries[0].status.message.startswith(
            "receipt handle was issued by broker 'broker-b'; this is broker 'broker-a'"
        )
        old = await s.AckMessage(
            ack("n1", old_receipt_handle(server.data_dir, handles["n1"])), metadata=meta()
        )
        assert old.entries[0].status.code == Code.OK
        changed = await s.ChangeInvisibleDuration(
            sv.ChangeInvisibleDurationRequest(
                group=resource("billing"),
                topic=resource("orders"),
                receipt_handle=old_receipt_handle(server.data_dir, handles["n2"]),
                invisible_duration={"seconds": 60},
                message_id="n2",
            ),
            metadata=meta(),
        )
        assert changed.status.code == Code.OK
        assert changed.receipt_handle.startswith("broker-a.")
        fresh = await s.AckMessage(ack("n2", changed.receipt_handle), metadata=meta())
        assert fresh.entries[0].status.code == Code.OK

    run(server, scenario)


@pytest.mark.parametrize("broker_config", [BrokerConfig(broker_name="shard-7")])
def test_routes_assignments_and_handles_carry_the_one_broker_name_clients_echo_back(
    server: ServerThread, topics: None
) -> None:
    """Official clients copy a route's MessageQueue (broker name included) into their
    ReceiveMessage; what the proxy handed out works, and handles name the same broker."""

    async def scenario(s: MessagingServiceStub) -> None:
        route = await s.QueryRoute(sv.QueryRouteRequest(topic=resource("orders")), metadata=meta())
        assert {q.broker.name for q in route.message_queues} == {"shard-7"}
        assignment = await s.QueryAssignment(
            sv.QueryAssignmentRequest(topic=resource("orders"), group=resource("billing")),
            metadata=meta(),
        )
        (queue,) = [a.message_queue for a in assignment.assignments]
        assert queue.broker.name == "shard-7"
        await send(s, message("orders", b"a", message_id="n1"))
        request = receive_request("billing", "orders")
        request.message_queue.CopyFrom(queue)  # what the client echoes
        (received,) = messages_of(await receive(s, request))
        handle = received.system_properties.receipt_handle
        assert handle.startswith("shard-7.")
        changed = await s.ChangeInvisibleDuration(
            sv.ChangeInvisibleDurationRequest(
                group=resource("billing"),
                topic=resource("orders"),
                receipt_handle=handle,
                invisible_duration={"seconds": 60},
                message_id="n1",
            ),
            metadata=meta(),
        )
        assert changed.status.code == Code.OK
        assert changed.receipt_handle.startswith("shard-7.")
        acked = await s.AckMessage(
            sv.AckMessageRequest(
                group=resource("billing"),
                topic=resource("orders"),
                entries=[
                    sv.AckMessageEntry(message_id="n1", receipt_handle=changed.receipt_handle)
                ],
            ),
            metadata=meta(),
        )
        assert acked.entries[0].status.code == Code.OK

    run(server, scenario)
    # The client registry (FIFO assignments, popmq.v1 push consumers) hashes the same name.
    assert server.server is not None and server.server.clients is not None
    assert server.server.clients.broker_name == "shard-7"


def test_notify_client_termination_releases_the_clients_messages_at_once(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        await send(
            s, message("orders", b"a", message_id="r1"), message("orders", b"b", message_id="r2")
        )
        held = messages_of(
            await receive(
                s, receive_request("billing", "orders", invisible_s=600), client_id="leaver"
            )
        )
        assert len(held) == 2
        started = time.monotonic()
        bye = await s.NotifyClientTermination(
            sv.NotifyClientTerminationRequest(group=resource("billing")), metadata=meta("leaver")
        )
        assert bye.status.code == Code.OK
        again: list[pb.Message] = []
        while len(again) < 2 and time.monotonic() - started < 30:
            frames = await receive(
                s, receive_request("billing", "orders", wait_s=10), client_id="heir"
            )
            again += messages_of(frames)
        assert sorted(m.system_properties.message_id for m in again) == ["r1", "r2"]
        assert {m.system_properties.delivery_attempt for m in again} == {2}
        # Back in seconds, not after the 600 s invisible time (release: 1 s, RocketMQ's).
        assert time.monotonic() - started < 30

    run(server, scenario)


@pytest.mark.parametrize(
    "broker_config", [BrokerConfig(long_polling=LongPollingConfig(max_per_key=1))]
)
def test_too_many_held_receives_answer_too_many_requests(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        holder = asyncio.ensure_future(receive(s, receive_request("billing", "orders", wait_s=10)))
        await until(lambda: server.held_pops() >= 1, "the receive held", 10, interval_s=0.01)
        frames = await receive(s, receive_request("billing", "orders", wait_s=10))
        assert frames[0].status.code == Code.TOO_MANY_REQUESTS
        await send(s, message("orders", b"wake", message_id="w1"))
        held = await holder
        assert [m.body for m in messages_of(held)] == [b"wake"]

    run(server, scenario)


# -- delayed messages, pull and offsets ---------------------------------------------------


def test_a_delayed_message_can_be_recalled_once(server: ServerThread, topics: None) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        due = int(time.time()) + 600
        sent = await send(s, message("mixed", b"later", message_id="d1", deliver_at_s=due))
        assert sent.status.code == Code.OK
        handle = sent.entries[0].recall_handle
        assert handle

        async def recall() -> sv.RecallMessageResponse:
            response: sv.RecallMessageResponse = await s.RecallMessage(
                sv.RecallMessageRequest(topic=resource("mixed"), recall_handle=handle),
                metadata=meta(),
            )
            return response

        first = await recall()
        assert first.status.code == Code.OK and first.message_id == "d1"
        second = await recall()
        assert second.status.code == Code.NOT_FOUND

    run(server, scenario)


def test_recall_handles_name_the_broker_and_old_ones_still_recall(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        due = int(time.time()) + 600
        sent = await send(s, message("mixed", b"later", message_id="d2", deliver_at_s=due))
        handle = sent.entries[0].recall_handle
        assert handle.startswith("broker-a.")

        async def recall(text: str) -> sv.RecallMessageResponse:
            response: sv.RecallMessageResponse = await s.RecallMessage(
                sv.RecallMessageRequest(topic=resource("mixed"), recall_handle=text),
                metadata=meta(),
            )
            return response

        foreign = await recall(renamed(handle, "broker-b"))
        assert foreign.status.code == Code.BAD_REQUEST
        assert "issued by broker 'broker-b'" in foreign.status.message
        old = await recall(old_recall_handle(server.data_dir, handle))
        assert old.status.code == Code.OK and old.message_id == "d2"

    run(server, scenario)


def test_pull_reads_a_queue_by_offset_and_offsets_round_trip(
    server: ServerThread, topics: None
) -> None:
    with Producer(server.endpoint) as producer:
        receipts = [producer.send("orders", f"m{i}".encode(), tag="T") for i in range(6)]
    queue_id = receipts[0].queue_id
    in_queue = [r for r in receipts if r.queue_id == queue_id]

    async def scenario(s: MessagingServiceStub) -> None:
        mq = pb.MessageQueue(topic=resource("orders"), id=queue_id)
        end = await s.QueryOffset(
            sv.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END), metadata=meta()
        )
        assert end.status.code == Code.OK and end.offset == len(in_queue)
        begin = await s.QueryOffset(
            sv.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.BEGINNING),
            metadata=meta(),
        )
        assert begin.offset == 0
        request = sv.PullMessageRequest(
            group=resource("pullers"), message_queue=mq, offset=0, batch_size=32
        )
        frames = [f async for f in s.PullMessage(request, metadata=meta(), timeout=10)]
        kinds = [f.WhichOneof("content") for f in frames]
        assert kinds == ["status"] + ["message"] * len(in_queue) + ["next_offset"]
        assert [f.message.system_properties.message_id for f in frames[1:-1]] == [
            r.message_id for r in in_queue
        ]
        assert frames[-1].next_offset == len(in_queue)
        # At the end of the queue a pull waits for an arrival, up to its long-polling time.
        request.offset = len(in_queue)
        request.long_polling_timeout.FromMilliseconds(300)
        tail = [f async for f in s.PullMessage(request, metadata=meta(), timeout=10)]
        assert tail[0].status.code == Code.MESSAGE_NOT_FOUND
        assert tail[-1].next_offset == len(in_queue)
        missing = await s.GetOffset(
            sv.GetOffsetRequest(group=resource("pullers"), message_queue=mq), metadata=meta()
        )
        assert missing.status.code in (Code.OFFSET_NOT_FOUND, Code.CONSUMER_GROUP_NOT_FOUND)
        update = await s.UpdateOffset(
            sv.UpdateOffsetRequest(group=resource("pullers"), message_queue=mq, offset=2),
            metadata=meta(),
        )
        assert update.status.code == Code.OK
        got = await s.GetOffset(
            sv.GetOffsetRequest(group=resource("pullers"), message_queue=mq), metadata=meta()
        )
        assert got.status.code == Code.OK and got.offset == 2
        beyond = await s.UpdateOffset(
            sv.UpdateOffsetRequest(group=resource("pullers"), message_queue=mq, offset=99),
            metadata=meta(),
        )
        assert beyond.status.code == Code.ILLEGAL_OFFSET

    run(server, scenario)


def test_heartbeat_needs_a_client_id(server: ServerThread) -> None:
    async def scenario(s: MessagingServiceStub) -> Any:
        missing = await s.Heartbeat(sv.HeartbeatRequest(client_type=pb.PRODUCER))
        assert missing.status.code == Code.CLIENT_ID_REQUIRED
        ok = await s.Heartbeat(
            sv.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=resource("g")),
            metadata=meta("hb"),
        )
        assert ok.status.code == Code.OK

    run(server, scenario)


def test_forward_to_dead_letter_queue_moves_the_message(server: ServerThread, topics: None) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        await send(s, message("orders", b"poison", message_id="p1"))
        (msg,) = messages_of(await receive(s, receive_request("billing", "orders")))
        forwarded = await s.ForwardMessageToDeadLetterQueue(
            sv.ForwardMessageToDeadLetterQueueRequest(
                group=resource("billing"),
                topic=resource("orders"),
                receipt_handle=msg.system_properties.receipt_handle,
                message_id="p1",
                delivery_attempt=1,
                max_delivery_attempts=17,
            ),
            metadata=meta(),
        )
        assert forwarded.status.code == Code.OK, forwarded.status
        dead = messages_of(await receive(s, receive_request("dlq-reader", "%DLQ%billing")))
        assert [m.system_properties.message_id for m in dead] == ["p1"]

    run(server, scenario)


def test_a_held_pull_wakes_on_an_arrival_in_its_queue_and_filters_it(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        mq = pb.MessageQueue(topic=resource("orders"), id=0)
        end = await s.QueryOffset(
            sv.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END), metadata=meta()
        )
        request = sv.PullMessageRequest(
            group=resource("pullers"),
            message_queue=mq,
            offset=end.offset,
            batch_size=32,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="B"),
        )
        request.long_polling_timeout.FromSeconds(10)

        async def arrivals() -> str:
            await asyncio.sleep(0.3)
            for i in range(256):  # sends to other queues do not answer the held pull
                sent = await send(s, message("orders", b"x", message_id=f"w{i}", tag="B"))
                now = await s.QueryOffset(
                    sv.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END),
                    metadata=meta(),
                )
                if now.offset > end.offset:
                    return sent.entries[0].message_id
            raise AssertionError("no send landed in queue 0")

        began = time.monotonic()
        sender = asyncio.create_task(arrivals())
        frames = [f async for f in s.PullMessage(request, metadata=meta(), timeout=20)]
        landed = await sender
        assert time.monotonic() - began < 8
        assert frames[0].status.code == Code.OK
        assert [f.message.system_properties.message_id for f in frames[1:-1]] == [landed]
        assert frames[-1].next_offset == end.offset + 1

    run(server, scenario)
