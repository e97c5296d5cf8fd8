"""`ClusterBroker`: the broker API (BrokerAPI) of a whole cluster, for a `popmq proxy`.

A cluster proxy is a PopMQServer whose broker is this object: it serves popmq.v1,
apache.rocketmq.v2, health and reflection exactly as `popmq serve` does, and this object
routes every operation to the brokers (docs/cluster.md):

- metadata comes from etcd through watched caches, so the synchronous members of BrokerAPI
  are answered without a call: topics from the route cache (coordination/routes.py),
  groups from the group cache (coordination/groups.py); a topic's queues are the route's
  global queues, numbered as popmq.v1 clients address them, and every value that carries a
  queue id is translated between the route's global ids and each broker's local ones
  (topology.py);
- admin writes change etcd first, with compare-and-set, and then push the change to the
  live brokers (each broker also follows etcd, broker/catalog_sync.py, to catch up after a loss);
- sends pick a broker and queue with latency fault tolerance and retry a broker failure
  inside the proxy (cluster/fault_tolerance.py): on another broker when the failed try
  provably was not stored, else on the same broker, whose dedup window makes the retry
  harmless; a client's repeat of a send goes where the first went (cluster/in_doubt.py); a
  FIFO message group keeps its queue;
- pops spread over the brokers holding the topic, with one long poll (cluster_pop.py);
- acks, changes of invisible time, nacks, dead letters and recalls go to the broker named
  in the handle (handles name their broker), so any proxy takes any handle;
- reads and admin operations over several brokers are gathered and merged
  (cluster_admin.py).

The proxy keeps only soft state: the caches, the fault table, connections, rotations.
Everything runs on the proxy's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TypeVar

from popmq.broker_core import (
    AlreadyExistsError,
    BrokerAPI,
    ConsumerOffset,
    DeliveryEvent,
    ExponentialBackoff,
    FailedPreconditionError,
    GroupInfo,
    GroupInspection,
    GroupSettings,
    InvalidArgumentError,
    LagReport,
    MetricsSnapshot,
    NewMessage,
    NotFoundError,
    PopMQError,
    PoppedMessage,
    PulledMessages,
    QueueDetails,
    QueueLag,
    QueueStats,
    ReceivedBatch,
    ReceivedPopAPI,
    ResetResult,
    SendResult,
    ServerInfo,
    Subscription,
    TopicInfo,
    TransactionCheck,
    TransactionInfo,
    UnavailableError,
    check_name,
)
from popmq.broker_core import validation as rules
from popmq.broker_core.catalog import MESSAGE_TYPES
from popmq.broker_core.offsets import PULL_DEFAULT_MESSAGES
from popmq.broker_core.types import PeekedMessage, RedriveResult
from popmq.cluster import handle_reads
from popmq.cluster.broker_numbering import number_joining_brokers
from popmq.cluster.broker_pool import BrokerPool
from popmq.cluster.cluster_admin import ClusterAdmin
from popmq.cluster.cluster_pop import ClusterPop, PopRequest
from popmq.cluster.cluster_send import ClusterSend
from popmq.cluster.fault_tolerance import FaultTable
from popmq.cluster.follower_reads import FollowerReads
from popmq.cluster.hop_calls import send_on
from popmq.cluster.remote_broker import RemoteBroker
from popmq.cluster.topology import Topology, issuer, issuers, one_issuer, topic_info
from popmq.coordination.config import HOP_KEEPALIVE_S, FaultToleranceConfig
from popmq.coordination.coordinator import Coordinator, Snapshot
from popmq.coordination.errors import CoordinationError
from popmq.coordination.groups import GroupAdmin, GroupCache, GroupRecord, GroupRules
from popmq.coordination.metadata import follow
from popmq.coordination.routes import RouteAdmin, RouteCache, RoutesConfig, TopicRoute
from popmq.security.signing import Signer
from popmq.security.tls import ChannelTLS

log = logging.getLogger(__name__)

_T = TypeVar("_T")

PROXIES_FOLDER = "proxies/"
WRITE_TIMEOUT_S = 10.0
"""How long an admin write waits for this proxy's caches to show it (read your writes)."""


