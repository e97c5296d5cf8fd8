"""Broker configuration: one frozen, keyword-only dataclass per concern.

Durations are seconds as floats named `*_s`. Defaults are RocketMQ 5's where it has one
(see docs/architecture.md for where popmq differs and why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from popmq.broker_core.handle_text import broker_name_problem

#: RocketMQ's delay levels, also its customized retry policy: 1s 5s 10s 30s 1m ... 2h.
DEFAULT_RETRY_BACKOFF_S: tuple[float, ...] = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip


MAX_POP_BATCH = 1024
"""Hard ceiling of PopConfig.max_batch."""


@dataclass(frozen=True, kw_only=True)
class StoreConfig:
    """Where and how messages are stored."""

    data_dir: Path = Path("data")
    """Directory holding the RocksDB store (created when missing)."""
    flush: Literal["sync", "async"] = "sync"
    """sync: Send returns after the batch is fsynced. async: after it is in the OS's WAL
    buffer (RocketMQ ASYNC_FLUSH); a machine crash can lose the last writes."""


@dataclass(frozen=True, kw_only=True)
class PopConfig:
    """Limits and timings of Pop, Ack and ChangeInvisibleTime."""

    max_batch: int = 32
    """Ceiling of max_messages per pop (RocketMQ: 32); configurable up to 1024."""
    default_invisible_s: float = 30.0
    """Invisible time when a pop does not set one."""
    min_invisible_s: float = 1.0
    """Smallest invisible time a pop may ask for."""
    max_invisible_s: float = 12 * 3600.0
    """Largest invisible time (RocketMQ, SQS: 12 h)."""
    retry_first_every: int = 5
    """Every n-th pop of a (group, topic) reads the retry queue first (RocketMQ: 20 %)."""
    max_scan_per_pop: int = 4096
    """Messages a filtered pop may skip in one queue before it moves on."""
    ck_buffer_time_s: float = 10.0
    """A checkpoint is persisted after staying this long in the buffer."""
    ck_persist_ahead_s: float = 3.0
    """A checkpoint is persisted when its deadline is this close."""
    ck_buffer_max: int = 200_000
    """Buffered checkpoints beyond this are persisted at once, oldest first."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_batch <= MAX_POP_BATCH:
            raise ValueError(f"pop.max_batch {self.max_batch} must be within 1..{MAX_POP_BATCH}")
        if not 0 < self.min_invisible_s <= self.default_invisible_s <= self.max_invisible_s:
            raise ValueError("pop invisible times must satisfy 0 < min <= default <= max")
        if self.retry_first_every < 1:
            raise ValueError("pop.retry_first_every must be at least 1")


@dataclass(frozen=True, kw_only=True)
class LongPollingConfig:
    """Bounds of held (long-polling) pops."""

    default_timeout_s: float = 20.0
    """Wait of a pop that does not set one (RocketMQ proxy: 20 s)."""
    max_timeout_s: float = 30.0
    """Largest wait a pop may ask for."""
    max_per_key: int = 1024
    """Held pops per (group, topic) (RocketMQ popPollingSize)."""
    max_total: int = 100_000
    """Held pops and AwaitMessages calls in total (RocketMQ maxPopPollingSize)."""
    max_watched_queues: int = 262_144
    """(queue, call) pairs all held AwaitMessages calls may watch at once: each is an
    entry in the arrival registry (~100 bytes), so this bounds its memory (~26 MB)."""

    def __post_init__(self) -> None:
        if not 0 <= self.default_timeout_s <= self.max_timeout_s:
            raise ValueError("long polling timeouts must satisfy 0 <= default <= max")


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    """How long messages are kept."""

    retention_s: float = 72 * 3600.0
    """Messages stored longer ago are deleted (RocketMQ fileReservedTime: 72 h)."""
    check_interval_s: float = 60.0
    """Retention runs continuously in small steps: every queue is checked this often."""
    max_disk_bytes: int = 0
    """When stored messages exceed this many bytes, the oldest are deleted first (0: no
    limit). Enforced on an estimate of live message bytes; RocksDB returns the disk space
    when compaction drops the deleted ranges."""

    def __post_init__(self) -> None:
        if self.retention_s <= 0 or self.check_interval_s <= 0:
            raise ValueError("retention_s and check_interval_s must be positive")
        if self.max_disk_bytes < 0:
            raise ValueError("retention.max_disk_bytes must be 0 (no limit) or positive")


@dataclass(frozen=True, kw_only=True)
class GroupDefaults:
    """Settings of groups created implicitly by their first use."""

    max_delivery_attempts: int = 17
    """RocketMQ retryMaxTimes 16, plus the first delivery."""
    retry_backoff_s: tuple[float, ...] = DEFAULT_RETRY_BACKOFF_S
    """Nack delay by delivery attempt when the nack sets none."""


