"""apache.rocketmq.v2 <-> broker_core conversions and the v2 argument rules.

Each check raises ProtocolError with the Code an official client expects for that field
(ILLEGAL_MESSAGE_TAG, MESSAGE_BODY_TOO_LARGE, ...) and a message saying what is allowed.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from google.protobuf import duration_pb2, timestamp_pb2

from popmq import broker_core  # its exported checks and limits
from popmq._gen import _pool
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.broker_core import KIND_DLQ, MessageRecord, NewMessage, PoppedMessage, TopicInfo
from popmq.proxy.convert import copy_properties, set_time
from popmq.proxy.rocketmq.codes import Code, ProtocolError, UnsupportedError
from popmq.proxy.rocketmq.config import RocketMQConfig

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# apache.rocketmq.v2 lives in popmq's private descriptor pool (popmq._gen._pool), so
# its messages take that pool's Timestamp and Duration, not google.protobuf's.
_TIMESTAMP = cast("type[timestamp_pb2.Timestamp]", _pool.well_known("google.protobuf.Timestamp"))
_DURATION = cast("type[duration_pb2.Duration]", _pool.well_known("google.protobuf.Duration"))

# The v2 message types a popmq topic of each message type accepts.
_ACCEPTS: dict[str, tuple[pb.MessageType, ...]] = {
    "normal": (pb.NORMAL,),
    "fifo": (pb.FIFO,),
    "delay": (pb.DELAY,),
    "transaction": (pb.TRANSACTION,),
    "mixed": (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION),
}
_TYPE_NAMES = {pb.NORMAL: "normal", pb.FIFO: "fifo", pb.DELAY: "delay"}

# popmq stores a body as sent or compressed with zlib; v2 clients understand GZIP or none.
_ZLIB = "zlib"
_ZLIB_LEVEL = 5
"""What popmq's SDK (and RocketMQ's Java producer) compress with."""


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return _TIMESTAMP(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def timestamp_ms(value: timestamp_pb2.Timestamp) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def duration(seconds: float) -> duration_pb2.Duration:
    whole = int(seconds)
    return _DURATION(seconds=whole, nanos=round((seconds - whole) * 1e9))


def seconds(field: str, value: duration_pb2.Duration, code: pb.Code = Code.BAD_REQUEST) -> float:
    """A Duration as seconds; rejects durations whose parts disagree in sign or overflow."""
    if abs(value.nanos) >= 1_000_000_000 or (value.seconds * value.nanos < 0):
        raise ProtocolError(code, f"{field} is not a valid duration")
    return value.seconds + value.nanos / 1e9


def namespace_refusal(namespace: str, where: str) -> str:
    """Why a namespace is refused, the same words wherever it was sent."""
    return (
        f"namespace {namespace!r} ({where}) is not supported: popmq has no namespaces; "
        "configure the client without one"
    )


def _name(resource: pb.Resource, kind: str, *, allow_dlq: bool = False) -> str:
    """The resource's name, checked by broker_core (its error names the field `kind`, which
    codes.FIELD_CODES maps to ILLEGAL_TOPIC or ILLEGAL_CONSUMER_GROUP)."""
    if resource.resource_namespace:
        # BAD_REQUEST, as for the x-mq-namespace header: refused alike on every path.
        raise ProtocolError(
            Code.BAD_REQUEST,
            namespace_refusal(resource.resource_namespace, f"the {kind}'s resource_namespace"),
        )
    broker_core.check_name(kind, resource.name, allow_dlq=allow_dlq)
    return resource.name


def topic_name(resource: pb.Resource, *, allow_dlq: bool = True) -> str:
    """A topic named in a request; dead-letter topics can be read, not written."""
    return _name(resource, "topic", allow_dlq=allow_dlq)


def group_name(resource: pb.Resource) -> str:
    return _name(resource, "group")


def accepted_types(info: TopicInfo) -> tuple[pb.MessageType, ...]:
    """The message types a topic takes, from its popmq message type."""
    if info.kind == KIND_DLQ:
        return (pb.NORMAL,)
    return _ACCEPTS[info.message_type_name]


def permission(info: TopicInfo) -> pb.Permission:
    """Dead-letter topics are read-only; the rest are read-write."""
    return pb.READ if info.kind == KIND_DLQ else pb.READ_WRITE


MAX_ENDPOINT_ADDRESSES = 16
"""Most addresses a request's endpoints may list (clients send their access point: a few)."""
MAX_HOST_LENGTH = 253
"""Longest host of an address: a DNS name's limit (IP literals are shorter)."""
MAX_HOSTS_TOTAL_LENGTH = 1024
"""Most characters the hosts of one endpoints list may take in all. Each queue of a route
repeats the list: with 1,024 queues the answer stays near 1 MiB, under the 4 MiB a gRPC
client accepts by default."""
_HOST = re.compile(r"[A-Za-z0-9._:%\[\]-]+")
"""Characters of a DNS name, an IPv4 or an IPv6 literal (with a zone after %)."""


