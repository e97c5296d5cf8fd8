"""apache.rocketmq.v2.MessagingService over the broker: RocketMQ 5 clients, unchanged.

Official clients read outcomes from the `Status` inside each response (gRPC status OK), so
every handler answers broker errors there, mapped once by codes.py; an unexpected exception
is logged and answered INTERNAL_SERVER_ERROR. Consumers are members of the server's client
registry, and push consumers of FIFO groups get queues of their own (assignments.py).
Everything runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq._gen.apache.rocketmq.v2 import service_pb2_grpc
from popmq.broker_core.broker import PULL_MAX_MESSAGES, Broker
from popmq.broker_core.errors import PopMQError
from popmq.broker_core.filters import parse_filter
from popmq.broker_core.types import QueueStats
from popmq.proxy.clients import ClientRegistry
from popmq.proxy.errors import INTERNAL_MESSAGE
from popmq.proxy.rocketmq import codes, convert, metadata
from popmq.proxy.rocketmq.acking import Acks
from popmq.proxy.rocketmq.assignments import ConsumerAssignments
from popmq.proxy.rocketmq.codes import Code, ProtocolError, UnsupportedError
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.inflight import Inflight
from popmq.proxy.rocketmq.membership import Membership
from popmq.proxy.rocketmq.receive import Receiver
from popmq.proxy.rocketmq.receiving import Receiving, Releases
from popmq.proxy.rocketmq.resources import Resources, check_filter
from popmq.proxy.rocketmq.routing import Routing
from popmq.proxy.rocketmq.sending import Sending
from popmq.proxy.rocketmq.sessions import Sessions
from popmq.proxy.rocketmq.telemetry import Telemetry

log = logging.getLogger(__name__)

_Response = TypeVar("_Response")
_PULL_WAIT_KEY = "\x00pull:"
"""Prefix of the long-polling key of pulls, so they never take a wake-up meant for a pop."""


def answers(
    response: Callable[..., _Response],
    overrides: Mapping[type[PopMQError], pb.Code] | None = None,
) -> Callable[
    [Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_Response]]],
    Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_Response]],
]:
    """Answer a unary RPC's broker errors with `response(status=...)`, as RocketMQ does."""

    def decorate(
        handler: Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_Response]],
    ) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_Response]]:
        @functools.wraps(handler)
        async def wrapper(self: RocketMQService, request: Any, context: Any) -> _Response:
            self.touch(context)
            try:
                metadata.check_namespace(context)
                return await handler(self, request, context)
            except PopMQError as exc:
                log.debug("%s failed: %s", handler.__name__, exc)
                return response(status=codes.status_of(exc, overrides))
            except Exception:
                log.exception("%s failed unexpectedly", handler.__name__)
                return response(status=_internal())

        return wrapper

    return decorate


def _internal() -> pb.Status:
    return pb.Status(code=Code.INTERNAL_SERVER_ERROR, message=INTERNAL_MESSAGE)


