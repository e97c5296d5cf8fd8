"""Transactional messages on the apache.rocketmq.v2 wire: half sends, EndTransaction's codes,
and the check-back written on a producer's Telemetry stream.

Spoken with popmq's generated stubs against the real server (as test_protocol.py), for what
the official clients hide: the codes of refused requests, the command's fields, when a
producer's stream is registered for checks. test_official_transactions.py runs the real
client.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq._gen.apache.rocketmq.v2.service_pb2_grpc import MessagingServiceStub
from popmq.broker_core import BrokerConfig, TransactionsConfig, UnavailableError
from popmq.proxy.rocketmq.transactions import CommandOutbox
from tests.compat.test_protocol import message, meta, resource, run, send
from tests.support.server_thread import ServerThread

Code = pb.Code


@pytest.fixture
def broker_config() -> BrokerConfig:
    return BrokerConfig(
        transactions=TransactionsConfig(check_first_s=6.0, check_interval_s=1.0, check_max=5)
    )


@pytest.fixture
def topics(server: ServerThread) -> None:
    async def create() -> None:
        await server.broker.create_topic("orders", 2)
        await server.broker.create_topic("payments", 2, message_type="transaction")
        await server.broker.create_topic("refunds", 2, message_type="transaction")

    server.call(create)


def half(
    body: bytes, message_id: str, *, recovery_s: int | None = None, topic: str = "payments"
) -> pb.Message:
    msg = message(topic, body, message_id=message_id, message_type=pb.TRANSACTION)
    if recovery_s is not None:
        msg.system_properties.orphaned_transaction_recovery_duration.seconds = recovery_s
    return msg


async def end(
    s: MessagingServiceStub,
    transaction_id: str,
    resolution: int,
    *,
    message_id: str,
    topic: str = "payments",
    source: int = pb.SOURCE_CLIENT,
) -> pb.Status:
    response = await s.EndTransaction(
        sv.EndTransactionRequest(
            topic=resource(topic),
            message_id=message_id,
            transaction_id=transaction_id,
            resolution=resolution,
            source=source,
        ),
        metadata=meta(),
    )
    status: pb.Status = response.status
    return status


def info(server: ServerThread, transaction_id: str) -> Any:
    return server.call(lambda: server.broker.get_transaction(transaction_id))


def test_half_sends_are_refused_with_rocketmq_codes_and_stored_invisible(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        to_normal = await send(s, half(b"x", "t1", topic="orders"))
        assert to_normal.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert "normal topic" in to_normal.status.message
        too_late = await send(s, half(b"x", "t2", recovery_s=3601))
        assert too_late.status.code == Code.BAD_REQUEST
        assert "3600" in too_late.status.message, too_late.status
        not_half = message("orders", b"x", message_id="t3")
        not_half.system_properties.orphaned_transaction_recovery_duration.seconds = 5
        refused = await send(s, not_half)
        assert refused.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert "only TRANSACTION messages" in refused.status.message
        mixed = await send(s, half(b"x", "t4"), message("payments", b"y", message_id="t5"))
        assert mixed.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE

        sent = await send(s, half(b"later", "t6", recovery_s=120))
        assert sent.status.code == Code.OK, sent.status
        (entry,) = sent.entries
        assert entry.message_id == "t6" and entry.offset == -1 and entry.transaction_id
        held = info(server, entry.transaction_id)
        assert held.state == "open" and held.producer_group == "payments"  # RocketMQ's rule
        assert 119_000 <= held.next_check_ms - held.created_ms <= 121_000
        assert server.call(lambda: server.broker.peek("payments")) == []

    run(server, scenario)


def test_end_transaction_is_final_idempotent_and_refuses_bad_ids(
    server: ServerThread, topics: None
) -> None:
    async def scenario(s: MessagingServiceStub) -> None:
        (first,) = (await send(s, half(b"one", "e1"))).entries
        (second,) = (await send(s, half(b"two", "e2"))).entries
        tid = first.transaction_id

        for bad in ("", "nonsense", tid[:-2] + ("AA" if not tid.endswith("AA") else "BB")):
            status = await end(s, bad, pb.COMMIT, message_id="e1")
            assert status.code == Code.INVALID_TRANSACTION_ID, (bad, status)
        other_topic = await end(s, tid, pb.COMMIT, message_id="e1", topic="refunds")
        assert other_topic.code == Code.INVALID_TRANSACTION_ID
        assert "refunds" in other_topic.message
        assert (await end(s, tid, 7, message_id="e1")).code == Code.BAD_REQUEST
        bad_source = await end(s, tid, pb.COMMIT, message_id="e1", source=9)
        assert bad_source.code == Code.BAD_REQUEST
        assert (await end(s, tid, pb.COMMIT, message_id="e1", topic="bad topic!")).code == (
            Code.ILLEGAL_TOPIC
        )
        assert info(server, tid).state == "open"

        # UNSPECIFIED is a checker's UNKNOWN: OK, and nothing changes.
        unknown = await end(
            s, tid, pb.TRANSACTION_RESOLUTION_UNSPECIFIED, message_id="e1",
            source=pb.SOURCE_SERVER_CHECK,
        )  # fmt: skip
        assert unknown.code == Code.OK and "stays open" in unknown.message
        assert info(server, tid).state == "open"

        # An old Java client's commit has no source: it is the client's.
        assert (
            await end(s, tid, pb.COMMIT, message_id="e1", source=pb.SOURCE_UNSPECIFIED)
        ).code == Code.OK
        done = info(server, tid)
        assert (done.state, done.resolved_by) == ("committed", "client")
        again = await end(s, tid, pb.COMMIT, message_id="e1", source=pb.SOURCE_SERVER_CHECK)
        assert again.code == Code.OK
        contrary = await end(s, tid, pb.ROLLBACK, message_id="e1")
        assert contrary.code == Code.PRECONDITION_FAILED
        assert "committed already" in contrary.message
        late_unknown = await end(s, tid, pb.TRANSACTION_RESOLUTION_UNSPECIFIED, message_id="e1")
        assert late_unknown.code == Code.OK and "committed already" in late_unknown.message

        assert (await end(s, second.transaction_id, pb.ROLLBACK, message_id="e2")).code == Code.OK
        refused = await end(s, second.transaction_id, pb.COMMIT, message_id="e2")
        assert refused.code == Code.PRECONDITION_FAILED

        (stored,) = server.call(lambda: server.broker.peek("payments"))
        assert stored.record.body == b"one"

    run(server, scenario)


def test_a_check_is_written_on_the_producers_telemetry_stream_while_it_is_open(
    server: ServerThread, topics: None
) -> None:
    checks = server.server.transaction_checks
    assert checks is not None

    async def scenario(s: MessagingServiceStub) -> None:
        call = s.Telemetry(metadata=meta("tx-producer"))

        async def settings(*topics: str) -> None:
            await call.write(
                sv.TelemetryCommand(
                    settings=pb.Settings(
                        client_type=pb.PRODUCER,
                        publishing=pb.Publishing(topics=[resource(t) for t in topics]),
                    )
                )
            )
            assert (await call.read()).status.code == Code.OK

        await settings("refunds")
        assert (checks.producers("refunds"), checks.producers("payments")) == (1, 0)
        await settings("payments")  # new settings replace the topics
        assert (checks.producers("refunds"), checks.producers("payments")) == (0, 1)

        msg = half(b"check me", "c1", recovery_s=1)
        msg.system_properties.tag = "TagA"
        msg.user_properties["region"] = "eu"
        sent_at = time.monotonic()
        (entry,) = (await send(s, msg)).entries
        command = await call.read()
        assert time.monotonic() - sent_at >= 0.9  # not before its recovery duration
        assert command.WhichOneof("command") == "recover_orphaned_transaction_command"
        recover = command.recover_orphaned_transaction_command
        assert recover.transaction_id == entry.transaction_id
        checked = recover.message
        assert checked.topic.name == "payments" and checked.body == b"check me"
        props = checked.system_properties
        assert (props.message_id, props.tag) == ("c1", "TagA")
        assert props.message_type == pb.TRANSACTION
        assert dict(checked.user_properties) == {"region": "eu"}
        assert info(server, entry.transaction_id).checks == 1

        status = await end(
            s, recover.transaction_id, pb.COMMIT, message_id=props.message_id,
            source=pb.SOURCE_SERVER_CHECK,
        )  # fmt: skip
        assert status.code == Code.OK
        resolved = info(server, entry.transaction_id)
        assert (resolved.state, resolved.resolved_by) == ("committed", "server_check")

        await call.done_writing()
        assert await call.read() is grpc.aio.EOF
        assert checks.producers("payments") == 0  # unregistered when the stream ended

    run(server, scenario)


def test_a_check_not_written_on_a_stream_fails_its_delivery() -> None:
    """The check loop tries the next producer when `deliver` raises: a stream that ended, or
    one whose handler does not write the check in time."""

    async def scenario() -> None:
        command = sv.TelemetryCommand()
        stuck = CommandOutbox()
        with pytest.raises(UnavailableError, match="did not take the command"):
            await stuck.send(command, wait_s=0.01)
        ended = CommandOutbox()
        pending = asyncio.ensure_future(ended.send(command))
        await asyncio.sleep(0)
        ended.close("the stream has ended")
        with pytest.raises(UnavailableError, match="has ended"):
            await pending
        with pytest.raises(UnavailableError, match="has ended"):
            await ended.send(command)
        written = CommandOutbox()
        delivery = asyncio.ensure_future(written.send(command))
        await written.ready.wait()
        ((taken, done),) = written.take()
        assert taken is command and not written.ready.is_set()
        done.set_result(None)  # what the stream's handler does after the write
        await delivery

    asyncio.run(scenario())
