"""The C walk that writes a delivery's wire bytes (broker_core/_delivery_wire.c) writes what
record_wire.py's Python walk writes, byte for byte, and leaves every record it does not
accept to the Python walk, which raises as before. Run where the build has it (`make
test`); the pure Python build runs record_wire.py's own walk through test_record_wire.py."""

from __future__ import annotations

import random

import pytest

from popmq import _compiled
from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import record_wire
from popmq.broker_core.record_wire import (
    append_received_message,
    invisible_until,
    topic_and_queue,
)

built = pytest.mark.skipif(
    record_wire._DELIVERY_LOOPS is None,
    reason="the C walk is not loaded (pure Python or not built)",
)
HANDLE = b"broker-a." + b"A" * 74


def _both(stored: bytes, *, offset: int = 1234, handle: bytes = HANDLE) -> tuple[bytes, bytes]:
    """The delivery written by the C walk and by the Python walk."""
    written = []
    for native in (True, False):
        parts: list[bytes] = []
        append_received_message(
            parts,
            stored,
            field_tag=b"\x0a",
            topic_and_queue=topic_and_queue("orders-ü".encode(), 3),
            offset=offset,
            receipt_handle=handle,
            invisible_until=invisible_until(1_764_000_000_123),
            native=native,
        )
        written.append(b"".join(parts))
    return written[0], written[1]


def _outcome(stored: bytes, *, native: bool, offset: int = 1234) -> bytes | str:
    """The delivery written, or the error raised (its type and message)."""
    parts: list[bytes] = []
    try:
        append_received_message(
            parts,
            stored,
            field_tag=b"\x0a",
            topic_and_queue=b"",
            offset=offset,
            receipt_handle=HANDLE,
            invisible_until=b"",
            native=native,
        )
    except (ValueError, OverflowError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return b"".join(parts)


def _outcomes(stored: bytes, *, offset: int = 1234) -> tuple[bytes | str, bytes | str]:
    return (
        _outcome(stored, native=True, offset=offset),
        _outcome(stored, native=False, offset=offset),
    )


def _record(rng: random.Random) -> records_pb2.StoredMessage:
    text = "abcxyz-_ü€😀"
    record = records_pb2.StoredMessage(
        message_id="".join(rng.choices(text, k=rng.randrange(1, 40))),
        body=rng.randbytes(rng.randrange(0, 3000)),
        born_time_ms=rng.choice([0, -1, -1_500, -(1 << 62), 1 << 62, rng.randrange(1, 1 << 45)]),
        store_time_ms=rng.randrange(-(1 << 40), 1 << 45),
        delivery_attempt=rng.choice([0, 1, 300, (1 << 31) - 1]),
        origin_topic="t" if rng.random() < 0.3 else "",
        origin_queue_id=rng.choice([0, -1, 7]),
        origin_offset=rng.choice([0, 5, 1 << 40]),
        message_group="g" * rng.randrange(0, 3),
        deliver_at_ms=rng.choice([0, 999, 1_000, 1_764_000_100_000]),
        body_encoding=rng.choice(["", "zstd"]),
        dedup_id=rng.choice(["", "dedup-1"]),
        born_host=rng.choice(["", "host-1" * 30]),
    )
    record.keys.extend("".join(rng.choices(text, k=3)) for _ in range(rng.randrange(0, 4)))
    for _ in range(rng.randrange(0, 5)):
        record.properties["".join(rng.choices(text, k=4))] = "x" * rng.randrange(0, 300)
    return record


def test_a_compiled_build_loads_the_c_walk() -> None:
    if not _compiled.state()[0]:
        pytest.skip(f"not compiled here: {_compiled.state()[1]}")
    assert record_wire._DELIVERY_LOOPS is not None


@built
def test_random_records_are_written_as_the_python_writes_them() -> None:
    rng = random.Random(11)
    for _ in range(400):
        stored = _record(rng).SerializeToString()
        offset = rng.choice([0, 1, 127, 128, (1 << 64) - 1, rng.randrange(0, 1 << 40)])
        handle = rng.choice([HANDLE, b"", b"h" * 300])
        native, python = _both(stored, offset=offset, handle=handle)
        assert native == python


@built
def test_fields_repeated_unknown_or_of_other_wire_types_are_written_as_the_python_does() -> None:
    base = records_pb2.StoredMessage(message_id="m", body=b"x", delivery_attempt=1)
    data = base.SerializeToString()
    for extra in (
        b"\xc1\x02" + bytes(8) + b"\xcd\x02" + bytes(4),  # fixed64 and fixed32 fields
        b"\x30\x05" * 3 + b"\x38\x80\x01" * 2,  # repeated times
        b"\x30" + b"\xff" * 9 + b"\x01",  # a ten-byte varint (a negative time)
        b"\x80\x01\x00",  # field 16 as a varint: skipped
        b"\x8a\x01\x02ab" + b"\x82\x01\x00",  # born_host and body_encoding keys of two bytes
        b"\xfa\xff\xff\xff\x0f\x01z",  # the largest field number, length-delimited
        b"",
    ):
        native, python = _both(data + extra)
        assert native == python


@built
@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05abc",  # a length past the end
        b"\x30",  # a varint cut off
        b"\x0b",  # wire type 3 (a group)
        b"\x0f",  # wire type 7
        b"\x30" + b"\xff" * 11,  # a varint longer than ten bytes
        b"\x30" + b"\xff" * 10 + b"\x01",  # eleven bytes, the last one ending it
        b"\x30" + b"\xff" * 9,  # ten bytes, none ending it, then the end
        b"\x30" + b"\xff" * 9 + b"\x02",  # ten bytes past 64 bits
        b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a length past 64 bits
        b"\x09" + bytes(7),  # a fixed64 cut off
        b"\x0d" + bytes(3),  # a fixed32 cut off
    ],
)
def test_a_record_the_c_walk_refuses_is_left_to_the_python_walk(data: bytes) -> None:
    loops = record_wire._DELIVERY_LOOPS
    assert loops is not None
    assert loops.received_message(data, b"\x0a", b"", 1, HANDLE, b"") is None
    assert _outcomes(data) == (_outcome(data, native=False),) * 2


@built
@pytest.mark.parametrize("offset", [-1, 1 << 64])
def test_an_offset_outside_64_bits_is_left_to_the_python_walk(offset: int) -> None:
    loops = record_wire._DELIVERY_LOOPS
    assert loops is not None
    stored = records_pb2.StoredMessage(message_id="m", body=b"x").SerializeToString()
    assert loops.received_message(stored, b"\x0a", b"", offset, HANDLE, b"") is None
    assert _outcomes(stored, offset=offset) == (_outcome(stored, offset=offset, native=False),) * 2
