"""SendMessages and SendStream requests read from their wire bytes, straight into NewMessages.

The generated classes parse a request into upb messages, and reading each field back from
Python costs an attribute lookup and a conversion: turning a parsed 1 KiB message into a
NewMessage cost about 17,000 instructions compiled, against about 1,000 for upb's parse.
These readers walk the bytes once (they are the two methods' gRPC request deserializers,
messaging.add_messaging_service) and build each message's NewMessage from the slices they
find: the body is the one copy of its bytes, each string is decoded once.

They read exactly what upb reads, so a request parses to the same values or fails as it
fails: fields in any order, a repeated singular field's last value, a repeated message field
merged (delivery_time, delay, transaction_check_delay, SendStreamRequest.send), a map entry's
last key and value and a repeated key's last entry, a field of the wrong wire type kept as an
unknown field (skipped), unknown fields and groups skipped; truncated fields, bad varints,
field number 0, wire types 6 and 7 and invalid UTF-8 in a string raise ValueError, which the
server's checked deserializer answers INVALID_ARGUMENT as for any request that does not
parse (grpc_calls/errors.py). tests/unit/proxy/test_send_request.py checks them against upb.

What the request says about scheduling is kept as its message (a Timestamp, a Duration) or
level, for the servicer to turn into a due time with its checks and their errors
(convert.deliver_at_ms), in message order, as it did when it read the generated classes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import DecodeError

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import MAX_SEND_MESSAGES, NewMessage

DELIVERY_TIME: Final = 8
DELAY: Final = 9
DELAY_LEVEL: Final = 10
"""OutgoingMessage's `schedule` fields: what `Scheduled.kind` holds."""


class Scheduled:
    """A message's `schedule` oneof, as sent: `value` is a Timestamp (DELIVERY_TIME), a
    Duration (DELAY) or the int32 level (DELAY_LEVEL)."""

    __slots__ = ("index", "kind", "value")

    def __init__(
        self, index: int, kind: int, value: timestamp_pb2.Timestamp | duration_pb2.Duration | int
    ) -> None:
        self.index = index
        """The message's index in its request."""
        self.kind = kind
        self.value = value


class SendRequest:
    """A popmq.v1.SendMessagesRequest read from its bytes (`FromString`): its messages as
    NewMessages whose `deliver_at_ms` is still 0, and their schedules beside them."""

    __slots__ = (
        "messages", "producer_group", "repeat", "schedules", "transaction_check_delay",
        "transactional",
    )  # fmt: skip

    DESCRIPTOR: ClassVar[Any] = messaging_pb2.SendMessagesRequest.DESCRIPTOR
    """The message this reads (error texts and the RPC log name its fields by it)."""

    def __init__(self) -> None:
        self.messages: (
            list[NewMessage] | RepeatedCompositeFieldContainer[messaging_pb2.OutgoingMessage]
        ) = []
        """The messages; in a request of more than MAX_SEND_MESSAGES (`_read_send`), the
        generated message's field, which the servicer's count check refuses before it reads
        a message, and access checks and the RPC log read the topics of."""
        self.schedules: list[Scheduled] = []
        """The messages that set a schedule, in message order."""
        self.transactional = False
        self.producer_group = ""
        self.transaction_check_delay: duration_pb2.Duration | None = None
        """None when the request does not set it."""
        self.repeat = False
        """The client's retry of a send whose answer it did not get (same message ids)."""

    @classmethod
    def FromString(cls, data: bytes) -> SendRequest:  # as generated classes name it
        """Read a SendMessagesRequest; ValueError when `data` is not one."""
        request = SendRequest()
        _read_send(data, 0, len(data), request)
        return request

    def HasField(self, name: str) -> bool:  # as generated classes name it
        """Whether the optional message field `name` (transaction_check_delay) is set."""
        if name == "transaction_check_delay":
            return self.transaction_check_delay is not None
        raise ValueError(f"SendMessagesRequest has no optional field {name!r}")


