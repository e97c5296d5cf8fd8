"""Receipt handles: signed, opaque, and refused when forged, cut or foreign."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from popmq.broker_core.errors import (
    InvalidArgumentError,
    InvalidReceiptHandleError,
    ReceiptHandleLostError,
)
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle
from popmq.broker_core.timer import RecallCodec, RecallHandle
from popmq.proxy.rocketmq.codes import Code, code_of

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


# -- one spelling per handle (issue 20) ---------------------------------------------------------

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_JUNK = [" ", "\n", "\t", "=", ".", "!", "+", "/", "\x00", "\u00e9", "A", "-"]


def _positions(text: str) -> list[int]:
    return [0, 1, len(text) // 2, len(text) - 1, len(text)]


def _with_both_urlsafe_chars(encode: Callable[[int], str]) -> str:
    """A genuine handle whose text holds both "-" and "_" (so "+" and "/" can stand in)."""
    for n in range(10_000):
        text = encode(n)
        if "-" in text and "_" in text:
            return text
    raise AssertionError("no handle with both - and _ in 10,000 tries")


def test_every_other_last_character_of_a_handle_is_refused() -> None:
    """The last character carries 4 unused bits: 15 other spellings decoded the same bytes."""
    codec = ReceiptCodec(SECRET)
    text = codec.encode(HANDLE)
    variants = [text[:-1] + c for c in _ALPHABET if c != text[-1]]
    assert len(variants) == 63
    for variant in variants:
        with pytest.raises(
            InvalidReceiptHandleError,
            match=r"^receipt handle (is malformed|signature does not match)",
        ):
            codec.decode(variant)
    assert codec.decode(text) == HANDLE


@pytest.mark.parametrize("junk", _JUNK)
def test_a_handle_with_an_inserted_character_is_refused(junk: str) -> None:
    codec = ReceiptCodec(SECRET)
    text = codec.encode(HANDLE)
    for at in _positions(text):
        with pytest.raises(InvalidReceiptHandleError, match="malformed"):
            codec.decode(text[:at] + junk + text[at:])


def test_a_handle_spelled_with_the_standard_alphabet_is_refused() -> None:
    codec = ReceiptCodec(SECRET)
    text = _with_both_urlsafe_chars(
        lambda n: codec.encode(HANDLE._replace(offset=n)),
    )
    for variant in (text.replace("-", "+"), text.replace("_", "/")):
        with pytest.raises(InvalidReceiptHandleError, match="malformed"):
            codec.decode(variant)


RECALL = RecallHandle(topic_id=3, due_ms=1_700_000_030_000, seq=42)


def test_recall_handle_round_trips_and_has_one_spelling() -> None:
    codec = RecallCodec(SECRET)
    text = codec.encode(RECALL)
    assert codec.decode(text) == RECALL
    for variant in [text[:-1] + c for c in _ALPHABET if c != text[-1]]:
        with pytest.raises(
            InvalidArgumentError, match=r"^recall_handle (is malformed|signature does not match)"
        ):
            codec.decode(variant)


@pytest.mark.parametrize("junk", _JUNK)
def test_a_recall_handle_with_an_inserted_character_is_refused(junk: str) -> None:
    codec = RecallCodec(SECRET)
    text = codec.encode(RECALL)
    for at in _positions(text):
        with pytest.raises(InvalidArgumentError, match="recall_handle is malformed"):
            codec.decode(text[:at] + junk + text[at:])


def test_a_recall_handle_spelled_with_the_standard_alphabet_is_refused() -> None:
    codec = RecallCodec(SECRET)
    text = _with_both_urlsafe_chars(lambda n: codec.encode(RecallHandle(3, n, n)))
    for variant in (text.replace("-", "+"), text.replace("_", "/")):
        with pytest.raises(InvalidArgumentError, match="recall_handle is malformed"):
            codec.decode(variant)


def test_a_lost_delivery_is_an_invalid_receipt_handle_for_rocketmq_clients() -> None:
    lost = ReceiptHandleLostError("no longer tracked")
    assert lost.code == "FAILED_PRECONDITION"
    assert code_of(lost) == Code.INVALID_RECEIPT_HANDLE
