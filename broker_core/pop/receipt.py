"""Receipt handles: opaque to clients, signed by the server, bound to one delivery.

A handle reads `<broker name>.<payload>` (handle_text.py). The payload encodes the group,
topic, queue, offset, checkpoint id, index in the checkpoint and the deadline, plus a
16-byte keyed BLAKE2b MAC over the broker name and them with a secret kept in the data dir,
so a client can neither forge one nor move one to another message, group or broker. (Keyed
BLAKE2b is a MAC by design and costs a fifth of HMAC-SHA256 here: every pop and ack
computes one per message.) Handles issued before handles named their broker (version 2, the
bare payload) are still accepted: their MAC covers the payload alone.

A pop's run of adjacent offsets (what a pop whose filter matches everything reads) gets
version 4 handles instead: the same fields, but each MAC is a 16-byte slice of one keyed
SHAKE-128 stream over the run's shared fields (its first offset in place of the offset, the
block of 32 handles in place of the index), so a pop of 32 computes one stream rather than
32 MACs. Each handle is still checked alone: its first offset is its offset less its index,
and its MAC must be the slice at its index of the stream for that; an edited field points at
another stream or slice. The codec keeps the streams it computed lately (by pops and by
checks), so the acks of a pop compare slices. Brokers built before version 4 refuse these
handles as forged; their messages come back after their invisible time.

A run's per-handle work (packing each body, slicing its MAC, base64, and back) runs in C
where the build has it (_receipt_runs.c): this module computes the streams and stays the
definition, and checks itself every handle the C code does not accept, to say why.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from hmac import compare_digest
from typing import Final, NamedTuple, Protocol, cast

from popmq.broker_core.errors import InvalidReceiptHandleError
from popmq.broker_core.handle_text import (
    SEPARATOR,
    HandleText,
    broker_name_problem,
    name_field,
)

VERSION_UNNAMED: Final = 2
"""Version byte of the handles issued before they named their broker."""
VERSION: Final = 3
"""Version byte of named handles MACed one by one (after the broker name)."""
VERSION_RUN: Final = 4
"""Version byte of named handles of a run of adjacent offsets (encode_checkpoint)."""
_BODY: Final = struct.Struct(">BIIIQQHQ")
_BODY_BYTES: Final = _BODY.size
_FIELDS: Final = struct.Struct(">IIIQQHQ")
"""A body after its version byte: the fields of a ReceiptHandle, in order."""
_UNPACK_FIELDS: Final = _FIELDS.unpack_from
"""Bound once: a method looked up by name on every handle checked costs more than its call."""
_OFFSET_AT: Final = struct.calcsize(">BIII")
"""Where a body's offset starts (after the version, group, topic and queue)."""
_INDEX_AT: Final = struct.calcsize(">BIIIQQ")
"""Where a body's index in its checkpoint starts (after the offset and ck_id)."""
_MAC_BYTES: Final = 16
_PAYLOAD_BYTES: Final = _BODY_BYTES + _MAC_BYTES
"""A payload's bytes: its body and its MAC."""
TEXT: Final[HandleText] = HandleText(_BODY.size + _MAC_BYTES)
"""The payload's text (both versions have the same length)."""
_TEXT_CHARS: Final = TEXT.chars
_GROUP_FILL: Final = bytes(-(_BODY.size + _MAC_BYTES) % 3)
"""Zero bytes that make a payload a whole number of base64 groups (encode_checkpoint)."""
_PADDED_BYTES: Final = _BODY.size + _MAC_BYTES + len(_GROUP_FILL)
_PADDED_CHARS: Final = _PADDED_BYTES // 3 * 4
"""Characters a payload and its fill take in a base64 text."""
_TEXT_FILL: Final = "A" * (_PADDED_CHARS - _TEXT_CHARS)
"""The fill's characters after a payload's text (zero bits: "A")."""
_RUN_BLOCK: Final = 32
"""Handles one stream covers: checking a handle alone computes at most 512 bytes of SHAKE,
whatever its index (a forged index cannot ask for more)."""
_RUN_MIN: Final = 4
"""Shortest run given version 4 handles: one stream costs about what four MACs do."""
_RUN_STREAMS_KEPT: Final = 4096
"""Streams a codec keeps (at most about 3.5 MB: 4,096 of 512 bytes and their keys); past it,
it starts over."""
_RUN_DOMAIN: Final = b"popmq receipt runs v4"
"""What the secret is hashed with into the stream key, so the two keys are unrelated."""
_FORGED: Final = (
    "receipt handle signature does not match: forged, altered, or issued by another popmq server"
)
_NOT_BASE64URL: Final = (
    "receipt handle is malformed (not the base64url text the server issued); pass the handle "
    "exactly as received"
)


