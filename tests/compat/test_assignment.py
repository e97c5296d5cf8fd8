"""RocketMQ 5 consumers in popmq's client registry: QueryAssignment, FIFO queue claims.

Normal groups keep RocketMQ's single queue -1 assignment. Push consumers of a FIFO group are
queue-exclusive registry members: the queues are split among them, one claim per queue, and
a receive names a queue the client holds and gets that queue's messages. The raw-stub tests
check the protocol; the last test runs two official push consumers in one FIFO group.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from popmq import Producer
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq._gen.apache.rocketmq.v2.service_pb2_grpc import MessagingServiceStub
from popmq.broker_core.types import GroupSettings
from popmq.proxy.clients import ClientRegistry, ConsumeMode
from tests.compat.conftest import OfficialClient
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
from tests.support.server_thread import ServerThread
from tests.support.waiting import until, wait_until

Code = pb.Code
Admin = Callable[..., Any]


def registry(server: ServerThread) -> ClientRegistry:
    assert server.server is not None and server.server.clients is not None
    return server.server.clients


def create_fifo(admin: Admin, topic: str = "fifo-orders", group: str = "fifo-pushers") -> None:
    admin(lambda b: b.create_topic(topic, 4, message_type="fifo"))
    admin(lambda b: b.create_group_with_settings(group, settings=GroupSettings(fifo=True)))


async def heartbeat(
    s: MessagingServiceStub,
    client_id: str,
    group: str,
    client_type: pb.ClientType = pb.PUSH_CONSUMER,
) -> pb.Status:
    response = await s.Heartbeat(
        sv.HeartbeatRequest(client_type=client_type, group=resource(group)),
        metadata=meta(client_id),
    )
    status: pb.Status = response.status
    return status


async def assigned(
    s: MessagingServiceStub, client_id: str, topic: str = "fifo-orders", group: str = "fifo-pushers"
) -> list[int]:
    response = await s.QueryAssignment(
        sv.QueryAssignmentRequest(topic=resource(topic), group=resource(group)),
        metadata=meta(client_id),
    )
    assert response.status.code == Code.OK, response.status
    return [a.message_queue.id for a in response.assignments]


def queue_receive(
    queue_id: int, *, group: str = "fifo-pushers", wait_s: int = 5
) -> sv.ReceiveMessageRequest:
    request = receive_request(group, "fifo-orders", wait_s=wait_s, auto_renew=True)
    request.message_queue.id = queue_id
    return request


async def settings_stream(
    s: MessagingServiceStub,
    client_id: str,
    client_type: pb.ClientType,
    group: str,
    topics: list[str],
) -> Any:
    """A Telemetry stream that reported the client's subscriptions (kept open by the caller)."""
    call = s.Telemetry(metadata=meta(client_id))
    settings = pb.Settings(
        client_type=client_type,
        subscription=pb.Subscription(
            group=resource(group),
            subscriptions=[
                pb.SubscriptionEntry(
                    topic=resource(t), expression=pb.FilterExpression(type=pb.TAG, expression="*")
                )
                for t in topics
            ],
        ),
    )
    await call.write(sv.TelemetryCommand(settings=settings))
    reply = await call.read()
    assert reply.status.code == Code.OK, reply.status
    return call


def test_a_normal_group_keeps_the_queue_minus_one_assignment_and_registers_pop_members(
    server: ServerThread, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 4))

    async def scenario(s: MessagingServiceStub) -> None:
        call = await settings_stream(s, "pusher", pb.PUSH_CONSUMER, "billing", ["orders", "nope"])
        assert (await heartbeat(s, "pusher", "billing")).code == Code.OK
        (member,) = server.call(lambda: registry(server).clients("billing"))
        assert member.client_id == "pusher"
        assert member.registration.mode is ConsumeMode.POP
        assert member.registration.topics == ("orders",)  # "nope" does not exist
        assert member.heartbeat_interval_s == 10.0  # RocketMQ 5 clients' heartbeat
        assert await assigned(s, "pusher", "orders", "billing") == [-1]
        bye = await s.NotifyClientTermination(
            sv.NotifyClientTerminationRequest(group=resource("billing")), metadata=meta("pusher")
        )
        assert bye.status.code == Code.OK
        assert server.call(lambda: registry(server).clients("billing")) == []
        call.cancel()

    run(server, scenario)