def client_endpoints(requested: pb.Endpoints, field: str = "endpoints") -> pb.Endpoints | None:
    """The endpoints a request names (None when it names none), checked before use.

    Routes echo them back in every queue's broker entry, so the list is bounded and each
    address must be a plausible HOST:PORT: a route's size then grows with its queues only,
    never with what a client sends.
    """
    count = len(requested.addresses)
    if count == 0:
        return None
    if count > MAX_ENDPOINT_ADDRESSES:
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"{field} lists {count} addresses: at most {MAX_ENDPOINT_ADDRESSES} are allowed "
            "(the access point the client connects to)",
        )
    if requested.scheme not in pb.AddressScheme.values():
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"{field}.scheme {requested.scheme} is unknown: use IPv4, IPv6 or DOMAIN_NAME",
        )
    for index, address in enumerate(requested.addresses):
        host = address.host
        if not host or len(host) > MAX_HOST_LENGTH or not _HOST.fullmatch(host):
            shown = host if len(host) <= MAX_HOST_LENGTH else host[:MAX_HOST_LENGTH] + "..."
            raise ProtocolError(
                Code.BAD_REQUEST,
                f"{field}.addresses[{index}].host {shown!r} is invalid: 1 to "
                f"{MAX_HOST_LENGTH} characters of a DNS name or an IP address",
            )
        if not 1 <= address.port <= 65535:
            raise ProtocolError(
                Code.BAD_REQUEST,
                f"{field}.addresses[{index}].port {address.port} is outside 1..65535",
            )
    total = sum(len(a.host) for a in requested.addresses)
    if total > MAX_HOSTS_TOTAL_LENGTH:
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"{field} hosts take {total} characters in all: at most {MAX_HOSTS_TOTAL_LENGTH} "
            "are allowed",
        )
    # Rebuilt, not echoed: unknown fields a client appended would be copied into every queue.
    return pb.Endpoints(
        scheme=requested.scheme,
        addresses=[pb.Address(host=a.host, port=a.port) for a in requested.addresses],
    )


