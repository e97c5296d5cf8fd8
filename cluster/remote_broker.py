"""`RemoteBroker`: the broker API (BrokerAPI) over a gRPC channel to a `popmq broker`.

A proxy uses it exactly as it uses the in-process `Broker`: the same operations, values and
errors (a broker error comes back as the same PopMQError subclass with the same fields,
broker/wire.py). A broker that cannot be reached, or a call that times out, raises a
retriable `UnavailableError` naming the broker's address.

Deadlines: a plain call gets `call_timeout_s`; a long poll (a pop, pull_wait or
await_messages that waits) gets its wait plus `call_timeout_s`, never a short deadline; and
`wait_failure` none. The channel pings the broker every `keepalive_s` (1 s: a silent cut
fails the calls in flight within ~2 s), and reconnects within ~1 s once the broker is back.

The synchronous members of BrokerAPI (its docstring says why they are synchronous) are
answered from a cache, for ONE broker:
- `server_info`: read at start and kept (a broker's limits change only when it restarts
  with another config; a RemoteBroker started before that keeps the old limits);
- `topic_info`: every topic (retry and dead-letter topics included), read at start;
- `get_group`, `group_settings`, `subscription_filter`: every group with its settings,
  read at start.
A RemoteBroker checks no pop or send arguments itself: the broker it calls does (a
pop's with `validation.check_pop`, a send's with `validation.check_send`).
The cache is refreshed: for a name, after this RemoteBroker's own admin writes to it
(create, update, delete), after a send or pop naming a topic or group it did not know (the
broker auto-creates them) and after a dead letter to a dead-letter topic it did not know;
for a name the cache misses, in the background (the miss itself answers NOT_FOUND, as it
would have a moment earlier); and wholly every `catalog_refresh_s`. So it is stale only
for changes made by others (another proxy, another RemoteBroker, the broker's own revive
creating a retry topic) and at most `catalog_refresh_s` or until a miss on that name.
Cluster mode replaces this cache with the proxies' route cache fed by etcd.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, TypeVar, cast

import grpc

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker import hop_wire, send_wire
from popmq.broker import wire as w
from popmq.broker_core import validation
from popmq.broker_core.api import BrokerAPI, MetricsSnapshot, ReceivedPopAPI, ServerInfo
from popmq.broker_core.catalog import GroupInfo, TopicInfo
from popmq.broker_core.errors import (
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
    UnavailableError,
)
from popmq.broker_core.group_rules import GroupState
from popmq.broker_core.inspection import DeliveryEvent, GroupInspection
from popmq.broker_core.offsets import PULL_DEFAULT_MESSAGES
from popmq.broker_core.record_wire import ReceivedBatch
from popmq.broker_core.types import (
    ConsumerOffset,
    ExponentialBackoff,
    GroupSettings,
    LagReport,
    NewMessage,
    PeekedMessage,
    PoppedMessage,
    PulledMessages,
    QueueDetails,
    QueueLag,
    QueueStats,
    RedriveResult,
    ResetResult,
    SendResult,
    Subscription,
    TransactionCheck,
    TransactionInfo,
)
from popmq.cluster.call_errors import call_error
from popmq.cluster.connection_watch import ConnectionDrops
from popmq.cluster.hop_calls import HopCalls
from popmq.cluster.hop_frames import HopFrameStream
from popmq.cluster.hop_stream import SEND_METHOD, HopStub
from popmq.cluster.pop_wire import pop_request
from popmq.cluster.send_outcome import BrokerUnansweredError
from popmq.coordination.config import HOP_KEEPALIVE_S
from popmq.security.signing import Signer
from popmq.security.tls import ChannelTLS

log = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_MESSAGE_BYTES = 130 * 1024 * 1024
"""Largest message either way: a pop answer is bounded well below it (budget.py)."""


class RemoteBroker:
    """The broker API of a `popmq broker` at `address` (HOST:PORT).

    Args:
        address: The broker's BrokerService, HOST:PORT.
        call_timeout_s: Deadline of a call that does not wait, and what a long poll gets
            beyond its wait.
        keepalive_s: Pings this often; a ping unanswered as long (10 s at most) drops it.
        catalog_refresh_s: The whole topic and group cache is read again this often.
        catalog: Keep the catalog cache and read the server info at start (the
            synchronous members need them). A cluster-mode proxy, which answers those from
            etcd, passes False: then `start` only opens the channel (it connects on the
            first call, so the broker need not be up) and the synchronous members are
            not used.
        name: The broker's name, when the caller knows it: errors name it beside its address.
        tls: Connect with TLS (a broker serving `[security] tls_cert_file`); None:
            plaintext.
        signer: Signs every call (a cluster proxy's root credential, for brokers with
            `[security] authentication`); None: calls are not signed.
    """

    def __init__(
        self,
        address: str,
        *,
        call_timeout_s: float = 10.0,
        keepalive_s: float = HOP_KEEPALIVE_S,
        catalog_refresh_s: float = 10.0,
        catalog: bool = True,
        name: str = "",
        tls: ChannelTLS | None = None,
        signer: Signer | None = None,
    ) -> None:
        for setting, value in (
            ("call_timeout_s", call_timeout_s),
            ("keepalive_s", keepalive_s),
            ("catalog_refresh_s", catalog_refresh_s),
        ):
            if value <= 0:
                raise ValueError(f"RemoteBroker {setting} {value} must be positive")
        self.address = address
        self._shown = f"{name!r} at {address}" if name else f"at {address}"
        self._timeout = call_timeout_s
        self._keepalive_s = keepalive_s
        self._refresh_s = catalog_refresh_s
        self._catalog = catalog
        self._tls = tls
        self._signer = signer
        self._channel: grpc.aio.Channel | None = None
        # Pops without a wait and acks, on one stream (None while closed).
        self._hop: HopFrameStream | None = None
        # Sends and half sends, on another (None while closed).
        self._hop_send: HopFrameStream | None = None
        self.hop_calls = HopCalls(
            self._shown, self._call, self._pop_long_poll, self._default_wait_s
        )
        """Its sends, pops and acks, compiled (hop_calls.py): what a cluster proxy calls them
        by. Its `draining` is this remote broker's (release_waiters)."""
        self._info: ServerInfo | None = None
        # The catalog cache (see the module docstring); changed on the loop thread only.
        self._topics: dict[str, TopicInfo] = {}
        self._groups: dict[str, tuple[GroupInfo, GroupSettings]] = {}
        # Long-poll calls in progress, cancelled (answered empty) by release_waiters.
        self._held: set[grpc.aio.Call] = set()
        # Background work: the periodic catalog refresh and refreshes after a miss.
        self._tasks: set[asyncio.Task[None]] = set()
        self.drops = ConnectionDrops()  # the connection's drops, watched from `start`

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the channel, read the server info and the catalog (UnavailableError when
        the broker does not answer)."""
        if self._channel is not None:
            return
        ms = round(self._keepalive_s * 1000)
        options: list[tuple[str, int | str]] = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", ms),
            ("grpc.keepalive_timeout_ms", min(ms, 10_000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # A restarted broker is found again within a second, not grpc's 2 min.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            # Its own subchannels: a channel opened after the broker restarted on the
            # same address must not inherit the dead connection's backoff.
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if self._tls is None:
            self._channel = grpc.aio.insecure_channel(self.address, options=options)
        else:
            options.extend(self._tls.options())
            self._channel = grpc.aio.secure_channel(
                self.address, self._tls.credentials, options=options
            )
        stub = HopStub(self._channel)
        self._hop = HopFrameStream(
            self._channel,
            shown=self._shown,
            timeout_s=self._timeout,
            metadata=self._metadata,
            error=self._error,
        )
        # Nothing is written on HopSend before the broker's headers: a broker without it
        # ends the call (UNIMPLEMENTED) without reading, and a send it did not read must be
        # known not stored (send_outcome.py).
        self._hop_send = HopFrameStream(
            self._channel,
            shown=self._shown,
            timeout_s=self._timeout,
            metadata=self._metadata,
            error=self._error,
            method=SEND_METHOD,
            carries="sends",
            handshake=True,
        )
        self.hop_calls.open(stub, self._hop, self._hop_send)
        self.hop_calls.draining = False
        self._spawn(self.drops.watch(self._channel), "popmq-remote-connection")
        if not self._catalog:
            return
        try:
            self._info = await self._first_server_info()
            await self._refresh_all()
        except BaseException:
            await self.close()
            raise
        self._spawn(self._refresh_loop(), "popmq-remote-catalog")

    async def _first_server_info(self) -> ServerInfo:
        """The server info, waiting for a connection within the call timeout: grpc gives a
        connect attempt only grpc.min_reconnect_backoff_ms, so a broker up but slow to
        accept (a loaded machine) would otherwise fail the start on the first attempt."""
        request = pb.GetServerInfoRequest()
        try:
            reply = await self._stub_().GetServerInfo(
                request, timeout=self._timeout, metadata=self._metadata(), wait_for_ready=True
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise self._error(exc) from None
            state = "connected" if self.connection_up() else "no connection could be made"
            raise BrokerUnansweredError(
                f"broker {self._shown} did not answer within the call timeout "
                f"{self._timeout}s of starting ({state}); retry later",
                request_sent=True,
            ) from None
        return w.server_info_from_pb(reply)

    async def close(self) -> None:
        """Answer held long polls, stop the background refreshes, close the channel."""
        self.release_waiters()
        tasks, self._tasks = self._tasks, set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for hop in (self._hop, self._hop_send):
            if hop is not None:
                await hop.close()
        self._hop = self._hop_send = None
        self.hop_calls.close()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

    def connection_up(self) -> bool:
        """Whether the channel's connection to the broker is up (READY) now; an idle channel
        is asked to connect, so that a later look finds out."""
        channel = self._channel
        return channel is not None and (
            channel.get_state(try_to_connect=True) is grpc.ChannelConnectivity.READY
        )

    def release_waiters(self) -> None:
        """Answer every held long poll now (empty) and hold no new ones: shutdown is coming.
        The broker gives back whatever a cancelled pop had taken when its invisible time
        passes (at-least-once)."""
        self.hop_calls.draining = True
        for call in list(self._held):
            call.cancel()

    async def wait_failure(self) -> str:
        """Return why the broker failed, once it has. While it cannot be reached this
        keeps asking (an unreachable broker is not a failed one: it may come back)."""
        while True:
            try:
                response = await self._call(
                    self._stub_().WaitFailure, pb.WaitFailureRequest(), deadline_s=None
                )
                return str(response.reason)
            except UnavailableError:
                await asyncio.sleep(1.0)

    def server_info(self) -> ServerInfo:
        if self._info is None:
            raise UnavailableError(f"the remote broker {self._shown} is not started")
        return self._info

    async def metrics_snapshot(self) -> MetricsSnapshot:
        response = await self._call(
            self._stub_().GetMetricsSnapshot, pb.GetMetricsSnapshotRequest()
        )
        return w.metrics_from_pb(response)

    # -- topics ---------------------------------------------------------------------------

    async def create_topic(
        self, name: str, queues: int | None = None, *, message_type: str = "normal"
    ) -> TopicInfo:
        request = pb.CreateTopicRequest(name=name, message_type=message_type)
        if queues is not None:
            request.queues = queues
        info = w.topic_from_pb((await self._call(self._stub_().CreateTopic, request)).topic)
        self._topics[info.name] = info
        return info

    async def create_routed_topic(
        self, name: str, queues: int, *, message_type: str, route_create_time_ms: int
    ) -> TopicInfo:
        """Create the local part of a route created at `route_create_time_ms` (cluster-
        internal, not part of BrokerAPI): as create_topic, but a topic of another
        incarnation there is deleted first (BrokerService CreateTopic, `Broker.apply_topic`)."""
        request = pb.CreateTopicRequest(
            name=name,
            queues=queues,
            message_type=message_type,
            route_create_time_ms=route_create_time_ms,
        )
        info = w.topic_from_pb((await self._call(self._stub_().CreateTopic, request)).topic)
        self._topics[info.name] = info
        return info

    def topic_info(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is not None:
            return info
        validation.check_name("topic", name, allow_dlq=True)
        self._spawn(self._refresh_topic(name), "popmq-remote-topic-miss")
        raise NotFoundError(f"topic {name!r} does not exist; create it first")

    async def get_topic(self, name: str) -> tuple[TopicInfo, list[QueueStats]]:
        response = await self._call(self._stub_().GetTopic, pb.GetTopicRequest(name=name))
        info = w.topic_from_pb(response.topic)
        self._topics[info.name] = info
        return info, [w.queue_stats_from_pb(q) for q in response.queues]

    async def list_topics(self) -> list[TopicInfo]:
        response = await self._call(self._stub_().ListTopics, pb.ListTopicsRequest())
        return [w.topic_from_pb(t) for t in response.topics]

    async def delete_topic(self, name: str) -> None:
        await self._call(self._stub_().DeleteTopic, pb.DeleteTopicRequest(name=name))
        await self._refresh_catalog()  # its retry topics went with it

    async def update_topic(self, name: str, queues: int, *, broker: str | None = None) -> TopicInfo:
        if broker is not None and broker != self.server_info().broker_name:
            raise InvalidArgumentError(
                f"this server has one broker, {self.server_info().broker_name!r}, not {broker!r}",
                field="broker",
                value=broker,
            )
        request = pb.UpdateTopicRequest(name=name, queues=queues)
        info = w.topic_from_pb((await self._call(self._stub_().UpdateTopic, request)).topic)
        self._topics[info.name] = info
        return info

    async def delete_topic_guarded(self, name: str, *, force: bool = False) -> None:
        request = pb.DeleteTopicRequest(name=name, guarded=True, force=force)
        await self._call(self._stub_().DeleteTopic, request)
        await self._refresh_catalog()

    async def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueDetails], list[str]]:
        response = await self._call(self._stub_().DescribeTopic, pb.DescribeTopicRequest(name=name))
        info = w.topic_from_pb(response.topic)
        self._topics[info.name] = info
        return info, [w.queue_details_from_pb(q) for q in response.queues], list(response.groups)

    # -- groups ---------------------------------------------------------------------------

    async def create_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
    ) -> GroupInfo:
        request = _create_group_request(name, max_delivery_attempts, retry_backoff_s)
        return self._keep_group((await self._call(self._stub_().CreateGroup, request)).group)

    async def create_group_with_settings(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        settings: GroupSettings | None = None,
    ) -> GroupInfo:
        request = _create_group_request(name, max_delivery_attempts, retry_backoff_s)
        request.settings.CopyFrom(w.settings_to_pb(settings or GroupSettings()))
        return self._keep_group((await self._call(self._stub_().CreateGroup, request)).group)

    def get_group(self, name: str) -> GroupInfo:
        return self._cached_group(name)[0]

    async def list_groups(self) -> list[GroupInfo]:
        response = await self._call(self._stub_().ListGroups, pb.ListGroupsRequest())
        return [w.group_from_pb(g)[0] for g in response.groups]

    def group_settings(self, name: str) -> GroupSettings:
        return self._cached_group(name)[1]

    def subscription_filter(self, group: str, topic: str) -> tuple[str, str] | None:
        cached = self._groups.get(group)
        if cached is None:
            return None  # as the broker answers for a group it does not know
        sub = cached[1].subscription(topic)
        return (sub.filter_type, sub.expression) if sub is not None else None

    async def update_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        exponential_backoff: ExponentialBackoff | None = None,
        fifo: bool | None = None,
        set_subscriptions: Sequence[Subscription] = (),
        remove_subscriptions: Sequence[str] = (),
        consume_from: str | None = None,
        consume_from_ms: int = 0,
    ) -> GroupInfo:
        request = pb.UpdateGroupRequest(
            name=name,
            set_subscriptions=[w.subscription_to_pb(s) for s in set_subscriptions],
            remove_subscriptions=remove_subscriptions,
            consume_from_ms=consume_from_ms,
        )
        if max_delivery_attempts is not None:
            request.max_delivery_attempts = max_delivery_attempts
        if retry_backoff_s is not None:
            request.retry_backoff_s.extend(retry_backoff_s)
            request.has_retry_backoff = True
        if exponential_backoff is not None:
            request.exponential_backoff.CopyFrom(w.backoff_to_pb(exponential_backoff))
        if fifo is not None:
            request.fifo = fifo
        if consume_from is not None:
            request.consume_from = consume_from
        return self._keep_group((await self._call(self._stub_().UpdateGroup, request)).group)

    async def delete_group(self, name: str, *, force: bool = False) -> None:
        await self._call(self._stub_().DeleteGroup, pb.DeleteGroupRequest(name=name, force=force))
        await self._refresh_catalog()  # its retry topics went with it

    async def delete_group_record(self, name: str, *, revision: int) -> None:
        """`Broker.delete_group_record` (cluster-internal, not part of BrokerAPI)."""
        request = pb.DeleteGroupRequest(name=name, force=True, revision=revision)
        await self._call(self._stub_().DeleteGroup, request)
        await self._refresh_catalog()  # its retry topics went with it

    async def apply_group(
        self, name: str, state: GroupState, *, create_time_ms: int, revision: int
    ) -> GroupInfo:
        """Set a group to exactly cluster mode's record at `revision` (`Broker.apply_group`;
        cluster-internal, not part of BrokerAPI): the group as the broker now has it."""
        request = w.apply_group_to_pb(name, state, create_time_ms, revision)
        return self._keep_group((await self._call(self._stub_().ApplyGroup, request)).group)

    # -- send, delayed messages, queries --------------------------------------------------

    async def send(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        results = await self.hop_calls.send(messages)
        if self._catalog:
            for topic in {r.topic for r in results} - self._topics.keys():
                await self._refresh_topic(topic)  # auto-created by this send
        return results

    async def lookup_sends(self, topic: str, sent: Sequence[tuple[str, str]]) -> list[bool]:
        """`Broker.lookup_sends` (cluster-internal, not part of BrokerAPI): whether each
        (message id, dedup id or "") of `topic` is in the broker's dedup window."""
        request = pb.LookupSendsRequest(topic=topic, message_ids=[mid for mid, _ in sent])
        if any(dedup_id for _, dedup_id in sent):
            request.dedup_ids.extend(dedup_id for _, dedup_id in sent)
        held = list((await self._call(self._stub_().LookupSends, request)).held)
        if len(held) != len(sent):
            raise BrokerUnansweredError(
                f"broker {self._shown} answered a lookup of {len(sent)} sends with "
                f"{len(held)} answers",
                request_sent=True,
            )
        return held

    async def send_half(
        self,
        messages: Sequence[NewMessage],
        *,
        producer_group: str = "",
        check_first_s: float | None = None,
    ) -> list[SendResult]:
        request = send_wire.send_request_wire(
            messages, producer_group=producer_group, check_first_s=check_first_s
        )
        return await self.hop_calls.stored(hop_wire.HOP_SEND_HALF, request, self._stub_().SendHalf)

    async def end_transaction(
        self,
        transaction_id: str,
        *,
        commit: bool,
        source: str = "client",
        topic: str = "",
        message_id: str = "",
    ) -> TransactionInfo:
        request = pb.EndTransactionRequest(
            transaction_id=transaction_id,
            commit=commit,
            source=source,
            topic=topic,
            message_id=message_id,
        )
        response = await self._call(self._stub_().EndTransaction, request)
        return w.transaction_from_pb(response.transaction)

    async def due_checks(
        self,
        max_checks: int = 32,
        *,
        wait_s: float = 0.0,
        topics: Collection[str] | None = None,
    ) -> list[TransactionCheck]:
        request = pb.DueChecksRequest(
            max_checks=max_checks,
            wait_s=wait_s,
            topics=sorted(topics or ()),
            only_topics=topics is not None,
        )
        response = await self._call(
            self._stub_().DueChecks, request, deadline_s=wait_s + self._timeout
        )
        return [w.check_from_pb(c) for c in response.checks]

    async def get_transaction(self, transaction_id: str, *, half: bool = False) -> TransactionInfo:
        request = pb.GetTransactionRequest(transaction_id=transaction_id, half=half)
        response = await self._call(self._stub_().GetTransaction, request)
        return w.transaction_from_pb(response.transaction)

    async def list_transactions(
        self, state: str, *, topic: str | None = None, limit: int = 100
    ) -> list[TransactionInfo]:
        request = pb.ListTransactionsRequest(state=state, topic=topic, limit=limit)
        response = await self._call(self._stub_().ListTransactions, request)
        return [w.transaction_from_pb(t) for t in response.transactions]

    async def resume_discarded(self, transaction_id: str) -> TransactionInfo:
        request = pb.ResumeTransactionRequest(transaction_id=transaction_id)
        response = await self._call(self._stub_().ResumeTransaction, request)
        return w.transaction_from_pb(response.transaction)

    async def recall(self, topic: str, recall_handle: str) -> str:
        request = pb.RecallRequest(topic=topic, recall_handle=recall_handle)
        return str((await self._call(self._stub_().Recall, request)).message_id)

    async def query_message(self, topic: str, message_id: str) -> PeekedMessage:
        request = pb.QueryMessageRequest(topic=topic, message_id=message_id)
        return w.peeked_from_pb((await self._call(self._stub_().QueryMessage, request)).message)

    async def query_messages_by_key(
        self, topic: str, key: str, limit: int = 64
    ) -> list[PeekedMessage]:
        request = pb.QueryMessagesByKeyRequest(topic=topic, key=key, limit=limit)
        response = await self._call(self._stub_().QueryMessagesByKey, request)
        return [w.peeked_from_pb(m) for m in response.messages]

    # -- pop, ack, nack, change invisible time, dead letter -------------------------------

    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_messages: int | None = None,
        invisible_s: float | None = None,
        wait_s: float | None = None,
        filter_expression: str = "",
        filter_type: str = "tag",
        queue_id: int | None = None,
        max_bytes: int | None = None,
        reserve: Callable[[int], int] | None = None,
        client_id: str = "",
    ) -> list[PoppedMessage]:
        # `reserve` cannot cross to the broker: a bounded pop answers AnswerBoundError.
        request = pop_request(
            group, topic, max_messages=max_messages, invisible_s=invisible_s,
            wait_s=0.0 if self.hop_calls.draining else wait_s, filter_expression=filter_expression,
            filter_type=filter_type, queue_id=queue_id, max_bytes=max_bytes, client_id=client_id,
        )  # fmt: skip
        return hop_wire.popped_from_wire(await self._pop_answer(request, b""))

    async def pop_received(
        self,
        group: str,
        topic: str,
        *,
        max_messages: int | None = None,
        invisible_s: float | None = None,
        wait_s: float | None = None,
        filter_expression: str = "",
        filter_type: str = "tag",
        queue_id: int | None = None,
        max_bytes: int | None = None,
        client_id: str = "",
    ) -> ReceivedBatch:
        """`pop`'s deliveries as the client gets them (ReceivedPopAPI), queue ids as they are."""
        request = pop_request(
            group, topic, max_messages=max_messages, invisible_s=invisible_s, wait_s=wait_s,
            filter_expression=filter_expression, filter_type=filter_type, queue_id=queue_id,
            max_bytes=max_bytes, client_id=client_id,
        )  # fmt: skip
        return await self.pop_received_form(request, ())

    async def pop_received_form(
        self, request: pb.PopRequest, queue_ids: Sequence[int]
    ) -> ReceivedBatch:
        """The pop `request` (pop_wire's) answered as the client gets it, queues numbered by
        `queue_ids` (by local id: ReceivedForm): by the broker, or here from the
        PoppedMessages of a broker of an earlier release (the same bytes)."""
        batch = await self.hop_calls.pop_received(request, queue_ids)
        await self._popped_by(request.group)
        return batch

    async def _pop_answer(self, request: pb.PopRequest, form: bytes) -> bytes:
        """The PopResponse bytes of `request` with `form` appended (HopCalls.pop_answer)."""
        answer = await self.hop_calls.pop_answer(request, form)
        await self._popped_by(request.group)
        return answer

    async def _popped_by(self, group: str) -> None:
        """Cache a group a pop auto-created (when this remote broker keeps a catalog)."""
        if self._catalog and group not in self._groups:
            await self._refresh_group(group)

    async def _pop_long_poll(self, data: bytes, wait_s: float) -> bytes:
        """A unary Pop of `data` (a PopRequest's bytes) held up to `wait_s` (HopCalls)."""
        return await self._long_poll(self._stub_().Pop, data, wait_s, b"")

    def _default_wait_s(self) -> float:
        return self.server_info().long_polling.default_timeout_s

    async def ack(self, group: str, handles: Sequence[str]) -> list[PopMQError | None]:
        return await self.hop_calls.ack(group, handles)

    async def get_deliveries(
        self, group: str, handles: Sequence[str]
    ) -> list[PoppedMessage | PopMQError]:
        request = pb.GetDeliveriesRequest(group=group, handles=handles)
        response = await self._call(self._stub_().GetDeliveries, request)
        return [w.delivery_result_from_pb(r) for r in response.results]

    async def follow_handles(
        self, group: str, handles: Sequence[str]
    ) -> list[tuple[str, int] | PopMQError]:
        request = pb.FollowHandlesRequest(group=group, handles=handles)
        response = await self._call(self._stub_().FollowHandles, request)
        return [w.follow_result_from_pb(r) for r in response.results]

    async def change_invisible_time(
        self, group: str, handle: str, invisible_s: float
    ) -> tuple[str, int]:
        request = pb.ChangeInvisibleTimeRequest(group=group, handle=handle, invisible_s=invisible_s)
        response = await self._call(self._stub_().ChangeInvisibleTime, request)
        return response.handle, response.invisible_until_ms

    async def nack(self, group: str, handle: str, delay_s: float | None = None) -> int:
        request = pb.NackRequest(group=group, handle=handle)
        if delay_s is not None:
            request.delay_s = delay_s
        return int((await self._call(self._stub_().Nack, request)).redeliver_at_ms)

    async def dead_letter(self, group: str, handle: str) -> str:
        request = pb.DeadLetterRequest(group=group, handle=handle)
        topic = str((await self._call(self._stub_().DeadLetter, request)).topic)
        if self._catalog and topic not in self._topics:
            await self._refresh_topic(topic)  # the first dead letter created it
        return topic

    # -- reads by offset ------------------------------------------------------------------

    async def pull(
        self, topic: str, queue_id: int, offset: int, max_messages: int = PULL_DEFAULT_MESSAGES
    ) -> PulledMessages:
        request = pb.PullRequest(
            topic=topic, queue_id=queue_id, offset=offset, max_messages=max_messages
        )
        return w.pulled_from_pb(await self._call(self._stub_().Pull, request))

    async def pull_wait(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = PULL_DEFAULT_MESSAGES,
        *,
        wait_s: float = 0.0,
        filter_expression: str = "",
        filter_type: str = "tag",
    ) -> PulledMessages:
        wait_s = 0.0 if self.hop_calls.draining else wait_s
        request = pb.PullRequest(
            topic=topic,
            queue_id=queue_id,
            offset=offset,
            max_messages=max_messages,
            wait=True,
            wait_s=wait_s,
            filter_expression=filter_expression,
            filter_type=filter_type,
        )
        empty = pb.PullResponse(
            topic=topic, queue_id=queue_id, min_offset=offset, max_offset=offset, next_offset=offset
        )
        return w.pulled_from_pb(await self._long_poll(self._stub_().Pull, request, wait_s, empty))

    async def await_messages(
        self, topic: str, positions: Mapping[int, int], wait_s: float
    ) -> list[tuple[int, int]]:
        wait_s = 0.0 if self.hop_calls.draining else wait_s
        request = pb.AwaitMessagesRequest(
            topic=topic, positions=w.pairs_to_pb(positions.items()), wait_s=wait_s
        )
        response = await self._long_poll(
            self._stub_().AwaitMessages, request, wait_s, pb.AwaitMessagesResponse()
        )
        return w.pairs_from_pb(response.ready)

    async def commit_offsets(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int]]
    ) -> None:
        request = pb.CommitOffsetsRequest(group=group, topic=topic, offsets=w.pairs_to_pb(offsets))
        await self._call(self._stub_().CommitOffsets, request)

    async def get_offsets(self, group: str, topic: str) -> list[ConsumerOffset]:
        request = pb.GetOffsetsRequest(group=group, topic=topic)
        response = await self._call(self._stub_().GetOffsets, request)
        return [w.consumer_offset_from_pb(o) for o in response.offsets]

    async def offsets_at(self, topic: str, timestamp_ms: int) -> list[tuple[int, int]]:
        request = pb.OffsetsAtRequest(topic=topic, timestamp_ms=timestamp_ms)
        return w.pairs_from_pb((await self._call(self._stub_().OffsetsAt, request)).offsets)

    # -- admin ----------------------------------------------------------------------------

    async def inflight_count(self, *, group: str | None = None, topic: str | None = None) -> int:
        request = pb.InflightCountRequest()
        if group is not None:
            request.group = group
        if topic is not None:
            request.topic = topic
        return int((await self._call(self._stub_().InflightCount, request)).count)

    async def purge(self, topic: str, queue_id: int | None = None) -> int:
        request = pb.PurgeRequest(topic=topic)
        if queue_id is not None:
            request.queue_id = queue_id
        return int((await self._call(self._stub_().Purge, request)).purged)

    async def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        target: str,
        timestamp_ms: int = 0,
        offsets: dict[int, int] | None = None,
        force: bool = False,
    ) -> ResetResult:
        request = pb.ResetOffsetsRequest(
            group=group, topic=topic, target=target, timestamp_ms=timestamp_ms, force=force
        )
        if offsets is not None:
            request.offsets.update(offsets)
            request.has_offsets = True
        return w.reset_from_pb(await self._call(self._stub_().ResetOffsets, request))

    async def peek(
        self,
        topic: str,
        *,
        queue_id: int | None = None,
        offset: int | None = None,
        group: str = "",
        max_messages: int = 16,
    ) -> list[PeekedMessage]:
        request = pb.PeekRequest(topic=topic, group=group, max_messages=max_messages)
        if queue_id is not None:
            request.queue_id = queue_id
        if offset is not None:
            request.offset = offset
        response = await self._call(self._stub_().Peek, request)
        return [w.peeked_from_pb(m) for m in response.messages]

    async def redrive(
        self, group: str, *, max_messages: int | None = None, only: Sequence[tuple[int, int]] = ()
    ) -> RedriveResult:
        request = pb.RedriveRequest(
            group=group, selected=[pb.DeadLetterRef(queue_id=q, offset=o) for q, o in only]
        )
        if max_messages is not None:
            request.max_messages = max_messages
        return w.redrive_from_pb(await self._call(self._stub_().Redrive, request))

    async def group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        request = pb.GetGroupLagRequest(group=group, topic=topic)
        response = await self._call(self._stub_().GetGroupLag, request)
        return [w.lag_from_pb(q) for q in response.queues]

    async def lag_report(self, group: str, topic: str = "") -> LagReport:
        request = pb.GetLagReportRequest(group=group, topic=topic)
        return w.lag_report_from_pb(await self._call(self._stub_().GetLagReport, request))

    async def inspect_group(
        self, group: str, topic: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> GroupInspection:
        request = pb.InspectGroupRequest(
            group=group, topic=topic, page_size=page_size, page_token=page_token
        )
        return w.inspection_from_pb(await self._call(self._stub_().InspectGroup, request))

    async def message_history(
        self, topic: str, message_id: str, *, group: str = ""
    ) -> list[DeliveryEvent]:
        request = pb.GetMessageHistoryRequest(topic=topic, message_id=message_id, group=group)
        response = await self._call(self._stub_().GetMessageHistory, request)
        return [w.event_from_pb(e) for e in response.events]

    # -- calls ----------------------------------------------------------------------------

    def _stub_(self) -> HopStub:
        """The broker's stub (held by `hop_calls`); UnavailableError while not started."""
        return self.hop_calls.stub()

    async def _call(
        self, method: Callable[..., Any], request: Any, *, deadline_s: float | None = -1.0
    ) -> Any:
        """One unary call with the call timeout (or `deadline_s`; None: no deadline), its
        failure raised as a broker error."""
        deadline = self._timeout if deadline_s is not None and deadline_s < 0 else deadline_s
        try:
            return await method(request, timeout=deadline, metadata=self._metadata())
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._channel is None and task is not None and not task.cancelling():
                # close() ended the call (the broker left the cluster, or a shard's leader
                # moved): the client's request is retriable elsewhere, not cancelled.
                raise BrokerUnansweredError(
                    f"broker {self._shown} left the cluster while the call was in flight "
                    "(its connection was closed); retry",
                    request_sent=True,
                ) from None
            raise

    async def _long_poll(
        self, method: Callable[..., Any], request: Any, wait_s: float, empty: _T
    ) -> _T:
        """A call that may be held up to `wait_s` by the broker: its deadline is the wait
        plus the call timeout; release_waiters answers it `empty`."""
        call = method(request, timeout=wait_s + self._timeout, metadata=self._metadata())
        self._held.add(call)
        try:
            return cast("_T", await _answer(call))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if (
                self.hop_calls.draining
                and call.cancelled()
                and task is not None
                and not task.cancelling()
            ):
                return empty  # released by release_waiters, not cancelled by our caller
            raise
        except grpc.aio.AioRpcError as exc:
            if self.hop_calls.draining and exc.code() == grpc.StatusCode.CANCELLED:
                return empty
            raise self._error(exc) from None
        finally:
            self._held.discard(call)

    def _metadata(self) -> tuple[tuple[str, str], ...] | None:
        return None if self._signer is None else self._signer.metadata()

    def _error(self, exc: grpc.aio.AioRpcError) -> PopMQError:
        return call_error(exc, self._shown)

    # -- the catalog cache ----------------------------------------------------------------

    def _cached_group(self, name: str) -> tuple[GroupInfo, GroupSettings]:
        cached = self._groups.get(name)
        if cached is not None:
            return cached
        validation.check_name("group", name)
        self._spawn(self._refresh_group(name), "popmq-remote-group-miss")
        raise NotFoundError(f"group {name!r} does not exist")

    def _keep_group(self, message: pb.Group) -> GroupInfo:
        info, settings = w.group_from_pb(message)
        self._groups[info.name] = (info, settings)
        return info

    async def _refresh_catalog(self) -> None:
        if self._catalog:
            await self._refresh_all()

    async def _refresh_all(self) -> None:
        stub = self._stub_()
        topics = await self._call(stub.ListTopics, pb.ListTopicsRequest())
        groups = await self._call(stub.ListGroups, pb.ListGroupsRequest())
        self._topics = {t.name: w.topic_from_pb(t) for t in topics.topics}
        self._groups = {g.name: w.group_from_pb(g) for g in groups.groups}

    async def _refresh_topic(self, name: str) -> None:
        try:
            response = await self._call(self._stub_().GetTopic, pb.GetTopicRequest(name=name))
        except NotFoundError:
            self._topics.pop(name, None)
            return
        self._topics[name] = w.topic_from_pb(response.topic)

    async def _refresh_group(self, name: str) -> None:
        try:
            response = await self._call(self._stub_().GetGroup, pb.GetGroupRequest(name=name))
        except NotFoundError:
            self._groups.pop(name, None)
            return
        self._keep_group(response.group)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self._refresh_all()
            except UnavailableError as exc:
                log.debug("catalog refresh from %s failed: %s", self.address, exc)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run background cache work; its broker errors are logged, never raised."""

        async def run() -> None:
            try:
                await work
            except PopMQError as exc:
                log.debug("%s from %s failed: %s", name, self.address, exc)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # asked outside the loop: no refresh, the periodic one comes
            work.close()
            return
        task = loop.create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _answer(call: Any) -> Any:
    return await call


def _create_group_request(
    name: str, attempts: int | None, backoff: Sequence[float] | None
) -> pb.CreateGroupRequest:
    request = pb.CreateGroupRequest(name=name)
    if attempts is not None:
        request.max_delivery_attempts = attempts
    if backoff is not None:
        request.retry_backoff_s.extend(backoff)
        request.has_retry_backoff = True
    return request


def _implements_api(broker: RemoteBroker) -> tuple[BrokerAPI, ReceivedPopAPI]:
    """Never called: mypy checks here that RemoteBroker conforms to BrokerAPI and ReceivedPopAPI."""
    return broker, broker
