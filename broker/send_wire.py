"""Sends across the cluster hop as bytes: a SendRequest (or SendHalfRequest) written by the
proxy straight from its NewMessages and read by the broker straight into NewMessages, and
the SendResponse's results back, without protobuf message objects on either side.

Built through the generated classes, the proxy made a NewMessage proto per message (a call
per field, a map for the properties) and serialized the request, and the broker parsed it and
read every field back into Python: about as much work per message as the broker's store of
it. Here each side walks the bytes once; the body is copied once, into the frame.

The same bytes go on HopSend (cluster/hop_stream.py) and in a unary Send or SendHalf to a
broker without HopSend: they are the messages the generated classes define, and the tests
check them against the generated classes both ways. Readers skip the fields they do not
know, as protobuf does, and raise ValueError on bytes that do not parse (the broker answers
INVALID_ARGUMENT).

The field numbers here must follow protos/popmq/broker/v1/broker.proto (NewMessage,
SendRequest, SendHalfRequest, SendResult, SendResponse, HopSendRequest.frame,
HopSendResponse.frame).

Frames: concurrent sends to one broker travel together as one HopSendRequest whose `frame`
holds each as a HopSendRequest of its own, answered by one HopSendResponse whose `frame`
holds each one's answer (cluster/hop_frames.py): the stream's per-message price is paid once
per frame. Only a broker whose HopSend headers carry `FRAMES_HEADER` is sent frames.
HopStream's pops and acks travel in frames the same way, with the same keys and header
(HopStreamRequest.frame, HopStreamResponse.frame).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from popmq.broker_core.record_wire import read_varint, varint
from popmq.broker_core.types import NewMessage, SendResult

_INT64_SIGN: Final = 1 << 63
_INT32_MASK: Final = 0xFFFFFFFF
_ELEMENT_TAG: Final = b"\x0a"
"""Field 1, length-delimited: SendRequest.messages, SendResponse.results."""
_PRODUCER_GROUP_TAG: Final = b"\x12"
_CHECK_FIRST_TAG: Final = b"\x19"
"""SendHalfRequest.check_first_s: a double (wire type 1)."""
# NewMessage's fields.
_TOPIC_TAG: Final = b"\x0a"
_BODY_TAG: Final = b"\x12"
_TAG_TAG: Final = b"\x1a"
_KEYS_TAG: Final = b"\x22"
_PROPERTIES_TAG: Final = b"\x2a"
_MESSAGE_ID_TAG: Final = b"\x32"
_BORN_TIME_TAG: Final = b"\x38"
_GROUP_TAG: Final = b"\x42"
_DELIVER_AT_TAG: Final = b"\x48"
_DEDUP_TAG: Final = b"\x52"
_ENCODING_TAG: Final = b"\x5a"
_BORN_HOST_TAG: Final = b"\x62"
_QUEUE_ID_TAG: Final = b"\x68"
# A map entry's key and value.
_KEY_TAG: Final = b"\x0a"
_VALUE_TAG: Final = b"\x12"
_DOUBLE: Final = struct.Struct("<d")
REQUEST_FRAME_KEY: Final = 0x22
"""HopSendRequest.frame's key: field 4, length-delimited."""
ANSWER_FRAME_KEY: Final = 0x2A
"""HopSendResponse.frame's key: field 5, length-delimited."""
FRAMES_HEADER: Final = "popmq-hop-frames"
"""The HopSend and HopStream header (initial metadata) of a broker that answers frames; its
value "1"."""


def frame_wire(key: int, parts: Sequence[bytes]) -> bytes:
    """The HopSendRequest (`key` REQUEST_FRAME_KEY) or HopSendResponse (ANSWER_FRAME_KEY)
    whose frame holds `parts`, each a HopSendRequest's or HopSendResponse's bytes."""
    tag = bytes((key,))
    out: list[bytes] = []
    for part in parts:
        out.append(tag)
        out.append(varint(len(part)))
        out.append(part)
    return b"".join(out)


def frame_from_wire(key: int, data: bytes) -> list[bytes] | None:
    """The parts of the frame `data` (field `key`: REQUEST_FRAME_KEY or ANSWER_FRAME_KEY),
    or None when `data` is a request or answer of its own (its first field is not the
    frame). Raises ValueError when it does not parse, or when a frame carries anything but
    its parts."""
    if not data or data[0] != key:
        return None
    parts: list[bytes] = []
    end = len(data)
    pos = 0
    while pos < end:
        field, pos = read_varint(data, pos)
        start, stop = _field(data, pos, field, end)
        if field != key:
            raise ValueError(f"a frame carries field {field >> 3} besides its parts")
        parts.append(data[start:stop])
        pos = stop
    return parts


def _text(tag: bytes, value: str, fields: list[bytes]) -> None:
    if value:
        data = value.encode()
        fields.append(tag)
        fields.append(varint(len(data)))
        fields.append(data)