def endpoints(address: str) -> pb.Endpoints:
    """Endpoints of one HOST:PORT address ([v6]:port for IPv6)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if ":" in host:
        scheme = pb.IPv6
    elif host.replace(".", "").isdigit():
        scheme = pb.IPv4
    else:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


def with_peers(where: pb.Endpoints, peers: Sequence[str]) -> pb.Endpoints:
    """The endpoints a client used plus every proxy's, when all are IP literals of the
    client's own scheme: the official clients make one gRPC target of a list
    (`ipv4:a,b`), which fails over between them. A DOMAIN_NAME endpoint, or a proxy
    advertised under a name or in another IP family, keeps the client's address alone: the
    clients refuse several addresses under a domain name."""
    if where.scheme == pb.DOMAIN_NAME:
        return where
    addresses = {(a.host, a.port) for a in where.addresses}
    for peer in peers:
        one = endpoints(peer)
        if one.scheme != where.scheme:
            return where
        addresses.update((a.host, a.port) for a in one.addresses)
    listed = sorted(addresses)[:MAX_ENDPOINT_ADDRESSES]
    return pb.Endpoints(
        scheme=where.scheme, addresses=[pb.Address(host=h, port=p) for h, p in listed]
    )


def broker(where: pb.Endpoints, broker_name: str) -> pb.Broker:
    """The broker entry of routes (built once per answer, copied into each queue)."""
    return pb.Broker(name=broker_name, id=0, endpoints=where)


def message_queue(info: TopicInfo, queue_id: int, entry: pb.Broker) -> pb.MessageQueue:
    return pb.MessageQueue(
        topic=pb.Resource(name=info.name),
        id=queue_id,
        permission=permission(info),
        broker=entry,
        accept_message_types=accepted_types(info),
    )


# -- send --------------------------------------------------------------------------------


def message_type_of(msg: pb.Message, where: str = "message") -> pb.MessageType:
    """The type a message's properties make it; a declared type must agree with them.

    TRANSACTION is declared, never derived: a half message keeps the FIFO or DELAY
    semantics its message group or delivery time give it, where its topic takes those
    (check_type_accepted). The declared type is an enum from the wire: a value this schema
    does not know is refused before any name lookup (which would raise for it).
    """
    props = msg.system_properties
    has_group = props.HasField("message_group")
    has_delay = props.HasField("delivery_timestamp")
    if props.message_type not in pb.MessageType.values():
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"{where}.message_type {props.message_type} is unknown: use NORMAL, FIFO, DELAY or "
            "TRANSACTION, or leave it unset",
        )
    if props.message_type in (pb.LITE, pb.PRIORITY):
        raise UnsupportedError(
            f"{pb.MessageType.Name(props.message_type)} messages are not supported by popmq; "
            "send NORMAL, FIFO, DELAY or TRANSACTION messages"
        )
    if props.HasField("lite_topic") or props.HasField("priority"):
        raise UnsupportedError("lite topics and message priorities are not supported by popmq")
    if has_group and has_delay:
        raise ProtocolError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a message cannot have both a message_group (FIFO) and a delivery_timestamp (DELAY)",
        )
    declared = props.message_type
    if props.HasField("orphaned_transaction_recovery_duration") and declared != pb.TRANSACTION:
        raise ProtocolError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"{where}.orphaned_transaction_recovery_duration is set, but only TRANSACTION "
            "messages are checked back: declare message_type TRANSACTION or leave it unset",
        )
    if declared == pb.TRANSACTION:
        return pb.TRANSACTION
    derived = pb.FIFO if has_group else pb.DELAY if has_delay else pb.NORMAL
    if declared not in (pb.MESSAGE_TYPE_UNSPECIFIED, derived):
        raise ProtocolError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"message_type {pb.MessageType.Name(declared)} does not match its properties, "
            f"which make it {pb.MessageType.Name(derived)} (FIFO needs message_group, DELAY "
            "needs delivery_timestamp, NORMAL neither)",
        )
    return derived


def _base_type(msg: pb.Message) -> str:
    """The popmq message type a message's properties give it (a half message's too)."""
    props = msg.system_properties
    if props.HasField("message_group"):
        return "fifo"
    return "delay" if props.HasField("delivery_timestamp") else "normal"


def check_type_accepted(info: TopicInfo, kind: pb.MessageType, msg: pb.Message) -> None:
    """Refuse a message its topic's type does not take, as RocketMQ does
    (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE). Transactional messages go to transaction and
    mixed topics, or to a fifo or delay topic when their properties are of its type (the
    broker's rule for half messages: the commit keeps the topic's semantics)."""
    name = info.message_type_name
    if kind == pb.TRANSACTION:
        if name in ("transaction", "mixed") or (name != "normal" and info.accepts(_base_type(msg))):
            return
        raise ProtocolError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {info.name!r} is a {name} topic and does not accept TRANSACTION messages"
            + (
                f" without a {'message_group' if name == 'fifo' else 'delivery_timestamp'}"
                if name in ("fifo", "delay")
                else ""
            )
            + ": send them to a topic of message type transaction or mixed",
        )
    if not info.accepts(_TYPE_NAMES[kind]):
        names = ", ".join(pb.MessageType.Name(t) for t in accepted_types(info))
        raise ProtocolError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {info.name!r} accepts {names} messages, not {pb.MessageType.Name(kind)}",
        )


@dataclass(slots=True)
class InflateBudget:
    """Bytes the GZIP bodies of one SendMessage may still inflate to. Shared by its messages,
    so the work of a request is bounded, not proportional to how many bodies it carries."""

    left: int


def _body(
    msg: pb.Message, where: str, config: RocketMQConfig, budget: InflateBudget
) -> tuple[bytes, str]:
    """The body to store and its popmq encoding; a GZIP body is stored zlib-compressed.
    Its size was checked by broker_core.check_message (_check_message)."""
    body = msg.body
    encoding = msg.system_properties.body_encoding
    if encoding in (pb.ENCODING_UNSPECIFIED, pb.IDENTITY):
        return body, ""
    if encoding != pb.GZIP:
        raise ProtocolError(
            Code.BAD_REQUEST,
            f"{where}.body_encoding {encoding} is unknown: use IDENTITY or GZIP, or leave it unset",
        )
    inflater = zlib.decompressobj(wbits=31)  # gzip framing
    try:
        raw = inflater.decompress(body, max(1, budget.left))
    except zlib.error as exc:
        raise ProtocolError(
            Code.MESSAGE_CORRUPTED, f"{where}.body is not valid GZIP: {exc}"
        ) from exc
    if inflater.unconsumed_tail or len(raw) > budget.left:
        raise ProtocolError(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"{where}.body inflates to more than the {budget.left} bytes left: the GZIP bodies "
            f"of one request may inflate to {config.max_gzip_body_bytes} bytes in all",
        )
    if not inflater.eof:
        raise ProtocolError(Code.MESSAGE_CORRUPTED, f"{where}.body is truncated GZIP")
    budget.left -= len(raw)
    return zlib.compress(raw, _ZLIB_LEVEL), _ZLIB


def _check_message(
    index: int, props: pb.SystemProperties, user: dict[str, str], body: bytes
) -> None:
    """broker_core's message rules (broker_core.check_message), which name the field that
    codes.FIELD_CODES maps to the v2 Code; v2 clients always send a message id, and a tag
    that is present must not be empty."""
    if props.HasField("tag") and not props.tag:
        broker_core.check_tag(index, props.tag)
    broker_core.check_message(
        index,
        body=body,
        tag=props.tag,
        keys=props.keys,
        properties=user,
        message_id=props.message_id,
        require_message_id=True,
    )


def new_message(
    msg: pb.Message,
    index: int,
    now_ms: int,
    config: RocketMQConfig,
    max_delay_s: float,
    budget: InflateBudget,
) -> tuple[NewMessage, pb.MessageType]:
    """A v2 message as the broker stores it, and its message type."""
    where = f"messages[{index}]"
    props = msg.system_properties
    user = dict(msg.user_properties)
    kind = message_type_of(msg, where)
    _check_message(index, props, user, msg.body)
    body, encoding = _body(msg, where, config, budget)
    group = props.message_group if props.HasField("message_group") else ""
    if props.HasField("message_group") and (
        not group.strip()
        or _CONTROL.search(group)
        or len(group.encode()) > config.max_message_group_bytes
    ):
        raise ProtocolError(
            Code.ILLEGAL_MESSAGE_GROUP,
            f"{where}.message_group {group!r} is invalid: 1 to "
            f"{config.max_message_group_bytes} bytes, not blank, no control characters",
        )
    deliver_at = 0
    if props.HasField("delivery_timestamp"):
        deliver_at = timestamp_ms(props.delivery_timestamp)
        broker_core.check_delivery_time(index, deliver_at, now_ms, max_delay_s)
    born = timestamp_ms(props.born_timestamp) if props.HasField("born_timestamp") else 0
    return (
        NewMessage(
            topic=msg.topic.name,
            body=body,
            tag=props.tag if props.HasField("tag") else "",
            keys=tuple(props.keys),
            properties=user,
            message_id=props.message_id,
            born_time_ms=born,
            message_group=group,
            deliver_at_ms=deliver_at,
            body_encoding=encoding,
            born_host=props.born_host,
        ),
        kind,
    )


# -- receive -----------------------------------------------------------------------------


def delivered_body(body: bytes, encoding: str, message_id: str) -> bytes:
    """The body as v2 clients read it (IDENTITY): popmq encodings are decoded here."""
    if encoding == "":
        return body
    if encoding == _ZLIB:
        return zlib.decompress(body)
    raise UnsupportedError(
        f"message {message_id} has body encoding {encoding!r}, which RocketMQ 5 clients "
        "cannot read and popmq cannot decode for them"
    )


def v2_message(
    record: MessageRecord,
    *,
    topic: str,
    queue_id: int,
    offset: int,
    store_host: str,
    receipt_handle: str = "",
    invisible_s: float | None = None,
) -> pb.Message:
    """A stored message as ReceiveMessage (with a handle) or PullMessage streams it."""
    message_id = record.message_id
    body = delivered_body(record.body, record.body_encoding, message_id)
    # Set in place, and empty fields not at all: see popmq.proxy.convert._copy_record (which
    # also says why each field of the record is read once).
    group = record.message_group
    deliver_at_ms = record.deliver_at_ms
    origin_topic = record.origin_topic
    props = pb.SystemProperties(
        message_id=message_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=pb.IDENTITY,
        message_type=pb.FIFO if group else pb.DELAY if deliver_at_ms else pb.NORMAL,
        store_host=store_host,
        # A retry copy reports where the message was first stored.
        queue_id=record.origin_queue_id if origin_topic else queue_id,
        queue_offset=record.origin_offset if origin_topic else offset,
        delivery_attempt=record.delivery_attempt,
    )
    set_time(props.born_timestamp, record.born_time_ms)
    set_time(props.store_timestamp, record.store_time_ms)
    keys = record.keys
    if keys:
        props.keys.extend(keys)
    born_host = record.born_host
    if born_host:
        props.born_host = born_host
    if receipt_handle:
        props.receipt_handle = receipt_handle
    if invisible_s is not None:
        props.invisible_duration.CopyFrom(duration(invisible_s))
    tag = record.tag
    if tag:
        props.tag = tag
    if group:
        props.message_group = group
    if deliver_at_ms:
        set_time(props.delivery_timestamp, deliver_at_ms)
    if origin_topic and topic.startswith(broker_core.DLQ_PREFIX):
        props.dead_letter_queue.CopyFrom(
            pb.DeadLetterQueue(topic=origin_topic, message_id=message_id)
        )
    message = pb.Message(topic=pb.Resource(name=topic), system_properties=props, body=body)
    properties = record.properties
    if properties:
        copy_properties(properties, message.user_properties)
    return message


def popped_message(popped: PoppedMessage, now_ms: int, store_host: str) -> pb.Message:
    return v2_message(
        popped.record,
        topic=popped.topic,
        queue_id=popped.queue_id,
        offset=popped.offset,
        store_host=store_host,
        receipt_handle=popped.receipt_handle,
        invisible_s=max(0, popped.invisible_until_ms - now_ms) / 1000,
    )
