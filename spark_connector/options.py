"""Data source options: parsed once on the driver into frozen dataclasses.

Spark hands options over as a case-insensitive mapping of strings. Each value is checked
here, and a bad one raises OptionError naming the option and what is allowed; nothing is
clamped. The parsed dataclasses are what readers and writers carry to the executors.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from popmq import Credentials, InvalidArgumentError
from popmq.sdk._channel import check_pinnable
from popmq.sdk.tls import TLS, TLSConfig, channel_security
from popmq.spark.errors import OptionError

__all__ = [
    "KAFKA_ALIASES",
    "MAX_TIMESTAMP_MS",
    "READ_OPTIONS",
    "SPARK_OPTIONS",
    "WRITE_OPTIONS",
    "ReadOptions",
    "WriteOptions",
    "parse_duration_s",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


def parse_duration_s(name: str, text: str) -> float:
    """``"30"``/``"30s"``, ``"500ms"``, ``"15m"``, ``"1h"`` as seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise OptionError(
            f"option {name}={text!r} is not a duration: use seconds (30, 2.5) or a number "
            "with a unit: 500ms, 30s, 15m, 1h"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


_COMMON = ("endpoint", "topic", "timeout", "tls", "tlsCaFile", "tlsCertFile", "tlsKeyFile",
           "tlsServerName", "accessKey", "secretKey")  # fmt: skip
_TOPICS = ("subscribe", "subscribePattern")
_OFFSET_ONLY = ("startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
                "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
                "startingOffsetsByTimestampStrategy", "maxRecordsPerPartition", "minPartitions",
                "minMessagesPerTrigger", "maxTriggerDelay", "failOnDataLoss",
                "pullBatchSize")  # fmt: skip
_POP_ONLY = ("numPartitions", "maxMessagesPerPartition", "invisibleDuration", "waitSeconds",
             "popBatchSize", "filter", "sqlFilter", "leaseEndpoints")  # fmt: skip
_FROM_THE_GROUP = "pop mode reads what the group has not consumed yet"
_NOT_IN_POP_MODE = {
    "startingOffsets": _FROM_THE_GROUP,
    "endingOffsets": _FROM_THE_GROUP,
    "startingTimestamp": _FROM_THE_GROUP,
    "endingTimestamp": _FROM_THE_GROUP,
    "startingOffsetsByTimestamp": _FROM_THE_GROUP,
    "endingOffsetsByTimestamp": _FROM_THE_GROUP,
    "startingOffsetsByTimestampStrategy": _FROM_THE_GROUP,
    "minPartitions": "pop mode runs exactly numPartitions concurrent pops per topic (default: "
    "its queue count), which share queues: there are no offset ranges to split",
    "maxRecordsPerPartition": "pop mode sizes partitions with maxMessagesPerPartition",
    "minMessagesPerTrigger": "pop mode plans a batch whenever the group has a backlog",
    "maxTriggerDelay": "pop mode plans a batch whenever the group has a backlog",
    "failOnDataLoss": "pop mode has no offset ranges to check; messages retention deletes "
    "before they are popped are not reported",
    "pullBatchSize": "pop mode sets messages per LeasePop with popBatchSize",
}
"""Why each offset-mode option means nothing in pop mode (the error says so)."""
READ_OPTIONS = (
    *_COMMON,
    *_TOPICS,
    "mode",
    "group",
    "maxMessagesPerTrigger",
    *_OFFSET_ONLY,
    *_POP_ONLY,
)
"""Every option a read takes (docs/spark.md, Options)."""
WRITE_OPTIONS = (*_COMMON, "batchSize", "batchBytes", "dedupKey")
"""Every option a write takes."""
KAFKA_ALIASES = {
    "maxOffsetsPerTrigger": "maxMessagesPerTrigger",
    "minOffsetsPerTrigger": "minMessagesPerTrigger",
}
"""The Kafka source's names accepted for options that mean exactly the same here: a queue
offset counts one message, as a Kafka offset counts one record."""
SPARK_OPTIONS = ("checkpointLocation",)
"""Options Spark itself reads that reach a data source too (writeStream's
``option("checkpointLocation", ...)``); accepted and left to Spark."""
_KAFKA_REFUSED = {
    "assign": "use option topic or subscribe, and startingOffsets "
    '{"<topic>": {"<queue>": offset}} for positions',
    "includeHeaders": "message properties are always in the properties column",
    "groupIdPrefix": "use option group (pop mode; offset mode: where to commit progress)",
    "path": "a popmq read or write names a topic, not a path: use option topic",
}
"""Kafka source options (and Spark's path) that have no exact popmq meaning: refused with
what to use instead, rather than ignored."""


class _Options:
    """Typed access to a case-insensitive option mapping.

    Every name must be one of `known` (or an alias of one, or Spark's own): an unknown one
    raises OptionError naming the nearest known name, so a typo is never silently ignored.
    """

    def __init__(self, options: Mapping[str, str], known: tuple[str, ...], what: str) -> None:
        canonical = {name.lower(): name for name in known}
        aliases = {
            alias.lower(): (alias, target.lower()) for alias, target in KAFKA_ALIASES.items()
        }
        refused = {name.lower(): (name, why) for name, why in _KAFKA_REFUSED.items()}
        spark = {name.lower() for name in SPARK_OPTIONS}
        self._values: dict[str, str] = {}
        self._given: dict[str, str] = {}
        """canonical lower-case name -> the name as the user gave it, for messages."""
        for key, value in options.items():
            given, name = str(key), str(key).lower()
            if name in spark:
                continue
            if name in aliases and aliases[name][1] in canonical:
                given, name = aliases[name]
            elif name in refused:
                kafka_name, why = refused[name]
                raise OptionError(f"option {kafka_name} is not supported by popmq: {why}")
            elif name.startswith("kafka.") or name.startswith("kafkaconsumer."):
                raise OptionError(
                    f"option {given} is a Kafka client setting; popmq takes endpoint "
                    "(host:port of the proxy) and its own options (docs/spark.md, Options)"
                )
            elif name not in canonical:
                near = difflib.get_close_matches(name, list(canonical), n=1, cutoff=0.6)
                hint = f"did you mean {canonical[near[0]]}? " if near else ""
                raise OptionError(
                    f"unknown option {given} for a popmq {what}: {hint}"
                    f"the options are {', '.join(sorted(known, key=str.lower))}"
                )
            label = given if given.lower() != name else canonical[name]
            if name in self._values:
                raise OptionError(
                    f"options {self._given[name]} and {label} are the same option: give one"
                )
            self._values[name] = str(value)
            self._given[name] = label

    def label(self, name: str) -> str:
        """The option as the user named it (an alias shows as given)."""
        return self._given.get(name.lower(), name)

    def has(self, name: str) -> bool:
        return name.lower() in self._values

    def text(self, name: str, default: str = "") -> str:
        return self._values.get(name.lower(), default)

    def required(self, name: str, why: str) -> str:
        value = self._values.get(name.lower(), "").strip()
        if not value:
            raise OptionError(f"option {name} is required: {why}")
        return value

    def integer(self, name: str, default: int | None, low: int, high: int) -> int | None:
        text = self._values.get(name.lower())
        if text is None:
            return default
        try:
            value = int(text.strip())
        except ValueError:
            raise OptionError(f"option {self.label(name)}={text!r} is not an integer") from None
        if not low <= value <= high:
            raise OptionError(
                f"option {self.label(name)}={value} is outside the allowed {low}..{high}"
            )
        return value

    def count(self, name: str, default: int, low: int, high: int) -> int:
        value = self.integer(name, default, low, high)
        return default if value is None else value

    def flag(self, name: str, default: bool) -> bool:
        text = self._values.get(name.lower())
        if text is None:
            return default
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise OptionError(f"option {self.label(name)}={text!r} is not a boolean: use true or false")

    def duration(self, name: str, default: float, low: float, high: float) -> float:
        text = self._values.get(name.lower())
        if text is None:
            return default
        value = parse_duration_s(self.label(name), text)
        if not low <= value <= high:
            raise OptionError(
                f"option {self.label(name)}={text!r} is {value:g}s, outside the allowed "
                f"{low:g}s..{high:g}s"
            )
        return value


def _tls(o: _Options) -> TLS:
    """The SDK's ``tls`` from the options tls, tlsCaFile, tlsCertFile, tlsKeyFile and
    tlsServerName; a file option turns TLS on. The files are read here (on the driver,
    which connects too), so a wrong path fails the query at once; executors read the same
    paths."""
    names = ("tlsCaFile", "tlsCertFile", "tlsKeyFile", "tlsServerName")
    ca, cert, key, server_name = (o.text(name).strip() or None for name in names)
    given = [name for name in names if o.text(name).strip()]
    if not given:
        return o.flag("tls", False)
    if not o.flag("tls", True):
        raise OptionError(f"option tls=false contradicts {', '.join(given)}: drop one")
    if (cert is None) != (key is None):
        raise OptionError("options tlsCertFile and tlsKeyFile go together: give both, or neither")
    config = TLSConfig(ca_file=ca, cert_file=cert, key_file=key, server_name=server_name)
    try:
        channel_security(config)
    except InvalidArgumentError as exc:
        raise OptionError(f"option {', '.join(given)}: {exc.message}") from exc
    return config


_ENDPOINT_WHY = "host:port of the popmq proxy, or several comma-separated to fail over between"


def _credentials(o: _Options) -> tuple[str, str]:
    """accessKey and secretKey: both or neither, checked as the SDK's Credentials."""
    access_key, secret_key = o.text("accessKey").strip(), o.text("secretKey")
    if bool(access_key) != bool(secret_key):
        raise OptionError(
            "options accessKey and secretKey go together: give both (a server with "
            "authentication on) or neither"
        )
    if access_key:
        try:
            Credentials(access_key, secret_key)
        except InvalidArgumentError as exc:
            raise OptionError(f"option accessKey: {exc.message}") from None
    return access_key, secret_key


class _Signed:
    """The credentials of a read's or write's clients (options accessKey, secretKey)."""

    access_key: str
    secret_key: str

    @property
    def credentials(self) -> Credentials | None:
        """What the SDK clients sign calls with; None without accessKey."""
        if not self.access_key:
            return None
        return Credentials(self.access_key, self.secret_key)


_MAX_INT = 2**31 - 1
_MAX_LONG = 2**63 - 1
MAX_TIMESTAMP_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z, the last time a timestamp option may name."""
_ONE_OF_TOPICS = (
    "give exactly one of topic (one topic), subscribe (comma-separated topics) or "
    "subscribePattern (a regular expression over topic names)"
)


def _topics(o: _Options) -> tuple[str, tuple[str, ...], str]:
    """(topic, subscribe, subscribePattern): exactly one of them, as Kafka's subscribe,
    subscribePattern and assign."""
    given = [name for name in ("topic", *_TOPICS) if o.has(name)]
    if len(given) != 1:
        if given:
            raise OptionError(f"options {' and '.join(given)} exclude each other: {_ONE_OF_TOPICS}")
        raise OptionError(f"a popmq read needs the topics to read: {_ONE_OF_TOPICS}")
    if o.has("topic"):
        return o.required("topic", "the topic to read"), (), ""
    if o.has("subscribe"):
        names = [name.strip() for name in o.text("subscribe").split(",")]
        topics = tuple(name for name in names if name)
        if not topics:
            raise OptionError("option subscribe is empty: give topic names separated by commas")
        twice = sorted({name for name in topics if topics.count(name) > 1})
        if twice:
            raise OptionError(f"option subscribe names {', '.join(twice)} more than once")
        return "", topics, ""
    pattern = o.required("subscribePattern", "a regular expression over topic names")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise OptionError(
            f"option subscribePattern={pattern!r} is not a regular expression (Python re "
            f"syntax): {exc}"
        ) from None
    return "", (), pattern


def _lease_endpoints(o: _Options) -> tuple[str, ...]:
    """Option leaseEndpoints: an ordered, comma-separated list of distinct proxies."""
    if not o.has("leaseEndpoints"):
        return ()
    text = o.text("leaseEndpoints")
    items = tuple(item.strip() for item in text.split(","))
    if not all(items):
        raise OptionError(
            f"option leaseEndpoints={text!r} has an empty item: give HOST:PORT of each proxy, "
            "separated by commas"
        )
    twice = sorted({item for item in items if items.count(item) > 1})
    if twice:
        raise OptionError(
            f"option leaseEndpoints names {', '.join(twice)} more than once: each proxy once"
        )
    for item in items:
        try:
            check_pinnable(item)
        except InvalidArgumentError as exc:
            raise OptionError(
                f"option leaseEndpoints={text!r} has item {item!r}, which is not one proxy: {exc}"
            ) from None
    return items


_BY_TIMESTAMP_SHAPE = '{"<topic>": {"<queue id>": <epoch ms>, ...}, ...}'


def _timestamps(o: _Options, name: str) -> dict[str, dict[int, int]] | None:
    """A startingOffsetsByTimestamp / endingOffsetsByTimestamp JSON, checked for shape and
    values; whether its topics and queues exist is checked when the read is planned."""
    if not o.has(name):
        return None
    text = o.text(name).strip()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"option {name}={text!r} is not a JSON object {_BY_TIMESTAMP_SHAPE}")
    result: dict[str, dict[int, int]] = {}
    for topic, queues in parsed.items():
        if not isinstance(queues, dict) or not queues:
            raise OptionError(
                f"option {name}: topic {topic!r} must map to an object "
                f'{{"<queue id>": <epoch ms>, ...}}, not {json.dumps(queues)}'
            )
        times: dict[int, int] = {}
        for key, value in queues.items():
            try:
                queue_id = int(key)
            except ValueError:
                raise OptionError(
                    f"option {name}: {key!r} of topic {topic!r} is not a queue id"
                ) from None
            if queue_id in times:
                raise OptionError(f"option {name}: topic {topic!r} names queue {queue_id} twice")
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(
                    f"option {name}: the time of topic {topic!r} queue {queue_id} is "
                    f"{json.dumps(value)}, not an integer (epoch milliseconds)"
                )
            if not 0 <= value <= MAX_TIMESTAMP_MS:
                raise OptionError(
                    f"option {name}: the time {value} of topic {topic!r} queue {queue_id} is "
                    f"outside the allowed 0..{MAX_TIMESTAMP_MS} (epoch milliseconds)"
                )
            times[queue_id] = value
        result[topic] = times
    return result


@dataclass(frozen=True, kw_only=True)
class ReadOptions(_Signed):
    """Options of a read (batch or streaming)."""

    endpoint: str
    """host:port of the popmq proxy, or several comma-separated ("h1:8081,h2:8081"), passed
    to the SDK unchanged: its clients fail over between them (docs/operations.md)."""
    topic: str = ""
    """Topic to read (option topic); empty with subscribe or subscribePattern."""
    subscribe: tuple[str, ...] = ()
    """Topics to read (option subscribe: comma-separated names)."""
    subscribe_pattern: str = ""
    """A regular expression (Python re) that topic names must match as a whole; matched
    against the topic list when the query starts and again at every trigger."""
    mode: Literal["offset", "pop"] = "offset"
    """offset: ranges of queue offsets (exactly-once source); pop: executors pop in
    parallel under lease tokens, acked after Spark commits (at-least-once)."""
    group: str = ""
    """pop mode: the consumer group (required). offset mode: when set, the query commits
    its progress to this group so lag tools show it (optional)."""
    starting_offsets: str = ""
    """earliest, latest, or JSON {"<queue>": offset} (with subscribe or subscribePattern:
    {"<topic>": {"<queue>": offset}}); -2 earliest, -1 latest."""
    ending_offsets: str = ""
    """Batch reads: latest (default), or JSON like starting_offsets."""
    starting_timestamp_ms: int | None = None
    """Start at the first message stored at or after this time, in every queue (wins over
    startingOffsetsByTimestamp and startingOffsets, as Kafka's startingTimestamp)."""
    ending_timestamp_ms: int | None = None
    """Batch reads: stop before the first message stored at or after this time."""
    starting_offsets_by_timestamp: dict[str, dict[int, int]] | None = None
    """Per topic and queue, start at the first message stored at or after that time (epoch
    ms); wins over startingOffsets. Must name every queue of every topic read."""
    ending_offsets_by_timestamp: dict[str, dict[int, int]] | None = None
    """Batch reads: per topic and queue, stop before the first message stored at or after
    that time (a queue with none stored since: at its end)."""
    starting_timestamp_strategy: Literal["error", "latest"] = "error"
    """startingOffsetsByTimestampStrategy: what a queue with no message stored at or after
    its starting time does: error (fail the query, Kafka's default) or latest (start at
    its end)."""
    max_records_per_partition: int = 100_000
    """Offset ranges longer than this are split into several Spark partitions."""
    min_partitions: int | None = None
    """Offset mode: at least about this many Spark partitions per batch; large ranges are
    split in proportion to their size, as Kafka's minPartitions (a hint, not exact)."""
    max_messages_per_trigger: int | None = None
    """Offset mode: rate limit per micro-batch, split across queues by backlog."""
    min_messages_per_trigger: int | None = None
    """Offset mode: wait for this many messages (or maxTriggerDelay) before a batch."""
    max_trigger_delay_s: float = 900.0
    """Offset mode: the longest minMessagesPerTrigger may delay a batch."""
    fail_on_data_loss: bool = True
    """Offset mode: fail when offsets the query needs were deleted (else skip them)."""
    pull_batch_size: int = 1024
    """Offset mode: messages per PullMessages call."""
    num_partitions: int | None = None
    """Pop mode: Spark partitions (parallel pops) per micro-batch; default the queue count.
    May exceed the queue count: pops share queues."""
    max_messages_per_partition: int = 1000
    """Pop mode: messages one partition takes per micro-batch."""
    invisible_duration_s: float = 120.0
    """Pop mode: how long leased messages stay invisible; must cover the trigger interval
    plus the batch time (leases of a running batch are renewed)."""
    wait_s: float = 2.0
    """Pop mode: how long a partition's first pop waits for a message (long polling)."""
    pop_batch_size: int = 1024
    """Pop mode: messages per LeasePop call, 1..1024 (the proxy fills a page larger than the
    server's pop.max_batch with several pops): one page per Arrow batch, so a partition pays
    one round trip and one lease entry per 1,024 rows."""
    filter: str = "*"
    """Pop mode: tag expression ("TagA || TagB")."""
    sql_filter: str = ""
    """Pop mode: a SQL92 filter over properties instead ("region = 'eu' AND amount > 100")."""
    lease_endpoints: tuple[str, ...] = ()
    """Pop mode (option leaseEndpoints: "h1:8081,h2:8081", in this order on every run):
    the proxies lease tokens are pinned to. Each token's reads, renewals and ack go to one of
    them, chosen by hashing the token, and never fail over: then a proxy serves the token
    from memory through an etcd outage (docs/cluster-consumers.md). Each item is HOST:PORT
    of one proxy process (not a load balancer nor a DNS name of several addresses; dns: and
    address-list targets are refused). Empty: every call goes to `endpoint`, failing over,
    and fails retriably while etcd is down."""
    timeout_s: float = 30.0
    """Timeout of each RPC."""
    tls: TLS = False
    """TLS to the proxies: True (the system's roots) or a TLSConfig (options tls,
    tlsCaFile, tlsCertFile, tlsKeyFile, tlsServerName); False: plaintext."""
    access_key: str = ""
    """accessKey: the access key the clients sign calls with (servers with authentication
    on); empty: unsigned."""
    secret_key: str = field(default="", repr=False)
    """secretKey: its secret key (never shown: Spark redacts options named like it)."""

    @property
    def by_topic(self) -> bool:
        """subscribe or subscribePattern: offsets (checkpointed and in options) are keyed
        by topic, as Kafka's; with option topic they are keyed by queue alone."""
        return not self.topic

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Check and parse a read's options."""
        o = _Options(options, READ_OPTIONS, "read")
        endpoint = o.required("endpoint", _ENDPOINT_WHY)
        topic, subscribe, pattern = _topics(o)
        access_key, secret_key = _credentials(o)
        mode = o.text("mode", "offset").strip().lower()
        if mode not in ("offset", "pop"):
            raise OptionError(f"option mode={mode!r} is not supported: use offset or pop")
        group = o.text("group").strip()
        if mode == "pop" and not group:
            raise OptionError("option group is required in pop mode: the consumer group")
        max_per_trigger = o.integer("maxMessagesPerTrigger", None, 1, _MAX_LONG)
        min_per_trigger = o.integer("minMessagesPerTrigger", None, 1, _MAX_LONG)
        if mode == "pop":
            for name in _OFFSET_ONLY:
                if o.has(name):
                    raise OptionError(
                        f"option {o.label(name)} applies to mode=offset only: "
                        f"{_NOT_IN_POP_MODE[name]}"
                    )
        if mode == "offset":
            for name in _POP_ONLY:
                if o.has(name):
                    raise OptionError(
                        f"option {name} applies to mode=pop only; offset reads return every "
                        "message of their ranges (filter with .where())"
                    )
        starting_ts = o.integer("startingTimestamp", None, 0, MAX_TIMESTAMP_MS)
        ending_ts = o.integer("endingTimestamp", None, 0, MAX_TIMESTAMP_MS)
        starting_by_ts = _timestamps(o, "startingOffsetsByTimestamp")
        ending_by_ts = _timestamps(o, "endingOffsetsByTimestamp")
        strategy = o.text("startingOffsetsByTimestampStrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(
                f"option startingOffsetsByTimestampStrategy={strategy!r} is not supported: "
                "use error or latest"
            )
        if o.has("startingOffsetsByTimestampStrategy") and starting_ts is None:
            if starting_by_ts is None:
                raise OptionError(
                    "option startingOffsetsByTimestampStrategy applies only with "
                    "startingOffsetsByTimestamp or startingTimestamp"
                )
        if o.has("filter") and o.has("sqlFilter"):
            raise OptionError("set filter (tags) or sqlFilter (properties), not both")
        if max_per_trigger is not None and min_per_trigger is not None:
            if min_per_trigger > max_per_trigger:
                raise OptionError(
                    f"{o.label('minMessagesPerTrigger')}={min_per_trigger} is above "
                    f"{o.label('maxMessagesPerTrigger')}={max_per_trigger}"
                )
        return cls(
            endpoint=endpoint,
            lease_endpoints=_lease_endpoints(o),
            topic=topic,
            subscribe=subscribe,
            subscribe_pattern=pattern,
            mode="pop" if mode == "pop" else "offset",
            group=group,
            starting_offsets=o.text("startingOffsets").strip(),
            ending_offsets=o.text("endingOffsets").strip(),
            starting_timestamp_ms=starting_ts,
            ending_timestamp_ms=ending_ts,
            starting_offsets_by_timestamp=starting_by_ts,
            ending_offsets_by_timestamp=ending_by_ts,
            starting_timestamp_strategy="latest" if strategy == "latest" else "error",
            max_records_per_partition=o.count("maxRecordsPerPartition", 100_000, 1, _MAX_INT),
            min_partitions=o.integer("minPartitions", None, 1, 100_000),
            max_messages_per_trigger=max_per_trigger,
            min_messages_per_trigger=min_per_trigger,
            max_trigger_delay_s=o.duration("maxTriggerDelay", 900.0, 0.0, 7 * 86400.0),
            fail_on_data_loss=o.flag("failOnDataLoss", True),
            pull_batch_size=o.count("pullBatchSize", 1024, 1, 1024),
            num_partitions=o.integer("numPartitions", None, 1, 10_000),
            max_messages_per_partition=o.count("maxMessagesPerPartition", 1000, 1, 10_000_000),
            invisible_duration_s=o.duration("invisibleDuration", 120.0, 1.0, 12 * 3600.0),
            wait_s=o.duration("waitSeconds", 2.0, 0.0, 30.0),
            pop_batch_size=o.count("popBatchSize", 1024, 1, 1024),
            filter=o.text("filter", "*").strip() or "*",
            sql_filter=o.text("sqlFilter").strip(),
            timeout_s=o.duration("timeout", 30.0, 0.1, 3600.0),
            tls=_tls(o),
            access_key=access_key,
            secret_key=secret_key,
        )


@dataclass(frozen=True, kw_only=True)
class WriteOptions(_Signed):
    """Options of a write (batch or streaming)."""

    endpoint: str
    """host:port of the popmq proxy, or several comma-separated ("h1:8081,h2:8081"), passed
    to the SDK unchanged: its clients fail over between them (docs/operations.md)."""
    topic: str = ""
    """Topic for every row; wins over a topic column. Required without a topic column."""
    batch_size: int = 256
    """Messages per SendMessages call (one atomic write on the broker)."""
    batch_bytes: int = 4 * 1024 * 1024
    """A batch is sent once its bodies reach this many bytes."""
    dedup_key: str = ""
    """Batch writes: a stable name for this write (e.g. "orders-export/2026-11-21"). Rows
    get dedup ids from it, so running the same write again within the broker's dedup
    window stores nothing twice. Default: a fresh id per write (covers task retries)."""
    timeout_s: float = 30.0
    """Timeout of each RPC."""
    tls: TLS = False
    """TLS to the proxies (see ReadOptions.tls)."""
    access_key: str = ""
    """accessKey: the access key the clients sign calls with (servers with authentication
    on); empty: unsigned."""
    secret_key: str = field(default="", repr=False)
    """secretKey: its secret key (never shown: Spark redacts options named like it)."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        """Check and parse a write's options."""
        o = _Options(options, WRITE_OPTIONS, "write")
        access_key, secret_key = _credentials(o)
        return cls(
            endpoint=o.required("endpoint", _ENDPOINT_WHY),
            topic=o.text("topic").strip(),
            batch_size=o.count("batchSize", 256, 1, 1024),
            batch_bytes=o.count("batchBytes", 4 * 1024 * 1024, 1, 4 * 1024 * 1024),
            dedup_key=o.text("dedupKey").strip(),
            timeout_s=o.duration("timeout", 30.0, 0.1, 3600.0),
            tls=_tls(o),
            access_key=access_key,
            secret_key=secret_key,
        )