def _message_fields(message: NewMessage, topic_field: bytes) -> list[bytes]:
    fields = [topic_field]
    body = message.body
    if body:
        fields.append(_BODY_TAG)
        fields.append(varint(len(body)))
        fields.append(body)
    _text(_TAG_TAG, message.tag, fields)
    for key in message.keys:
        data = key.encode()
        fields.append(_KEYS_TAG)
        fields.append(varint(len(data)))
        fields.append(data)
    for name, value in message.properties.items():
        k = name.encode()
        v = value.encode()
        entry = b"".join((_KEY_TAG, varint(len(k)), k, _VALUE_TAG, varint(len(v)), v))
        fields.append(_PROPERTIES_TAG)
        fields.append(varint(len(entry)))
        fields.append(entry)
    _text(_MESSAGE_ID_TAG, message.message_id, fields)
    if message.born_time_ms:
        fields.append(_BORN_TIME_TAG)
        fields.append(varint(message.born_time_ms))
    _text(_GROUP_TAG, message.message_group, fields)
    if message.deliver_at_ms:
        fields.append(_DELIVER_AT_TAG)
        fields.append(varint(message.deliver_at_ms))
    _text(_DEDUP_TAG, message.dedup_id, fields)
    _text(_ENCODING_TAG, message.body_encoding, fields)
    _text(_BORN_HOST_TAG, message.born_host, fields)
    queue_id = message.queue_id
    if queue_id is not None:  # optional: 0 is sent too
        fields.append(_QUEUE_ID_TAG)
        fields.append(varint(queue_id))
    return fields


def send_request_wire(
    messages: Sequence[NewMessage],
    *,
    producer_group: str = "",
    check_first_s: float | None = None,
) -> bytes:
    """`messages` as the bytes of a SendRequest, or of a SendHalfRequest with its
    `producer_group` and `check_first_s` (a SendRequest has neither)."""
    parts: list[bytes] = []
    topic = ""
    topic_field = b""
    for message in messages:
        if message.topic != topic or not topic_field:
            topic = message.topic
            name = topic.encode()
            topic_field = b"".join((_TOPIC_TAG, varint(len(name)), name)) if name else b""
        fields = _message_fields(message, topic_field)
        size = 0
        for field in fields:
            size += len(field)
        parts.append(_ELEMENT_TAG)
        parts.append(varint(size))
        parts.extend(fields)
    _text(_PRODUCER_GROUP_TAG, producer_group, parts)
    if check_first_s is not None:
        parts.append(_CHECK_FIRST_TAG)
        parts.append(_DOUBLE.pack(check_first_s))
    return b"".join(parts)


class SendRequestRead:
    """A SendRequest or SendHalfRequest read from its bytes (`send_request_from_wire`)."""

    __slots__ = ("check_first_s", "messages", "producer_group")

    def __init__(
        self, messages: list[NewMessage], producer_group: str, check_first_s: float | None
    ) -> None:
        self.messages = messages
        self.producer_group = producer_group
        """SendHalfRequest's; "" when unset."""
        self.check_first_s = check_first_s
        """SendHalfRequest's; None when unset."""


def send_request_from_wire(data: bytes) -> SendRequestRead:
    """The SendRequest or SendHalfRequest `data`. Raises ValueError when it does not parse."""
    messages: list[NewMessage] = []
    producer_group = ""
    check_first_s: float | None = None
    # The messages of a batch nearly always share a topic: decoded once.
    last_topic = b""
    topic = ""
    end = len(data)
    pos = 0
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key, end)
        if key == 0x0A:
            message, name = _new_message(data, start, stop, last_topic, topic)
            if name is not last_topic:
                last_topic = name
                topic = message.topic
            messages.append(message)
        elif key == 0x12:
            producer_group = data[start:stop].decode()
        elif key == 0x19:
            check_first_s = float(_DOUBLE.unpack_from(data, start)[0])
        pos = stop
    return SendRequestRead(messages, producer_group, check_first_s)


