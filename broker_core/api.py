"""The broker API: what a front end (the proxy) may ask of a broker, as a typing Protocol.

`Broker` (broker.py) implements it in-process; in cluster mode `RemoteBroker` puts the same
operations behind one broker's gRPC BrokerService and `ClusterBroker` spreads them over a
cluster's brokers, so the API is shaped for a remote implementation:
- value types are frozen dataclasses or core value types (no live broker objects cross it);
- nothing calls back into the caller: metrics are pulled (`metrics_snapshot`, histogram
  buckets included), failure is awaited (`wait_failure`), limits are read once
  (`server_info`);
- everything a broker answers from its store or its live state is async: sends, pops,
  acks, long polls, admin writes, and every read (topics with their queues' offsets,
  listings, queries, pull, offsets, peek, lag, in-flight counts, the metrics snapshot).
  A remote broker answers them over the wire; the in-process one answers at once.
A few members stay synchronous because a cluster-mode proxy answers them without asking a
broker: from its metadata cache (topics and groups as the catalog in etcd has them, fed by
a watch), from what it read once at start, or by computing locally. BrokerAPI's docstring
says why for each.

Conformance is checked statically (broker.py assigns a Broker to a BrokerAPI, which mypy
verifies) and by tests/unit/broker_core/test_broker_api.py, which compares every member's signature
with the facade's and pins which members are synchronous.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from popmq.broker_core import validation
from popmq.broker_core.catalog import GroupInfo, TopicInfo
from popmq.broker_core.config import BrokerConfig, GroupDefaults, LongPollingConfig, PopConfig
from popmq.broker_core.errors import PopMQError
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
from popmq.broker_core.validation import PopArguments


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Observations per bucket at one moment (Prometheus style, but not cumulative)."""

    bounds: tuple[float, ...]
    """Upper bounds of the buckets; a last +Inf bucket is implied."""
    counts: tuple[int, ...]
    """Observations per bucket, one more than `bounds` (the +Inf bucket last)."""
    total: float
    """Sum of the observed values."""

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """The broker's counters and gauges at one moment, for the metrics exporter.

    Counters are monotonic since the broker started; (group, topic) keys count retry-topic
    traffic under the user topic.
    """

    sent: Mapping[str, int]
    """Messages stored by sends, per topic."""
    popped: Mapping[tuple[str, str], int]
    acked: Mapping[tuple[str, str], int]
    nacked: Mapping[tuple[str, str], int]
    revived: Mapping[tuple[str, str], int]
    dead_lettered: Mapping[tuple[str, str], int]
    long_polls_held: int
    """Pops and arrival watches held right now."""
    buffered_checkpoints: int
    """Checkpoints held in memory, not yet persisted."""
    live_checkpoints: int
    """Checkpoints that still owe a message."""
    write_batches: int
    write_batches_failed: int
    write_jobs: int
    """Write jobs (sends, acks, checkpoint writes...) committed in all batches."""
    batch_jobs: HistogramSnapshot
    """Write jobs per committed group-commit batch."""
    write_seconds_synced: HistogramSnapshot
    """Time of one fsynced batch write, fsync included."""
    write_seconds_unsynced: HistogramSnapshot
    store_bytes: int
    """Bytes of the store's files, measured by the broker on its own disk."""
    topics: int
    groups: int
    disk_free_bytes: int | None = None
    """Bytes still free for the store on its data dir's filesystem (statvfs f_bavail), as
    the broker measured them; None when not measured (a sum over brokers has none)."""
    replication: ReplicationSnapshot | None = None
    """A replicated shard's leader's replication state; None when not replicated."""
    transactions_open: int = 0
    """Half messages waiting for a commit, a rollback or a check (a gauge)."""
    half_sent: Mapping[str, int] = field(default_factory=dict)
    """Half messages stored, per topic."""
    transaction_checks: Mapping[str, int] = field(default_factory=dict)
    """Checks handed out, per topic."""
    transaction_resolutions: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """Resolutions per (resolution "commit" / "rollback", source "client" / "server_check"
    / "admin")."""
    transactions_discarded: Mapping[str, int] = field(default_factory=dict)
    """Transactions discarded after transactions.check_max checks, per topic."""


