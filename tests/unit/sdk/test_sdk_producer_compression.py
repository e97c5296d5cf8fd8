"""Body compression: threshold, only-when-smaller, round trip, and refusal of bad bodies."""

from __future__ import annotations

import os
import zlib

import pytest

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._compression import (
    COMPRESS_OVER_BYTES,
    IDENTITY,
    ZLIB,
    BodyDecodeError,
    decode_body,
    encode_body,
)
from popmq.sdk.types import ReceivedMessage

TEXT = b"order 42 charged to card ending 4242; " * 2_000  # 76 KB, very compressible


def test_bodies_up_to_the_threshold_are_sent_as_is() -> None:
    body = b"a" * COMPRESS_OVER_BYTES

    assert encode_body(body) == (body, IDENTITY)


def test_a_compressible_body_over_the_threshold_is_zlib_compressed() -> None:
    body = b"a" * (COMPRESS_OVER_BYTES + 1)

    encoded, encoding = encode_body(body)

    assert encoding == ZLIB
    assert len(encoded) < 100
    assert zlib.decompress(encoded) == body


def test_an_incompressible_body_is_sent_as_is() -> None:
    body = os.urandom(64 * 1024)

    assert encode_body(body) == (body, IDENTITY)


@pytest.mark.parametrize("size", [1, COMPRESS_OVER_BYTES, COMPRESS_OVER_BYTES + 1, 4 * 1024 * 1024])
def test_encode_then_decode_gives_the_body_back(size: int) -> None:
    body = (TEXT * (size // len(TEXT) + 1))[:size]

    encoded, encoding = encode_body(body)

    assert decode_body(encoded, encoding) == body


def test_an_unknown_encoding_is_refused() -> None:
    with pytest.raises(BodyDecodeError, match="'zstd' is not supported"):
        decode_body(b"\x28\xb5\x2f\xfd", "zstd")


def test_corrupt_and_truncated_zlib_bodies_are_refused() -> None:
    encoded = zlib.compress(TEXT)

    with pytest.raises(BodyDecodeError, match="corrupt"):
        decode_body(b"not zlib at all", ZLIB)
    with pytest.raises(BodyDecodeError, match="truncated"):
        decode_body(encoded[: len(encoded) // 2], ZLIB)


def test_a_body_inflating_past_the_limit_is_refused() -> None:
    bomb = zlib.compress(b"\0" * (4 * 1024 * 1024 + 1), 9)

    with pytest.raises(BodyDecodeError, match="more than 4194304 bytes"):
        decode_body(bomb, ZLIB)
    assert decode_body(zlib.compress(b"\0" * 4 * 1024 * 1024), ZLIB) == b"\0" * 4 * 1024 * 1024


def test_received_message_body_is_decoded_and_the_encoding_does_not_show() -> None:
    encoded, encoding = encode_body(TEXT)
    wire = messaging_pb2.ReceivedMessage(
        message_id="m", topic="t", body=encoded, body_encoding=encoding
    )

    message = ReceivedMessage.from_proto(wire)

    assert message.body == TEXT
    assert message.body_encoding == ""


def test_received_message_with_an_undecodable_body_keeps_the_raw_bytes_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wire = messaging_pb2.ReceivedMessage(
        message_id="m-9", topic="t", body=b"garbage", body_encoding=ZLIB
    )

    message = ReceivedMessage.from_proto(wire)

    assert (message.body, message.body_encoding) == (b"garbage", ZLIB)
    assert "m-9" in caplog.text
    assert "cannot decode" in caplog.text