def _new_message(
    data: bytes, pos: int, end: int, last_topic: bytes, last_topic_text: str
) -> tuple[NewMessage, bytes]:
    """The NewMessage in data[pos:end], and its topic's bytes (`last_topic` itself when they
    are equal, whose text `last_topic_text` is then reused)."""
    name = b""
    topic = ""
    body = b""
    tag = ""
    keys: list[str] = []
    properties: dict[str, str] = {}
    message_id = ""
    born_time_ms = 0
    message_group = ""
    deliver_at_ms = 0
    dedup_id = ""
    body_encoding = ""
    born_host = ""
    queue_id: int | None = None
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key, end)
        if key == 0x0A:
            name = data[start:stop]
            if name == last_topic:
                name = last_topic
                topic = last_topic_text
            else:
                topic = name.decode()
        elif key == 0x12:
            body = data[start:stop]
        elif key == 0x1A:
            tag = data[start:stop].decode()
        elif key == 0x22:
            keys.append(data[start:stop].decode())
        elif key == 0x2A:
            entry_key, entry_value = _entry(data, start, stop)
            properties[entry_key] = entry_value
        elif key == 0x32:
            message_id = data[start:stop].decode()
        elif key == 0x38:
            born_time_ms = _int64(read_varint(data, start)[0])
        elif key == 0x42:
            message_group = data[start:stop].decode()
        elif key == 0x48:
            deliver_at_ms = _int64(read_varint(data, start)[0])
        elif key == 0x52:
            dedup_id = data[start:stop].decode()
        elif key == 0x5A:
            body_encoding = data[start:stop].decode()
        elif key == 0x62:
            born_host = data[start:stop].decode()
        elif key == 0x68:
            queue_id = _int32(read_varint(data, start)[0])
        pos = stop
    message = NewMessage(
        topic, body, tag, tuple(keys), properties, message_id, born_time_ms, message_group,
        deliver_at_ms, dedup_id, body_encoding, born_host, queue_id,
    )  # fmt: skip
    return message, name


def _entry(data: bytes, pos: int, end: int) -> tuple[str, str]:
    """A map<string, string> entry's key and value ("" for one left out)."""
    key_text = ""
    value_text = ""
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key, end)
        if key == 0x0A:
            key_text = data[start:stop].decode()
        elif key == 0x12:
            value_text = data[start:stop].decode()
        pos = stop
    return key_text, value_text


def send_response_wire(results: Sequence[SendResult]) -> bytes:
    """`results` as the bytes of a SendResponse (or SendHalfResponse: the same fields)."""
    parts: list[bytes] = []
    for result in results:
        fields: list[bytes] = []
        _text(b"\x0a", result.message_id, fields)
        _text(b"\x12", result.topic, fields)
        if result.queue_id:
            fields.append(b"\x18")
            fields.append(varint(result.queue_id))
        if result.offset:
            fields.append(b"\x20")
            fields.append(varint(result.offset))
        _text(b"\x2a", result.recall_handle, fields)
        if result.duplicate:
            fields.append(b"\x30\x01")
        _text(b"\x3a", result.transaction_id, fields)
        size = 0
        for field in fields:
            size += len(field)
        parts.append(_ELEMENT_TAG)
        parts.append(varint(size))
        parts.extend(fields)
    return b"".join(parts)


def send_results_from_wire(data: bytes) -> list[SendResult]:
    """The results of the SendResponse or SendHalfResponse `data`, in order. Raises
    ValueError when it does not parse."""
    results: list[SendResult] = []
    end = len(data)
    pos = 0
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key, end)
        if key == 0x0A:
            results.append(_result(data, start, stop))
        pos = stop
    return results


def _result(data: bytes, pos: int, end: int) -> SendResult:
    message_id = ""
    topic = ""
    queue_id = 0
    offset = 0
    recall_handle = ""
    duplicate = False
    transaction_id = ""
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key, end)
        if key == 0x0A:
            message_id = data[start:stop].decode()
        elif key == 0x12:
            topic = data[start:stop].decode()
        elif key == 0x18:
            queue_id = _int32(read_varint(data, start)[0])
        elif key == 0x20:
            offset = _int64(read_varint(data, start)[0])
        elif key == 0x2A:
            recall_handle = data[start:stop].decode()
        elif key == 0x30:
            duplicate = read_varint(data, start)[0] != 0
        elif key == 0x3A:
            transaction_id = data[start:stop].decode()
        pos = stop
    return SendResult(message_id, topic, queue_id, offset, recall_handle, duplicate, transaction_id)


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= _INT64_SIGN else value


def _int32(value: int) -> int:
    value &= _INT32_MASK
    return value - (1 << 32) if value >= 1 << 31 else value


def _field(data: bytes, pos: int, key: int, end: int) -> tuple[int, int]:
    """Where the value of the field with `key` that starts at `pos` is: (start, stop), within
    `end`; a varint's start is its first byte, a length-delimited one's its payload's."""
    wire_type = key & 7
    if key >> 3 == 0:
        raise ValueError("field number 0 is not a field")
    if wire_type == 0:
        stop = read_varint(data, pos)[1]
    elif wire_type == 2:
        length, pos = read_varint(data, pos)
        stop = pos + length
    elif wire_type == 1:
        stop = pos + 8
    elif wire_type == 5:
        stop = pos + 4
    else:
        raise ValueError(f"wire type {wire_type} of field {key >> 3} is not one a send uses")
    if stop > end:
        raise ValueError(f"field {key >> 3} runs past the end of its message")
    return pos, stop