@dataclass(frozen=True, slots=True)
class FollowerReplication:
    """One follower as its shard's leader sees it (docs/replication.md)."""

    replica: str
    in_sync: bool
    """In the in-sync set: sends wait for it, and it may be elected."""
    acked_lsn: int
    """The last batch it wrote and fsynced."""
    lag_batches: int
    lag_bytes: int
    """Bytes of the batches it lacks (as far as the leader's in-memory log reaches)."""
    lag_s: float
    """Age of the oldest batch it lacks (0 when it holds the log but for batches in flight)."""


@dataclass(frozen=True, slots=True)
class ReplicationSnapshot:
    """A replicated shard's leader: its term, log position and followers."""

    replica: str
    """The leader replica's name."""
    epoch: int
    lsn: int
    """The last batch of its log."""
    mode: str
    """sync or async."""
    min_insync: int
    followers: tuple[FollowerReplication, ...]
    """Connected followers and in-sync ones that are not connected."""
    written_bytes: int
    """Bytes of batches written in this term."""
    terms: int
    """Times this replica process became its shard's leader."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The broker's identity and the limits a front end checks or shows (read once)."""

    broker_name: str
    data_dir: str
    """Where the broker keeps its store, for display only (it may be on another host)."""
    pop: PopConfig
    long_polling: LongPollingConfig
    groups: GroupDefaults
    """Settings a group gets when created without them."""
    max_delay_s: float
    """Longest delivery delay a sent message may ask for."""
    auto_create_topics: bool

    @classmethod
    def of(cls, config: BrokerConfig) -> ServerInfo:
        """A broker's, from its settings."""
        return cls(
            broker_name=config.broker_name,
            data_dir=str(config.store.data_dir.resolve()),
            pop=config.pop,
            long_polling=config.long_polling,
            groups=config.groups,
            max_delay_s=config.messages.max_delay_s,
            auto_create_topics=config.auto_create_topics,
        )

    def pop_arguments(
        self,
        *,
        max_messages: int | None = None,
        invisible_s: float | None = None,
        wait_s: float | None = None,
    ) -> PopArguments:
        """A pop's batch size, invisible duration and long-polling wait as this broker
        takes them: defaulted and checked against these limits (validation.pop_arguments,
        the rule every BrokerAPI's pop applies), for a front end that needs them before it
        pops."""
        return validation.pop_arguments(
            self.pop,
            self.long_polling,
            max_messages=max_messages,
            invisible_s=invisible_s,
            wait_s=wait_s,
        )

    def check_pop(
        self,
        group: str,
        topic: str,
        *,
        max_messages: int | None = None,
        invisible_s: float | None = None,
        wait_s: float | None = None,
        max_bytes: int | None = None,
    ) -> PopArguments:
        """What a BrokerAPI's pop checks before it reads, against these limits
        (validation.check_pop: names, max_bytes, then `pop_arguments`)."""
        return validation.check_pop(
            self.pop,
            self.long_polling,
            group,
            topic,
            max_messages=max_messages,
            invisible_s=invisible_s,
            wait_s=wait_s,
            max_bytes=max_bytes,
        )


