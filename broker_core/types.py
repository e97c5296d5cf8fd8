"""Values that cross broker_core's public API (the proxy converts them to and from protos).

NewMessage, SendResult and PoppedMessage are built once per message on the send and pop
paths, so they are not frozen: a frozen dataclass's __init__ sets each field through
object.__setattr__ and costs about 2.7x a plain one (3.9 vs 1.5 us for six fields here).
Treat them as read-only all the same. They also write their own `__init__` (`init=False`):
the one dataclasses generates is interpreted Python even when this module is compiled
(mypyc calls it through tp_init), about 6,000 instructions for a NewMessage against a few
hundred for a compiled one. Each takes every field by name, as the generated one does, so
`dataclasses.replace` works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from popmq.broker_core.record import MessageRecord


@dataclass(slots=True, init=False)
class NewMessage:
    """A message to send."""

    topic: str
    body: bytes
    tag: str = ""
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    message_id: str = ""
    born_time_ms: int = 0
    message_group: str = ""
    """FIFO group: delivered in send order, one in flight at a time (fifo/mixed topics)."""
    deliver_at_ms: int = 0
    """Epoch ms before which the message stays invisible (delay/mixed topics); 0 = now."""
    dedup_id: str = ""
    """A repeat within the topic's dedup window is answered with the first send's result."""
    body_encoding: str = ""
    """How the producer encoded `body`: "" (identity), "zlib" or "zstd"."""
    born_host: str = ""
    queue_id: int | None = None
    """The queue to store it in (0..queues-1), chosen by the sender, e.g. a cluster proxy
    that spreads sends over brokers; None lets the broker choose (a message group's hash,
    else round-robin)."""

    def __init__(
        self,
        topic: str,
        body: bytes,
        tag: str = "",
        keys: tuple[str, ...] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
        born_time_ms: int = 0,
        message_group: str = "",
        deliver_at_ms: int = 0,
        dedup_id: str = "",
        body_encoding: str = "",
        born_host: str = "",
        queue_id: int | None = None,
    ) -> None:
        self.topic = topic
        self.body = body
        self.tag = tag
        self.keys = keys
        self.properties = {} if properties is None else properties
        self.message_id = message_id
        self.born_time_ms = born_time_ms
        self.message_group = message_group
        self.deliver_at_ms = deliver_at_ms
        self.dedup_id = dedup_id
        self.body_encoding = body_encoding
        self.born_host = born_host
        self.queue_id = queue_id


@dataclass(slots=True, init=False)
class SendResult:
    """Where a sent message was stored."""

    message_id: str
    topic: str
    queue_id: int
    offset: int
    recall_handle: str = ""
    """For a delayed message: pass to Broker.recall to cancel it before it is due."""
    duplicate: bool = False
    """True when this send repeated a dedup id inside the window and was not stored."""
    transaction_id: str = ""
    """For a half message (`send_half`): the transaction to end; its offset is -1 until it
    is committed."""

    def __init__(
        self,
        message_id: str,
        topic: str,
        queue_id: int,
        offset: int,
        recall_handle: str = "",
        duplicate: bool = False,
        transaction_id: str = "",
    ) -> None:
        self.message_id = message_id
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset
        self.recall_handle = recall_handle
        self.duplicate = duplicate
        self.transaction_id = transaction_id


@dataclass(slots=True, init=False)
class PoppedMessage:
    """One delivery: the stored message plus where it came from and its receipt handle."""

    topic: str
    """The user topic (for a retry copy, the topic it was first sent to)."""
    queue_id: int
    offset: int
    record: MessageRecord
    receipt_handle: str
    invisible_until_ms: int

    def __init__(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        record: MessageRecord,
        receipt_handle: str,
        invisible_until_ms: int,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset
        self.record = record
        self.receipt_handle = receipt_handle
        self.invisible_until_ms = invisible_until_ms

    @property
    def delivery_attempt(self) -> int:
        return self.record.delivery_attempt


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue_id: int
    min_offset: int
    max_offset: int
    broker: str = ""
    """The broker holding the queue, in cluster mode ("" from a broker itself)."""


@dataclass(frozen=True, slots=True)
class QueueLag:
    topic: str
    queue_id: int
    retry: bool
    consumer_offset: int
    max_offset: int
    inflight: int
    retention_skipped: int = 0
    broker: str = ""
    """The broker holding the queue, in cluster mode ("" from a broker itself)."""

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.consumer_offset)


@dataclass(frozen=True, slots=True)
class PulledMessages:
    """A read of one queue by offset (no group, no state): records and the queue's bounds."""

    topic: str
    queue_id: int
    messages: list[tuple[int, MessageRecord]]
    """(offset, record) in offset order."""
    min_offset: int
    """Smallest offset still stored; a read below it started here instead."""
    max_offset: int
    """Offset the next stored message will get."""
    next_offset: int
    """Where to read next: after the last returned record, or where the read started."""


@dataclass(frozen=True, slots=True)
class ConsumerOffset:
    """A consumer group's position in one queue."""

    queue_id: int
    offset: int
    committed: bool
    """False: the group has no position in the queue yet; offset is where it would start."""


# -- admin operations (AdminService) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """A group's redelivery backoff as a policy: the nack delay initial_s *
    multiplier^(attempt-1), capped at max_s (RocketMQ's ExponentialRetryPolicy: initial 5 s,
    max 2 h, multiplier 2), from which the group's retry_backoff_s list is computed."""

    initial_s: float = 5.0
    max_s: float = 7200.0
    multiplier: float = 2.0


