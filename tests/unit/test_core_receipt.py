"""Receipt handles: signed, opaque, and refused when forged, cut or foreign."""

from __future__ import annotations

import base64

import pytest

from broker_core.errors import InvalidArgumentError, InvalidReceiptHandleError
from broker_core.pop.receipt import ReceiptCodec, ReceiptHandle

SECRET = b"s" * 32
HANDLE = ReceiptHandle(
    group_id=7,
    topic_id=3,
    queue_id=5,
    offset=123_456_789,
    ck_id=(2 << 40) | 99,
    ck_index=4,
    deadline_ms=1_700_000_030_000,
)


def _raw(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_handle_round_trips_every_field() -> None:
    codec = ReceiptCodec(SECRET)
    assert codec.decode(codec.encode(HANDLE)) == HANDLE


def test_handle_round_trips_extreme_values() -> None:
    codec = ReceiptCodec(SECRET)
    handle = ReceiptHandle(2**32 - 1, 2**32 - 1, 2**32 - 1, 2**64 - 1, 2**64 - 1, 2**16 - 1, 0)
    assert codec.decode(codec.encode(handle)) == handle


def test_handle_text_is_url_safe_and_unpadded() -> None:
    text = ReceiptCodec(SECRET).encode(HANDLE)
    assert text.isascii()
    assert not set(text) & set("+/=")


def test_a_handle_verifies_with_a_new_codec_over_the_same_secret() -> None:
    """The secret lives in the data dir, so handles survive a restart."""
    text = ReceiptCodec(SECRET).encode(HANDLE)
    assert ReceiptCodec(bytes(SECRET)).decode(text) == HANDLE


# The handle is a 39-byte body (version, ids, offset, ck id, index, deadline) + 16-byte MAC.
@pytest.mark.parametrize("position", [0, 1, 5, 14, 30, 38, 39, 50, -1])
def test_handle_with_one_flipped_byte_is_refused(position: int) -> None:
    codec = ReceiptCodec(SECRET)
    raw = bytearray(_raw(codec.encode(HANDLE)))
    raw[position] ^= 0x01
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        codec.decode(_text(bytes(raw)))


def test_handle_moved_to_another_offset_is_refused() -> None:
    """A client cannot re-point a genuine handle at another message: the MAC covers it."""
    codec = ReceiptCodec(SECRET)
    raw = bytearray(_raw(codec.encode(HANDLE)))
    other = bytearray(_raw(codec.encode(ReceiptHandle(7, 3, 5, 1, HANDLE.ck_id, 4, 0))))
    raw[:39] = other[:39]  # body of another handle, MAC of this one
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        codec.decode(_text(bytes(raw)))


@pytest.mark.parametrize("cut", [1, 4, 16, 40])
def test_truncated_handle_is_refused(cut: int) -> None:
    codec = ReceiptCodec(SECRET)
    text = codec.encode(HANDLE)
    with pytest.raises(InvalidReceiptHandleError, match="malformed"):
        codec.decode(text[:-cut])


def test_handle_with_extra_bytes_is_refused() -> None:
    codec = ReceiptCodec(SECRET)
    with pytest.raises(InvalidReceiptHandleError, match="wrong length"):
        codec.decode(_text(_raw(codec.encode(HANDLE)) + b"\x00"))


@pytest.mark.parametrize("text", ["not a handle!", "%%%%", "A", "caf\u00e9-\u2603", "====", "  "])
def test_non_base64_handle_is_refused(text: str) -> None:
    with pytest.raises(InvalidReceiptHandleError, match="malformed"):
        ReceiptCodec(SECRET).decode(text)


def test_empty_handle_is_refused() -> None:
    with pytest.raises(InvalidReceiptHandleError, match="empty"):
        ReceiptCodec(SECRET).decode("")


def test_handle_signed_with_another_secret_is_refused() -> None:
    text = ReceiptCodec(b"t" * 32).encode(HANDLE)
    with pytest.raises(InvalidReceiptHandleError, match="another popmq server"):
        ReceiptCodec(SECRET).decode(text)


def test_invalid_handle_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        ReceiptCodec(SECRET).decode("x")
    assert info.value.code == "INVALID_ARGUMENT"