#: RocketMQ's 18 delay levels (messageDelayLevel), level n -> DELAY_LEVELS_S[n - 1].
DELAY_LEVELS_S: tuple[float, ...] = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class MessagesConfig:
    """Delayed messages, deduplication and FIFO read-ahead."""

    max_delay_s: float = 3 * 86400.0
    """Latest delivery time a send may ask for, from now (RocketMQ timerMaxDelaySec: 3 d)."""
    dedup_window_s: float = 300.0
    """A repeated dedup id within this window is not stored again (SQS FIFO: 5 min); a
    repeated half message is answered with its first transaction."""
    fifo_max_held: int = 10_000
    """FIFO messages a queue may read ahead of their blocked groups, per consumer group;
    beyond it a pop stops reading that queue until groups move on."""
    crash_tail_s: float = 30.0
    """After a run that did not end cleanly, a cluster broker (`popmq broker`; a shard's
    replica on a takeover whose last leader did not release it) asks the other brokers,
    before it takes writes, whether they hold the messages it stored within this long
    before its last one, and removes those they hold: sends a proxy moved off it when it
    died (crash_tail.py). It covers a send left in doubt on a broker paused and then
    killed: the proxy's broker call timeout (10 s) plus `in_doubt_retry_s` (5 s), twice
    over. 0: never. Within 0..3600 s; beyond `dedup_window_s` it acts as that window, past
    which no broker says it holds a send."""

    def __post_init__(self) -> None:
        if self.max_delay_s <= 0 or self.dedup_window_s <= 0:
            raise ValueError("messages.max_delay_s and dedup_window_s must be positive")
        if not 0 <= self.crash_tail_s <= 3600:
            raise ValueError(
                f"messages.crash_tail_s {self.crash_tail_s} must be within 0..3600 s (0: off)"
            )
        if self.fifo_max_held < 1:
            raise ValueError("messages.fifo_max_held must be at least 1")


MAX_TRANSACTION_CHECKS = 1000
"""Hard ceiling of TransactionsConfig.check_max."""


@dataclass(frozen=True, kw_only=True)
class TransactionsConfig:
    """Check-back of transactions left open (RocketMQ BrokerConfig's transaction settings)."""

    check_first_s: float = 6.0
    """An open transaction is first checked this long after its half message was stored,
    unless the message asked for its own delay (RocketMQ transactionTimeOut: 6 s)."""
    check_interval_s: float = 30.0
    """Then it is checked again this often (RocketMQ transactionCheckInterval: 30 s)."""
    check_max: int = 15
    """Checks before an unanswered transaction is discarded to the discarded-transactions
    topic, where it can be inspected and resumed (RocketMQ transactionCheckMax: 15)."""
    max_check_first_s: float = 3600.0
    """Longest first-check delay a half message may ask for (RocketMQ
    maxTransactionRecoverySecond: 3600 s); a longer one is refused."""
    resolved_ttl_s: float = 3600.0
    """A committed or rolled-back transaction is remembered this long, so that a repeated
    resolution (a client retry, a late check answer) is answered as the first was; after
    it, resolving it answers NOT_FOUND."""

    def __post_init__(self) -> None:
        for name in ("check_first_s", "check_interval_s", "resolved_ttl_s"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"transactions.{name} {getattr(self, name)} must be positive (seconds)"
                )
        if not 1 <= self.check_max <= MAX_TRANSACTION_CHECKS:
            raise ValueError(
                f"transactions.check_max {self.check_max} must be within "
                f"1..{MAX_TRANSACTION_CHECKS}"
            )
        if not self.max_check_first_s >= self.check_first_s:
            raise ValueError(
                f"transactions.max_check_first_s {self.max_check_first_s} must be at least "
                f"check_first_s {self.check_first_s}"
            )


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    """Everything broker_core needs."""

    broker_name: str = "broker-a"
    """This broker's name (RocketMQ brokerName), written into every receipt handle and
    recall handle it issues so a proxy can route them; it names the data dir's owner, so
    keep it when the broker moves to another host. Letters, digits, '_' and '-', 1 to 64
    characters. It is also the Broker name of RocketMQ 5 routes and assignments, and the
    brokerName of the queues consumer assignment hashes: one name for all. The data dir
    remembers it at first start and refuses a start under another name (allow_rename).
    RocketMQ defaults to the host name; popmq uses the name of RocketMQ's sample
    conf/broker.conf instead, which does not change with the host."""
    allow_rename: bool = False
    """Start on a data dir that belongs to a broker of another name, and make it this
    name's. Handles issued under the old name are then refused ("issued by broker ..."), so
    their messages come back after their invisible time. Off: such a start fails, saying
    both names."""
    store: StoreConfig = field(default_factory=StoreConfig)
    pop: PopConfig = field(default_factory=PopConfig)
    long_polling: LongPollingConfig = field(default_factory=LongPollingConfig)
    groups: GroupDefaults = field(default_factory=GroupDefaults)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    messages: MessagesConfig = field(default_factory=MessagesConfig)
    transactions: TransactionsConfig = field(default_factory=TransactionsConfig)
    auto_create_topics: bool = False
    """Create a missing topic (8 queues) on first send instead of answering NOT_FOUND."""
    default_topic_queues: int = 8
    """Queues of a topic created without a queue count (RocketMQ defaultTopicQueueNums)."""

    def __post_init__(self) -> None:
        problem = broker_name_problem(self.broker_name)
        if problem is not None:
            raise ValueError(problem)