@dataclass(frozen=True, slots=True)
class Subscription:
    """A group's subscription to a topic, with the filter a pop without its own uses."""

    topic: str
    filter_type: str = "tag"
    """"tag" or "sql" (SQL92)."""
    expression: str = ""
    """The filter; empty delivers everything."""


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Group settings beyond max_delivery_attempts and the backoff list."""

    fifo: bool = False
    """FIFO group (RocketMQ consumeMessageOrderly)."""
    subscriptions: tuple[Subscription, ...] = ()
    """Declared subscriptions, sorted by topic."""
    consume_from: str = "first"
    """Where the group starts in a queue it never consumed: "first", "last" or "timestamp"."""
    consume_from_ms: int = 0
    """For consume_from "timestamp": ms since the epoch."""
    exponential_backoff: ExponentialBackoff | None = None
    """Set when the backoff list was computed from an exponential policy."""

    def subscription(self, topic: str) -> Subscription | None:
        for sub in self.subscriptions:
            if sub.topic == topic:
                return sub
        return None


@dataclass(frozen=True, slots=True)
class QueueDetails:
    """One queue of a topic as `describe_topic` reports it."""

    queue_id: int
    min_offset: int
    max_offset: int
    last_store_ms: int
    """Store time of the newest message; 0 for an empty queue."""
    broker: str = ""
    """The broker holding the queue, in cluster mode ("" from a broker itself)."""

    @property
    def message_count(self) -> int:
        return self.max_offset - self.min_offset


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """A lag row plus the store time of the oldest message the group has not acked."""

    lag: QueueLag
    oldest_unacked_ms: int
    """Store time of the message at the consumer offset; 0 when nothing is unacked."""


@dataclass(frozen=True, slots=True)
class TopicBacklog:
    """A group's lag summed over one topic."""

    topic: str
    lag: int
    inflight: int
    retry_backlog: int
    oldest_unacked_ms: int


@dataclass(frozen=True, slots=True)
class LagReport:
    """`Broker.lag_report`: per queue, per topic, and the group's dead-letter depth."""

    group: str
    queues: list[QueueBacklog]
    topics: list[TopicBacklog]
    dlq_depth: int


@dataclass(frozen=True, slots=True)
class OffsetChange:
    queue_id: int
    old_offset: int
    new_offset: int


@dataclass(frozen=True, slots=True)
class ResetResult:
    """What `Broker.reset_offsets` moved, and the in-flight deliveries a forced reset dropped."""

    queues: list[OffsetChange]
    dropped_inflight: int


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """A stored message read without consuming it."""

    topic: str
    queue_id: int
    offset: int
    record: MessageRecord


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """What `Broker.redrive` did with a dead-letter topic."""

    moved: int
    dropped: int
    """Removed without a move: the topic they came from no longer exists."""
    remaining: int
    outcomes: tuple[RedriveOutcome, ...] = ()
    """A selected redrive's answer for each dead letter named, in the order asked."""


REDRIVE_OUTCOMES = ("moved", "dropped", "not_found")
"""What a selected redrive did with one dead letter: moved back; removed because its topic is
gone; or not stored (never, or already redriven, purged or expired)."""


@dataclass(frozen=True, slots=True)
class RedriveOutcome:
    """One named dead letter of a selected redrive: where it was and what became of it."""

    queue_id: int
    offset: int
    outcome: str
    """One of REDRIVE_OUTCOMES."""


# -- transactions (transactions.py) -----------------------------------------------------------

TRANSACTION_STATES = ("open", "committed", "rolled_back", "discarded")
"""States of a transaction: open (waiting for a resolution or a check), resolved, or
discarded after check_max unanswered checks."""
TRANSACTION_SOURCES = ("client", "server_check", "admin")
"""Who resolves a transaction: its producer, its producer answering a check, an operator."""


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """A transaction as the broker holds it (end_transaction's answer, listings)."""

    transaction_id: str
    topic: str
    message_id: str
    producer_group: str
    state: str
    """One of TRANSACTION_STATES."""
    created_ms: int
    checks: int
    """Checks handed out so far."""
    next_check_ms: int
    """Open: when the next check (or, after check_max checks, the discard) is due; else 0."""
    resolved_ms: int = 0
    resolved_by: str = ""
    """Resolved or discarded: one of TRANSACTION_SOURCES, or "check_max" for a discard."""
    queue_id: int = -1
    """The queue the message is (or will be) stored in."""
    offset: int = -1
    """Committed: its offset (-1 while a delayed message waits for its time)."""
    recall_handle: str = ""
    """Committed with a future delivery time: the recall handle of its timer."""
    discard_offset: int = -1
    """Discarded: the offset of its copy in the discarded-transactions topic (queue 0)."""
    half_message: MessageRecord | None = None
    """Asked for (`get_transaction(..., half=True)`), open or discarded: its half message;
    None once resolved (the body is dropped then) and when not asked for."""


@dataclass(frozen=True, slots=True)
class TransactionCheck:
    """An open transaction due for a check: ask its producer whether to commit it."""

    topic: str
    transaction_id: str
    message_id: str
    producer_group: str
    """The group given at the half send ("" when none was: RocketMQ's proxy uses the topic)."""
    message: MessageRecord
    """The half message, for the producer's transaction checker."""
    attempt: int
    """1 for the first check, up to transactions.check_max."""
    queue_id: int
