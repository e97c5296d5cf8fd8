"""`MessageRecord`: a stored message as the broker API delivers it (popped, pulled, peeked).

The broker API must not hand out the storage proto (records_pb2.StoredMessage): a front end
would then depend on how the core stores messages, and a remote broker (cluster mode) could
not answer with anything but that proto. `MessageRecord` is the core's own value type for it.

It is a read-only view over the record the core already parsed, not a copy: a pop delivers
up to 32 messages per call, and copying the 16 fields into a frozen dataclass costs about
as much per message as the whole conversion to the wire it feeds, ~30x the wrapping
(`python -m bench.record_view_cost` measures both). Construction stores one reference; a field is
read from the record when it is asked for. `to_bytes` / `from_bytes` carry it across a
process boundary as the stored bytes, so a remote implementation ships what it read and the
other side wraps it the same way.

A record read from the store also keeps the bytes it was read from: `to_bytes` returns them
as they are, and a pop's answer re-tags them for the wire (record_wire.py) without going
through the parsed fields.

A record that crossed the cluster hop (`from_wire`) is only those bytes until a field is
read: a proxy passes a popped record's bytes through to its client's answer and reads none of
its fields, so parsing it there (about a microsecond and a half for 1 KiB) bought nothing.

Immutable from the outside: fields are properties without setters, `keys` is a tuple and
`properties` a read-only mapping proxy. The core must not change a record after wrapping
it (it wraps records it has just parsed, or a copy it made for the delivery).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from google.protobuf.message import DecodeError

from popmq._gen.popmq.store.v1 import records_pb2

_REPR_FIELDS = (
    "tag",
    "delivery_attempt",
    "born_time_ms",
    "store_time_ms",
    "origin_topic",
    "origin_queue_id",
    "origin_offset",
    "message_group",
    "deliver_at_ms",
    "body_encoding",
    "dedup_id",
    "born_host",
)


class MessageRecord:
    """One stored message as delivered: id, body, tag, keys, properties, times, attempt and,
    for a retry or dead-letter copy, where it was first stored."""

    __slots__ = ("_parsed", "_raw")

    def __init__(self, record: records_pb2.StoredMessage | None, raw: bytes | None = None) -> None:
        """Wrap a parsed record without copying it (core-internal: the core owns `record`
        and does not change it afterwards). `raw` is the bytes `record` was parsed from,
        when it was read as it is stored; with `record` None, they are parsed when a field
        is first read. Other code builds one with `from_bytes` or `from_wire`."""
        if record is None and raw is None:
            raise ValueError("a MessageRecord needs a parsed record or its bytes")
        self._parsed = record
        self._raw = raw

    @property
    def _record(self) -> records_pb2.StoredMessage:
        parsed = self._parsed
        if parsed is None:
            parsed = records_pb2.StoredMessage.FromString(self._raw or b"")
            self._parsed = parsed
        return parsed

    @classmethod
    def from_bytes(cls, data: bytes) -> MessageRecord:
        """The record `to_bytes` wrote (a stored message's bytes), e.g. sent by a remote
        broker. Raises ValueError when `data` is not one."""
        try:
            return cls(records_pb2.StoredMessage.FromString(data), data)
        except DecodeError as e:
            raise ValueError(
                f"{len(data)} bytes are not a stored message record (popmq.store.v1."
                f"StoredMessage): {e}"
            ) from None

    @classmethod
    def from_wire(cls, data: bytes) -> MessageRecord:
        """A record's bytes as a broker sent them (its `to_bytes`), parsed only when a field
        is read: for bytes that came from a broker, which wrote them. Malformed bytes raise
        DecodeError at that first read rather than here."""
        return cls(None, data)

    def to_bytes(self) -> bytes:
        """The record as a stored message's bytes (what `from_bytes` reads)."""
        raw = self._raw
        return raw if raw is not None else self._record.SerializeToString()

    @property
    def stored_size(self) -> int:
        """Bytes the record takes serialized: what holding it costs, near enough."""
        raw = self._raw
        # The stored bytes are the record serialized (the core writes them, and a parse
        # keeps any unknown field), so their length is ByteSize's answer without its walk.
        return len(raw) if raw is not None else self._record.ByteSize()

    @property
    def message_id(self) -> str:
        """Message id assigned at send."""
        return self._record.message_id

    @property
    def body(self) -> bytes:
        """Payload, encoded as `body_encoding` says."""
        return self._record.body

    @property
    def tag(self) -> str:
        """Tag, or empty."""
        return self._record.tag

    @property
    def keys(self) -> Sequence[str]:
        """Business keys, in send order (a tuple)."""
        keys = self._record.keys
        return tuple(keys) if keys else ()

    @property
    def properties(self) -> Mapping[str, str]:
        """User properties (read-only: a mapping proxy over the record's map)."""
        return MappingProxyType(self._record.properties)

    @property
    def born_time_ms(self) -> int:
        """When the producer created the message (ms since the epoch)."""
        return self._record.born_time_ms

    @property
    def store_time_ms(self) -> int:
        """When this copy was stored (ms since the epoch)."""
        return self._record.store_time_ms

    @property
    def delivery_attempt(self) -> int:
        """Attempt this delivery is: 1 for a new message, n+1 for a retry."""
        return self._record.delivery_attempt

    @property
    def origin_topic(self) -> str:
        """For retry and dead-letter copies: the user topic it was first sent to; else ""."""
        return self._record.origin_topic

    @property
    def origin_queue_id(self) -> int:
        """For retry and dead-letter copies: the queue of the first copy."""
        return self._record.origin_queue_id

    @property
    def origin_offset(self) -> int:
        """For retry and dead-letter copies: the offset of the first copy."""
        return self._record.origin_offset

    @property
    def message_group(self) -> str:
        """FIFO message group; empty for a message outside any group."""
        return self._record.message_group

    @property
    def deliver_at_ms(self) -> int:
        """Epoch ms before which it was not delivered (delay/scheduled); 0 = at once."""
        return self._record.deliver_at_ms

    @property
    def body_encoding(self) -> str:
        """How `body` is encoded: "" (as sent), "zlib" or "zstd"."""
        return self._record.body_encoding

    @property
    def dedup_id(self) -> str:
        """Producer-chosen dedup id (the message id when it chose none)."""
        return self._record.dedup_id

    @property
    def born_host(self) -> str:
        """Host that built the message, as the producer reports it."""
        return self._record.born_host

    def __reduce__(self) -> tuple[Callable[[bytes], MessageRecord], tuple[bytes]]:
        """Pickles as the stored bytes (`from_bytes` reads them back): by value, and the same
        whether this class is compiled (popmq/_compiled.py) or not."""
        return MessageRecord.from_bytes, (self.to_bytes(),)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageRecord):
            return NotImplemented
        return self._record == other._record

    # Unhashable, as the record is: a hash would have to serialize it, and map entries have
    # no canonical order there.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        record = self._record
        parts = [f"message_id={record.message_id!r}", f"body=<{len(record.body)} bytes>"]
        parts.extend(
            f"{name}={value!r}" for name in _REPR_FIELDS if (value := getattr(record, name))
        )
        if record.keys:
            parts.append(f"keys={tuple(record.keys)!r}")
        if record.properties:
            parts.append(f"properties={dict(sorted(record.properties.items()))!r}")
        return f"MessageRecord({', '.join(parts)})"
