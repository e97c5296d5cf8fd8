"""The BrokerService servicer: one broker core (`Broker`) served over gRPC to proxies.

Each RPC calls the BrokerAPI operation of the same name and converts its answer
(wire.py). A PopMQError ends the call with its status code and an ErrorDetail in the
`popmq-error-bin` trailer; anything else is a bug, answered INTERNAL (an InternalError
detail naming this broker) and logged here, once.

ApplyGroup (cluster-internal, not in BrokerAPI) needs a broker with `apply_group`
(`GroupApplier`); it is a write, so fenced like the others. So does a CreateTopic that
carries its route's create time (`TopicApplier`: a proxy's push of a route).

Fencing (fencing.py): every RPC that changes the store (sends, pops, acks, admin writes...)
asks the servicer's `writes` fence first, which refuses it while the broker's etcd
registration is lost (a retriable UNAVAILABLE) or while a replica follows its leader
(NOT_LEADER); reads keep working (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import grpc

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq._gen.popmq.broker.v1 import broker_pb2_grpc
from popmq.broker import hop_wire, send_wire
from popmq.broker import wire as w
from popmq.broker.fencing import WriteFence
from popmq.broker.hop_serve import serve_stream
from popmq.broker_core import MAX_SEND_MESSAGES, check_count
from popmq.broker_core.api import BrokerAPI
from popmq.broker_core.catalog import GroupInfo, TopicInfo
from popmq.broker_core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    PopMQError,
)
from popmq.broker_core.group_rules import GroupState
from popmq.broker_core.send import SendTicket
from popmq.broker_core.types import NewMessage, PoppedMessage
from popmq.grpc_calls import reserialized

log = logging.getLogger(__name__)

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Handler = Callable[[Any, _Req, grpc.aio.ServicerContext], Awaitable[_Resp]]


def _rpc(
    *, writes: bool, admits: bool = False
) -> Callable[[_Handler[_Req, _Resp]], _Handler[_Req, _Resp]]:
    """Run a handler: refuse it while fenced when it `writes` (unless it `admits` the call
    itself, from what the request asks), and put broker errors on the wire with their
    class and fields."""

    def decorate(handler: _Handler[_Req, _Resp]) -> _Handler[_Req, _Resp]:
        @functools.wraps(handler)
        async def wrapper(
            self: BrokerServicer, request: _Req, context: grpc.aio.ServicerContext
        ) -> _Resp:
            try:
                if not admits:
                    await self._admit(writes=writes)
                return await handler(self, request, context)
            except PopMQError as exc:
                await _abort(context, exc)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                log.exception("BrokerService.%s failed unexpectedly", handler.__name__)
                await _abort(
                    context,
                    InternalError(f"broker {self.name!r} failed in {handler.__name__}: {exc!r}"),
                )
            raise AssertionError("abort returned")  # pragma: no cover

        return wrapper

    return decorate


def _hop_error(error: PopMQError) -> tuple[int, bytes]:
    return hop_wire.HOP_ERROR, w.error_detail(error).SerializeToString()


async def _abort(context: grpc.aio.ServicerContext, error: PopMQError) -> None:
    detail = w.error_detail(error).SerializeToString()
    await context.abort(
        grpc.StatusCode[error.code], str(error), trailing_metadata=((w.ERROR_TRAILER, detail),)
    )


def _hop_request(request_id: int, payload: bytes) -> send_wire.SendRequestRead:
    """The SendRequest or SendHalfRequest of HopSendRequest `request_id`."""
    try:
        return send_wire.send_request_from_wire(payload)
    except ValueError as exc:
        raise InvalidArgumentError(f"HopSendRequest {request_id} does not parse: {exc}") from None


def _retrieved(task: asyncio.Task[tuple[int, bytes]]) -> None:
    if not task.cancelled():
        task.exception()


@runtime_checkable
class GroupApplier(Protocol):
    """A broker that takes cluster mode's group records (`Broker`, `RemoteBroker`): not part
    of BrokerAPI, which is what a proxy needs of any broker."""

    async def apply_group(
        self, name: str, state: GroupState, *, create_time_ms: int, revision: int
    ) -> GroupInfo: ...

    async def delete_group_record(self, name: str, *, revision: int) -> None:
        """Delete a group (forced); records at or below `revision` are ignored from then on."""


@runtime_checkable
class TopicApplier(Protocol):
    """A broker that keeps each topic the local part of one incarnation of its cluster route
    (`Broker`): not part of BrokerAPI."""

    async def apply_topic(
        self, name: str, *, queues: int, message_type: str, route_create_time_ms: int
    ) -> TopicInfo | None: ...


@runtime_checkable
class SendLookup(Protocol):
    """A broker that says which sent messages are in its dedup window (`Broker`): asked by
    a cluster proxy before it routes a repeat it does not remember; not part of BrokerAPI."""

    def lookup_sends(
        self, topic: str, sent: Sequence[tuple[str, str]], *, stored_only: bool = False
    ) -> list[bool]: ...


@runtime_checkable
class FrameSender(Protocol):
    """A broker that hands a send to group commit without waiting for it (`Broker`): the
    sends of a HopSend frame are then served by one task (`_hop_send_frame`); not part of
    BrokerAPI."""

    def send_now(self, messages: Sequence[NewMessage]) -> SendTicket | None: ...


_Begun = tuple[int, SendTicket | asyncio.Task[tuple[int, bytes]] | tuple[int, bytes]] | None
"""A request of a HopSend frame once begun (`_hop_send_begin`): its id and its send's ticket,
its task, or its answer (field, bytes) already; None for one whose id cannot be read."""


class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):
    """popmq.broker.v1.BrokerService over a started broker (in-process `Broker`)."""

    def __init__(self, broker: BrokerAPI) -> None:
        self._broker = broker
        self.answers_received_form = True
        """Answer a pop that sets PopRequest.received_form in that form. A broker of an
        earlier release does not know the field and answers `messages`: with False this
        one answers as it does (a proxy works with both, as in a rolling upgrade)."""
        self.name = broker.server_info().broker_name
        self.writes = WriteFence(self.name)
        """Whether calls that change the store may go ahead (fencing.py)."""
        self.reads_from: Callable[[], Awaitable[BrokerAPI]] | None = None
        """While following: what serves the calls that only read (a read-only view of the
        follower's copy, replication/replica.py); None refuses them too."""
        self._streams_ending = asyncio.Event()

    def end_streams(self) -> None:
        """The server is stopping: HopStream and HopSend calls read no more requests, answer
        the ones they read and end, so that a stop does not wait its whole grace for streams
        that never end by themselves. A proxy fails what it wrote after that as unanswered
        and asks again on a new stream (here refused, so elsewhere: cluster/hop_stream.py)."""
        self._streams_ending.set()

    def serve(self, broker: BrokerAPI) -> None:
        """Serve another broker core (a replica that became its shard's leader)."""
        self._broker = broker

    async def _admit(self, *, writes: bool) -> None:
        """Refuse a call while fenced when it `writes`; while following, serve one that
        only reads from the follower's copy (or refuse it when there is none)."""
        if writes:
            self.writes.check()
        elif self.writes.following is not None:
            if self.reads_from is None:
                self.writes.check()
            else:
                self._broker = await self.reads_from()

    # -- lifecycle, info -----------------------------------------------------------------

    @_rpc(writes=False)
    async def WaitFailure(
        self, request: pb.WaitFailureRequest, context: Any
    ) -> pb.WaitFailureResponse:
        return pb.WaitFailureResponse(reason=await self._broker.wait_failure())

    @_rpc(writes=False)
    async def GetServerInfo(
        self, request: pb.GetServerInfoRequest, context: Any
    ) -> pb.GetServerInfoResponse:
        return w.server_info_to_pb(self._broker.server_info())

    @_rpc(writes=False)
    async def GetMetricsSnapshot(
        self, request: pb.GetMetricsSnapshotRequest, context: Any
    ) -> pb.GetMetricsSnapshotResponse:
        return w.metrics_to_pb(await self._broker.metrics_snapshot())

    # -- topics --------------------------------------------------------------------------

    @_rpc(writes=True)
    async def CreateTopic(
        self, request: pb.CreateTopicRequest, context: Any
    ) -> pb.CreateTopicResponse:
        queues = request.queues if request.HasField("queues") else None
        message_type = request.message_type or "normal"
        if request.route_create_time_ms and queues is not None:
            info = await self._create_routed_topic(
                request.name, queues, message_type, request.route_create_time_ms
            )
        else:
            info = await self._broker.create_topic(request.name, queues, message_type=message_type)
        return pb.CreateTopicResponse(topic=w.topic_to_pb(info))

    async def _create_routed_topic(
        self, name: str, queues: int, message_type: str, route_create_time_ms: int
    ) -> TopicInfo:
        """A proxy's push of a route: as create_topic (ALREADY_EXISTS when the route's topic
        is here), but a local topic of another incarnation is deleted first rather than
        taken for the route's, and the topic is created with the route's create time."""
        broker = self._broker
        if not isinstance(broker, TopicApplier):
            raise FailedPreconditionError(
                f"broker {self.name!r} serves a {type(broker).__name__}, which cannot apply "
                "cluster routes"
            )
        if queues < 1:
            raise InvalidArgumentError(
                f"queues {queues} is below the minimum 1", field="queues", value=queues
            )
        held = await broker.apply_topic(
            name, queues=0, message_type=message_type, route_create_time_ms=route_create_time_ms
        )
        if held is not None:
            raise AlreadyExistsError(f"topic {name!r} already exists")
        info = await broker.apply_topic(
            name,
            queues=queues,
            message_type=message_type,
            route_create_time_ms=route_create_time_ms,
        )
        assert info is not None  # with queues >= 1 the topic is created (or was, meanwhile)
        return info

    @_rpc(writes=False)
    async def GetTopic(self, request: pb.GetTopicRequest, context: Any) -> pb.GetTopicResponse:
        info, stats = await self._broker.get_topic(request.name)
        return pb.GetTopicResponse(
            topic=w.topic_to_pb(info), queues=[w.queue_stats_to_pb(s) for s in stats]
        )

    @_rpc(writes=False)
    async def ListTopics(
        self, request: pb.ListTopicsRequest, context: Any
    ) -> pb.ListTopicsResponse:
        topics = await self._broker.list_topics()
        return pb.ListTopicsResponse(topics=[w.topic_to_pb(t) for t in topics])

    @_rpc(writes=True)
    async def DeleteTopic(
        self, request: pb.DeleteTopicRequest, context: Any
    ) -> pb.DeleteTopicResponse:
        if request.guarded:
            await self._broker.delete_topic_guarded(request.name, force=request.force)
        else:
            await self._broker.delete_topic(request.name)
        return pb.DeleteTopicResponse()

    @_rpc(writes=True)
    async def UpdateTopic(
        self, request: pb.UpdateTopicRequest, context: Any
    ) -> pb.UpdateTopicResponse:
        info = await self._broker.update_topic(request.name, request.queues)
        return pb.UpdateTopicResponse(topic=w.topic_to_pb(info))

    @_rpc(writes=False)
    async def DescribeTopic(
        self, request: pb.DescribeTopicRequest, context: Any
    ) -> pb.DescribeTopicResponse:
        info, queues, groups = await self._broker.describe_topic(request.name)
        return pb.DescribeTopicResponse(
            topic=w.topic_to_pb(info),
            queues=[w.queue_details_to_pb(q) for q in queues],
            groups=groups,
        )

    # -- groups --------------------------------------------------------------------------

    def _group(self, name: str) -> pb.Group:
        return w.group_to_pb(self._broker.get_group(name), self._broker.group_settings(name))

    @_rpc(writes=True)
    async def CreateGroup(
        self, request: pb.CreateGroupRequest, context: Any
    ) -> pb.CreateGroupResponse:
        attempts = (
            request.max_delivery_attempts if request.HasField("max_delivery_attempts") else None
        )
        backoff = tuple(request.retry_backoff_s) if request.has_retry_backoff else None
        if request.HasField("settings"):
            info = await self._broker.create_group_with_settings(
                request.name,
                max_delivery_attempts=attempts,
                retry_backoff_s=backoff,
                settings=w.settings_from_pb(request.settings),
            )
        else:
            info = await self._broker.create_group(
                request.name, max_delivery_attempts=attempts, retry_backoff_s=backoff
            )
        return pb.CreateGroupResponse(group=self._group(info.name))

    @_rpc(writes=False)
    async def GetGroup(self, request: pb.GetGroupRequest, context: Any) -> pb.GetGroupResponse:
        return pb.GetGroupResponse(group=self._group(request.name))

    @_rpc(writes=False)
    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: Any
    ) -> pb.ListGroupsResponse:
        groups = await self._broker.list_groups()
        return pb.ListGroupsResponse(
            groups=[w.group_to_pb(g, self._broker.group_settings(g.name)) for g in groups]
        )

    @_rpc(writes=True)
    async def UpdateGroup(
        self, request: pb.UpdateGroupRequest, context: Any
    ) -> pb.UpdateGroupResponse:
        r = request
        info = await self._broker.update_group(
            r.name,
            max_delivery_attempts=r.max_delivery_attempts
            if r.HasField("max_delivery_attempts")
            else None,
            retry_backoff_s=tuple(r.retry_backoff_s) if r.has_retry_backoff else None,
            exponential_backoff=w.backoff_from_pb(r.exponential_backoff)
            if r.HasField("exponential_backoff")
            else None,
            fifo=r.fifo if r.HasField("fifo") else None,
            set_subscriptions=[w.subscription_from_pb(s) for s in r.set_subscriptions],
            remove_subscriptions=list(r.remove_subscriptions),
            consume_from=r.consume_from if r.HasField("consume_from") else None,
            consume_from_ms=r.consume_from_ms,
        )
        return pb.UpdateGroupResponse(group=self._group(info.name))

    @_rpc(writes=True)
    async def DeleteGroup(
        self, request: pb.DeleteGroupRequest, context: Any
    ) -> pb.DeleteGroupResponse:
        if request.revision:
            if not isinstance(self._broker, GroupApplier):
                raise FailedPreconditionError(
                    f"broker {self.name!r} serves a {type(self._broker).__name__}, which "
                    "cannot take a group deletion's cluster revision"
                )
            await self._broker.delete_group_record(request.name, revision=request.revision)
        else:
            await self._broker.delete_group(request.name, force=request.force)
        return pb.DeleteGroupResponse()

    @_rpc(writes=True)
    async def ApplyGroup(
        self, request: pb.ApplyGroupRequest, context: Any
    ) -> pb.ApplyGroupResponse:
        if not isinstance(self._broker, GroupApplier):
            raise FailedPreconditionError(
                f"broker {self.name!r} serves a {type(self._broker).__name__}, which cannot "
                "apply cluster group records"
            )
        info = await self._broker.apply_group(
            request.name,
            w.group_state_from_pb(request),
            create_time_ms=request.create_time_ms,
            revision=request.revision,
        )
        return pb.ApplyGroupResponse(group=self._group(info.name))

    # -- send, queries -------------------------------------------------------------------

    @_rpc(writes=True)
    async def Send(self, request: pb.SendRequest, context: Any) -> pb.SendResponse:
        results = await self._broker.send([w.new_message_from_pb(m) for m in request.messages])
        return pb.SendResponse(results=[w.send_result_to_pb(r) for r in results])

    # A read, but answered as a write is, by the shard's leader only: a follower's copy may
    # lack a send its leader is storing now, and "not held" must never be said by mistake.
    @_rpc(writes=True, admits=True)  # admitted by the fence's check_lookup, below
    async def LookupSends(
        self, request: pb.LookupSendsRequest, context: Any
    ) -> pb.LookupSendsResponse:
        broker = self._broker
        if not isinstance(broker, SendLookup):
            raise FailedPreconditionError(
                f"broker {self.name!r} ({type(broker).__name__}) cannot look up sends"
            )
        ids, dedup_ids = request.message_ids, request.dedup_ids
        # A lookup names one send's messages: as many as a send may carry.
        check_count("message_ids", len(ids), MAX_SEND_MESSAGES, "ids")
        if dedup_ids and len(dedup_ids) != len(ids):
            raise InvalidArgumentError(
                f"LookupSends has {len(ids)} message_ids and {len(dedup_ids)} dedup_ids: "
                'give one dedup id per message ("" for none), or none at all'
            )
        sent = list(zip(ids, dedup_ids or [""] * len(ids), strict=True))
        self.writes.check_lookup(request.topic, sent)
        held = broker.lookup_sends(request.topic, sent, stored_only=request.stored_only)
        return pb.LookupSendsResponse(held=held)

    @_rpc(writes=True)
    async def SendHalf(self, request: pb.SendHalfRequest, context: Any) -> pb.SendHalfResponse:
        results = await self._broker.send_half(
            [w.new_message_from_pb(m) for m in request.messages],
            producer_group=request.producer_group,
            check_first_s=request.check_first_s if request.HasField("check_first_s") else None,
        )
        return pb.SendHalfResponse(results=[w.send_result_to_pb(r) for r in results])

    @_rpc(writes=True)
    async def EndTransaction(
        self, request: pb.EndTransactionRequest, context: Any
    ) -> pb.EndTransactionResponse:
        info = await self._broker.end_transaction(
            request.transaction_id,
            commit=request.commit,
            source=request.source,
            topic=request.topic,
            message_id=request.message_id,
        )
        return pb.EndTransactionResponse(transaction=w.transaction_to_pb(info))

    @_rpc(writes=True)  # claiming a check advances its schedule in the store
    async def DueChecks(self, request: pb.DueChecksRequest, context: Any) -> pb.DueChecksResponse:
        checks = await self._broker.due_checks(
            request.max_checks,
            wait_s=request.wait_s,
            topics=list(request.topics) if request.only_topics else None,
        )
        return pb.DueChecksResponse(checks=[w.check_to_pb(c) for c in checks])

    @_rpc(writes=False)
    async def GetTransaction(
        self, request: pb.GetTransactionRequest, context: Any
    ) -> pb.GetTransactionResponse:
        info = await self._broker.get_transaction(request.transaction_id, half=request.half)
        return pb.GetTransactionResponse(transaction=w.transaction_to_pb(info))

    @_rpc(writes=False)
    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: Any
    ) -> pb.ListTransactionsResponse:
        found = await self._broker.list_transactions(
            request.state,
            topic=request.topic if request.HasField("topic") else None,
            limit=request.limit,
        )
        return pb.ListTransactionsResponse(transactions=[w.transaction_to_pb(t) for t in found])

    @_rpc(writes=True)
    async def ResumeTransaction(
        self, request: pb.ResumeTransactionRequest, context: Any
    ) -> pb.ResumeTransactionResponse:
        info = await self._broker.resume_discarded(request.transaction_id)
        return pb.ResumeTransactionResponse(transaction=w.transaction_to_pb(info))

    @_rpc(writes=True)
    async def Recall(self, request: pb.RecallRequest, context: Any) -> pb.RecallResponse:
        message_id = await self._broker.recall(request.topic, request.recall_handle)
        return pb.RecallResponse(message_id=message_id)

    @_rpc(writes=False)
    async def QueryMessage(
        self, request: pb.QueryMessageRequest, context: Any
    ) -> pb.QueryMessageResponse:
        found = await self._broker.query_message(request.topic, request.message_id)
        return pb.QueryMessageResponse(message=w.peeked_to_pb(found))

    @_rpc(writes=False)
    async def QueryMessagesByKey(
        self, request: pb.QueryMessagesByKeyRequest, context: Any
    ) -> pb.QueryMessagesByKeyResponse:
        found = await self._broker.query_messages_by_key(request.topic, request.key, request.limit)
        return pb.QueryMessagesByKeyResponse(messages=[w.peeked_to_pb(p) for p in found])

    # -- pop and its handles -------------------------------------------------------------

    @_rpc(writes=True)
    async def Pop(self, request: pb.PopRequest, context: Any) -> bytes:
        """Answers a PopResponse's bytes (hop_wire.py; ENCODED_ANSWERS)."""
        return await self._pop(request)

    async def _pop(self, r: pb.PopRequest) -> bytes:
        """A pop's PopResponse, encoded: in the received form when the request asks for it
        (each delivery as the proxy's client gets it), else with `messages`."""
        popped = await self._popped(r)
        if self.answers_received_form and r.HasField("received_form"):
            return hop_wire.received_response_wire(popped, r.received_form.queue_ids)
        return hop_wire.pop_response_wire(popped)

    async def _popped(self, r: pb.PopRequest) -> list[PoppedMessage]:
        return await self._broker.pop(
            r.group,
            r.topic,
            max_messages=r.max_messages if r.HasField("max_messages") else None,
            invisible_s=r.invisible_s if r.HasField("invisible_s") else None,
            wait_s=r.wait_s if r.HasField("wait_s") else None,
            filter_expression=r.filter_expression,
            filter_type=r.filter_type or "tag",
            queue_id=r.queue_id if r.HasField("queue_id") else None,
            max_bytes=r.max_bytes if r.HasField("max_bytes") else None,
            client_id=r.client_id,
        )

    @_rpc(writes=True)
    async def Ack(self, request: pb.AckRequest, context: Any) -> bytes:
        """Answers an AckResponse's bytes (hop_wire.py; ENCODED_ANSWERS)."""
        outcomes = await self._broker.ack(request.group, list(request.handles))
        return hop_wire.ack_response_wire(outcomes)

    async def HopStream(
        self, requests: AsyncIterator[pb.HopStreamRequest], context: grpc.aio.ServicerContext
    ) -> None:
        """Pops and acks on one stream (cluster/hop_stream.py): each request runs as its own task,
        as its unary call would, and its answer (HopStreamResponse bytes) is written when ready.
        Its headers go first and say that frames of requests are answered (hop_frames.py)."""
        await context.send_initial_metadata(((send_wire.FRAMES_HEADER, "1"),))
        await serve_stream(requests, context, self._hop_stream_frame, self._streams_ending)

    async def _hop_stream_frame(self, request: pb.HopStreamRequest) -> bytes | None:
        """The answer to a HopStreamRequest: to a frame, a frame of its requests' answers once
        they are all ready (each served on its own, as if it had come alone); to a request of
        its own, its answer."""
        if not request.frame:
            return hop_wire.hop_answer(request.id, *await self._hop_answer(request))
        answers = await asyncio.gather(*map(self._hop_answer, request.frame))
        return send_wire.frame_wire(
            send_wire.ANSWER_FRAME_KEY,
            [hop_wire.hop_answer(r.id, *a) for r, a in zip(request.frame, answers, strict=True)],
        )

    async def HopSend(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> None:
        """Sends and half sends on one stream, served as HopStream serves pops and acks; each
        request arrives as its HopSendRequest bytes, its messages read by send_wire.py. Its
        headers go first: the proxy writes nothing before them (cluster/hop_stream.py), and
        they say that frames of requests are answered (send_wire.py)."""
        await context.send_initial_metadata(((send_wire.FRAMES_HEADER, "1"),))
        await serve_stream(requests, context, self._hop_send_frame, self._streams_ending)

    async def _hop_send_frame(self, data: bytes) -> bytes | None:
        """The answer to a HopSendRequest: to a frame, a frame of its requests' answers once
        they are all ready; to a request of its own, its answer.

        Each request of a frame is stored, or refused, on its own, as if it had come alone,
        but without a task and a wait of its own: its send is handed to group commit
        (`FrameSender.send_now`) as the frame is read, in the frame's order, and this task
        then waits for each in turn (they are written together, as concurrent sends are).
        A half send, or a send whose topic must be created first, runs as its own task."""
        try:
            parts = send_wire.frame_from_wire(send_wire.REQUEST_FRAME_KEY, data)
        except ValueError:
            log.exception("a proxy sent a malformed HopSendRequest frame")
            return None
        if parts is None:
            return await self._hop_send_answer(data)
        broker = self._broker
        if not isinstance(broker, FrameSender):
            answers = await asyncio.gather(*map(self._hop_send_answer, parts))
            return send_wire.frame_wire(
                send_wire.ANSWER_FRAME_KEY, [a for a in answers if a is not None]
            )
        begun = [self._hop_send_begin(broker, part) for part in parts]
        ended: list[bytes] = []
        waited = 0
        try:
            for started in begun:
                answer = await self._hop_send_end(started)
                waited += 1
                if answer is not None:
                    ended.append(answer)
        finally:
            # Cancelled (the stream ended): the answers not read yet are given up. Their
            # writes and dedup claims go on (a retry finds the claim or the stored copy).
            for started in begun[waited:]:
                if started is not None and isinstance(started[1], asyncio.Task):
                    started[1].cancel()
        return send_wire.frame_wire(send_wire.ANSWER_FRAME_KEY, ended)

    def _hop_send_begin(self, broker: FrameSender, data: bytes) -> _Begun:
        """Begin the HopSendRequest `data` of a frame: a send handed to group commit, a
        half send (or a send that must wait for its topic) on a task of its own, or a
        refusal's answer."""
        try:
            request_id, field, payload = hop_wire.hop_answer_from_wire(data)
        except ValueError:
            log.exception("a proxy sent a malformed HopSendRequest")
            return None
        try:
            self.writes.check()  # _admit(writes=True), which does nothing else
            request = _hop_request(request_id, payload)
            ticket = broker.send_now(request.messages) if field == hop_wire.HOP_SEND else None
        except PopMQError as exc:
            return request_id, _hop_error(exc)
        except Exception as exc:
            log.exception("BrokerService.HopSend failed unexpectedly")
            return request_id, _hop_error(
                InternalError(f"broker {self.name!r} failed in HopSend: {exc!r}")
            )
        if ticket is not None:
            return request_id, ticket
        task = asyncio.ensure_future(self._hop_store(request_id, field, request))
        # Retrieved even when the frame is given up before its answer is read.
        task.add_done_callback(_retrieved)
        return request_id, task

    async def _hop_send_end(self, begun: _Begun) -> bytes | None:
        """The HopSendResponse bytes answering a begun request, once its outcome is known;
        None for one that names no request."""
        if begun is None:
            return None
        request_id, waiting = begun
        if isinstance(waiting, tuple):
            return hop_wire.hop_answer(request_id, *waiting)
        try:
            if isinstance(waiting, SendTicket):
                answer = hop_wire.HOP_SEND, send_wire.send_response_wire(await waiting.results())
            else:
                answer = await waiting
        except PopMQError as exc:
            answer = _hop_error(exc)
        except Exception as exc:
            log.exception("BrokerService.HopSend failed unexpectedly")
            answer = _hop_error(InternalError(f"broker {self.name!r} failed in HopSend: {exc!r}"))
        return hop_wire.hop_answer(request_id, *answer)

    async def _hop_send_answer(self, data: bytes) -> bytes | None:
        """The HopSendResponse bytes answering the HopSendRequest `data`; None for bytes that
        name no request (nothing to answer: the proxy's wait for it times out)."""
        try:
            request_id, field, payload = hop_wire.hop_answer_from_wire(data)
        except ValueError:
            log.exception("a proxy sent a malformed HopSendRequest")
            return None
        try:
            answer = await self._hop_sent(request_id, field, payload)
        except PopMQError as exc:
            answer = _hop_error(exc)
        except Exception as exc:
            log.exception("BrokerService.HopSend failed unexpectedly")
            answer = _hop_error(InternalError(f"broker {self.name!r} failed in HopSend: {exc!r}"))
        return hop_wire.hop_answer(request_id, *answer)

    async def _hop_sent(self, request_id: int, field: int, payload: bytes) -> tuple[int, bytes]:
        """Store the (half) send `payload` (HopSendRequest `field`): (the answer's field, the
        results' bytes), as the unary Send or SendHalf stores and answers it."""
        await self._admit(writes=True)
        return await self._hop_store(request_id, field, _hop_request(request_id, payload))

    async def _hop_store(
        self, request_id: int, field: int, request: send_wire.SendRequestRead
    ) -> tuple[int, bytes]:
        """`_hop_sent` for a request read and admitted already."""
        if field == hop_wire.HOP_SEND:
            results = await self._broker.send(request.messages)
        elif field == hop_wire.HOP_SEND_HALF:
            results = await self._broker.send_half(
                request.messages,
                producer_group=request.producer_group,
                check_first_s=request.check_first_s,
            )
        else:
            raise InvalidArgumentError(
                f"HopSendRequest {request_id} carries neither send (field {hop_wire.HOP_SEND}) "
                f"nor send_half (field {hop_wire.HOP_SEND_HALF}): it must carry one of them"
            )
        return field, send_wire.send_response_wire(results)

    async def _hop_answer(self, request: pb.HopStreamRequest) -> tuple[int, bytes]:
        """The answer to one HopStream request: (HopStreamResponse field, its bytes)."""
        try:
            await self._admit(writes=True)
            kind = request.WhichOneof("request")
            if kind == "pop":
                return hop_wire.HOP_POP, await self._pop(request.pop)
            if kind != "ack":
                return _hop_error(InvalidArgumentError(f"HopStreamRequest {request.id} is empty"))
            ack = request.ack
            outcomes = await self._broker.ack(ack.group, list(ack.handles))
            return hop_wire.HOP_ACK, hop_wire.ack_response_wire(outcomes)
        except PopMQError as exc:
            return _hop_error(exc)
        except Exception as exc:
            log.exception("BrokerService.HopStream failed unexpectedly")
            return _hop_error(InternalError(f"broker {self.name!r} failed in HopStream: {exc!r}"))

    @_rpc(writes=False)
    async def GetDeliveries(
        self, request: pb.GetDeliveriesRequest, context: Any
    ) -> pb.GetDeliveriesResponse:
        found = await self._broker.get_deliveries(request.group, list(request.handles))
        return pb.GetDeliveriesResponse(results=[w.delivery_result_to_pb(f) for f in found])

    @_rpc(writes=False)
    async def FollowHandles(
        self, request: pb.FollowHandlesRequest, context: Any
    ) -> pb.FollowHandlesResponse:
        found = await self._broker.follow_handles(request.group, list(request.handles))
        return pb.FollowHandlesResponse(results=[w.follow_result_to_pb(f) for f in found])

    @_rpc(writes=True)
    async def ChangeInvisibleTime(
        self, request: pb.ChangeInvisibleTimeRequest, context: Any
    ) -> pb.ChangeInvisibleTimeResponse:
        handle, until = await self._broker.change_invisible_time(
            request.group, request.handle, request.invisible_s
        )
        return pb.ChangeInvisibleTimeResponse(handle=handle, invisible_until_ms=until)

    @_rpc(writes=True)
    async def Nack(self, request: pb.NackRequest, context: Any) -> pb.NackResponse:
        delay = request.delay_s if request.HasField("delay_s") else None
        at = await self._broker.nack(request.group, request.handle, delay)
        return pb.NackResponse(redeliver_at_ms=at)

    @_rpc(writes=True)
    async def DeadLetter(
        self, request: pb.DeadLetterRequest, context: Any
    ) -> pb.DeadLetterResponse:
        topic = await self._broker.dead_letter(request.group, request.handle)
        return pb.DeadLetterResponse(topic=topic)

    # -- reads by offset -----------------------------------------------------------------

    @_rpc(writes=False)
    async def Pull(self, request: pb.PullRequest, context: Any) -> pb.PullResponse:
        r = request
        if r.wait:
            pulled = await self._broker.pull_wait(
                r.topic,
                r.queue_id,
                r.offset,
                r.max_messages,
                wait_s=r.wait_s,
                filter_expression=r.filter_expression,
                filter_type=r.filter_type or "tag",
            )
        else:
            pulled = await self._broker.pull(r.topic, r.queue_id, r.offset, r.max_messages)
        return w.pulled_to_pb(pulled)

    @_rpc(writes=False)
    async def AwaitMessages(
        self, request: pb.AwaitMessagesRequest, context: Any
    ) -> pb.AwaitMessagesResponse:
        ready = await self._broker.await_messages(
            request.topic, dict(w.pairs_from_pb(request.positions)), request.wait_s
        )
        return pb.AwaitMessagesResponse(ready=w.pairs_to_pb(ready))

    @_rpc(writes=True)
    async def CommitOffsets(
        self, request: pb.CommitOffsetsRequest, context: Any
    ) -> pb.CommitOffsetsResponse:
        await self._broker.commit_offsets(
            request.group, request.topic, w.pairs_from_pb(request.offsets)
        )
        return pb.CommitOffsetsResponse()

    @_rpc(writes=False)
    async def GetOffsets(
        self, request: pb.GetOffsetsRequest, context: Any
    ) -> pb.GetOffsetsResponse:
        offsets = await self._broker.get_offsets(request.group, request.topic)
        return pb.GetOffsetsResponse(offsets=[w.consumer_offset_to_pb(o) for o in offsets])

    @_rpc(writes=False)
    async def OffsetsAt(self, request: pb.OffsetsAtRequest, context: Any) -> pb.OffsetsAtResponse:
        pairs = await self._broker.offsets_at(request.topic, request.timestamp_ms)
        return pb.OffsetsAtResponse(offsets=w.pairs_to_pb(pairs))

    # -- admin ---------------------------------------------------------------------------

    @_rpc(writes=False)
    async def InflightCount(
        self, request: pb.InflightCountRequest, context: Any
    ) -> pb.InflightCountResponse:
        count = await self._broker.inflight_count(
            group=request.group if request.HasField("group") else None,
            topic=request.topic if request.HasField("topic") else None,
        )
        return pb.InflightCountResponse(count=count)

    @_rpc(writes=True)
    async def Purge(self, request: pb.PurgeRequest, context: Any) -> pb.PurgeResponse:
        queue = request.queue_id if request.HasField("queue_id") else None
        return pb.PurgeResponse(purged=await self._broker.purge(request.topic, queue))

    @_rpc(writes=True)
    async def ResetOffsets(
        self, request: pb.ResetOffsetsRequest, context: Any
    ) -> pb.ResetOffsetsResponse:
        result = await self._broker.reset_offsets(
            request.group,
            request.topic,
            target=request.target,
            timestamp_ms=request.timestamp_ms,
            offsets=dict(request.offsets) if request.has_offsets else None,
            force=request.force,
        )
        return w.reset_to_pb(result)

    @_rpc(writes=False)
    async def Peek(self, request: pb.PeekRequest, context: Any) -> pb.PeekResponse:
        found = await self._broker.peek(
            request.topic,
            queue_id=request.queue_id if request.HasField("queue_id") else None,
            offset=request.offset if request.HasField("offset") else None,
            group=request.group,
            max_messages=request.max_messages,
        )
        return pb.PeekResponse(messages=[w.peeked_to_pb(p) for p in found])

    @_rpc(writes=True)
    async def Redrive(self, request: pb.RedriveRequest, context: Any) -> pb.RedriveResponse:
        limit = request.max_messages if request.HasField("max_messages") else None
        selected = [(r.queue_id, r.offset) for r in request.selected]
        return w.redrive_to_pb(
            await self._broker.redrive(request.group, max_messages=limit, only=selected)
        )

    @_rpc(writes=False)
    async def GetGroupLag(
        self, request: pb.GetGroupLagRequest, context: Any
    ) -> pb.GetGroupLagResponse:
        rows = await self._broker.group_lag(request.group, request.topic)
        return pb.GetGroupLagResponse(queues=[w.lag_to_pb(r) for r in rows])

    @_rpc(writes=False)
    async def GetLagReport(
        self, request: pb.GetLagReportRequest, context: Any
    ) -> pb.GetLagReportResponse:
        return w.lag_report_to_pb(await self._broker.lag_report(request.group, request.topic))

    @_rpc(writes=False)
    async def InspectGroup(
        self, request: pb.InspectGroupRequest, context: Any
    ) -> pb.InspectGroupResponse:
        found = await self._broker.inspect_group(
            request.group,
            request.topic,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return w.inspection_to_pb(found)

    @_rpc(writes=False)
    async def GetMessageHistory(
        self, request: pb.GetMessageHistoryRequest, context: Any
    ) -> pb.GetMessageHistoryResponse:
        events = await self._broker.message_history(
            request.topic, request.message_id, group=request.group
        )
        return pb.GetMessageHistoryResponse(events=[w.event_to_pb(e) for e in events])


ENCODED_ANSWERS = frozenset({"Pop", "Ack", "HopStream", "HopSend"})
"""BrokerService methods whose handlers answer with the response's bytes (hop_wire.py)."""
ENCODED_REQUESTS = frozenset({"HopSend"})
"""BrokerService methods whose handlers take each request as its bytes (send_wire.py)."""


def add_broker_service(server: grpc.aio.Server, servicer: BrokerServicer) -> None:
    """Register BrokerService on `server` as the generated code does, except that the
    methods of ENCODED_ANSWERS send the bytes their handlers answer as they are (and those
    of ENCODED_REQUESTS take each request as its bytes)."""
    reserialized.register(
        broker_pb2_grpc.add_BrokerServiceServicer_to_server, servicer, server, _bytes_out
    )


def _bytes_out(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    if method not in ENCODED_ANSWERS:
        return handler
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            handler.stream_stream,
            request_deserializer=_as_is
            if method in ENCODED_REQUESTS
            else handler.request_deserializer,
            response_serializer=_as_is,
        )
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            handler.unary_unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=_as_is,
        )
    raise TypeError(f"no encoded answers for a handler of this shape: {handler!r}")


def _as_is(answer: bytes) -> bytes:
    return answer
