"""apache.rocketmq.v2.MessagingService over the broker: RocketMQ 5 clients, unchanged.

The servicer is the boundary: it marks the caller alive, refuses a namespace, dispatches
each RPC to the module of its concern, and maps errors. Official clients read outcomes from
the `Status` inside each response (gRPC status OK), so every handler answers broker errors
there, mapped once by codes.py; an unexpected exception is logged and answered
INTERNAL_SERVER_ERROR.

The concerns: telemetry.py (Telemetry, Heartbeat, NotifyClientTermination), membership.py
(consumers in the server's client registry), routing.py (QueryRoute, QueryAssignment),
sending.py (SendMessage, RecallMessage), transactions.py (EndTransaction, check-backs
over Telemetry), receiving.py and receive.py (ReceiveMessage),
acking.py (AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue),
pulling.py (PullMessage and the offsets), resources.py (the lookups they share).
Everything runs on the server's event loop.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq._gen.apache.rocketmq.v2 import service_pb2_grpc
from popmq.broker_core import BrokerAPI, PopMQError, TransactionAPI
from popmq.grpc_calls.errors import INTERNAL_MESSAGE
from popmq.proxy.call_deadline import set_call_deadline
from popmq.proxy.clients import ClientRegistry
from popmq.proxy.memory import PoppedBytes
from popmq.proxy.rocketmq import codes, metadata
from popmq.proxy.rocketmq.acking import Acks
from popmq.proxy.rocketmq.assignments import ConsumerAssignments
from popmq.proxy.rocketmq.codes import Code, ProtocolError, UnsupportedError
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.inflight import Inflight
from popmq.proxy.rocketmq.membership import Membership
from popmq.proxy.rocketmq.pulling import Pulls
from popmq.proxy.rocketmq.receive import Receiver
from popmq.proxy.rocketmq.receiving import Receiving, Releases
from popmq.proxy.rocketmq.resources import Resources
from popmq.proxy.rocketmq.routing import Routing
from popmq.proxy.rocketmq.sending import Sending
from popmq.proxy.rocketmq.sessions import Sessions
from popmq.proxy.rocketmq.telemetry import Telemetry
from popmq.proxy.rocketmq.transactions import END, Transactions
from popmq.proxy.transaction_checks import TransactionCheckLoop

log = logging.getLogger(__name__)

_Response = TypeVar("_Response")


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
        broker: BrokerAPI,
        *,
        address: Callable[[], str],
        config: RocketMQConfig | None = None,
        clients: ClientRegistry,
        popped_bytes: PoppedBytes | None = None,
        peers: Callable[[], Sequence[str]] | None = None,
        transaction_checks: TransactionCheckLoop | None = None,
    ) -> None:
        """`address` gives this server's HOST:PORT, for routes of clients that name none.
        `peers` gives the HOST:PORT of every proxy of a cluster (this one included), which
        routes list as the broker's endpoints (Resources.broker_entry).

        `clients` is the server's consumer registry, shared with popmq.v1 (`serve_on` builds
        one when the server has none). `popped_bytes` is the server-wide budget of popped,
        unwritten bytes (proxy/memory.py) that receives count in with popmq.v1's PopStreams;
        without one the service keeps its own.

        `transaction_checks` hands due transaction checks to producers: the service
        registers its producers' Telemetry streams there. Without it no check reaches a v2
        producer (half messages and EndTransaction work when the broker is a
        TransactionAPI).
        """
        self.config = config or RocketMQConfig()
        resources = Resources(broker, address, peers)
        self.assignments = ConsumerAssignments(clients)
        self._membership = membership = Membership(broker, resources, self.assignments)
        self.sessions = Sessions(self.config.client_idle_s, on_end=membership.session_ended)
        self.inflight = Inflight(broker, self.config, self.sessions)
        self._releases = Releases(self.inflight)
        transactions = broker if isinstance(broker, TransactionAPI) else None
        self._transactions = Transactions(transactions, transaction_checks, address)
        self._telemetry = Telemetry(
            broker,
            self.config,
            sessions=self.sessions,
            membership=membership,
            inflight=self.inflight,
            resources=resources,
            transactions=self._transactions,
        )
        self._routing = Routing(
            resources, sessions=self.sessions, membership=membership, assignments=self.assignments
        )
        self._sending = Sending(broker, self.config, resources, transactions)
        receiving = Receiving(
            broker,
            self.config,
            sessions=self.sessions,
            resources=resources,
            assignments=self.assignments,
            release_later=self._releases.later,
        )
        self.receiver = Receiver(
            receiving.prepare,
            self.inflight,
            address,
            self._releases.later,
            popped_bytes if popped_bytes is not None else PoppedBytes(),
        )
        self._acks = Acks(broker, self.config, self.inflight)
        self._pulls = Pulls(broker, self.config, resources, address)

    @classmethod
    async def serve_on(
        cls,
        server: grpc.aio.Server,
        broker: BrokerAPI,
        *,
        address: Callable[[], str],
        clients: ClientRegistry | None = None,
        popped_bytes: PoppedBytes | None = None,
        peers: Callable[[], Sequence[str]] | None = None,
        transaction_checks: TransactionCheckLoop | None = None,
    ) -> RocketMQService:
        """Register a started service on a gRPC server (before the server starts).

        Without `clients` the service keeps its own registry, which treats the broker's
        groups as existing before it (a started broker's groups did: see ClientRegistry).
        """
        if clients is None:
            clients = ClientRegistry(
                broker_name=broker.server_info().broker_name,
                existing_groups=[g.name for g in await broker.list_groups()],
            )
        service = cls(
            broker,
            address=address,
            clients=clients,
            popped_bytes=popped_bytes,
            peers=peers,
            transaction_checks=transaction_checks,
        )
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
        await self._membership.close()

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
        route = self._routing.route(request)
        client_id = metadata.client_id(context)
        if client_id:
            self._telemetry.nudge(client_id)  # a Node.js client's start-up (telemetry.py)
        return route

    @answers(sv.QueryAssignmentResponse, codes.TOPIC)
    async def QueryAssignment(
        self, request: sv.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> sv.QueryAssignmentResponse:
        return await self._routing.assignment(request, metadata.client_id(context))

    @answers(sv.HeartbeatResponse, codes.GROUP)
    async def Heartbeat(
        self, request: sv.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> sv.HeartbeatResponse:
        return await self._telemetry.heartbeat(metadata.require_client_id(context), request)

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
            await self._telemetry.refuse(context, exc)
            return
        await self._telemetry.serve(client_id, context)

    # -- send ------------------------------------------------------------------------------

    async def SendMessage(
        self, request: sv.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> sv.SendMessageResponse:
        self.touch(context)
        try:
            metadata.check_namespace(context)
            set_call_deadline(context)  # a send that would wait past it fails just before it
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

    @answers(sv.EndTransactionResponse, END)
    async def EndTransaction(
        self, request: sv.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> sv.EndTransactionResponse:
        return await self._transactions.end(request)

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
            frames = await self._pulls.pull(request, context)
        except PopMQError as exc:
            frames = [sv.PullMessageResponse(status=codes.status_of(exc, codes.GROUP))]
        except Exception:
            log.exception("PullMessage failed unexpectedly")
            frames = [sv.PullMessageResponse(status=_internal())]
        for frame in frames:
            await context.write(frame)

    @answers(sv.GetOffsetResponse, codes.GROUP)
    async def GetOffset(
        self, request: sv.GetOffsetRequest, context: grpc.aio.ServicerContext
    ) -> sv.GetOffsetResponse:
        return await self._pulls.get_offset(request)

    @answers(sv.UpdateOffsetResponse, codes.GROUP)
    async def UpdateOffset(
        self, request: sv.UpdateOffsetRequest, context: grpc.aio.ServicerContext
    ) -> sv.UpdateOffsetResponse:
        return await self._pulls.update_offset(request)

    @answers(sv.QueryOffsetResponse, codes.TOPIC)
    async def QueryOffset(
        self, request: sv.QueryOffsetRequest, context: grpc.aio.ServicerContext
    ) -> sv.QueryOffsetResponse:
        return await self._pulls.query_offset(request)