@runtime_checkable
class TransactionAPI(Protocol):
    """Transactional messages (broker_core/transactions.py): what a front end needs to take
    half messages, end transactions, hand out checks to producers, and show them to an
    operator. All async: a remote broker answers each with a call.

    Part of BrokerAPI; kept as a Protocol of its own so the proxy's check loop can be typed
    against what it uses (tests/unit/broker_core/test_broker_api.py checks the signatures).
    """

    async def send_half(
        self,
        messages: Sequence[NewMessage],
        *,
        producer_group: str = "",
        check_first_s: float | None = None,
    ) -> list[SendResult]: ...

    async def end_transaction(
        self,
        transaction_id: str,
        *,
        commit: bool,
        source: str = "client",
        topic: str = "",
        message_id: str = "",
    ) -> TransactionInfo: ...

    async def due_checks(
        self,
        max_checks: int = 32,
        *,
        wait_s: float = 0.0,
        topics: Collection[str] | None = None,
    ) -> list[TransactionCheck]: ...

    async def get_transaction(
        self, transaction_id: str, *, half: bool = False
    ) -> TransactionInfo: ...

    async def list_transactions(
        self, state: str, *, topic: str | None = None, limit: int = 100
    ) -> list[TransactionInfo]: ...

    async def resume_discarded(self, transaction_id: str) -> TransactionInfo: ...


@runtime_checkable
class RepeatedSendAPI(Protocol):
    """A broker that routes a client's repeat of a send apart from a first send (a cluster
    proxy's, which finds where the first went: docs/cluster.md). Not part of BrokerAPI: a
    proxy whose broker lacks it sends a repeat as any send, as one broker core does, whose
    dedup window answers it."""

    async def send_repeat(self, messages: Sequence[NewMessage]) -> list[SendResult]: ...

    async def send_half_repeat(
        self,
        messages: Sequence[NewMessage],
        *,
        producer_group: str = "",
        check_first_s: float | None = None,
    ) -> list[SendResult]: ...


@runtime_checkable
class ReceivedPopAPI(Protocol):
    """A broker whose pops can answer their deliveries already encoded as the client gets
    them (a cluster proxy's: its brokers write them so, and it passes them on unread,
    docs/broker-service.md). Not part of BrokerAPI: a proxy whose broker lacks it pops
    PoppedMessages and encodes them itself. `pop_received` takes `pop`'s arguments but
    `reserve`, checks them as `pop` does and answers what `pop` would, in that form."""

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
    ) -> ReceivedBatch: ...