class SendStreamRequest:
    """A popmq.v1.SendStreamRequest read from its bytes (`FromString`)."""

    __slots__ = ("has_send", "request_id", "send")

    DESCRIPTOR: ClassVar[Any] = messaging_pb2.SendStreamRequest.DESCRIPTOR

    def __init__(self, request_id: int, send: SendRequest | None) -> None:
        self.request_id = request_id
        self.has_send = send is not None
        self.send = SendRequest() if send is None else send
        """An empty send when the request has none (`has_send`), as a generated message
        reads an unset field: access checks read `send.messages[].topic` either way."""

    @classmethod
    def FromString(cls, data: bytes) -> SendStreamRequest:
        """Read a SendStreamRequest; ValueError when `data` is not one."""
        request_id = 0
        # (start, end) of each `send` field's bytes: repeated, they merge, and a merge of
        # messages is what parsing their concatenation gives.
        sends: list[tuple[int, int]] = []
        end = len(data)
        pos = 0
        while pos < end:
            key, pos = _key(data, pos, end)
            field = key >> 3
            wire_type = key & 7
            if field == 1 and wire_type == 0:
                request_id, pos = _varint(data, pos, end)
            elif field == 2 and wire_type == 2:
                start, stop = _length_delimited(data, pos, end)
                sends.append((start, stop))
                pos = stop
            else:
                pos = _skip(data, pos, end, key)
        if not sends:
            return SendStreamRequest(request_id, None)
        send = SendRequest()
        if len(sends) == 1:
            _read_send(data, sends[0][0], sends[0][1], send)
        else:
            merged = b"".join(data[start:stop] for start, stop in sends)
            _read_send(merged, 0, len(merged), send)
        return SendStreamRequest(request_id, send)


def _read_send(data: bytes, pos: int, end: int, out: SendRequest) -> None:
    """Read the SendMessagesRequest in data[pos:end] into `out`.

    A request of more messages than a send may carry is parsed by upb instead, once its
    reading reaches the first message past the limit: upb's parse costs a tenth of reading
    them here, the servicer refuses the request for its count before it reads a message,
    and the request is accepted as valid, or not, by upb, as it always was."""
    first = pos
    messages: list[NewMessage] = []
    out.messages = messages
    while pos < end:
        key = data[pos]
        if key == 0x0A:  # messages = 1, the usual field: no varint to read for its key
            pos += 1
        else:
            key, pos = _key(data, pos, end)
        field = key >> 3
        wire_type = key & 7
        if field == 1 and wire_type == 2:
            if len(messages) == MAX_SEND_MESSAGES:
                _read_too_many(data[first:end], out)
                return
            start, stop = _length_delimited(data, pos, end)
            messages.append(_read_message(data, start, stop, len(messages), out))
            pos = stop
        elif field == 2 and wire_type == 0:
            value, pos = _varint(data, pos, end)
            out.transactional = value != 0
        elif field == 3 and wire_type == 2:
            start, stop = _length_delimited(data, pos, end)
            out.producer_group = _text(data, start, stop)
            pos = stop
        elif field == 4 and wire_type == 2:
            start, stop = _length_delimited(data, pos, end)
            delay = out.transaction_check_delay
            if delay is None:
                delay = out.transaction_check_delay = duration_pb2.Duration()
            _merge(delay, data[start:stop])
            pos = stop
        elif field == 5 and wire_type == 0:
            value, pos = _varint(data, pos, end)
            out.repeat = value != 0
        else:
            pos = _skip(data, pos, end, key)


def _read_too_many(data: bytes, out: SendRequest) -> None:
    """`_read_send` for a request of more than MAX_SEND_MESSAGES messages: all of it read
    by upb (ValueError when it does not parse)."""
    try:
        parsed = messaging_pb2.SendMessagesRequest.FromString(data)
    except DecodeError as e:
        raise ValueError(f"the request does not parse: {e}") from None
    out.messages = parsed.messages
    out.schedules = []
    out.transactional = parsed.transactional
    out.producer_group = parsed.producer_group
    out.repeat = parsed.repeat
    has_delay = parsed.HasField("transaction_check_delay")
    out.transaction_check_delay = parsed.transaction_check_delay if has_delay else None


def _read_message(data: bytes, pos: int, end: int, index: int, out: SendRequest) -> NewMessage:
    """The OutgoingMessage in data[pos:end] as a NewMessage (its schedule, if it has one,
    appended to `out.schedules`)."""
    topic = tag = message_id = message_group = dedup_id = body_encoding = born_host = ""
    body = b""
    keys: list[str] = []
    properties: dict[str, str] = {}
    scheduled: Scheduled | None = None
    while pos < end:
        key = data[pos]
        if 0x08 <= key < 0x80:  # a one-byte key of a valid field number: most are
            pos += 1
        else:
            key, pos = _key(data, pos, end)
        field = key >> 3
        wire_type = key & 7
        if wire_type == 2 and 1 <= field <= 13 and field != DELAY_LEVEL:
            start, stop = _length_delimited(data, pos, end)
            pos = stop
            if field == 2:
                body = data[start:stop]
            elif field == 1:
                topic = _text(data, start, stop)
            elif field == 3:
                tag = _text(data, start, stop)
            elif field == 4:
                keys.append(_text(data, start, stop))
            elif field == 5:
                _read_entry(data, start, stop, properties)
            elif field == 6:
                message_id = _text(data, start, stop)
            elif field == 7:
                message_group = _text(data, start, stop)
            elif field == 11:
                dedup_id = _text(data, start, stop)
            elif field == 12:
                body_encoding = _text(data, start, stop)
            elif field == 13:
                born_host = _text(data, start, stop)
            else:  # delivery_time 8 or delay 9: a message of the oneof, merged when repeated
                if scheduled is None or scheduled.kind != field:
                    fresh: timestamp_pb2.Timestamp | duration_pb2.Duration = (
                        timestamp_pb2.Timestamp() if field == DELIVERY_TIME
                        else duration_pb2.Duration()
                    )  # fmt: skip
                    scheduled = Scheduled(index, field, fresh)
                value = scheduled.value
                assert not isinstance(value, int)
                _merge(value, data[start:stop])
        elif field == DELAY_LEVEL and wire_type == 0:
            level, pos = _varint(data, pos, end)
            scheduled = Scheduled(index, DELAY_LEVEL, _int32(level))
        else:
            pos = _skip(data, pos, end, key)
    if scheduled is not None:
        out.schedules.append(scheduled)
    return NewMessage(
        topic,
        body,
        tag,
        tuple(keys) if keys else (),
        properties,
        message_id,
        0,
        message_group,
        0,
        dedup_id,
        body_encoding,
        born_host,
    )


