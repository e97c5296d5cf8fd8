"""popmq.v1.MessagingService on top of the broker.

Transactions: a transactional send stores half messages (`TransactionAPI.send_half`),
EndTransaction resolves one, and a producer's TransactionChecks stream registers it with
the server's check loop (proxy/transaction_checks.py) while it is open. A broker that does
not implement TransactionAPI answers these FAILED_PRECONDITION.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypedDict

import grpc

from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.broker_core import (
    MAX_HANDLES,
    MAX_QUEUES,
    MAX_SEND_MESSAGES,
    PULL_DEFAULT_MESSAGES,
    Broker,
    BrokerAPI,
    FailedPreconditionError,
    InvalidArgumentError,
    NewMessage,
    PoppedMessage,
    ReceivedBatch,
    ReceivedPopAPI,
    RepeatedSendAPI,
    SendResult,
    SendTicket,
    TransactionAPI,
    TransactionCheck,
    UnavailableError,
    check_client_id,
    check_count,
    check_name,
    check_range,
    now_ms,
    received_messages_wire,
)
from popmq.coordination.coordinator import Coordinator
from popmq.grpc_calls import reserialized
from popmq.grpc_calls.errors import rpc
from popmq.proxy import convert
from popmq.proxy.ack_request import AckRequest, PopStreamRequest
from popmq.proxy.allocation import Strategy
from popmq.proxy.call_deadline import set_call_deadline
from popmq.proxy.clients import MAX_TOPICS_PER_CLIENT, ClientRegistry, ConsumeMode, Registration
from popmq.proxy.health import LateServices
from popmq.proxy.lease_pages import page_popper, page_size
from popmq.proxy.leases import LeaseOutcome, LeaseTable
from popmq.proxy.memory import PoppedBytes
from popmq.proxy.pop_stream import (
    AckedPop,
    AckOutcomes,
    AnyAckRequest,
    GiveBack,
    PopResult,
    PopStreamSession,
    ack_answer,
    pop_answer,
)
from popmq.proxy.send_request import SendRequest, SendStreamRequest
from popmq.proxy.send_stream import SendStreamSession, send_answer
from popmq.proxy.stream_session import Observe
from popmq.proxy.transaction_checks import TransactionCheckLoop

_DEADLINE_MARGIN_S = 0.05
"""A long poll returns this long before the caller's deadline instead of overrunning it."""
CHECK_WRITE_TIMEOUT_S = 5.0
"""A check not written to a producer's stream within this is given to the next producer."""
MAX_CHECK_TOPICS = MAX_TOPICS_PER_CLIENT
"""Topics one TransactionChecks stream may name."""


def transactions_of(broker: object) -> TransactionAPI:
    """`broker` as a TransactionAPI, or FAILED_PRECONDITION saying it takes no transactions."""
    if isinstance(broker, TransactionAPI):
        return broker
    raise FailedPreconditionError(
        f"this server's broker ({type(broker).__name__}) does not take transactional "
        "messages; send them through a server whose broker does"
    )