class ClusterBroker:
    """BrokerAPI over the brokers of a cluster (module docstring).

    Args:
        coordinator: The cluster's coordinator (an EtcdCoordinator; the caller owns it).
        info: What `server_info` answers: the limits this proxy checks and reports, its name
            as routes show the cluster to RocketMQ clients, the defaults of new groups.
        faults: The send path's fault tolerance tables.
        call_timeout_s: Deadline of a broker call that does not wait.
        hop_keepalive_s: How often each broker connection is pinged (`[cluster]`).
        routes: Queues each live broker gets when a topic is created without a count
            (RocketMQ: 8 per broker), how long a vanished broker is held; None: defaults.
        broker_tls: How to connect to brokers that serve TLS (`[security] broker_tls`);
            None: plaintext.
        signer: Signs every broker call (`authn.cluster_signer`: the root credential).
    """

    def __init__(
        self,
        coordinator: Coordinator,
        info: ServerInfo,
        *,
        faults: FaultToleranceConfig | None = None,
        call_timeout_s: float = 10.0,
        hop_keepalive_s: float = HOP_KEEPALIVE_S,
        routes: RoutesConfig | None = None,
        broker_tls: ChannelTLS | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.coordinator = coordinator
        self._info = info
        self.routes = RouteCache(
            coordinator,
            routes or RoutesConfig(),
            # Asked only once started, when the pool (made below) exists.
            answering=lambda name: self.pool.answering(name),
        )
        self.groups = GroupCache(coordinator)
        self.topology = Topology(self.routes, self.groups)
        self.route_admin = RouteAdmin(coordinator, self.routes.config)
        self.group_admin = GroupAdmin(
            coordinator,
            GroupRules(defaults=info.groups, max_invisible_s=info.pop.max_invisible_s),
            self.topology.route,
        )
        self.pool = BrokerPool(
            call_timeout_s=call_timeout_s,
            keepalive_s=hop_keepalive_s,
            tls=broker_tls,
            signer=signer,
        )
        self.faults = FaultTable(faults)
        self.sends = ClusterSend(
            self.topology,
            self.routes,
            self.pool,
            self.faults,
            max_delay_s=info.max_delay_s,
            topic_for_send=self._topic_for_send,
        )
        self._pop = ClusterPop(self.topology, self.pool)
        self.followers = FollowerReads(
            coordinator, call_timeout_s=call_timeout_s, tls=broker_tls, signer=signer
        )
        self.admin = ClusterAdmin(self.topology, self.pool, self.followers)
        # Follows live-broker changes into the pool and the fault table (held so it runs).
        self._membership: asyncio.Task[None] | None = None
        # Follows proxies/ (held so it runs); the proxies' advertised addresses by name.
        self._proxy_watch: asyncio.Task[None] | None = None
        # Numbers the brokers that join, for the derived DLQ routes (broker_numbering.py).
        self._numbering: asyncio.Task[None] | None = None
        self._proxies: dict[str, str] = {}
        self._failed = asyncio.Event()
        self._failure = ""
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the caches (CoordinationUnavailableError if etcd does not answer within
        their ready timeout) and connect to the live brokers."""
        if self._started:
            return
        await self.routes.start()
        try:
            await self.groups.start()
            await self.pool.sync(self.routes.live_brokers)
        except BaseException:
            await self.routes.close()
            await self.groups.close()
            raise
        self._membership = asyncio.get_running_loop().create_task(
            self._follow_members(), name="popmq-cluster-members"
        )
        self._membership.add_done_callback(self._membership_done)
        self._proxy_watch = asyncio.get_running_loop().create_task(
            follow(self.coordinator, PROXIES_FOLDER, self._proxies_changed),
            name="popmq-cluster-proxies",
        )
        self._numbering = asyncio.get_running_loop().create_task(
            number_joining_brokers(self.routes, self.coordinator), name="popmq-broker-numbers"
        )
        self._started = True

    def _proxies_changed(self, snapshot: Snapshot) -> None:
        proxies: dict[str, str] = {}
        for entry in snapshot.entries.values():
            addr = entry.value.get("addr")
            if isinstance(addr, str) and addr:
                proxies[entry.path[len(PROXIES_FOLDER) :]] = addr
        self._proxies = proxies

    def proxy_addresses(self) -> list[str]:
        """The advertised HOST:PORT of every live proxy, by name (RocketMQ routes list them)."""
        return [self._proxies[name] for name in sorted(self._proxies)]

    async def _follow_members(self) -> None:
        # Broker name -> the epoch of its registration, as last seen.
        known = {name: entry.created_revision for name, entry in self.routes.live_brokers.items()}
        while True:
            await self.routes.wait_changed()
            live = self.routes.live_brokers
            await self.pool.sync(live)
            epochs = {name: entry.created_revision for name, entry in live.items()}
            for name, epoch in known.items():
                # Gone, or registered again (a restart, a replicated shard's new leader):
                # what the old process did says nothing of the new one.
                if epochs.get(name) != epoch:
                    self.faults.forget(name)
            known = epochs

    def _membership_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        self._failure = f"the cluster's route cache stopped following etcd: {error!r}"
        log.error("%s", self._failure)
        self._failed.set()

    async def close(self) -> None:
        for task in (self._membership, self._proxy_watch, self._numbering):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, CoordinationError):
                    await task
        self._membership = self._proxy_watch = self._numbering = None
        await self.sends.quarantine.close()
        await self.pool.close()
        await self.followers.close()
        await self.routes.close()
        await self.groups.close()

    def release_waiters(self) -> None:
        self._pop.draining = True
        self.pool.release_waiters()

    async def wait_failure(self) -> str:
        """Return once the proxy can no longer route: its route cache stopped following."""
        await self._failed.wait()
        return self._failure

    def server_info(self) -> ServerInfo:
        return self._info

    async def metrics_snapshot(self) -> MetricsSnapshot:
        return await self.admin.metrics_snapshot()

    # -- topics -----------------------------------------------------------------------------

    async def create_topic(
        self, name: str, queues: int | None = None, *, message_type: str = "normal"
    ) -> TopicInfo:
        """Create a topic over every live broker: `queues` on each (RocketMQ's per-broker
        count; default the RoutesConfig's `default_queues_per_broker`)."""
        check_name("topic", name)
        if message_type not in MESSAGE_TYPES:
            raise InvalidArgumentError(
                f"message type {message_type!r} is unknown: use one of {', '.join(MESSAGE_TYPES)}",
                field="message_type",
                value=message_type,
            )
        route = await self.route_admin.create_topic(
            name, queues_per_broker=queues, message_type=message_type
        )
        await self._after_route_change(route)
        return topic_info(route)

    async def add_queues(self, name: str, broker: str, queues: int) -> TopicInfo:
        """Give `broker` (a live one) `queues` queues of the topic in all: spreads the topic
        to a broker that joined, or grows it there. Queues are never removed."""
        route = self.topology.route(name)
        current = route.queue_counts.get(broker, 0)
        if queues < current:
            raise InvalidArgumentError(
                f"topic {name!r} has {current} queues on broker {broker!r}; queues are never "
                f"removed, so give at least {current}",
                field="queues",
                value=queues,
                allowed=f">= {current}",
            )
        if queues == current:
            return topic_info(route)
        grown = await self.route_admin.add_queues(name, broker, queues - current)
        await self._after_route_change(grown)
        return topic_info(grown)

    async def _after_route_change(self, route: TopicRoute) -> None:
        """Push a route's topic to its live brokers, then wait until this proxy serves it."""
        counts = route.queue_counts

        async def push(broker: str, remote: RemoteBroker) -> None:
            try:
                await remote.create_routed_topic(
                    route.topic,
                    counts[broker],
                    message_type=route.message_type,
                    route_create_time_ms=route.create_time_ms,
                )
            except AlreadyExistsError:
                await remote.update_topic(route.topic, counts[broker])

        await self._each_live(route.brokers, push, what=f"create topic {route.topic!r}")
        await _visible(self.routes.wait_for(route.revision, timeout_s=WRITE_TIMEOUT_S))

    def topic_info(self, name: str) -> TopicInfo:
        return self.topology.info(name)

    async def get_topic(self, name: str) -> tuple[TopicInfo, list[QueueStats]]:
        return await self.admin.get_topic(name)

    async def list_topics(self) -> list[TopicInfo]:
        return await self.admin.list_topics()

    async def delete_topic(self, name: str) -> None:
        await self._delete_topic(name)

    async def update_topic(self, name: str, queues: int, *, broker: str | None = None) -> TopicInfo:
        """Give every broker holding the topic (or only `broker`) `queues` queues of it
        (RocketMQ's per-broker count); see add_queues."""
        rules.check_range("queues", queues, 1, rules.MAX_QUEUES, field="queues")
        if broker is not None:
            check_name("broker", broker)
            return await self.add_queues(name, broker, queues)
        route = self.topology.route(name)
        for broker in route.brokers:
            info = await self.add_queues(name, broker, queues)
        return info

    async def delete_topic_guarded(self, name: str, *, force: bool = False) -> None:
        if not force:
            inflight = await self.admin.inflight_count(topic=name)
            if inflight:
                raise FailedPreconditionError(
                    f"topic {name!r} has {inflight} messages in flight; wait until they are "
                    "acked or redelivered, or delete with force"
                )
        await self._delete_topic(name)

    async def _delete_topic(self, name: str) -> None:
        route = self.topology.route(name)
        if route.kind != "normal":
            raise InvalidArgumentError(
                f"topic {name!r} is a {route.kind} topic; in cluster mode it lives on every "
                "broker and goes with its group",
                field="topic",
                value=name,
            )
        revision = await self.route_admin.delete_topic(name)
        self.faults.forget_topic(name)

        async def drop(_: str, remote: RemoteBroker) -> None:
            with contextlib.suppress(NotFoundError):
                await remote.delete_topic(name)

        await self._each_live(route.brokers, drop, what=f"delete topic {name!r}")
        await _visible(self.routes.wait_for(revision, timeout_s=WRITE_TIMEOUT_S))

    async def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueDetails], list[str]]:
        return await self.admin.describe_topic(name)

    # -- groups -----------------------------------------------------------------------------

    async def create_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
    ) -> GroupInfo:
        return await self.create_group_with_settings(
            name, max_delivery_attempts=max_delivery_attempts, retry_backoff_s=retry_backoff_s
        )

    async def create_group_with_settings(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        settings: GroupSettings | None = None,
    ) -> GroupInfo:
        record = await self.group_admin.create(
            name,
            max_delivery_attempts=max_delivery_attempts,
            retry_backoff_s=retry_backoff_s,
            settings=settings,
        )
        await self._after_group_change(record)
        return record.info()

    async def _after_group_change(self, record: GroupRecord) -> None:
        """Push a group's settings to every live broker, then wait until this proxy's cache
        serves them."""

        async def push(_: str, remote: RemoteBroker) -> None:
            await remote.apply_group(
                record.name,
                record.state,
                create_time_ms=record.create_time_ms,
                revision=record.revision,
            )

        await self._each_live(self.pool.names(), push, what=f"apply group {record.name!r}")
        await _visible(self.groups.wait_for(record.revision, timeout_s=WRITE_TIMEOUT_S))

    def get_group(self, name: str) -> GroupInfo:
        return self.groups.get(name).info()

    async def list_groups(self) -> list[GroupInfo]:
        return [self.groups.groups[n].info() for n in sorted(self.groups.groups)]

    def group_settings(self, name: str) -> GroupSettings:
        return self.groups.get(name).settings

    def subscription_filter(self, group: str, topic: str) -> tuple[str, str] | None:
        record = self.groups.groups.get(group)
        if record is None:
            return None
        sub = record.settings.subscription(topic)
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
        record = await self.group_admin.update(
            name,
            max_delivery_attempts=max_delivery_attempts,
            retry_backoff_s=retry_backoff_s,
            exponential_backoff=exponential_backoff,
            fifo=fifo,
            set_subscriptions=set_subscriptions,
            remove_subscriptions=remove_subscriptions,
            consume_from=consume_from,
            consume_from_ms=consume_from_ms,
        )
        await self._after_group_change(record)
        return record.info()

    async def delete_group(self, name: str, *, force: bool = False) -> None:
        check_name("group", name)
        self.groups.get(name)  # NotFoundError before anything is asked of a broker
        if not force:
            inflight = await self.admin.inflight_count(group=name)
            if inflight:
                raise FailedPreconditionError(
                    f"group {name!r} has {inflight} messages in flight; wait until they are "
                    "acked or redelivered, or delete with force"
                )
        revision = await self.group_admin.delete(name)

        async def drop(_: str, remote: RemoteBroker) -> None:
            with contextlib.suppress(NotFoundError):
                await remote.delete_group_record(name, revision=revision)

        await self._each_live(self.pool.names(), drop, what=f"delete group {name!r}")
        await _visible(self.groups.wait_for(revision, timeout_s=WRITE_TIMEOUT_S))

    async def _ensure_group(self, group: str) -> None:
        """A group used before it was created gets a record with the defaults (as a broker
        auto-creates one), so every proxy reports the same group."""
        if group not in self.groups.groups:
            check_name("group", group)
            record = await self.group_admin.ensure(group)
            await self._after_group_change(record)  # every broker knows it, not only the first

    # -- send, delayed messages, queries ----------------------------------------------------

    async def send(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        """Store messages; each topic's batch goes to one broker, which spreads it over its
        queues (retried after a broker failure: on another broker when it provably was not
        stored, else on the same one); each FIFO message group's to its group's queue. A
        repeat of a send this proxy remembers goes to the broker the first went to
        (cluster_send.py)."""
        return await self.sends.route(messages, send_on)

    async def send_repeat(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        """`send` for a client's repeat of a send whose answer it did not get: one this
        proxy does not remember is looked up on the topic's brokers first, so that it
        reaches the copy stored through another proxy (cluster_send.py; RepeatedSendAPI)."""
        return await self.sends.route(messages, send_on, repeat=True)

    async def _topic_for_send(self, topic: str) -> TopicRoute:
        """The topic's route; created on first use when auto_create_topics is on (the name
        was checked with the send's messages, validation.check_send)."""
        try:
            return self.topology.route(topic)
        except NotFoundError:
            if not self._info.auto_create_topics:
                raise
        route = await self.route_admin.create_topic(topic, if_absent=True)
        await self._after_route_change(route)
        return route

    # -- transactions: a half message lives on one broker, named by its transaction id -----

    async def send_half(
        self,
        messages: Sequence[NewMessage],
        *,
        producer_group: str = "",
        check_first_s: float | None = None,
    ) -> list[SendResult]:
        """Store half messages as `send` stores messages, retried as a send is; each
        transaction id names the broker (shard) that holds it, so any proxy can end it
        (unlike RocketMQ, #9431)."""
        return await self.sends.route_half(messages, producer_group, check_first_s)

    async def send_half_repeat(
        self,
        messages: Sequence[NewMessage],
        *,
        producer_group: str = "",
        check_first_s: float | None = None,
    ) -> list[SendResult]:
        """`send_half` for a client's repeat, looked up first as `send_repeat` is."""
        return await self.sends.route_half(messages, producer_group, check_first_s, repeat=True)

    async def end_transaction(
        self,
        transaction_id: str,
        *,
        commit: bool,
        source: str = "client",
        topic: str = "",
        message_id: str = "",
    ) -> TransactionInfo:
        broker = issuer(transaction_id, "transaction id")
        info = await self.pool.get(broker).end_transaction(
            transaction_id, commit=commit, source=source, topic=topic, message_id=message_id
        )
        return self._global_transaction(info, broker)

    async def due_checks(
        self,
        max_checks: int = 32,
        *,
        wait_s: float = 0.0,
        topics: Collection[str] | None = None,
    ) -> list[TransactionCheck]:
        """Every live broker's due checks (of `topics`, when given: those this proxy has a
        producer for), each broker claiming its own, waiting up to `wait_s`.

        A broker that fails is logged and skipped: its checks come due again later."""
        names = self.pool.names()
        if not names:
            await asyncio.sleep(wait_s)
            return []

        async def one(name: str) -> list[TransactionCheck]:
            try:
                checks = await self.pool.get(name).due_checks(
                    max_checks, wait_s=wait_s, topics=topics
                )
            except UnavailableError as error:
                log.info("cannot take due transaction checks from %s: %s", name, error)
                return []
            return [
                dataclasses.replace(c, queue_id=self.topology.global_id(c.topic, name, c.queue_id))
                for c in checks
            ]

        found = await _all([one(name) for name in names])
        return [check for checks in found for check in checks]

    async def get_transaction(self, transaction_id: str, *, half: bool = False) -> TransactionInfo:
        broker = issuer(transaction_id, "transaction id")
        info = await self.pool.get(broker).get_transaction(transaction_id, half=half)
        return self._global_transaction(info, broker)

    async def list_transactions(
        self, state: str, *, topic: str | None = None, limit: int = 100
    ) -> list[TransactionInfo]:
        names = self.pool.names()
        found = await _all(
            [self.pool.get(n).list_transactions(state, topic=topic, limit=limit) for n in names]
        )
        listed = [
            self._global_transaction(info, name)
            for name, infos in zip(names, found, strict=True)
            for info in infos
        ]
        return sorted(listed, key=lambda t: (t.created_ms, t.transaction_id))[:limit]

    async def resume_discarded(self, transaction_id: str) -> TransactionInfo:
        broker = issuer(transaction_id, "transaction id")
        info = await self.pool.get(broker).resume_discarded(transaction_id)
        return self._global_transaction(info, broker)

    def _global_transaction(self, info: TransactionInfo, broker: str) -> TransactionInfo:
        """The broker's answer with its queue id as the cluster numbers it."""
        if info.queue_id < 0:
            return info
        return dataclasses.replace(
            info, queue_id=self.topology.global_id(info.topic, broker, info.queue_id)
        )

    async def recall(self, topic: str, recall_handle: str) -> str:
        self.topology.route(topic)
        broker = issuer(recall_handle, "recall handle")
        return await self.pool.get(broker).recall(topic, recall_handle)

    async def query_message(self, topic: str, message_id: str) -> PeekedMessage:
        return await self.admin.query_message(topic, message_id)

    async def query_messages_by_key(
        self, topic: str, key: str, limit: int = 64
    ) -> list[PeekedMessage]:
        return await self.admin.query_messages_by_key(topic, key, limit)

    # -- pop, ack, nack, change invisible time, dead letter ---------------------------------

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
        """Pop up to max_messages from the topic's brokers (cluster_pop.py); each broker
        records `client_id` with the deliveries it makes.

        `reserve` is not used: a broker across the network cannot ask the proxy for more
        bytes in the middle of its pop, so a pop bounded by max_bytes answers
        AnswerBoundError as it would without it."""
        request, wait = await self._pop_request(
            group, topic, max_messages, invisible_s, wait_s, filter_expression, filter_type,
            queue_id, max_bytes, client_id,
        )  # fmt: skip
        if queue_id is not None:
            return await self._pop.pop_queue(request, queue_id, wait)
        return await self._pop.pop(request, wait)

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
        """`pop`'s deliveries as its client gets them, written so by the brokers
        (ReceivedPopAPI): the same checks, sweep and errors."""
        request, wait = await self._pop_request(
            group, topic, max_messages, invisible_s, wait_s, filter_expression, filter_type,
            queue_id, max_bytes, client_id,
        )  # fmt: skip
        if queue_id is not None:
            return await self._pop.pop_queue_received(request, queue_id, wait)
        return await self._pop.pop_received(request, wait)

    async def _pop_request(
        self,
        group: str,
        topic: str,
        max_messages: int | None,
        invisible_s: float | None,
        wait_s: float | None,
        filter_expression: str,
        filter_type: str,
        queue_id: int | None,
        max_bytes: int | None,
        client_id: str,
    ) -> tuple[PopRequest, float]:
        """A pop's checked arguments and its wait; its group made sure of."""
        # The core's checks (ServerInfo.check_pop, the rule every broker's pop applies
        # again), here as well because this pop is more than one broker call: it must be
        # refused before its group is written to etcd and before it fans out, and it needs
        # the wait (its own long poll) and one batch size to split over the brokers.
        checked = self._info.check_pop(
            group,
            topic,
            max_messages=max_messages,
            invisible_s=invisible_s,
            wait_s=wait_s,
            max_bytes=max_bytes,
        )
        rules.check_client_id(client_id)
        # One filter for the whole pop: the group's declared subscription as this proxy's
        # group cache has it, so no broker whose catalog sync lags filters otherwise.
        filter_type, filter_expression = rules.pop_filter(
            self, group, topic, filter_expression, filter_type
        )
        route = self.topology.route(topic)
        if queue_id is not None:
            route.queue(queue_id)  # InvalidArgumentError naming the range, before any call
        await self._ensure_group(group)
        request = PopRequest(
            group,
            topic,
            checked.max_messages,
            checked.invisible_s,
            filter_expression,
            filter_type,
            max_bytes,
            client_id,
        )
        return request, checked.wait_s

    async def ack(self, group: str, handles: Sequence[str]) -> list[PopMQError | None]:
        """Ack each handle on the broker that issued it; one result per handle. A handle of
        a broker that is not live now gets a retriable UnavailableError: its message comes
        back after its invisible time once the broker is back (at-least-once)."""
        check_name("group", group)
        if len(handles) > rules.MAX_HANDLES:
            raise InvalidArgumentError(
                f"{len(handles)} receipt handles: at most {rules.MAX_HANDLES} per ack",
                field="receipt_handles",
                allowed=f"1..{rules.MAX_HANDLES}",
            )
        found = issuers(handles)
        only = one_issuer(found)
        if only is not None:  # one pop's handles: no per-handle routing
            try:
                answers = await self.pool.get(only).hop_calls.ack(group, handles)
            except PopMQError as error:
                return [error] * len(handles)
            if len(answers) != len(handles):
                raise ValueError(f"broker {only} answered {len(answers)} of {len(handles)} acks")
            return answers
        results: list[PopMQError | None] = [None] * len(handles)
        by_broker: dict[str, list[int]] = {}
        for index, name in enumerate(found):
            if isinstance(name, str):
                by_broker.setdefault(name, []).append(index)
            else:
                results[index] = name

        async def ack_on(broker: str, indexes: list[int]) -> None:
            try:
                answers = await self.pool.get(broker).hop_calls.ack(
                    group, [handles[i] for i in indexes]
                )
            except PopMQError as error:
                for index in indexes:
                    results[index] = error
                return
            for index, answer in zip(indexes, answers, strict=True):
                results[index] = answer

        if len(by_broker) == 1:  # the usual batch: one broker's pop, no task to gather
            ((broker, indexes),) = by_broker.items()
            await ack_on(broker, indexes)
        else:
            await asyncio.gather(*(ack_on(b, idx) for b, idx in by_broker.items()))
        return results

    async def get_deliveries(
        self, group: str, handles: Sequence[str]
    ) -> list[PoppedMessage | PopMQError]:
        """Each handle's delivery, read from the broker that issued it (one result per
        handle, in order); queue ids as the route numbers them (handle_reads.py)."""
        return await handle_reads.get_deliveries(self.pool, self.topology, group, handles)

    async def follow_handles(
        self, group: str, handles: Sequence[str]
    ) -> list[tuple[str, int] | PopMQError]:
        """Each handle's newest handle, from the broker that issued it (one result per
        handle, in order): a delivery's handles all come from that broker."""
        return await handle_reads.follow_handles(self.pool, group, handles)

    async def change_invisible_time(
        self, group: str, handle: str, invisible_s: float
    ) -> tuple[str, int]:
        return await self.pool.get(issuer(handle)).change_invisible_time(group, handle, invisible_s)

    async def nack(self, group: str, handle: str, delay_s: float | None = None) -> int:
        return await self.pool.get(issuer(handle)).nack(group, handle, delay_s)

    async def dead_letter(self, group: str, handle: str) -> str:
        return await self.pool.get(issuer(handle)).dead_letter(group, handle)

    # -- reads by offset --------------------------------------------------------------------

    async def pull(
        self, topic: str, queue_id: int, offset: int, max_messages: int = PULL_DEFAULT_MESSAGES
    ) -> PulledMessages:
        queue = self.topology.locate(topic, queue_id)
        pulled = await self.pool.get(queue.broker).pull(topic, queue.queue_id, offset, max_messages)
        return _pulled_as(pulled, queue_id)

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
        queue = self.topology.locate(topic, queue_id)
        pulled = await self.pool.get(queue.broker).pull_wait(
            topic,
            queue.queue_id,
            offset,
            max_messages,
            wait_s=0.0 if self._pop.draining else wait_s,
            filter_expression=filter_expression,
            filter_type=filter_type,
        )
        return _pulled_as(pulled, queue_id)

    async def await_messages(
        self, topic: str, positions: Mapping[int, int], wait_s: float
    ) -> list[tuple[int, int]]:
        return await self.admin.await_messages(
            topic, positions, 0.0 if self._pop.draining else wait_s
        )

    async def commit_offsets(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int]]
    ) -> None:
        await self.admin.commit_offsets(group, topic, offsets)

    async def get_offsets(self, group: str, topic: str) -> list[ConsumerOffset]:
        return await self.admin.get_offsets(group, topic)

    async def offsets_at(self, topic: str, timestamp_ms: int) -> list[tuple[int, int]]:
        return await self.admin.offsets_at(topic, timestamp_ms)

    # -- admin ------------------------------------------------------------------------------

    async def inflight_count(self, *, group: str | None = None, topic: str | None = None) -> int:
        return await self.admin.inflight_count(group=group, topic=topic)

    async def purge(self, topic: str, queue_id: int | None = None) -> int:
        return await self.admin.purge(topic, queue_id)

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
        return await self.admin.reset_offsets(
            group, topic, target=target, timestamp_ms=timestamp_ms, offsets=offsets, force=force
        )

    async def peek(
        self,
        topic: str,
        *,
        queue_id: int | None = None,
        offset: int | None = None,
        group: str = "",
        max_messages: int = 16,
    ) -> list[PeekedMessage]:
        return await self.admin.peek(
            topic, queue_id=queue_id, offset=offset, group=group, max_messages=max_messages
        )

    async def redrive(
        self, group: str, *, max_messages: int | None = None, only: Sequence[tuple[int, int]] = ()
    ) -> RedriveResult:
        self.groups.get(group)
        return await self.admin.redrive(group, max_messages=max_messages, only=only)

    async def group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        return await self.admin.group_lag(group, topic)

    async def lag_report(self, group: str, topic: str = "") -> LagReport:
        return await self.admin.lag_report(group, topic)

    async def inspect_group(
        self, group: str, topic: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> GroupInspection:
        return await self.admin.inspect_group(
            group, topic, page_size=page_size, page_token=page_token
        )

    async def message_history(
        self, topic: str, message_id: str, *, group: str = ""
    ) -> list[DeliveryEvent]:
        return await self.admin.message_history(topic, message_id, group=group)

    # -- helpers ----------------------------------------------------------------------------

    async def _each_live(
        self,
        brokers: Sequence[str],
        work: Callable[[str, RemoteBroker], Awaitable[None]],
        *,
        what: str,
    ) -> None:
        """Run `work` on each live broker among `brokers`, concurrently. A broker that fails
        is logged, not raised: etcd holds the change and the broker's catalog sync applies it
        when it can; a request error (the same on every broker) is raised."""

        async def one(broker: str) -> None:
            try:
                remote = self.pool.get(broker)
            except UnavailableError:
                return  # not live: its sync applies the change when it is back
            try:
                await work(broker, remote)
            except UnavailableError as error:
                log.warning("%s on broker %s deferred to its catalog sync: %s", what, broker, error)

        await _all([one(broker) for broker in brokers])


async def _visible(wait: Awaitable[None]) -> None:
    """Wait until this proxy's cache shows a write it made; a retriable error if it does not
    within WRITE_TIMEOUT_S (the write is in etcd: a retry finds it done or conflicting)."""
    try:
        await wait
    except TimeoutError:
        raise UnavailableError(
            f"the change is stored in etcd but this proxy's cache did not show it within "
            f"{WRITE_TIMEOUT_S:g}s (is its etcd watch behind?); read it again before retrying"
        ) from None


def _pulled_as(pulled: PulledMessages, queue_id: int) -> PulledMessages:
    """A broker's pull answer under the queue's global id."""
    return dataclasses.replace(pulled, queue_id=queue_id)


async def _all(work: Sequence[Awaitable[_T]]) -> list[_T]:
    """Await all; if any fails, the others still finish and the first error is raised."""
    results = await asyncio.gather(*work, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def _implements_api(broker: ClusterBroker) -> tuple[BrokerAPI, ReceivedPopAPI]:
    """Never called: mypy checks that ClusterBroker conforms to BrokerAPI and ReceivedPopAPI."""
    return broker, broker