class RocketMQService(service_pb2_grpc.MessagingServiceServicer):
    """The RocketMQ 5 front end: sessions, settings, in-flight handles, protocol mapping."""

    def __init__(
        self,
        broker: Broker,
        *,
        address: Callable[[], str],
        config: RocketMQConfig | None = None,
        clients: ClientRegistry | None = None,
    ) -> None:
        """`address` gives this server's HOST:PORT, for routes of clients that name none.

        `clients` is the server's consumer registry, shared with popmq.v1; without one the
        service keeps its own (a started broker's groups existed before it).
        """
        self._broker = broker
        self._address = address
        self.config = config or RocketMQConfig()
        if clients is None:
            clients = ClientRegistry(existing_groups=[g.name for g in broker.list_groups()])
        self._resources = Resources(broker, address, self.config)
        self.assignments = ConsumerAssignments(clients)
        membership = Membership(broker, self._resources, self.assignments)
        self.sessions = Sessions(self.config.client_idle_s, on_end=membership.session_ended)
        self.inflight = Inflight(broker, self.config, self.sessions)
        self._releases = Releases(self.inflight)
        self._telemetry = Telemetry(
            broker,
            self.config,
            sessions=self.sessions,
            membership=membership,
            inflight=self.inflight,
            resources=self._resources,
        )
        self._routing = Routing(
            self._resources,
            sessions=self.sessions,
            membership=membership,
            assignments=self.assignments,
        )
        self._sending = Sending(broker, self.config, self._resources)
        receiving = Receiving(
            broker,
            self.config,
            sessions=self.sessions,
            resources=self._resources,
            assignments=self.assignments,
            release_later=self._releases.later,
        )
        self.receiver = Receiver(receiving.pop, self.inflight, address, self._releases.later)
        self._acks = Acks(broker, self.config, self.inflight)

    @classmethod
    async def serve_on(
        cls,
        server: grpc.aio.Server,
        broker: Broker,
        *,
        address: Callable[[], str],
        clients: ClientRegistry | None = None,
    ) -> RocketMQService:
        """Register a started service on a gRPC server (before the server starts)."""
        service = cls(broker, address=address, clients=clients)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)
        await service.start()
        return service

    async def start(self) -> None:
        self.inflight.start()

    async def close(self) -> None:
        """End Telemetry streams and stop renewing (held messages keep their deadlines)."""
        self.sessions.close_all()
        await self.inflight.close()
        await self._releases.close()

    def touch(self, context: grpc.aio.ServicerContext) -> str:
        """Mark the calling client as alive; returns its id ("" when it sent none)."""
        client_id = metadata.client_id(context)
        if client_id:
            self.sessions.touch(client_id)
        return client_id

    # -- routes, heartbeats, sessions ------------------------------------------------------

    @answers(sv.QueryRouteResponse, codes.TOPIC)
    async def QueryRoute(
        self, request: sv.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> sv.QueryRouteResponse:
        return self._routing.route(request)

    @answers(sv.QueryAssignmentResponse, codes.TOPIC)
    async def QueryAssignment(
        self, request: sv.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> sv.QueryAssignmentResponse:
        return self._routing.assignment(request, metadata.client_id(context))

    @answers(sv.HeartbeatResponse, codes.GROUP)
    async def Heartbeat(
        self, request: sv.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> sv.HeartbeatResponse:
        return self._telemetry.heartbeat(metadata.require_client_id(context), request)

    @answers(sv.NotifyClientTerminationResponse, codes.GROUP)
    async def NotifyClientTermination(
        self, request: sv.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext
    ) -> sv.NotifyClientTerminationResponse:
        return await self._telemetry.terminate(metadata.require_client_id(context))

    async def Telemetry(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        """A client's settings and server commands, open for the client's lifetime
        (telemetry.py); a call without a client id or with a namespace gets one status."""
        try:
            client_id = metadata.require_client_id(context)
            metadata.check_namespace(context)
        except ProtocolError as exc:
            await context.write(sv.TelemetryCommand(status=codes.status_of(exc)))
            return
        await self._telemetry.serve(client_id, context)

    # -- send ------------------------------------------------------------------------------

    async def SendMessage(
        self, request: sv.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> sv.SendMessageResponse:
        self.touch(context)
        try:
            metadata.check_namespace(context)
            results = await self._sending.send(request)
        except PopMQError as exc:
            status = codes.status_of(exc, codes.TOPIC)
        except Exception:
            log.exception("SendMessage failed unexpectedly")
            status = _internal()
        else:
            return sv.SendMessageResponse(status=codes.ok(), entries=results)
        return self._sending.failed(request, status)

    @answers(sv.RecallMessageResponse, codes.TOPIC)
    async def RecallMessage(
        self, request: sv.RecallMessageRequest, context: grpc.aio.ServicerContext
    ) -> sv.RecallMessageResponse:
        return await self._sending.recall(request)

    @answers(sv.EndTransactionResponse)
    async def EndTransaction(
        self, request: sv.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> sv.EndTransactionResponse:
        raise UnsupportedError(
            "transactional messages are not supported by popmq: there is no half message "
            f"{request.message_id!r} to commit or roll back"
        )

    @answers(sv.SyncLiteSubscriptionResponse)
    async def SyncLiteSubscription(
        self, request: sv.SyncLiteSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> sv.SyncLiteSubscriptionResponse:
        raise UnsupportedError("lite topics are not supported by popmq")

    # -- receive, ack, change invisible duration, dead letters -----------------------------

    async def ReceiveMessage(
        self, request: sv.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> None:
        """Stream: a status, then the messages, then the delivery timestamp (receive.py)."""
        client_id = self.touch(context)
        try:
            metadata.check_namespace(context)
        except PopMQError as exc:
            await context.write(sv.ReceiveMessageResponse(status=codes.status_of(exc, codes.TOPIC)))
            return
        await self.receiver.receive(request, context, client_id)

    @answers(sv.AckMessageResponse, codes.GROUP)
    async def AckMessage(
        self, request: sv.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> sv.AckMessageResponse:
        return await self._acks.ack(request)

    @answers(sv.ChangeInvisibleDurationResponse, codes.GROUP)
    async def ChangeInvisibleDuration(
        self, request: sv.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> sv.ChangeInvisibleDurationResponse:
        return await self._acks.change_invisible(request)

    @answers(sv.ForwardMessageToDeadLetterQueueResponse, codes.GROUP)
    async def ForwardMessageToDeadLetterQueue(
        self,
        request: sv.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext,
    ) -> sv.ForwardMessageToDeadLetterQueueResponse:
        return await self._acks.dead_letter(request)

    # -- offset-based reads (pull consumers) -----------------------------------------------

    def _offset_in(self, stats: list[QueueStats], queue_id: int, offset: int) -> None:
        high = stats[queue_id].max_offset
        if not 0 <= offset <= high:
            raise ProtocolError(
                Code.ILLEGAL_OFFSET,
                f"offset {offset} is outside 0..{high} of queue {queue_id}",
            )

    async def PullMessage(
        self, request: sv.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> None:
        """Stream: a status, the messages from `offset` on that pass the filter, next_offset.

        Reads change no state. When nothing is there yet, it waits for an arrival up to the
        long-polling timeout (bounded like ReceiveMessage's).
        """
        self.touch(context)
        try:
            metadata.check_namespace(context)
            frames = await self._pull(request, context)
        except PopMQError as exc:
            frames = [sv.PullMessageResponse(status=codes.status_of(exc, codes.GROUP))]
        except Exception:
            log.exception("PullMessage failed unexpectedly")
            frames = [sv.PullMessageResponse(status=_internal())]
        for frame in frames:
            await context.write(frame)

    async def _pull(
        self, request: sv.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> list[sv.PullMessageResponse]:
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.message_queue.topic)
        filter_type, expression = check_filter(request.filter_expression)
        record_filter = parse_filter(expression, filter_type)
        if request.batch_size < 1:
            raise ProtocolError(
                Code.BAD_REQUEST, f"batch_size {request.batch_size} is below the minimum 1"
            )
        batch = min(request.batch_size, PULL_MAX_MESSAGES)
        info, stats = self._resources.topic(topic)
        queue_id = self._resources.queue_id(info, request.message_queue)
        self._offset_in(stats, queue_id, request.offset)
        wait = 0.0
        if request.HasField("long_polling_timeout"):
            wait = convert.seconds(
                "long_polling_timeout", request.long_polling_timeout, Code.ILLEGAL_POLLING_TIME
            )
            wait = min(max(wait, 0.0), self.config.max_long_polling_s)
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - metadata.DEADLINE_MARGIN_S))
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait
        while True:
            result = self._broker.pull(topic, queue_id, request.offset, batch)
            records = [(o, r) for o, r in result.messages if record_filter.accepts(r)]
            left = give_up - loop.time()
            if records or result.messages or left <= 0:
                break
            # Parked on its queue: a send to another queue neither wakes it nor is spent on it.
            waiter = self._broker.polling.park(_PULL_WAIT_KEY + group, topic, queue_id)
            try:
                await asyncio.wait([waiter], timeout=left)
            finally:
                self._broker.polling.unpark(_PULL_WAIT_KEY + group, topic, waiter, queue_id)
        host = self._address()
        frames = [
            sv.PullMessageResponse(
                status=codes.ok()
                if records
                else pb.Status(code=Code.MESSAGE_NOT_FOUND, message="no new message")
            )
        ]
        frames.extend(
            sv.PullMessageResponse(
                message=convert.v2_message(
                    record, topic=topic, queue_id=queue_id, offset=offset, store_host=host
                )
            )
            for offset, record in records
        )
        frames.append(sv.PullMessageResponse(next_offset=result.next_offset))
        return frames

    @answers(sv.GetOffsetResponse, codes.GROUP)
    async def GetOffset(
        self, request: sv.GetOffsetRequest, context: grpc.aio.ServicerContext
    ) -> sv.GetOffsetResponse:
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.message_queue.topic)
        info, _ = self._resources.topic(topic)
        queue_id = self._resources.queue_id(info, request.message_queue)
        position = self._broker.get_offsets(group, topic)[queue_id]
        if not position.committed:
            raise ProtocolError(
                Code.OFFSET_NOT_FOUND,
                f"group {group!r} has no offset in queue {queue_id} of {topic!r} yet (it would "
                f"start at {position.offset})",
            )
        return sv.GetOffsetResponse(status=codes.ok(), offset=position.offset)

    @answers(sv.UpdateOffsetResponse, codes.GROUP)
    async def UpdateOffset(
        self, request: sv.UpdateOffsetRequest, context: grpc.aio.ServicerContext
    ) -> sv.UpdateOffsetResponse:
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.message_queue.topic)
        info, stats = self._resources.topic(topic)
        queue_id = self._resources.queue_id(info, request.message_queue)
        self._offset_in(stats, queue_id, request.offset)
        await self._broker.commit_offsets(group, topic, [(queue_id, request.offset)])
        return sv.UpdateOffsetResponse(status=codes.ok())

    @answers(sv.QueryOffsetResponse, codes.TOPIC)
    async def QueryOffset(
        self, request: sv.QueryOffsetRequest, context: grpc.aio.ServicerContext
    ) -> sv.QueryOffsetResponse:
        topic = convert.topic_name(request.message_queue.topic)
        info, stats = self._resources.topic(topic)
        queue_id = self._resources.queue_id(info, request.message_queue)
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            offset = stats[queue_id].min_offset
        elif policy == pb.END:
            offset = stats[queue_id].max_offset
        elif policy == pb.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise ProtocolError(Code.BAD_REQUEST, "policy TIMESTAMP needs a timestamp")
            at = convert.timestamp_ms(request.timestamp)
            offset = dict(self._broker.offsets_at(topic, at))[queue_id]
        else:
            raise ProtocolError(
                Code.BAD_REQUEST,
                f"query_offset_policy {policy} is unknown: use BEGINNING, END or TIMESTAMP",
            )
        return sv.QueryOffsetResponse(status=codes.ok(), offset=offset)