def _keyed(secret: bytes) -> hashlib.blake2b:
    return hashlib.blake2b(key=secret, digest_size=_MAC_BYTES)


def _mac(keyed: hashlib.blake2b, body: bytes) -> bytes:
    """The MAC of `body`: a copy of the keyed state, so the key block (and the broker name)
    is hashed once per codec, not once per handle (0.6 against 1.4 us a MAC here)."""
    state = keyed.copy()
    state.update(body)
    return state.digest()


_RunKey = tuple[int, int, int, int, int, int, int]
"""A run block's shared fields: group, topic, queue, first offset, checkpoint id, block and
deadline. The stream's input is these packed as a body (`_run_input`); the codec keeps its
streams by the tuple, which a check builds from the fields it unpacked anyway, at a fraction
of the cost of slicing and joining the body's bytes."""


class _RunLoops(Protocol):
    """_receipt_runs.c: a run's handles built from their streams, and checked against the
    streams kept (None for a text it leaves to this module)."""

    def encode(
        self, prefix: str, shared: bytes, first: int, count: int, streams: list[bytes], /
    ) -> list[str]: ...

    def verify(
        self,
        texts: Sequence[str],
        prefix: str,
        streams: dict[_RunKey, bytes],
        handle_type: type[ReceiptHandle],
        /,
    ) -> list[ReceiptHandle | None]: ...


_RUN_LOOPS: _RunLoops | None
"""The C loops, or None where this module's own Python runs them: not built, or hidden by
popmq._compiled (POPMQ_PURE_PYTHON=1, or a .c file edited since the build)."""
try:
    from popmq.broker_core.pop import _receipt_runs

    _RUN_LOOPS = _receipt_runs
except ImportError:
    _RUN_LOOPS = None


class ReceiptHandle(NamedTuple):
    """The decoded fields of a receipt handle.

    A NamedTuple, not a frozen dataclass: one is built per message popped and per handle
    acked, and this costs a third as much (and packs with one star).
    """

    group_id: int
    topic_id: int
    queue_id: int
    offset: int
    ck_id: int
    ck_index: int
    deadline_ms: int