def test_fifo_push_consumers_split_the_queues_one_owner_each(
    server: ServerThread, admin: Admin
) -> None:
    create_fifo(admin)

    async def scenario(s: MessagingServiceStub) -> None:
        for client in ("c1", "c2"):
            assert (await heartbeat(s, client, "fifo-pushers")).code == Code.OK
        assert await assigned(s, "c1") == [0, 1, 2, 3]  # c2 has not asked yet
        assert await assigned(s, "c2") == []  # its queues are still c1's
        assert await assigned(s, "c1") == [0, 1]  # c1 gives 2 and 3 up
        response = await s.QueryAssignment(
            sv.QueryAssignmentRequest(
                topic=resource("fifo-orders"), group=resource("fifo-pushers")
            ),
            metadata=meta("c2"),
        )
        queues = [a.message_queue for a in response.assignments]
        assert [q.id for q in queues] == [2, 3]
        for queue in queues:
            assert queue.topic.name == "fifo-orders"
            assert queue.permission == pb.READ_WRITE
            assert list(queue.accept_message_types) == [pb.FIFO]
            assert queue.broker.id == 0
        owners = server.sync(lambda: registry(server).owners("fifo-pushers", "fifo-orders"))
        assert owners == {0: "c1", 1: "c1", 2: "c2", 3: "c2"}
        for _ in range(2):  # each query renews what the client has
            assert await assigned(s, "c1") == [0, 1]
            assert await assigned(s, "c2") == [2, 3]

    run(server, scenario)


def test_a_fifo_receive_must_name_a_queue_the_client_holds(
    server: ServerThread, admin: Admin
) -> None:
    create_fifo(admin)

    async def scenario(s: MessagingServiceStub) -> None:
        for client in ("c1", "c2"):
            await heartbeat(s, client, "fifo-pushers")
        await assigned(s, "c1")
        await assigned(s, "c2")
        await assigned(s, "c1")
        assert await assigned(s, "c2") == [2, 3]
        refused = await receive(s, queue_receive(0), client_id="c2")
        assert refused[0].status.code == Code.FORBIDDEN
        assert "does not hold queue 0" in refused[0].status.message
        assert "(client 'c1' does)" in refused[0].status.message
        whole = await receive(s, queue_receive(-1), client_id="c2")
        assert whole[0].status.code == Code.FORBIDDEN
        assert "FIFO group" in whole[0].status.message
        outside = await receive(s, queue_receive(4), client_id="c2")
        assert outside[0].status.code == Code.BAD_REQUEST
        sent = [
            message("fifo-orders", f"m{i}".encode(), message_id=f"f{i}", group=f"g{i}")
            for i in range(8)
        ]
        await send(s, *sent)
        _, stats = server.call(lambda: server.broker.get_topic("fifo-orders"))
        stored = [q.max_offset for q in stats]
        assert stored[2] + stored[3] > 0 and stored[0] + stored[1] > 0  # for c2 and for c1
        taken: list[bytes] = []
        for queue in (2, 3):
            if not stored[queue]:
                continue
            held = messages_of(await receive(s, queue_receive(queue), client_id="c2"))
            # Only the queue it names: one message per FIFO group, all there at once.
            assert [m.system_properties.queue_id for m in held] == [queue] * stored[queue]
            taken += [m.body for m in held]
        # Simple consumers name route queues round-robin and pop every queue, as before.
        await send(s, message("fifo-orders", b"s", message_id="f-s", group="gs"))
        request = receive_request("fifo-pushers", "fifo-orders")
        request.message_queue.id = 0
        simple = messages_of(await receive(s, request, client_id="simple"))
        rest = {m.body for m in sent} - set(taken) | {b"s"}
        assert sorted(m.body for m in simple) == sorted(rest)
        assert {m.system_properties.queue_id for m in simple} != {0}

    run(server, scenario)