class MessagingServicer(messaging_pb2_grpc.MessagingServiceServicer):
    """Validates requests, converts them and calls the broker (lease tokens: proxy/leases.py)."""

    def __init__(
        self,
        broker: BrokerAPI,
        clients: ClientRegistry,
        coordinator: Coordinator,
        observe_pop: Observe | None = None,
        observe_send: Observe | None = None,
        observe_stream_ack: Observe | None = None,
        transaction_checks: TransactionCheckLoop | None = None,
    ) -> None:
        self._broker = broker
        self._send_repeat: Callable[
            [Sequence[NewMessage]], Coroutine[Any, Any, list[SendResult]]
        ] = broker.send_repeat if isinstance(broker, RepeatedSendAPI) else broker.send
        """How a send the client marked as a repeat is sent (RepeatedSendAPI)."""
        self._send_now: Callable[[Sequence[NewMessage]], SendTicket | None] | None = (
            broker.send_now if isinstance(broker, Broker) else None
        )
        """Hands a send to group commit at once (`begin_send`): the server's own broker's."""
        self._pop_received: Callable[..., Coroutine[Any, Any, ReceivedBatch]] | None = (
            broker.pop_received if isinstance(broker, ReceivedPopAPI) else None
        )
        """Pops with the deliveries already encoded as the client gets them (a cluster
        proxy's broker: ReceivedPopAPI), for the answers Pop and PopStream write as bytes."""
        self._transaction_checks = transaction_checks
        """Where TransactionChecks streams register their producers (None: the RPC answers
        FAILED_PRECONDITION)."""
        # Open TransactionChecks calls: each waits on its event, set by release_waiters.
        self._check_streams: set[asyncio.Event] = set()
        self._observe_pop = observe_pop
        """Told of each pop a PopStream answers (the interceptor times only whole calls)."""
        self._observe_stream_ack = observe_stream_ack
        """Told of each ack a PopStream answers."""
        self._observe_send = observe_send
        """Told of each send a SendStream answers."""
        self.clients = clients
        """The server's consumer registry (built by the caller: it needs the groups that
        existed before it, an async read of the broker)."""
        self._leases = LeaseTable(broker, coordinator)
        """Spark lease tokens, kept in `coordinator` (the server's: LocalCoordinator in
        `popmq serve`, etcd in a cluster's proxies) so that another proxy can replay them."""
        # Set by release_waiters (shutdown): no new long waits.
        self._releasing = False
        # Open PopStream and SendStream calls, released (answered, then ended) by
        # release_waiters.
        self._streams: set[PopStreamSession | SendStreamSession] = set()
        self.give_back = GiveBack(broker)
        """Takes back what PopStreams popped and never wrote (their client went away)."""
        self.popped_bytes = PoppedBytes()
        """What all PopStreams together may hold popped and unwritten (proxy/memory.py)."""

    @rpc
    async def SendMessages(self, request: SendRequest, context: grpc.aio.ServicerContext) -> bytes:
        """Answers a SendMessagesResponse's bytes (send_stream.send_answer)."""
        set_call_deadline(context)  # a send that would wait past it fails just before it
        return send_answer(await self.start_send(request))

    def start_send(
        self, request: SendRequest | messaging_pb2.SendMessagesRequest
    ) -> Coroutine[Any, Any, list[SendResult]]:
        """Schedule a send's messages and return the broker's send coroutine for it (not yet
        started): `_start_send`."""
        started = self._start_send(request, None)
        assert not isinstance(started, SendTicket)  # none without send_now
        return started

    def begin_send(
        self, request: SendRequest
    ) -> SendTicket | Coroutine[Any, Any, list[SendResult]]:
        """`start_send` for a SendStream: a plain send (not transactional, not a repeat) to
        topics that exist, on the server's own broker, is handed to group commit before this
        returns, and its ticket is returned instead of a coroutine (proxy/send_stream.py)."""
        return self._start_send(request, self._send_now)

    def _start_send(
        self,
        request: SendRequest | messaging_pb2.SendMessagesRequest,
        send_now: Callable[[Sequence[NewMessage]], SendTicket | None] | None,
    ) -> SendTicket | Coroutine[Any, Any, list[SendResult]]:
        """Schedule a send's messages and return the broker's send coroutine for it (not yet
        started), or, given `send_now`, its ticket when the broker took it at once.

        The one path of the SendMessages RPC and of each send of a SendStream, so both
        accept and reject alike. The request is as their deserializer read it
        (send_request.py; a generated message, from embedded callers, is read again from
        its bytes). Raises the broker's error for a schedule that cannot be converted; the
        returned coroutine raises the others.
        """
        if not isinstance(request, SendRequest):
            request = SendRequest.FromString(request.SerializeToString())
        messages = request.messages
        # The count before anything per message (work proportional to the request); the
        # broker checks it again with the rest of the send (validation.check_send).
        check_count("messages", len(messages), MAX_SEND_MESSAGES, "messages")
        assert isinstance(messages, list)  # only a request of too many holds upb's field
        if request.schedules:
            now = now_ms()
            for scheduled in request.schedules:  # in message order: the first error wins
                messages[scheduled.index].deliver_at_ms = convert.scheduled_ms(
                    scheduled.index, scheduled.kind, scheduled.value, now
                )
        check_delay = request.transaction_check_delay
        if request.transactional:
            check_first_s = (
                convert.seconds("transaction_check_delay", check_delay)
                if check_delay is not None
                else None
            )
            if request.repeat and isinstance(self._broker, RepeatedSendAPI):
                # A client's retry of a half send: found where the first went, as a send's.
                return self._broker.send_half_repeat(
                    messages, producer_group=request.producer_group, check_first_s=check_first_s
                )
            return transactions_of(self._broker).send_half(
                messages, producer_group=request.producer_group, check_first_s=check_first_s
            )
        if request.producer_group or check_delay is not None:
            raise InvalidArgumentError(
                "producer_group and transaction_check_delay are for transactional sends: "
                "set transactional, or leave them unset"
            )
        if request.repeat:  # a client's retry: its first try may be stored on any broker
            return self._send_repeat(messages)
        if send_now is not None and (ticket := send_now(messages)) is not None:
            return ticket
        return self._broker.send(messages)

    async def SendStream(
        self,
        request_iterator: AsyncIterable[SendStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Many sends over one stream, each served as `SendMessages` serves it, started in
        the order read (proxy/send_stream.py)."""
        session = SendStreamSession(
            self.start_send,
            context,
            self._observe_send,
            begin_send=None if self._send_now is None else self.begin_send,
        )
        if self._releasing:
            session.release()
        self._streams.add(session)
        try:
            await session.serve()
        finally:
            self._streams.discard(session)

    @rpc
    async def Pop(
        self, request: messaging_pb2.PopRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Answers a PopResponse's bytes (pop_stream.pop_answer; the method's serializer,
        convert.serialized, passes them through)."""
        result = await self.start_pop(request, context.time_remaining())
        return pop_answer(request, result)

    def start_pop(
        self,
        request: messaging_pb2.PopRequest,
        remaining_s: float | None,
        max_bytes: int | None = None,
        reserve: Callable[[int], int] | None = None,
    ) -> Coroutine[Any, Any, PopResult]:
        """Validate a Pop and return the broker's pop coroutine for it (not yet started).

        The one path of the Pop RPC and of each pop of a PopStream, so both accept, reject
        (with the same code and message) and wait alike. Raises the broker's error for a bad
        argument; the returned coroutine raises the others (unknown topic, too many held
        pops). `remaining_s` is the time left before the caller's deadline, if it has one.
        A pop that carries acks applies them first, and only once its own arguments passed.
        `max_bytes` is what a PopStream reserved for the answer (BrokerAPI.pop's bound), and
        `reserve` how it reserves more once a message is found (BrokerAPI.pop's `reserve`).
        """
        check_count("ack_receipt_handles", len(request.ack_receipt_handles), MAX_HANDLES)
        pop = _pop_arguments(self._broker, request, remaining_s)
        # Checked before any ack rides along; "" (a client that sent none) is allowed.
        check_client_id(request.client_id)
        if request.ack_receipt_handles:
            return self._ack_then_pop(request, pop, max_bytes)
        pop_received = self._pop_received
        if pop_received is not None:  # `reserve` is one only an in-process broker uses
            return pop_received(
                request.group,
                request.topic,
                max_bytes=max_bytes,
                client_id=request.client_id,
                **pop,
            )
        return self._broker.pop(
            request.group,
            request.topic,
            max_bytes=max_bytes,
            reserve=reserve,
            client_id=request.client_id,
            **pop,
        )

    async def _ack_then_pop(
        self, request: messaging_pb2.PopRequest, pop: _PopArguments, max_bytes: int | None
    ) -> AckedPop:
        acks = await self._broker.ack(request.group, request.ack_receipt_handles)
        group, topic, client_id = request.group, request.topic, request.client_id
        popped: list[PoppedMessage] | ReceivedBatch
        if self._pop_received is not None:
            popped = await self._pop_received(
                group, topic, max_bytes=max_bytes, client_id=client_id, **pop
            )
        else:
            popped = await self._broker.pop(
                group, topic, max_bytes=max_bytes, client_id=client_id, **pop
            )
        return AckedPop(acks, popped)

    async def PopStream(
        self,
        request_iterator: AsyncIterable[PopStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Many pops over one stream, each served as `Pop` serves it (proxy/pop_stream.py)."""
        session = PopStreamSession(
            self.start_pop,
            self.start_ack,
            context,
            self._observe_pop,
            self._observe_stream_ack,
            self.give_back,
            self.popped_bytes,
        )
        if self._releasing:
            session.release()
        self._streams.add(session)
        try:
            await session.serve()
        finally:
            self._streams.discard(session)

    @rpc
    async def Ack(self, request: AnyAckRequest, context: grpc.aio.ServicerContext) -> bytes:
        """Answers an AckResponse's bytes (pop_stream.ack_answer)."""
        return ack_answer(request.receipt_handles, await self.start_ack(request))

    def start_ack(self, request: AnyAckRequest) -> Coroutine[Any, Any, AckOutcomes]:
        """The broker's ack coroutine for an Ack (not yet started): the one path of the Ack
        RPC and of each ack of a PopStream."""
        check_count("receipt_handles", len(request.receipt_handles), MAX_HANDLES)
        return self._broker.ack(request.group, request.receipt_handles)

    @rpc
    async def ChangeInvisibleTime(
        self, request: messaging_pb2.ChangeInvisibleTimeRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.ChangeInvisibleTimeResponse:
        if not request.HasField("invisible_duration"):
            raise InvalidArgumentError("invisible_duration is required (0s..12h)")
        invisible = convert.seconds("invisible_duration", request.invisible_duration)
        handle, until_ms = await self._broker.change_invisible_time(
            request.group, request.receipt_handle, invisible
        )
        return messaging_pb2.ChangeInvisibleTimeResponse(
            receipt_handle=handle, invisible_until=convert.timestamp(until_ms)
        )

    @rpc
    async def Nack(
        self, request: messaging_pb2.NackRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.NackResponse:
        delay = convert.seconds("delay", request.delay) if request.HasField("delay") else None
        until_ms = await self._broker.nack(request.group, request.receipt_handle, delay)
        return messaging_pb2.NackResponse(redeliver_time=convert.timestamp(until_ms))

    @rpc
    async def RecallMessage(
        self, request: messaging_pb2.RecallMessageRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.RecallMessageResponse:
        message_id = await self._broker.recall(request.topic, request.recall_handle)
        return messaging_pb2.RecallMessageResponse(message_id=message_id)

    # -- consumer clients and queue assignment (proxy/clients.py) ------------------------

    @rpc
    async def Heartbeat(
        self, request: messaging_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.HeartbeatResponse:
        # Sizes first: a topic's queue count is a lookup, but nothing is done per entry of
        # a list longer than the registry accepts.
        for name, size in (
            ("topics", len(request.topics)),
            ("configured_queues", len(request.configured_queues)),
        ):
            if size > MAX_TOPICS_PER_CLIENT:
                raise InvalidArgumentError(
                    f"{name} has {size} entries: a client may subscribe to at most "
                    f"{MAX_TOPICS_PER_CLIENT} topics"
                )
        for topic, ids in request.configured_queues.items():
            check_count(f"configured_queues[{topic!r}]", len(ids.queue_ids), MAX_QUEUES)
        queue_counts = {topic: self._queue_count(topic) for topic in request.topics}
        interval = (
            convert.seconds("heartbeat_interval", request.heartbeat_interval)
            if request.HasField("heartbeat_interval")
            else None
        )
        registration = Registration(
            client_id=request.client_id,
            group=request.group,
            topics=tuple(request.topics),
            mode=_consume_mode(request.mode),
            strategy=_strategy(request.strategy),
            heartbeat_interval_s=interval,
            machine_room=request.machine_room,
            configured_queues={
                topic: tuple(ids.queue_ids) for topic, ids in request.configured_queues.items()
            },
        )
        for topic in registration.configured_queues:
            if topic not in queue_counts:
                queue_counts[topic] = self._queue_count(topic)
        interval_s = await self.clients.heartbeat(registration, queue_counts)
        claim_s = interval_s * self.clients.config.missed_heartbeats
        return messaging_pb2.HeartbeatResponse(
            heartbeat_interval=convert.duration(interval_s),
            # The claim time of the queues QueryAssignment grants (the field's name predates
            # the word claim).
            lease_duration=convert.duration(claim_s),
        )

    @rpc
    async def QueryAssignment(
        self, request: messaging_pb2.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.QueryAssignmentResponse:
        check_count("held_queue_ids", len(request.held_queue_ids), MAX_QUEUES, "queue ids")
        assignment = await self.clients.query_assignment(
            request.client_id,
            request.group,
            request.topic,
            self._queue_count(request.topic),
            list(request.held_queue_ids),
        )
        return messaging_pb2.QueryAssignmentResponse(
            queue_ids=assignment.queue_ids,
            pending_queue_ids=assignment.pending_queue_ids,
            epoch=assignment.epoch,
            lease_duration=convert.duration(assignment.claim_s),
        )

    @rpc
    async def NotifyClientTermination(
        self,
        request: messaging_pb2.NotifyClientTerminationRequest,
        context: grpc.aio.ServicerContext,
    ) -> messaging_pb2.NotifyClientTerminationResponse:
        known = await self.clients.unregister(request.client_id, request.group)
        return messaging_pb2.NotifyClientTerminationResponse(was_registered=known)

    @rpc
    async def AwaitMessages(
        self, request: messaging_pb2.AwaitMessagesRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.AwaitMessagesResponse:
        limits = self._broker.server_info().long_polling
        wait = (
            convert.seconds("long_polling_timeout", request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else limits.default_timeout_s
        )
        check_range("long_polling_timeout", wait, 0, limits.max_timeout_s, "s")
        if len(request.positions) > MAX_QUEUES:
            raise InvalidArgumentError(
                f"positions has {len(request.positions)} entries: a topic has at most "
                f"{MAX_QUEUES} queues"
            )
        positions: dict[int, int] = {}
        for position in request.positions:
            if position.queue_id in positions:
                raise InvalidArgumentError(f"positions repeats queue id {position.queue_id}")
            positions[position.queue_id] = position.offset
        remaining = context.time_remaining()
        if remaining is not None:
            wait = max(0.0, min(wait, remaining - _DEADLINE_MARGIN_S))
        if self._releasing:
            wait = 0.0
        ready = await self._broker.await_messages(request.topic, positions, wait)
        return messaging_pb2.AwaitMessagesResponse(
            ready=[messaging_pb2.QueueOffset(queue_id=q, offset=o) for q, o in ready]
        )

    # -- transactions -------------------------------------------------------------------

    @rpc
    async def EndTransaction(
        self, request: messaging_pb2.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.EndTransactionResponse:
        if not request.transaction_id:
            raise InvalidArgumentError(
                "transaction_id is empty: pass the transaction_id of the half send's result"
            )
        if not request.topic:
            raise InvalidArgumentError(
                "topic is empty: name the half message's topic (access control checks it)"
            )
        commit = convert.commit_flag(request.resolution)
        source = convert.client_source(request.source)
        info = await transactions_of(self._broker).end_transaction(
            request.transaction_id,
            commit=commit,
            source=source,
            topic=request.topic,
            message_id=request.message_id,
        )
        return messaging_pb2.EndTransactionResponse(transaction=convert.transaction(info))

    @rpc
    async def TransactionChecks(
        self, request: messaging_pb2.TransactionChecksRequest, context: grpc.aio.ServicerContext
    ) -> None:
        """Register the caller as an online producer of `topics` until the call ends; each
        check for it is written to the stream (module docstring)."""
        transactions_of(self._broker)
        loop = self._transaction_checks
        if loop is None:
            raise FailedPreconditionError(
                "this server runs no transaction check loop: checks cannot be delivered here"
            )
        topics = list(dict.fromkeys(request.topics))
        if not topics:
            raise InvalidArgumentError(
                "topics is empty: name the topics whose transactions this producer checks"
            )
        check_count("topics", len(topics), MAX_CHECK_TOPICS, "topics")
        for topic in topics:
            check_name("topic", topic)
        ended = asyncio.Event()

        async def deliver(check: TransactionCheck) -> None:
            if ended.is_set():
                raise UnavailableError("the producer's check stream is ending")
            await asyncio.wait_for(
                context.write(convert.transaction_check(check)), CHECK_WRITE_TIMEOUT_S
            )

        remove = loop.add_producer(topics, deliver, name=request.client_id or context.peer())
        self._check_streams.add(ended)
        try:
            # The headers tell the client it is registered: checks can reach it from now on.
            await context.send_initial_metadata(())
            if self._releasing:
                ended.set()
            await ended.wait()
        finally:
            remove()
            self._check_streams.discard(ended)
        raise UnavailableError(
            "the server is shutting down: open the TransactionChecks stream again "
            "(on another proxy)"
        )

    @property
    def check_streams(self) -> int:
        """TransactionChecks calls open now."""
        return len(self._check_streams)

    @property
    def pop_streams(self) -> int:
        """PopStream calls open now."""
        return sum(isinstance(s, PopStreamSession) for s in self._streams)

    @property
    def send_streams(self) -> int:
        """SendStream calls open now."""
        return sum(isinstance(s, SendStreamSession) for s in self._streams)

    def release_waiters(self) -> None:
        """Hold no new AwaitMessages (the broker answers held ones when it releases its
        waiters, which the server does first); end PopStreams once
        their pops are answered (the broker answers held pops when it releases its
        waiters, which the server does first) and SendStreams once their sends are stored:
        shutdown is coming."""
        self._releasing = True
        for session in self._streams:
            session.release()
        for ended in self._check_streams:
            ended.set()

    async def close(self) -> None:
        """Stop the lease table's background work (the server is stopping)."""
        await self._leases.close()

    def _queue_count(self, topic: str) -> int:
        return self._broker.topic_info(topic).queues

    # -- offset reads and lease tokens (Spark connector) --------------------------------

    @rpc
    async def PullMessages(
        self, request: messaging_pb2.PullMessagesRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.PullMessagesResponse:
        max_messages = (
            request.max_messages if request.HasField("max_messages") else PULL_DEFAULT_MESSAGES
        )
        pulled = await self._broker.pull(
            request.topic, request.queue_id, request.offset, max_messages
        )
        return convert.pull_response(pulled)

    @rpc
    async def CommitOffset(
        self, request: messaging_pb2.CommitOffsetRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.CommitOffsetResponse:
        check_count("offsets", len(request.offsets), MAX_QUEUES)
        await self._broker.commit_offsets(
            request.group, request.topic, [(o.queue_id, o.offset) for o in request.offsets]
        )
        return messaging_pb2.CommitOffsetResponse()

    @rpc
    async def GetOffset(
        self, request: messaging_pb2.GetOffsetRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.GetOffsetResponse:
        offsets = await self._broker.get_offsets(request.group, request.topic)
        return messaging_pb2.GetOffsetResponse(
            offsets=[convert.consumer_offset(o) for o in offsets]
        )

    @rpc
    async def GetOffsetsAtTime(
        self, request: messaging_pb2.GetOffsetsAtTimeRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.GetOffsetsAtTimeResponse:
        if not request.HasField("time"):
            raise InvalidArgumentError("time is required")
        at_ms = convert.timestamp_ms("time", request.time)
        return messaging_pb2.GetOffsetsAtTimeResponse(
            offsets=[
                messaging_pb2.QueueOffset(queue_id=q, offset=o)
                for q, o in await self._broker.offsets_at(request.topic, at_ms)
            ]
        )

    @rpc
    async def LeasePop(
        self, request: messaging_pb2.LeasePopRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Answers a LeasePopResponse's bytes, its messages encoded as Pop's are. A page may
        ask for more than pop.max_batch: it is filled by several pops (leases.page_popper)."""
        max_batch = self._broker.server_info().pop.max_batch
        size = page_size(
            request.max_messages if request.HasField("max_messages") else None, max_batch
        )
        pop = _pop_arguments(
            self._broker, request, context.time_remaining(), max_messages=min(size, max_batch)
        )

        def pop_chunk(
            count: int, wait_s: float, max_bytes: int | None
        ) -> Awaitable[list[PoppedMessage]]:
            return self._broker.pop(
                request.group,
                request.topic,
                max_messages=count,
                invisible_s=pop["invisible_s"],
                wait_s=wait_s,
                filter_expression=pop["filter_expression"],
                filter_type=pop["filter_type"],
                max_bytes=max_bytes,
            )

        page = await self._leases.pop(
            request.group,
            request.topic,
            request.lease_token,
            request.page,
            pop["invisible_s"],
            page_popper(pop_chunk, size, max_batch, pop["wait_s"]),
            by_page=request.acks_by_page,
            pinned=request.pinned,
        )
        response = messaging_pb2.LeasePopResponse(
            replayed=page.replayed,
            lease_until=convert.timestamp(page.lease_until_ms),
            page_id=page.page_id,
        )
        return response.SerializeToString() + received_messages_wire(page.messages)

    @rpc
    async def AckLease(
        self, request: messaging_pb2.AckLeaseRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.AckLeaseResponse:
        check_count("lease_tokens", len(request.lease_tokens), MAX_HANDLES)
        pages: dict[str, list[str]] = {}
        for read in request.read_pages:
            pages.setdefault(read.lease_token, []).extend(read.page_ids)
        check_count("read_pages page_ids", sum(map(len, pages.values())), MAX_HANDLES)
        outcomes = await self._leases.ack(
            request.group, list(request.lease_tokens), pages, pinned=request.pinned
        )
        return messaging_pb2.AckLeaseResponse(results=[_lease_result(o) for o in outcomes])

    @rpc
    async def RenewLease(
        self, request: messaging_pb2.RenewLeaseRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.RenewLeaseResponse:
        if not request.HasField("invisible_duration"):
            raise InvalidArgumentError("invisible_duration is required (1s..12h)")
        check_count("lease_tokens", len(request.lease_tokens), MAX_HANDLES)
        invisible = convert.seconds("invisible_duration", request.invisible_duration)
        outcomes = await self._leases.renew(request.group, list(request.lease_tokens), invisible)
        return messaging_pb2.RenewLeaseResponse(results=[_lease_result(o) for o in outcomes])


class _PopArguments(TypedDict):
    """BrokerAPI.pop's keyword arguments for one Pop (or LeasePop) request."""

    max_messages: int
    invisible_s: float
    wait_s: float
    filter_expression: str
    filter_type: str


def _pop_arguments(
    broker: BrokerAPI,
    request: messaging_pb2.PopRequest | messaging_pb2.LeasePopRequest,
    remaining_s: float | None,
    *,
    max_messages: int | None = None,
) -> _PopArguments:
    """A pop request's arguments with the broker's defaults, checked by the broker's rule
    (ServerInfo.pop_arguments, which BrokerAPI.pop applies again).

    Resolved here, before the pop, because the servicer needs them first: a pop's acks are
    applied only once its arguments passed, LeasePop's lease lives for the invisible time,
    and `remaining_s` (the time before the caller's deadline) shortens the long poll so it
    answers, empty, just before the deadline rather than let the call expire (a wait above
    the maximum is refused, not shortened). `max_messages`, when given, replaces the
    request's (each pop of a LeasePop page asks at most pop.max_batch).
    """
    if max_messages is None and request.HasField("max_messages"):
        max_messages = request.max_messages
    checked = broker.server_info().pop_arguments(
        max_messages=max_messages,
        invisible_s=(
            convert.seconds("invisible_duration", request.invisible_duration)
            if request.HasField("invisible_duration")
            else None
        ),
        wait_s=(
            convert.seconds("long_polling_timeout", request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else None
        ),
    )
    wait = checked.wait_s
    if remaining_s is not None:
        wait = max(0.0, min(wait, remaining_s - _DEADLINE_MARGIN_S))
    return _PopArguments(
        max_messages=checked.max_messages,
        invisible_s=checked.invisible_s,
        wait_s=wait,
        filter_expression=request.filter.expression,
        filter_type=convert.filter_type(request.filter),
    )


def _lease_result(outcome: LeaseOutcome) -> messaging_pb2.LeaseResult:
    result = messaging_pb2.LeaseResult(
        lease_token=outcome.token,
        code="OK" if outcome.error is None else outcome.error.code,
        message="" if outcome.error is None else str(outcome.error),
        messages=outcome.messages,
    )
    if outcome.lease_until_ms:
        result.lease_until.CopyFrom(convert.timestamp(outcome.lease_until_ms))
    return result


_CONSUME_MODES: dict[int, ConsumeMode] = {
    messaging_pb2.CONSUME_MODE_UNSPECIFIED: ConsumeMode.POP,
    messaging_pb2.CONSUME_MODE_POP: ConsumeMode.POP,
    messaging_pb2.CONSUME_MODE_QUEUE_EXCLUSIVE: ConsumeMode.QUEUE_EXCLUSIVE,
}
_STRATEGIES: dict[int, Strategy] = {
    messaging_pb2.ASSIGNMENT_STRATEGY_UNSPECIFIED: Strategy.AVERAGE,
    messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE: Strategy.AVERAGE,
    messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE_BY_CIRCLE: Strategy.AVERAGE_BY_CIRCLE,
    messaging_pb2.ASSIGNMENT_STRATEGY_CONSISTENT_HASH: Strategy.CONSISTENT_HASH,
    messaging_pb2.ASSIGNMENT_STRATEGY_BY_CONFIG: Strategy.BY_CONFIG,
    messaging_pb2.ASSIGNMENT_STRATEGY_BY_MACHINE_ROOM: Strategy.BY_MACHINE_ROOM,
}


def _consume_mode(value: int) -> ConsumeMode:
    mode = _CONSUME_MODES.get(value)
    if mode is None:
        raise InvalidArgumentError(f"mode {value} is unknown: use POP or QUEUE_EXCLUSIVE")
    return mode


def _strategy(value: int) -> Strategy:
    strategy = _STRATEGIES.get(value)
    if strategy is None:
        allowed = ", ".join(s.value for s in Strategy)
        raise InvalidArgumentError(f"strategy {value} is unknown: use one of {allowed}")
    return strategy


ENCODED_ANSWERS = frozenset({"SendMessages", "SendStream", "Pop", "PopStream", "Ack", "LeasePop"})
"""MessagingService methods whose handlers may answer with bytes already encoded."""

WIRE_REQUESTS: dict[str, Callable[[bytes], object]] = {
    "SendMessages": SendRequest.FromString,
    "SendStream": SendStreamRequest.FromString,
    "Ack": AckRequest.FromString,
    "PopStream": PopStreamRequest.FromString,
}
"""MessagingService methods whose requests are read from their bytes by send_request.py and
ack_request.py instead of the generated classes, and their readers."""


def add_messaging_service(servicer: MessagingServicer, server: LateServices) -> None:
    """Register `servicer` on `server` as the generated code does, except that the methods
    of ENCODED_ANSWERS get a serializer that passes encoded bytes through
    (convert.serialized), and those of WIRE_REQUESTS their own request readers."""
    reserialized.register(
        messaging_pb2_grpc.add_MessagingServiceServicer_to_server, servicer, server, _reserialized
    )


def _reserialized(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    if method not in ENCODED_ANSWERS:
        return handler
    deserializer = WIRE_REQUESTS.get(method, handler.request_deserializer)
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            handler.unary_unary,
            request_deserializer=deserializer,
            response_serializer=convert.serialized,
        )
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            handler.stream_stream,
            request_deserializer=deserializer,
            response_serializer=convert.serialized,
        )
    raise TypeError(f"no encoded answers for a handler of this shape: {handler!r}")
