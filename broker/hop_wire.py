"""The hot BrokerService answers as bytes: a Pop's deliveries and an Ack's results, written by
the broker and read by the proxy without protobuf message objects.

A pop crosses the hop as popmq.broker.v1.PopResponse: per delivery a PoppedMessage holding
the stored record's bytes as they are. Built through the generated classes, the broker made a
PoppedMessage object per delivery and serialized it, and the proxy parsed the response, read
each field into Python and wrapped the record; here the broker writes each delivery's fields
straight after their tags (the record as one length-delimited slice) and the proxy walks the
answer once into `PoppedMessage`s whose records stay bytes until a field is read
(`MessageRecord.from_wire`): a proxy passes them through to its client's answer
(record_wire.py) without reading them.

A proxy that passes the deliveries on to its client unread asks instead for the received
form (PopRequest.received_form): the broker writes each delivery as the client's
popmq.v1.ReceivedMessage (record_wire.received_messages_wire, queue ids renumbered to the
route's), after a header of their count, stored bytes and receipt handles, which is all the
proxy reads (`received_from_wire`: a ReceivedBatch). A broker of an earlier release ignores
the field and answers PoppedMessages, which the proxy tells apart and encodes itself.

An Ack's answer is one AckResult per handle, nearly always empty (acked): two bytes each, and
only a failed one carries an ErrorDetail, parsed with the generated class.

On HopStream (one stream per proxy and broker carrying pops and acks), a HopStreamResponse is the
request's id and one of those answers, or an ErrorDetail: `hop_answer` writes one around the
answer's bytes, `hop_answer_from_wire` splits one. HopSend (sends; send_wire.py) frames its
requests and answers the same way, and so does the proxy its HopStream requests.

The field numbers here must follow protos/popmq/broker/v1/broker.proto: the tests check these
bytes against the generated classes both ways. Fields a reader does not know are skipped, as
protobuf skips them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker.wire import error_detail, error_from_detail
from popmq.broker_core.errors import PopMQError
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.record_wire import (
    ReceivedBatch,
    length_delimited,
    read_varint,
    receipt_handles_wire,
    received_messages_wire,
    varint,
)
from popmq.broker_core.types import PoppedMessage
from popmq.broker_core.validation import MESSAGE_OVERHEAD_BYTES

_ELEMENT_TAG: Final = b"\x0a"
"""Field 1, length-delimited: PopResponse.messages, AckResponse.results."""
# PoppedMessage's fields.
_TOPIC_TAG: Final = b"\x0a"
_QUEUE_ID_TAG: Final = b"\x10"
_OFFSET_TAG: Final = b"\x18"
_RECORD_TAG: Final = b"\x22"
_HANDLE_TAG: Final = b"\x2a"
_INVISIBLE_UNTIL_TAG: Final = b"\x30"
_ACKED: Final = b"\x0a\x00"
"""An AckResult without an error, as an element of AckResponse.results."""
_GROUP_TAG: Final = b"\x0a"
_HANDLES_FIELD_TAG: Final = b"\x12"
"""AckRequest's group (1) and handles (2)."""
_INT64_SIGN: Final = 1 << 63


def pop_response_wire(popped: Sequence[PoppedMessage]) -> bytes:
    """`popped` as the bytes of a PopResponse. Zero numbers are left out, as proto3 leaves
    them out; the record goes as the bytes it was read as (`MessageRecord.to_bytes`)."""
    parts: list[bytes] = []
    topic = ""
    topic_field = b""
    for message in popped:
        if message.topic != topic or not topic_field:
            topic = message.topic
            name = topic.encode()
            topic_field = b"".join((_TOPIC_TAG, varint(len(name)), name)) if name else b""
        record = message.record.to_bytes()
        handle = message.receipt_handle.encode()
        fields = [topic_field]
        if message.queue_id:
            fields.append(_QUEUE_ID_TAG)
            fields.append(varint(message.queue_id))
        if message.offset:
            fields.append(_OFFSET_TAG)
            fields.append(varint(message.offset))
        if record:
            fields.append(_RECORD_TAG)
            fields.append(varint(len(record)))
            fields.append(record)
        if handle:
            fields.append(_HANDLE_TAG)
            fields.append(varint(len(handle)))
            fields.append(handle)
        if message.invisible_until_ms:
            fields.append(_INVISIBLE_UNTIL_TAG)
            fields.append(varint(message.invisible_until_ms))
        size = 0
        for field in fields:
            size += len(field)
        parts.append(_ELEMENT_TAG)
        parts.append(varint(size))
        parts.extend(fields)
    return b"".join(parts)


