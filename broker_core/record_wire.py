"""A stored record's bytes re-tagged as the fields a delivery carries on the wire.

A pop answers with popmq.v1.ReceivedMessage, whose fields are the stored record's
(popmq.store.v1.StoredMessage) under other numbers, plus what the pop adds (topic, queue,
offset, receipt handle, invisible-until). Protobuf fields are self-delimiting, so the record's
bytes can be walked once and each delivered field copied with its new tag: a body, tag, key or
property goes across as the slice it already is (its length prefix and bytes unchanged), and
only the three times (stored as milliseconds, delivered as google.protobuf.Timestamp) are
re-encoded. No message object is built on either side; building the ReceivedMessage field by
field from a parsed record and serializing it cost 3.5 times as much (3.2 against 0.92 us a
1 KiB message, compiled).

`received_message_wire` writes a whole delivery in one pass over the record's bytes, framed as
one element of a response's repeated field; `delivered_fields` is the record's part alone.
Internal fields (dedup id, the origin of a retry or dead-letter copy) are left out, as the
message-by-message conversion leaves them out.

The numbering here must follow both protos: tests/unit/broker_core/test_record_wire.py checks
the bytes against the conversion through message objects for every field.

Where the build has it, a delivery is written by C (_delivery_wire.c: the same walk over the
record's bytes, into one bytes a delivery); this module stays the definition, and walks
itself a record the C code leaves to it (a malformed one), to raise its error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from popmq.broker_core.types import PoppedMessage


class _DeliveryLoops(Protocol):
    """_delivery_wire.c: append_received_message's delivery as one bytes, or None for a
    record (or offset) it leaves to this module."""

    def received_message(
        self,
        stored: bytes,
        field_tag: bytes,
        topic_and_queue: bytes,
        offset: int,
        receipt_handle: bytes,
        invisible_until: bytes,
        /,
    ) -> bytes | None: ...


_DELIVERY_LOOPS: _DeliveryLoops | None
"""The C walk, or None where this module's own runs: not built, or hidden by popmq._compiled
(POPMQ_PURE_PYTHON=1, or a .c file edited since the build)."""
try:
    from popmq.broker_core import _delivery_wire

    _DELIVERY_LOOPS = _delivery_wire
except ImportError:
    _DELIVERY_LOOPS = None

_UINT64_MASK: Final = (1 << 64) - 1


def delivered_fields(stored: bytes) -> bytes:
    """The fields of the StoredMessage `stored` that a delivery carries, encoded as
    popmq.v1.ReceivedMessage's fields. Raises ValueError when `stored` is not well-formed
    protobuf."""
    parts: list[bytes] = []
    _transcode(stored, parts)
    return b"".join(parts)


def _transcode(stored: bytes, parts: list[bytes]) -> None:
    """Append the delivered fields of `stored` to `parts` (delivered_fields' walk).

    The field numbers are compared one by one rather than looked up in a table: compiled,
    that is a few native comparisons a field, against a boxed lookup."""
    end = len(stored)
    pos = 0
    while pos < end:
        key = stored[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(stored, pos)
        field = key >> 3
        wire_type = key & 7
        if wire_type == 2:
            length = stored[pos] if pos < end else 0x80
            start = pos + 1
            if length >= 0x80:
                length, start = read_varint(stored, pos)
            stop = start + length
            if stop > end:
                raise ValueError(f"field {field} runs past the end of a {end}-byte record")
            # StoredMessage -> ReceivedMessage: message_id 1 -> 1, body 2 -> 5, tag 3 -> 6,
            # keys 4 -> 7 (each), properties 5 -> 8 (each entry: key 1, value 2 in both),
            # message_group 12 -> 14, body_encoding 14 -> 16, born_host 16 -> 17; the rest
            # (origin topic 9, dedup id 15) stay behind. The slice keeps the length prefix.
            if field == 2:
                parts.append(b"\x2a")
            elif field == 1:
                parts.append(b"\x0a")
            elif field == 3:
                parts.append(b"\x32")
            elif field == 4:
                parts.append(b"\x3a")
            elif field == 5:
                parts.append(b"\x42")
            elif field == 12:
                parts.append(b"\x72")
            elif field == 14:
                parts.append(b"\x82\x01")
            elif field == 16:
                parts.append(b"\x8a\x01")
            else:
                pos = stop
                continue
            parts.append(stored[pos:stop])
            pos = stop
        elif wire_type == 0:
            value = 0
            shift = 0
            while True:  # read_varint, inline: three or four of these a record
                if pos >= end:
                    raise ValueError(f"field {field} runs past the end of a {end}-byte record")
                byte = stored[pos]
                pos += 1
                value |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if shift >= 64:
                    raise ValueError("a varint is longer than 10 bytes")
            # Epoch milliseconds -> a Timestamp: born_time_ms 6 -> born_time 9, store_time_ms
            # 7 -> store_time 10, deliver_at_ms 13 -> deliver_time 15; delivery_attempt 8 ->
            # 11. The origin queue and offset (10, 11) stay behind.
            # Each written as one part, its key included: every part costs a join about as
            # much as copying a hundred bytes.
            if field == 6:
                parts.append(_BORN.encode(_signed(value)))
            elif field == 7:
                parts.append(_STORED.encode(_signed(value)))
            elif field == 8:
                parts.append(_tagged_varint(0x58, value))  # delivery_attempt 11
            elif field == 13:
                parts.append(_DELIVER.encode(_signed(value)))
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise ValueError(f"wire type {wire_type} of field {field} is not one a record uses")
    if pos != end:
        raise ValueError(f"the last field runs past the end of a {end}-byte record")


def has_message_group(stored: bytes) -> bool:
    """Whether the StoredMessage `stored` names a message group (FIFO), read off its bytes
    without parsing it: a pop needs nothing else of a record it delivers whole when its
    filter matches everything. Raises ValueError when `stored` is not well-formed protobuf
    (parsing it says why)."""
    end = len(stored)
    pos = 0
    found = False
    while pos < end:
        key = stored[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(stored, pos)
        wire_type = key & 7
        if wire_type == 0:
            # A number is skipped: only where it ends matters, so its bytes are not summed
            # (compiled, each shift and or of a tagged int is a few checks: born and store
            # times are six bytes each).
            last = pos + 9  # its tenth byte must end it
            while True:
                if pos >= end:
                    raise ValueError(f"a field runs past the end of a {end}-byte record")
                if stored[pos] < 0x80:
                    break
                if pos >= last:
                    raise ValueError("a varint is longer than 10 bytes")
                pos += 1
            pos += 1
        elif wire_type == 2:
            # A length, read inline (no tuple a field).
            length = 0
            shift = 0
            while True:
                if pos >= end:
                    raise ValueError(f"a field runs past the end of a {end}-byte record")
                byte = stored[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if shift >= 64:
                    raise ValueError("a varint is longer than 10 bytes")
            pos += length
            if key >> 3 == 12:  # message_group; the last occurrence wins, as in a parse
                found = length > 0
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise ValueError(f"wire type {wire_type} is not one a record uses")
    if pos != end:
        raise ValueError(f"the last field runs past the end of a {end}-byte record")
    return found


def _signed(value: int) -> int:
    """An int64 read as a varint: negative ones are ten bytes of two's complement."""
    # A shift, not a comparison with 2**63: compiled, a time (a small int) then never meets
    # a boxed one.
    return value - (1 << 64) if value >> 63 else value


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    result = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise ValueError(f"a varint runs past the end of {end} bytes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ValueError("a varint is longer than 10 bytes")


_ONE_BYTE: Final = tuple(bytes((i,)) for i in range(128))


def varint(value: int) -> bytes:
    """`value` (0 <= value < 2**64; a negative int64 masked to 64 bits) as a protobuf
    varint. Its bytes are gathered in an int and converted once: compiled, cheaper than
    building a bytes from a sequence."""
    if value < 0x80:
        if value >= 0:
            return _ONE_BYTE[value]
        value &= _UINT64_MASK
    packed = 0
    shift = 0
    while value >= 0x80:
        packed |= ((value & 0x7F) | 0x80) << shift
        value >>= 7
        shift += 8
    packed |= value << shift
    return packed.to_bytes(shift // 8 + 1, "little")


def _tagged_varint(key: int, value: int) -> bytes:
    """A one-byte field key `key` and the varint `value` (0 <= value < 2**64) after it, as
    one bytes: `varint`'s packing with the key in the low byte."""
    packed = key
    shift = 8
    while value >= 0x80:
        packed |= ((value & 0x7F) | 0x80) << shift
        value >>= 7
        shift += 8
    packed |= value << shift
    return packed.to_bytes(shift // 8 + 1, "little")


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: `tag`, the payload's length, the payload."""
    return b"".join((tag, varint(len(payload)), payload))


_NANOS: Final = (b"", *(_tagged_varint(0x10, n * 1_000_000) for n in range(1, 1000)))
"""A Timestamp's nanos field for each millisecond of a second (none for 0, as proto3)."""


def timestamp_message(ms: int) -> bytes:
    """A google.protobuf.Timestamp for epoch milliseconds `ms`, length-prefixed: the value of
    a Timestamp field after its tag. Seconds round down and nanos are never negative, as the
    message-by-message conversion sets them.

    The nanos field comes from a table of the thousand a millisecond time can have, and
    positive seconds are packed with their key in one int (_tagged_varint): one bytes built
    where masking with 2**64 - 1 and three concatenations cost 3,100 instructions, compiled."""
    seconds = ms // 1000
    inner = _NANOS[ms % 1000]
    if seconds > 0:
        inner = _tagged_varint(0x08, seconds) + inner
    elif seconds:
        inner = b"\x08" + varint(seconds & _UINT64_MASK) + inner
    return _ONE_BYTE[len(inner)] + inner  # at most 17 bytes: a one-byte length


_RECENT_TIMES: Final = 512
"""Encodings a _LastTimestamp keeps besides the last one; past it, it starts over."""


class _LastTimestamp:
    """One Timestamp field, its key and timestamp_message, of the last time asked for and of
    recent ones, kept: the messages of a send share their store time (and most their born
    time), and the messages of a pop their invisible-until, so a pop encodes each about once
    instead of once a message. A queue's run interleaves a few sends (a send spreads over
    the queues), so the last time alone missed one time in four."""

    __slots__ = ("_key", "_last", "_recent")

    def __init__(self, key: bytes) -> None:
        self._key = key
        # (ms, its encoding), replaced as one reference so a reader never pairs halves.
        self._last: tuple[int, bytes] = (0, key + timestamp_message(0))
        # ms -> its encoding; every entry is right for its key, so a race only loses one.
        self._recent: dict[int, bytes] = {}

    def encode(self, ms: int) -> bytes:
        last = self._last
        if last[0] == ms:
            return last[1]
        recent = self._recent
        encoded = recent.get(ms)
        if encoded is None:
            if len(recent) >= _RECENT_TIMES:
                recent.clear()
            encoded = self._key + timestamp_message(ms)
            recent[ms] = encoded
        self._last = (ms, encoded)
        return encoded


# ReceivedMessage's born_time 9, store_time 10, deliver_time 15 and invisible_until 13.
_BORN: Final = _LastTimestamp(b"\x4a")
_STORED: Final = _LastTimestamp(b"\x52")
_DELIVER: Final = _LastTimestamp(b"\x7a")
_INVISIBLE_UNTIL: Final = _LastTimestamp(b"\x6a")

# What a pop adds to the delivered fields: ReceivedMessage's topic 2, queue_id 3, offset 4,
# receipt_handle 12 and invisible_until 13.
_TOPIC_TAG: Final = b"\x12"
_QUEUE_ID_KEY: Final = 0x18
_OFFSET_KEY: Final = 0x20
_HANDLE_TAG: Final = b"\x62"


def received_message_wire(
    stored: bytes,
    *,
    field_tag: bytes,
    topic: bytes,
    queue_id: int,
    offset: int,
    receipt_handle: str,
    invisible_until_ms: int,
) -> bytes:
    """One delivery as a length-delimited field `field_tag` holding a popmq.v1.ReceivedMessage:
    the delivered fields of the record `stored` (delivered_fields) and what the pop adds.
    `topic` is the topic's name in UTF-8 (the same for a whole answer, so encoded once). Zero
    numbers are left out, as proto3 leaves them out. One copy of the record's bytes."""
    parts: list[bytes] = []
    append_received_message(
        parts,
        stored,
        field_tag=field_tag,
        topic_and_queue=topic_and_queue(topic, queue_id),
        offset=offset,
        receipt_handle=receipt_handle.encode(),
        invisible_until=invisible_until(invisible_until_ms),
    )
    return b"".join(parts)


def topic_and_queue(topic: bytes, queue_id: int) -> bytes:
    """ReceivedMessage's topic (`topic` in UTF-8) and queue_id, encoded: the same for every
    message of a queue, so an answer encodes them once a queue (append_received_message)."""
    field = _TOPIC_TAG + varint(len(topic)) + topic
    return field + _tagged_varint(_QUEUE_ID_KEY, queue_id) if queue_id else field


def invisible_until(ms: int) -> bytes:
    """ReceivedMessage's invisible_until, encoded: the same for the messages of a pop."""
    return _INVISIBLE_UNTIL.encode(ms)


_HANDLE_HEADS: Final = tuple(_HANDLE_TAG + varint(n) for n in range(256))
"""The key and length of a receipt handle of fewer than 256 bytes (all of them, in practice:
a broker name has at most 64 characters)."""


def append_received_message(
    parts: list[bytes],
    stored: bytes,
    *,
    field_tag: bytes,
    topic_and_queue: bytes,
    offset: int,
    receipt_handle: bytes,
    invisible_until: bytes,
    native: bool = True,
) -> None:
    """Append received_message_wire's delivery to `parts`, to be joined with the rest of an
    answer once, rather than joined alone and copied again into the answer. What a pop adds
    that its messages share comes encoded (`topic_and_queue`, `invisible_until`: the
    functions of those names); `receipt_handle` is the handle's text in ASCII. The same
    bytes as received_message_wire, in as few parts as it can: each part costs a join
    about as much as copying a hundred bytes. Written by the C walk where the build has it
    (one part); `native=False` walks in Python (the reference the tests compare it with)."""
    loops = _DELIVERY_LOOPS
    if native and loops is not None:
        wire = loops.received_message(
            stored, field_tag, topic_and_queue, offset, receipt_handle, invisible_until
        )
        if wire is not None:
            parts.append(wire)
            return
    parts.append(field_tag)
    at = len(parts)
    parts.append(b"")  # the length, once it is known
    _transcode(stored, parts)
    parts.append(topic_and_queue)
    if offset:
        parts.append(_tagged_varint(_OFFSET_KEY, offset))
    length = len(receipt_handle)
    parts.append(_HANDLE_HEADS[length] if length < 256 else _HANDLE_TAG + varint(length))
    parts.append(receipt_handle)
    parts.append(invisible_until)
    size = 0
    for i in range(at + 1, len(parts)):
        size += len(parts[i])
    parts[at] = varint(size)


_MESSAGES_TAG: Final = b"\x0a"
"""Field 1, length-delimited: `messages` of popmq.v1's PopResponse and LeasePopResponse."""


def received_messages_wire(popped: Iterable[PoppedMessage], queue_ids: Sequence[int] = ()) -> bytes:
    """Popped messages as the bytes of a response's `repeated ReceivedMessage messages = 1`
    (popmq.v1 PopResponse, LeasePopResponse): each the record's delivered fields as stored
    plus what the pop adds, with no message object on the way. Appended to the bytes of the
    response's other fields, they parse as that response; two answers' bytes concatenated
    are the answer of their messages together.

    `queue_ids` renumbers the queues: a message of local queue i < len(queue_ids) says
    queue_ids[i] (a cluster broker writing its deliveries with the route's global ids); one
    past it keeps its own id.

    One join for the whole answer: what the messages share (topic and queue, and the
    invisible-until of a pop's deliveries) is encoded once, when it changes, and each
    message's parts go straight into the answer's."""
    parts: list[bytes] = []
    topic = ""
    queue_id = -1
    shared = b""
    until_ms = -1
    until = b""
    known = len(queue_ids)
    for message in popped:
        if message.queue_id != queue_id or message.topic != topic:
            topic = message.topic
            queue_id = message.queue_id
            number = queue_ids[queue_id] if 0 <= queue_id < known else queue_id
            shared = topic_and_queue(topic.encode(), number)
        if message.invisible_until_ms != until_ms:
            until_ms = message.invisible_until_ms
            until = invisible_until(until_ms)
        append_received_message(
            parts,
            message.record.to_bytes(),
            field_tag=_MESSAGES_TAG,
            topic_and_queue=shared,
            offset=message.offset,
            receipt_handle=message.receipt_handle.encode(),
            invisible_until=until,
        )
    return b"".join(parts)


_HANDLE_ENTRY_HEADS: Final = tuple(b"\x0a" + bytes((n,)) for n in range(0x80))
"""The key of ReceiptHandles.handles (field 1 of popmq.broker.v1.ReceiptHandles) and a
length below 128, by length."""


def receipt_handles_wire(popped: Iterable[PoppedMessage]) -> bytes:
    """The receipt handles of `popped`, in order, as the bytes of a ReceiptHandles message
    (popmq.broker.v1: `repeated string handles = 1`)."""
    parts: list[bytes] = []
    for message in popped:
        handle = message.receipt_handle.encode()
        length = len(handle)
        parts.append(_HANDLE_ENTRY_HEADS[length] if length < 0x80 else b"\x0a" + varint(length))
        parts.append(handle)
    return b"".join(parts)


def receipt_handles_from_wire(data: bytes) -> list[str]:
    """The handles of the ReceiptHandles message `data` (receipt_handles_wire's). Raises
    ValueError when `data` is not well-formed."""
    handles: list[str] = []
    end = len(data)
    pos = 0
    while pos < end:
        key, pos = read_varint(data, pos)
        if key & 7 != 2:
            raise ValueError(f"field {key >> 3} of ReceiptHandles is not length-delimited")
        length, pos = read_varint(data, pos)
        stop = pos + length
        if stop > end:
            raise ValueError(f"a field of {length} bytes runs past the end of {end}")
        if key == 0x0A:
            handles.append(data[pos:stop].decode())
        pos = stop
    return handles


class ReceivedBatch:
    """A pop's deliveries already in the encoding its client gets them in: what a cluster
    broker answers a proxy that asked for the received form (popmq.broker.v1
    ReceivedForm), passed on to the client's answer without being read.

    `received` holds the bytes of popmq.v1 PopResponse's `messages` (received_messages_wire's),
    one part per broker's answer, joined once into the client's answer (`wire`); `handles`
    the receipt handles of each part as a ReceiptHandles message, decoded only when the
    deliveries are given back (`receipt_handles`). Its length is the deliveries'."""

    __slots__ = ("count", "handles", "received", "stored_bytes")

    def __init__(
        self, received: list[bytes], handles: list[bytes], count: int, stored_bytes: int
    ) -> None:
        self.received = received
        self.handles = handles
        self.count = count
        """How many deliveries `received` holds."""
        self.stored_bytes = stored_bytes
        """Their stored records' bytes, summed (MessageRecord.stored_size)."""

    @classmethod
    def of(cls, popped: Sequence[PoppedMessage], queue_ids: Sequence[int] = ()) -> ReceivedBatch:
        """`popped` in the received form (received_messages_wire's renumbering)."""
        if not popped:
            return cls([], [], 0, 0)
        stored = 0
        for message in popped:
            stored += message.record.stored_size
        return cls(
            [received_messages_wire(popped, queue_ids)],
            [receipt_handles_wire(popped)],
            len(popped),
            stored,
        )

    def __len__(self) -> int:
        return self.count

    def extend(self, other: ReceivedBatch) -> None:
        """Add `other`'s deliveries after these."""
        self.received.extend(other.received)
        self.handles.extend(other.handles)
        self.count += other.count
        self.stored_bytes += other.stored_bytes

    def wire(self) -> bytes:
        """The deliveries as the bytes of popmq.v1 PopResponse's `messages`."""
        received = self.received
        return received[0] if len(received) == 1 else b"".join(received)

    def handles_only(self) -> ReceivedBatch:
        """The same deliveries' handles without their messages (what giving them back
        needs: held while their answer waits, it does not hold the answer twice)."""
        return ReceivedBatch([], self.handles, self.count, 0)

    def receipt_handles(self) -> list[str]:
        """The deliveries' receipt handles, in order."""
        found: list[str] = []
        for part in self.handles:
            found.extend(receipt_handles_from_wire(part))
        return found