def test_a_queue_given_up_ends_the_old_owners_waiting_receive(
    server: ServerThread, admin: Admin
) -> None:
    create_fifo(admin)

    async def scenario(s: MessagingServiceStub) -> None:
        await heartbeat(s, "c1", "fifo-pushers")
        assert await assigned(s, "c1") == [0, 1, 2, 3]
        waiting = asyncio.ensure_future(receive(s, queue_receive(3, wait_s=20), client_id="c1"))
        await until(lambda: server.held_pops() >= 1, "the receive held", 10, interval_s=0.01)
        await heartbeat(s, "c2", "fifo-pushers")
        assert await assigned(s, "c2") == []
        started = time.monotonic()
        assert await assigned(s, "c1") == [0, 1]
        frames = await asyncio.wait_for(waiting, 10)
        assert frames[0].status.code == Code.MESSAGE_NOT_FOUND
        assert time.monotonic() - started < 5  # not after its 20 s wait
        again = await receive(s, queue_receive(3), client_id="c1")
        assert again[0].status.code == Code.FORBIDDEN
        assert await assigned(s, "c2") == [2, 3]

    run(server, scenario)


class ClaimHistory:
    """The owners of a group's queues, sampled on a thread every 20 ms with the wall clock
    (the official clients stamp what they consume with it)."""

    def __init__(self, server: ServerThread, group: str, topic: str) -> None:
        self._read = lambda: dict(registry(server).owners(group, topic))
        self._server = server
        self._samples: list[tuple[int, dict[int, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claim-history", daemon=True)

    def __enter__(self) -> ClaimHistory:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self) -> None:
        owners = self._server.sync(self._read)
        self._samples.append((int(time.time() * 1000), owners))

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    def holders(self, queue_id: int, at_ms: int, window_ms: int = 10_000) -> set[str]:
        """Who held the queue in the samples of the `window_ms` before `at_ms`: a message
        is received a moment before the listener stamps it, and a claim moves at queries."""
        return {
            owner
            for stamp, owners in self._samples
            if at_ms - window_ms <= stamp <= at_ms and (owner := owners.get(queue_id)) is not None
        }


def test_a_terminated_client_hands_its_queues_over_at_once(
    server: ServerThread, admin: Admin
) -> None:
    create_fifo(admin)

    async def scenario(s: MessagingServiceStub) -> None:
        # c1 learns its topics from its settings; c2 from the topic it queries.
        call = await settings_stream(s, "c1", pb.PUSH_CONSUMER, "fifo-pushers", ["fifo-orders"])
        await heartbeat(s, "c1", "fifo-pushers")
        await heartbeat(s, "c2", "fifo-pushers")  # no topics known yet: not a member
        assert await assigned(s, "c1") == [0, 1, 2, 3]
        assert await assigned(s, "c2") == []
        assert await assigned(s, "c1") == [0, 1]
        assert await assigned(s, "c2") == [2, 3]
        members = server.call(lambda: registry(server).clients("fifo-pushers"))
        assert [(m.client_id, m.registration.mode) for m in members] == [
            ("c1", ConsumeMode.QUEUE_EXCLUSIVE),
            ("c2", ConsumeMode.QUEUE_EXCLUSIVE),
        ]
        bye = await s.NotifyClientTermination(
            sv.NotifyClientTerminationRequest(group=resource("fifo-pushers")),
            metadata=meta("c1"),
        )
        assert bye.status.code == Code.OK
        assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF  # its session ended
        assert await assigned(s, "c2") == [0, 1, 2, 3]
        members = server.call(lambda: registry(server).clients("fifo-pushers"))
        assert [m.client_id for m in members] == ["c2"]

    run(server, scenario)


def test_a_simple_consumer_joining_a_group_of_fifo_push_consumers_is_told_why_not(
    server: ServerThread, admin: Admin
) -> None:
    create_fifo(admin)

    async def scenario(s: MessagingServiceStub) -> None:
        await heartbeat(s, "pusher", "fifo-pushers")
        await assigned(s, "pusher")
        call = await settings_stream(
            s, "simple", pb.SIMPLE_CONSUMER, "fifo-pushers", ["fifo-orders"]
        )
        status = await heartbeat(s, "simple", "fifo-pushers", pb.SIMPLE_CONSUMER)
        assert status.code == Code.PRECONDITION_FAILED
        assert "QUEUE_EXCLUSIVE mode (client 'pusher')" in status.message
        call.cancel()

    run(server, scenario)


# -- the official PushConsumer ------------------------------------------------------------


@pytest.mark.slow
def test_two_official_fifo_push_consumers_split_the_queues_and_consume_each_message_once(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    create_fifo(admin, "fifo-split", "splitters")
    groups = [f"order-{g}" for g in range(8)]
    bodies = [f"{g}:{i}" for i in range(6) for g in groups]
    scenario = {"group": "splitters", "topic": "fifo-split", "want_bodies": bodies}
    # Each consumer sees only its share, so both run to their deadline.
    procs = [official.start("push", deadline_s=30, **scenario) for _ in range(2)]

    def split() -> bool:
        owners = server.sync(lambda: registry(server).owners("splitters", "fifo-split"))
        return sorted(owners) == [0, 1, 2, 3] and len(set(owners.values())) == 2

    # Clients query every 5 s: the second one's share moves at the first one's next query.
    wait_until(split, "two official consumers holding two queues each", 25)
    owners = server.sync(lambda: registry(server).owners("splitters", "fifo-split"))
    assert sorted(list(owners.values()).count(c) for c in set(owners.values())) == [2, 2]
    # The official client's id is host@pid@index@time: which process is which member.
    client_of = {c.split("@")[1]: c for c in owners.values()}
    assert sorted(client_of) == sorted(str(p.pid) for p in procs)
    queue_of: dict[str, int] = {}
    with ClaimHistory(server, "splitters", "fifo-split") as claims:
        with Producer(server.endpoint) as producer:
            for body in bodies:
                receipt = producer.send(
                    "fifo-split", body.encode(), message_group=body.split(":")[0]
                )
                queue_of[body] = receipt.queue_id
        results = [official.result(p, timeout=60) for p in procs]
    assert all(r["fifo"] is True for r in results)
    logs = [r["log"] for r in results]
    consumed = sorted(e["body"] for log in logs for e in log)
    assert consumed == sorted(bodies)  # every message once, none twice
    # Each message came from a queue its consumer held when it received it.
    for proc, log in zip(procs, logs, strict=True):
        client = client_of[str(proc.pid)]
        for entry in log:
            queue = queue_of[entry["body"]]
            holders = claims.holders(queue, entry["received_ms"])
            assert client in holders, (entry["body"], queue, client, holders)
    assert {e["delivery_attempt"] for log in logs for e in log} == {1}
    # Per message group, listener calls (across both processes) follow the send order.
    merged = sorted((e for log in logs for e in log), key=lambda e: (e["received_ms"], e["body"]))
    order: dict[str, list[int]] = {}
    for entry in merged:
        group, index = entry["body"].split(":")
        assert entry["message_group"] == group
        order.setdefault(group, []).append(int(index))
    assert order == {g: list(range(6)) for g in groups}
    # Both said goodbye: the group has no members and no claims left.
    assert server.call(lambda: registry(server).clients("splitters")) == []
    assert server.sync(lambda: registry(server).owners("splitters", "fifo-split")) == {}