def popped_from_wire(data: bytes) -> list[PoppedMessage]:
    """The deliveries of the PopResponse `data` (what `pop_response_wire` writes, or the
    generated class serializes). Raises ValueError when `data` is not well-formed."""
    found: list[PoppedMessage] = []
    end = len(data)
    pos = 0
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key)
        if key == 0x0A:
            found.append(_popped(data, start, stop))
        pos = stop
    return found


# PopResponse's received form (a request with received_form): received_count 2,
# received_stored_bytes 3, received_handles 4, received 5; read by their keys (0x10, 0x18,
# 0x22, 0x2A) and `messages` (0x0A), which an answer in the objects' form has instead.
_COUNT_TAG: Final = b"\x10"
_STORED_TAG: Final = b"\x18"
_HANDLES_TAG: Final = b"\x22"
_RECEIVED_TAG: Final = b"\x2a"
_QUEUE_IDS_TAG: Final = b"\x0a"
"""ReceivedForm.queue_ids (1), packed."""
_RECEIVED_FORM_TAG: Final = b"\x5a"
"""PopRequest.received_form (11)."""


def received_response_wire(popped: Sequence[PoppedMessage], queue_ids: Sequence[int]) -> bytes:
    """`popped` as the bytes of a PopResponse in the received form: each delivery as the
    proxy's client gets it (record_wire.received_messages_wire, queue ids renumbered by
    `queue_ids`), after the count, the records' stored bytes and the handles, which are all
    a proxy reads. Nothing for no delivery, as proto3 writes an empty PopResponse."""
    if not popped:
        return b""
    stored = 0
    for message in popped:
        stored += message.record.stored_size
    handles = receipt_handles_wire(popped)
    received = received_messages_wire(popped, queue_ids)
    return b"".join(
        (
            _COUNT_TAG,
            varint(len(popped)),
            _STORED_TAG,
            varint(stored),
            _HANDLES_TAG,
            varint(len(handles)),
            handles,
            _RECEIVED_TAG,
            varint(len(received)),
            received,
        )
    )


def received_from_wire(data: bytes) -> ReceivedBatch | None:
    """The deliveries of the PopResponse `data` in the received form, their bytes unread;
    None when it holds `messages` instead (a broker of an earlier release, which ignored the
    request's received_form: popped_from_wire reads it). Raises ValueError when `data` is not
    well-formed."""
    count = 0
    stored = 0
    handles = b""
    received = b""
    end = len(data)
    pos = 0
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key)
        if key == 0x2A:
            received = data[start:stop]
        elif key == 0x10:
            count = read_varint(data, start)[0]
        elif key == 0x18:
            stored = read_varint(data, start)[0]
        elif key == 0x22:
            handles = data[start:stop]
        elif key == 0x0A:
            return None
        pos = stop
    if (count == 0) != (not received):
        raise ValueError(
            f"a received-form answer counts {count} deliveries in {len(received)} bytes"
        )
    if not count:
        return ReceivedBatch([], [], 0, 0)
    return ReceivedBatch([received], [handles], count, stored)


def received_form_wire(queue_ids: Sequence[int]) -> bytes:
    """PopRequest's received_form field with `queue_ids` (non-negative), encoded: appended to
    a PopRequest's bytes, it asks for the received form (a message's bytes followed by a
    field's are the message with that field set)."""
    packed = b"".join([varint(number) for number in queue_ids])
    ids = b"".join((_QUEUE_IDS_TAG, varint(len(packed)), packed)) if packed else b""
    return b"".join((_RECEIVED_FORM_TAG, varint(len(ids)), ids))


def globalize(messages: list[PoppedMessage], global_id: Callable[[int], int]) -> int:
    """Give each of a broker's `messages` the queue id its route numbers it by
    (`global_id` of its local id, asked once a queue: an answer's messages come from a few)
    and return the bytes they count for in an answer (their stored size and
    MESSAGE_OVERHEAD_BYTES each). A proxy's loop over each delivery, compiled here."""
    global_ids: dict[int, int] = {}
    size = 0
    for message in messages:
        local_id = message.queue_id
        number = global_ids.get(local_id)
        if number is None:
            number = global_id(local_id)
            global_ids[local_id] = number
        message.queue_id = number
        size += message.record.stored_size + MESSAGE_OVERHEAD_BYTES
    return size


def _popped(data: bytes, pos: int, end: int) -> PoppedMessage:
    topic = ""
    queue_id = 0
    offset = 0
    record = b""
    handle = ""
    until = 0
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key)
        if stop > end:
            raise ValueError("a field runs past the end of its PoppedMessage")
        if key == 0x0A:
            topic = data[start:stop].decode()
        elif key == 0x10:
            value = read_varint(data, start)[0] & 0xFFFFFFFF
            queue_id = value - (1 << 32) if value >= 1 << 31 else value
        elif key == 0x18:
            value = read_varint(data, start)[0]
            # `value >> 62` first: a compare with 2**63 itself is a boxed int's.
            offset = value - (1 << 64) if value >> 62 and value >= _INT64_SIGN else value
        elif key == 0x22:
            record = data[start:stop]
        elif key == 0x2A:
            handle = data[start:stop].decode()
        elif key == 0x30:
            value = read_varint(data, start)[0]
            until = value - (1 << 64) if value >> 62 and value >= _INT64_SIGN else value
        pos = stop
    # MessageRecord.from_wire's record, built by its constructor: compiled code calls a
    # classmethod through Python, the constructor natively.
    return PoppedMessage(topic, queue_id, offset, MessageRecord(None, record), handle, until)


