"""Ack and PopStream requests read from their wire bytes: the receipt handles straight into a
list of strings.

An AckRequest parsed by the generated class holds its handles in upb, and each read of the
repeated field from Python builds a new string per handle: the servicer's ack reads them
once and its answer once more. `AckRequest.FromString` (the Ack method's gRPC request
deserializer, messaging.add_messaging_service) walks the bytes once and decodes each handle
once. `PopStreamRequest.FromString` (PopStream's) does the same for a stream's acks and
leaves its pops and cancels to upb: a pop is read field by field by the servicer's checks,
as it always was.

They read exactly what upb reads (send_request.py's rules and helpers): fields in any order,
a repeated singular field's last value, a repeated message field merged, a oneof member
replaced by another member (which starts afresh), fields of the wrong wire type kept as
unknown fields (skipped), unknown fields and groups skipped; truncated fields, bad varints,
field number 0, wire types 6 and 7 and invalid UTF-8 raise ValueError, which the server's
checked deserializer answers INVALID_ARGUMENT as for any request that does not parse
(grpc_calls/errors.py). tests/unit/proxy/test_ack_request.py checks them against upb.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from google.protobuf.message import DecodeError

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.proxy.send_request import _key, _length_delimited, _skip, _varint

_ACTIONS: Final = {2: "pop", 3: "cancel", 4: "ack"}
"""PopStreamRequest's `action` oneof: field number -> member name."""


class AckRequest:
    """A popmq.v1.AckRequest read from its bytes (`FromString`)."""

    __slots__ = ("group", "receipt_handles")

    DESCRIPTOR: ClassVar[Any] = messaging_pb2.AckRequest.DESCRIPTOR
    """The message this reads (error texts and the RPC log name its fields by it)."""

    def __init__(self) -> None:
        self.group = ""
        self.receipt_handles: list[str] = []

    @classmethod
    def FromString(cls, data: bytes) -> AckRequest:  # as generated classes name it
        """Read an AckRequest; ValueError when `data` is not one."""
        request = AckRequest()
        _read_ack(data, 0, len(data), request)
        return request


def _read_ack(data: bytes, pos: int, end: int, out: AckRequest) -> None:
    """Read the AckRequest in data[pos:end] into `out` (merged: handles are appended)."""
    handles = out.receipt_handles
    while pos < end:
        key = data[pos]
        if key == 0x12 or key == 0x0A:  # receipt_handles = 2, group = 1: one-byte keys
            pos += 1
        else:
            key, pos = _key(data, pos, end)
        if key == 0x12 or key == 0x0A:
            length = data[pos] if pos < end else 0x80
            start = pos + 1
            if length >= 0x80:
                start, stop = _length_delimited(data, pos, end)
            else:
                stop = start + length
                if stop > end:
                    raise ValueError(f"a field of {length} bytes runs past the end of its message")
            # UTF-8, as proto3 requires of a string (UnicodeDecodeError otherwise).
            if key == 0x12:
                handles.append(data[start:stop].decode())
            else:
                out.group = data[start:stop].decode()
            pos = stop
        else:
            pos = _skip(data, pos, end, key)


class PopStreamRequest:
    """A popmq.v1.PopStreamRequest read from its bytes (`FromString`): its ack an AckRequest
    of this module, its pop or cancel the generated message."""

    __slots__ = ("_ack", "_action", "_cancel", "_pop", "request_id")

    DESCRIPTOR: ClassVar[Any] = messaging_pb2.PopStreamRequest.DESCRIPTOR

    def __init__(self) -> None:
        self.request_id = 0
        self._action: str | None = None
        self._pop: messaging_pb2.PopRequest | None = None
        self._ack: AckRequest | None = None
        self._cancel: messaging_pb2.PopStreamCancel | None = None

    @property
    def pop(self) -> messaging_pb2.PopRequest:
        """The pop; an empty one when the action is not a pop, as a generated message reads
        an unset field."""
        return self._pop if self._pop is not None else messaging_pb2.PopRequest()

    @property
    def ack(self) -> AckRequest:
        """The ack; an empty one when the action is not an ack."""
        return self._ack if self._ack is not None else AckRequest()

    @property
    def cancel(self) -> messaging_pb2.PopStreamCancel:
        """The cancel; an empty one when the action is not a cancel."""
        return self._cancel if self._cancel is not None else messaging_pb2.PopStreamCancel()

    def WhichOneof(self, name: str) -> str | None:  # as generated classes name it
        """The member of the oneof `name` ("action") that is set, or None."""
        if name != "action":
            raise ValueError(f'Protocol message has no oneof "{name}" field.')
        return self._action

    def HasField(self, name: str) -> bool:  # as generated classes name it
        """Whether the oneof `action` or its member `name` is set."""
        if name == "action":
            return self._action is not None
        if name in ("pop", "cancel", "ack"):
            return self._action == name
        raise ValueError(f'Protocol message has no singular "{name}" field.')

    @classmethod
    def FromString(cls, data: bytes) -> PopStreamRequest:
        """Read a PopStreamRequest; ValueError when `data` is not one."""
        request = PopStreamRequest()
        end = len(data)
        pos = 0
        while pos < end:
            key, pos = _key(data, pos, end)
            field = key >> 3
            wire_type = key & 7
            if field == 1 and wire_type == 0:
                request.request_id, pos = _varint(data, pos, end)
            elif 2 <= field <= 4 and wire_type == 2:
                start, stop = _length_delimited(data, pos, end)
                request._read_action(_ACTIONS[field], data, start, stop)
                pos = stop
            else:
                pos = _skip(data, pos, end, key)
        return request

    def _read_action(self, action: str, data: bytes, start: int, stop: int) -> None:
        """Merge the member `action` in data[start:stop] into the oneof: into the same
        member's value, or into a fresh one that replaces another member's."""
        if action != self._action:
            self._action = action
            self._pop = self._ack = self._cancel = None
        if action == "ack":
            if self._ack is None:
                self._ack = AckRequest()
            _read_ack(data, start, stop, self._ack)
            return
        if action == "pop":
            if self._pop is None:
                self._pop = messaging_pb2.PopRequest()
            _merge(self._pop, data[start:stop])
            return
        if self._cancel is None:
            self._cancel = messaging_pb2.PopStreamCancel()
        _merge(self._cancel, data[start:stop])


def _merge(message: messaging_pb2.PopRequest | messaging_pb2.PopStreamCancel, data: bytes) -> None:
    """Merge `data` into `message` as upb merges a repeated message field; ValueError when
    it does not parse, as for the rest of the request."""
    try:
        message.MergeFromString(data)
    except DecodeError as e:
        raise ValueError(f"a {message.DESCRIPTOR.name} does not parse: {e}") from None