class BrokerAPI(TransactionAPI, Protocol):
    """The operations the proxy needs from a broker. See the module docstring for the rules.

    Every member is async except these, which a cluster-mode proxy answers without a call:
    - `topic_info`: catalog metadata, answered from the proxy's cache of the catalog (etcd);
    - `get_group`: likewise, a group's settings as the catalog has them;
    - `group_settings`: likewise (FIFO flag, subscriptions, backoff are group metadata);
    - `subscription_filter`: likewise, part of the group's settings;
    - `server_info`: identity and frozen limits, read once at start and kept (a front end
      has a pop's arguments defaulted and checked against them, locally, by
      `ServerInfo.pop_arguments`);
    - `release_waiters`: a shutdown signal that returns nothing and waits for nothing.
    The rest reads state that only the broker owning the store has current (queue offsets,
    stored messages, lag, counters) or is an admin read the broker answers (listings,
    describe_topic), so a remote implementation makes a call for each.
    """

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def release_waiters(self) -> None:
        """Answer held long polls now and hold no new ones (shutdown is coming)."""
        ...

    async def wait_failure(self) -> str:
        """Return, once it happens, why the broker stopped doing its job (a dead background
        task): the server's health turns NOT_SERVING on it."""
        ...

    def server_info(self) -> ServerInfo: ...

    async def metrics_snapshot(self) -> MetricsSnapshot: ...

    # -- topics -----------------------------------------------------------------------------

    async def create_topic(
        self, name: str, queues: int | None = None, *, message_type: str = "normal"
    ) -> TopicInfo: ...

    def topic_info(self, name: str) -> TopicInfo: ...

    async def get_topic(self, name: str) -> tuple[TopicInfo, list[QueueStats]]: ...

    async def list_topics(self) -> list[TopicInfo]: ...

    async def delete_topic(self, name: str) -> None: ...

    async def update_topic(
        self, name: str, queues: int, *, broker: str | None = None
    ) -> TopicInfo: ...

    async def delete_topic_guarded(self, name: str, *, force: bool = False) -> None: ...

    async def describe_topic(
        self, name: str
    ) -> tuple[TopicInfo, list[QueueDetails], list[str]]: ...

    # -- groups -----------------------------------------------------------------------------

    async def create_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
    ) -> GroupInfo: ...

    async def create_group_with_settings(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        settings: GroupSettings | None = None,
    ) -> GroupInfo: ...

    def get_group(self, name: str) -> GroupInfo: ...

    async def list_groups(self) -> list[GroupInfo]: ...

    def group_settings(self, name: str) -> GroupSettings: ...

    def subscription_filter(self, group: str, topic: str) -> tuple[str, str] | None: ...

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
    ) -> GroupInfo: ...

    async def delete_group(self, name: str, *, force: bool = False) -> None: ...

    # -- send, delayed messages, queries ----------------------------------------------------

    async def send(self, messages: Sequence[NewMessage]) -> list[SendResult]: ...

    async def recall(self, topic: str, recall_handle: str) -> str: ...

    async def query_message(self, topic: str, message_id: str) -> PeekedMessage: ...

    async def query_messages_by_key(
        self, topic: str, key: str, limit: int = 64
    ) -> list[PeekedMessage]: ...

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
    ) -> list[PoppedMessage]: ...

    async def ack(self, group: str, handles: Sequence[str]) -> list[PopMQError | None]: ...

    async def get_deliveries(
        self, group: str, handles: Sequence[str]
    ) -> list[PoppedMessage | PopMQError]: ...

    async def follow_handles(
        self, group: str, handles: Sequence[str]
    ) -> list[tuple[str, int] | PopMQError]:
        """For each handle, the newest handle of its delivery and that handle's deadline
        (following what ChangeInvisibleTime superseded), or why it has none; changes
        nothing. For a proxy's leases only, never offered to clients (pop/deliveries.py)."""
        ...

    async def change_invisible_time(
        self, group: str, handle: str, invisible_s: float
    ) -> tuple[str, int]: ...

    async def nack(self, group: str, handle: str, delay_s: float | None = None) -> int: ...

    async def dead_letter(self, group: str, handle: str) -> str: ...

    # -- reads by offset --------------------------------------------------------------------

    async def pull(
        self, topic: str, queue_id: int, offset: int, max_messages: int = PULL_DEFAULT_MESSAGES
    ) -> PulledMessages: ...

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
    ) -> PulledMessages: ...

    async def await_messages(
        self, topic: str, positions: Mapping[int, int], wait_s: float
    ) -> list[tuple[int, int]]: ...

    async def commit_offsets(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int]]
    ) -> None: ...

    async def get_offsets(self, group: str, topic: str) -> list[ConsumerOffset]: ...

    async def offsets_at(self, topic: str, timestamp_ms: int) -> list[tuple[int, int]]: ...

    # -- admin ------------------------------------------------------------------------------

    async def inflight_count(
        self, *, group: str | None = None, topic: str | None = None
    ) -> int: ...

    async def purge(self, topic: str, queue_id: int | None = None) -> int: ...

    async def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        target: str,
        timestamp_ms: int = 0,
        offsets: dict[int, int] | None = None,
        force: bool = False,
    ) -> ResetResult: ...

    async def peek(
        self,
        topic: str,
        *,
        queue_id: int | None = None,
        offset: int | None = None,
        group: str = "",
        max_messages: int = 16,
    ) -> list[PeekedMessage]: ...

    async def redrive(
        self, group: str, *, max_messages: int | None = None, only: Sequence[tuple[int, int]] = ()
    ) -> RedriveResult: ...

    async def group_lag(self, group: str, topic: str = "") -> list[QueueLag]: ...

    async def lag_report(self, group: str, topic: str = "") -> LagReport: ...

    async def inspect_group(
        self, group: str, topic: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> GroupInspection: ...

    async def message_history(
        self, topic: str, message_id: str, *, group: str = ""
    ) -> list[DeliveryEvent]: ...