def _field(data: bytes, pos: int, key: int) -> tuple[int, int]:
    """Where the value of the field with `key` that starts at `pos` is: (start, stop); a
    varint's start is its first byte, a length-delimited one's the first of its payload."""
    wire_type = key & 7
    if wire_type == 0:
        return pos, read_varint(data, pos)[1]
    if wire_type == 2:
        length, start = read_varint(data, pos)
        stop = start + length
        if stop > len(data):
            raise ValueError(f"a field of {length} bytes runs past the end of {len(data)}")
        return start, stop
    if wire_type == 1:
        return pos, pos + 8
    if wire_type == 5:
        return pos, pos + 4
    raise ValueError(f"wire type {wire_type} of field {key >> 3} is not one BrokerService uses")


def ack_request_wire(group: str, handles: Sequence[str]) -> bytes:
    """The bytes of the AckRequest (group, handles): a proxy's ack of a pop's handles,
    written without building the message (each handle is a string field of its own)."""
    parts = [length_delimited(_GROUP_TAG, group.encode())] if group else []
    for handle in handles:
        data = handle.encode()
        parts.append(_HANDLES_FIELD_TAG)
        parts.append(varint(len(data)))
        parts.append(data)
    return b"".join(parts)


def ack_response_wire(outcomes: Sequence[PopMQError | None]) -> bytes:
    """`outcomes` (BrokerAPI.ack's) as the bytes of an AckResponse."""
    parts: list[bytes] = []
    for outcome in outcomes:
        if outcome is None:
            parts.append(_ACKED)
        else:
            result = pb.AckResult(error=error_detail(outcome)).SerializeToString()
            parts.append(_ELEMENT_TAG)
            parts.append(varint(len(result)))
            parts.append(result)
    return b"".join(parts)


def ack_results_from_wire(data: bytes) -> list[PopMQError | None]:
    """The outcomes of the AckResponse `data`, one per handle, in order: None for an acked
    handle, the error otherwise. Raises ValueError when `data` is not well-formed."""
    if data == _ACKED * (len(data) // 2):
        return [None] * (len(data) // 2)  # every handle acked: the usual answer
    outcomes: list[PopMQError | None] = []
    end = len(data)
    pos = 0
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key)
        if key == 0x0A:
            result = pb.AckResult.FromString(data[start:stop])
            outcomes.append(error_from_detail(result.error) if result.HasField("error") else None)
        pos = stop
    return outcomes


HOP_POP: Final = 2
"""HopStreamResponse.pop: a PopResponse."""
HOP_ACK: Final = 3
"""HopStreamResponse.ack: an AckResponse."""
HOP_ERROR: Final = 4
"""HopStreamResponse.error, HopSendResponse.error: an ErrorDetail."""
HOP_SEND: Final = 2
"""HopSendRequest.send, HopSendResponse.send: a SendRequest, a SendResponse."""
HOP_SEND_HALF: Final = 3
"""HopSendRequest.send_half, HopSendResponse.send_half: a SendHalfRequest, its response."""


def hop_answer(request_id: int, field: int, payload: bytes) -> bytes:
    """A HopStreamResponse: `request_id` and `payload` (a message's bytes) as its `field`.
    HopStreamRequest, HopSendRequest and HopSendResponse have the same layout (an id, then
    one message of a oneof), written and split by the same two functions."""
    return b"".join(
        (b"\x08", varint(request_id), varint(field << 3 | 2), varint(len(payload)), payload)
    )


def hop_answer_from_wire(data: bytes) -> tuple[int, int, bytes]:
    """The HopStreamResponse `data` (or HopSendRequest, HopSendResponse) as (request id, field,
    the field's bytes); the field is 0 when it carries none. Raises ValueError when `data`
    is not well-formed."""
    request_id = 0
    field = 0
    payload = b""
    end = len(data)
    pos = 0
    while pos < end:
        key, pos = read_varint(data, pos)
        start, stop = _field(data, pos, key)
        if key == 0x08:
            request_id = read_varint(data, start)[0]
        elif key & 7 == 2 and HOP_POP <= key >> 3 <= HOP_ERROR:
            field = key >> 3
            payload = data[start:stop]
        pos = stop
    return request_id, field, payload