def _read_entry(data: bytes, pos: int, end: int, out: dict[str, str]) -> None:
    """A map<string, string> entry (key 1, value 2): set in `out`, a later entry of the same
    key replacing an earlier one."""
    name = value = ""
    while pos < end:
        key, pos = _key(data, pos, end)
        field = key >> 3
        if (field == 1 or field == 2) and key & 7 == 2:
            start, stop = _length_delimited(data, pos, end)
            if field == 1:
                name = _text(data, start, stop)
            else:
                value = _text(data, start, stop)
            pos = stop
        else:
            pos = _skip(data, pos, end, key)
    out[name] = value


def _merge(message: timestamp_pb2.Timestamp | duration_pb2.Duration, data: bytes) -> None:
    """Merge `data` into `message` as upb merges a repeated message field; ValueError when
    it does not parse, as for the rest of the request."""
    try:
        message.MergeFromString(data)
    except DecodeError as e:
        raise ValueError(f"a {message.DESCRIPTOR.name} does not parse: {e}") from None


def _text(data: bytes, start: int, stop: int) -> str:
    """A string field's value: UTF-8, as proto3 requires (UnicodeDecodeError otherwise)."""
    return data[start:stop].decode()


def _int32(value: int) -> int:
    """An int32 field read from its varint, as upb truncates it."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _key(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A field's key and the position after it; field number 0 does not parse."""
    key, pos = _varint(data, pos, end)
    if key >> 3 == 0 or key > 0xFFFFFFFF:
        raise ValueError(f"field key {key} is not a valid field number and wire type")
    return key, pos


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it (at most ten bytes, 64 bits kept)."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ValueError("a varint runs past the end of its message")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            # Masked only when it may pass 64 bits: compiled, the mask is a boxed integer
            # operation, which cost as much as the rest of reading a short varint.
            return (result if shift < 63 else result & _UINT64), pos
        shift += 7
        if shift >= 70:
            raise ValueError("a varint is longer than 10 bytes")


_UINT64: Final = (1 << 64) - 1


def _length_delimited(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The start and end of the length-delimited value at `pos` (after its key)."""
    length = data[pos] if pos < end else 0x80
    start = pos + 1
    if length >= 0x80:
        if start < end and data[start] < 0x80:  # two bytes: up to 16 KiB, as most bodies
            length = (length & 0x7F) | data[start] << 7
            start += 1
        else:
            length, start = _varint(data, pos, end)
    stop = start + length
    if stop > end:
        raise ValueError(f"a field of {length} bytes runs past the end of its message")
    return start, stop


def _skip(data: bytes, pos: int, end: int, key: int) -> int:
    """The position after the value of the unknown field `key` at `pos`."""
    wire_type = key & 7
    if wire_type == 0:
        return _varint(data, pos, end)[1]
    if wire_type == 2:
        return _length_delimited(data, pos, end)[1]
    if wire_type == 1 or wire_type == 5:
        pos += 8 if wire_type == 1 else 4
        if pos > end:
            raise ValueError("a fixed-size field runs past the end of its message")
        return pos
    if wire_type == 3:  # a group: fields up to its end-group key of the same number
        while True:
            if pos >= end:
                raise ValueError("a group runs past the end of its message")
            inner, pos = _key(data, pos, end)
            if inner & 7 == 4:
                if inner >> 3 != key >> 3:
                    raise ValueError("a group ends with another group's end key")
                return pos
            pos = _skip(data, pos, end, inner)
    raise ValueError(f"wire type {wire_type} is not a valid wire type here")