class ReceiptCodec:
    """Encodes and verifies handles with one server secret, for the broker `broker_name`."""

    def __init__(self, secret: bytes, *, broker_name: str, native: bool = True) -> None:
        """`native=False` runs a run's loops in this module's Python even where the C ones
        were built (the reference the tests compare them with)."""
        problem = broker_name_problem(broker_name)
        if problem is not None:
            raise ValueError(problem)
        self.broker_name = broker_name
        self._prefix = broker_name + SEPARATOR
        self._prefix_chars = len(self._prefix)
        self._unnamed = _keyed(secret)
        self._named = self._unnamed.copy()
        self._named.update(name_field(broker_name))
        run_key = hashlib.blake2b(_RUN_DOMAIN, key=secret, digest_size=32).digest()
        self._runs = hashlib.shake_128(run_key + name_field(broker_name))
        # A run block's key -> the stream's bytes computed so far; every entry is right for
        # its key, so a race only loses one.
        self._streams: dict[_RunKey, bytes] = {}
        self._loops = _RUN_LOOPS if native else None

    def encode(self, handle: ReceiptHandle) -> str:
        body = _BODY.pack(VERSION, *handle)
        return self._prefix + TEXT.encode(body + _mac(self._named, body)).decode()

    def encode_checkpoint(
        self,
        group_id: int,
        topic_id: int,
        queue_id: int,
        offsets: Sequence[int],
        ck_id: int,
        deadline_ms: int,
    ) -> list[str]:
        """The handles of a checkpoint's messages, the i-th for offsets[i] at index i.

        A run of adjacent offsets (at least _RUN_MIN) gets version 4 handles, MACed by
        slices of one stream a block of 32 (the module's docstring); other offsets get what
        `encode` writes for each. The shared fields are packed once; each handle's body is
        their bytes joined with its offset's and index's. The payloads are base64-encoded
        together: each padded with two zero bytes to a whole number of base64's 3-byte
        groups, so each one's text is a slice of the whole's (`_PADDED_CHARS` apart), its
        first TEXT.chars characters those of its own encoding. Where the build has the C
        loops, they write a run's texts from the same packed fields and streams."""
        # Packing them checks the shared fields' ranges as `encode` does; offsets and
        # indexes are unsigned 64 and 16-bit (store keys; a pop's at most MAX_HANDLES).
        count = len(offsets)
        run = count >= _RUN_MIN and _adjacent(offsets)
        shared = _BODY.pack(
            VERSION_RUN if run else VERSION, group_id, topic_id, queue_id, 0, ck_id, 0, deadline_ms
        )
        head, middle, tail = shared[:_OFFSET_AT], shared[_OFFSET_AT + 8 : _INDEX_AT], shared[-8:]
        parts: list[bytes] = []
        if run:
            first = offsets[0]
            streams = [
                self._stream(
                    (group_id, topic_id, queue_id, first, ck_id, block, deadline_ms),
                    min(_RUN_BLOCK, count - block * _RUN_BLOCK) * _MAC_BYTES,
                )
                for block in range((count + _RUN_BLOCK - 1) // _RUN_BLOCK)
            ]
            if self._loops is not None:
                return self._loops.encode(self._prefix, shared, first, count, streams)
            for index in range(count):
                parts.append(
                    b"".join(
                        (
                            head,
                            offsets[index].to_bytes(8, "big"),
                            middle,
                            index.to_bytes(2, "big"),
                            tail,
                        )
                    )
                )
                at = index % _RUN_BLOCK * _MAC_BYTES
                parts.append(streams[index // _RUN_BLOCK][at : at + _MAC_BYTES])
                parts.append(_GROUP_FILL)
        else:
            named = self._named
            for index, offset in enumerate(offsets):
                body = b"".join(
                    (head, offset.to_bytes(8, "big"), middle, index.to_bytes(2, "big"), tail)
                )
                parts.append(body)
                parts.append(_mac(named, body))
                parts.append(_GROUP_FILL)
        text = TEXT.encode_padded(b"".join(parts)).decode()
        prefix = self._prefix
        return [
            prefix + text[start : start + _TEXT_CHARS]
            for start in range(0, len(text), _PADDED_CHARS)
        ]

    def _stream(self, key: _RunKey, length: int) -> bytes:
        """The first `length` bytes of the stream of the run block `key`, computed and kept."""
        stream = self._streams.get(key)
        if stream is not None and len(stream) >= length:
            return stream
        stream = self._run_stream(key, length)
        self._keep(key, stream)
        return stream

    def _run_stream(self, key: _RunKey, length: int) -> bytes:
        state = self._runs.copy()
        state.update(_run_input(key))
        return state.digest(length)

    def _keep(self, key: _RunKey, stream: bytes) -> None:
        streams = self._streams
        if len(streams) >= _RUN_STREAMS_KEPT:
            streams.clear()
        streams[key] = stream

    def _verified_named(self, raw: bytes, start: int) -> ReceiptHandle:
        """The handle of the named payload at `start` of `raw` (its bytes), once its MAC and
        version are checked."""
        if raw[start] != VERSION_RUN:
            return _verified(raw[start : start + _PAYLOAD_BYTES], self._named, VERSION)
        fields = _UNPACK_FIELDS(raw, start + 1)
        offset: int = fields[3]
        index: int = fields[5]
        first = offset - index
        if first < 0:
            raise InvalidReceiptHandleError(_FORGED)
        block = index // _RUN_BLOCK
        key: _RunKey = (fields[0], fields[1], fields[2], first, fields[4], block, fields[6])
        at = (index - block * _RUN_BLOCK) * _MAC_BYTES
        mac = raw[start + _BODY_BYTES : start + _PAYLOAD_BYTES]
        stream = self._streams.get(key)
        if stream is None or len(stream) < at + _MAC_BYTES:
            # Not kept (another process's pop, or forgotten): computed whole, and kept only
            # once a handle shows it is genuine, so forged handles cannot fill the table.
            stream = self._run_stream(key, _RUN_BLOCK * _MAC_BYTES)
            if not compare_digest(mac, stream[at : at + _MAC_BYTES]):
                raise InvalidReceiptHandleError(_FORGED)
            self._keep(key, stream)
        elif not compare_digest(mac, stream[at : at + _MAC_BYTES]):
            raise InvalidReceiptHandleError(_FORGED)
        handle: ReceiptHandle = _NEW_TUPLE(ReceiptHandle, fields)
        return handle

    def decode(self, text: str) -> ReceiptHandle:
        """Verify and decode; raises InvalidReceiptHandleError when malformed, forged or
        issued by another broker."""
        if text.startswith(self._prefix):
            return self._verified_named(_payload_bytes(text[self._prefix_chars :]), 0)
        if SEPARATOR in text:
            raise self._foreign(text)
        if not text:
            raise InvalidReceiptHandleError("receipt handle is empty")
        return _verified(_payload_bytes(text), self._unnamed, VERSION_UNNAMED)

    def decode_all(self, texts: Sequence[str]) -> list[ReceiptHandle | InvalidReceiptHandleError]:
        """`decode` of each text, the error it raises in place of a handle it refuses.

        Where the C loops are built, they check the handles of runs whose streams are kept
        (the acks of this broker's pops); `_decode_all` checks the rest."""
        loops = self._loops
        if loops is None:
            return self._decode_all(texts)
        found = loops.verify(texts, self._prefix, self._streams, ReceiptHandle)
        left = [text for handle, text in zip(found, texts, strict=True) if handle is None]
        if not left:  # every one a handle
            return cast("list[ReceiptHandle | InvalidReceiptHandleError]", found)
        checked = iter(self._decode_all(left))
        return [next(checked) if handle is None else handle for handle in found]

    def _decode_all(self, texts: Sequence[str]) -> list[ReceiptHandle | InvalidReceiptHandleError]:
        """`decode_all` in Python.

        The payloads of handles named after this broker are base64-decoded together (each
        followed by a fill that completes its last group, as encode_checkpoint's); when one
        of them is not a canonical text, each text is decoded alone, to say which and why."""
        prefix, chars = self._prefix, self._prefix_chars + _TEXT_CHARS
        joined: list[str] = []
        for text in texts:
            if len(text) != chars or not text.startswith(prefix):
                joined.clear()  # another broker's, an old one or malformed: one by one
                break
            joined.append(text[self._prefix_chars :])
            joined.append(_TEXT_FILL)
        raw = None
        if joined:
            try:
                raw = TEXT.decode_joined("".join(joined).encode("ascii"), _PADDED_CHARS)
            except UnicodeEncodeError:
                raw = None
        if raw is None:
            return [self._decode_or_error(text) for text in texts]
        handles: list[ReceiptHandle | InvalidReceiptHandleError] = []
        for start in range(0, len(raw), _PADDED_BYTES):
            try:  # a method call, not a bound method in a local: compiled, that is C's call
                handles.append(self._verified_named(raw, start))
            except InvalidReceiptHandleError as exc:
                handles.append(exc)
        return handles

    def _decode_or_error(self, text: str) -> ReceiptHandle | InvalidReceiptHandleError:
        try:
            return self.decode(text)
        except InvalidReceiptHandleError as exc:
            return exc

    def _foreign(self, text: str) -> InvalidReceiptHandleError:
        """The error for a named handle that does not name this broker."""
        issuer, _, payload = text.partition(SEPARATOR)
        _payload_bytes(payload)  # a malformed handle is malformed, whatever it names
        if broker_name_problem(issuer) is not None:
            return InvalidReceiptHandleError(
                "receipt handle is malformed (its broker name is not one a broker can have); "
                "pass the handle exactly as received"
            )
        return InvalidReceiptHandleError(
            f"receipt handle was issued by broker {issuer!r}; this is broker "
            f"{self.broker_name!r}: ack it on the broker that issued it"
        )


def _run_input(key: _RunKey) -> bytes:
    """What a run block's stream is computed over: its shared fields packed as a body (the
    first offset in place of the offset, the block in place of the index)."""
    return _BODY.pack(VERSION_RUN, *key)


def _adjacent(offsets: Sequence[int]) -> bool:
    """Whether `offsets` are a run: each one more than the one before."""
    first = offsets[0]
    for index in range(1, len(offsets)):
        if offsets[index] != first + index:
            return False
    return True


_NEW_TUPLE: Final = tuple.__new__
"""Builds a ReceiptHandle from its fields' tuple in C: NamedTuple's own `_make` and
`__new__` are Python functions, which cost half as much as the MAC a handle is checked
with."""


def _verified(raw: bytes, keyed: hashlib.blake2b, version: int) -> ReceiptHandle:
    """The handle of a payload's bytes, once its MAC (by `keyed`) and version are checked."""
    body, mac = raw[:_BODY_BYTES], raw[_BODY_BYTES:]
    if not compare_digest(mac, _mac(keyed, body)):
        raise InvalidReceiptHandleError(_FORGED)
    if body[0] != version:
        raise InvalidReceiptHandleError(f"receipt handle version {body[0]} is not supported")
    handle: ReceiptHandle = _NEW_TUPLE(ReceiptHandle, _FIELDS.unpack_from(body, 1))
    return handle


def _payload_bytes(payload: str) -> bytes:
    """The bytes of a handle's payload text; raises when it is not one canonical spelling."""
    if len(payload) != _TEXT_CHARS:
        raise InvalidReceiptHandleError(
            "receipt handle is malformed (wrong length); pass the handle exactly as received"
        )
    try:
        raw = TEXT.decode(payload.encode())  # bytes: their translate is 10x str's
    except UnicodeEncodeError as exc:
        raise InvalidReceiptHandleError(_NOT_BASE64URL) from exc
    if raw is None:  # not the one canonical spelling (handle_text.py)
        raise InvalidReceiptHandleError(_NOT_BASE64URL)
    return raw
