"""A handle's text decodes only in its one canonical spelling: exactly the texts that
encoding the decoded bytes again would give back."""

from __future__ import annotations

import binascii
import random

import pytest

from popmq.broker_core.handle_text import HandleText

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _canonical(text: HandleText, raw_bytes: int, encoded: bytes) -> bytes | None:
    """The oracle: decode leniently, then accept only bytes of the handle's length whose
    encoding gives the text back."""
    try:
        raw = binascii.a2b_base64(
            (encoded + b"=" * (-len(encoded) % 4)).replace(b"-", b"+").replace(b"_", b"/"),
            strict_mode=True,
        )
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == raw_bytes and text.encode(raw) == encoded else None


@pytest.mark.parametrize("raw_bytes", [53, 54, 55, 56])  # each leftover: 2, 0, 1, 2 bytes
def test_only_the_canonical_spelling_decodes(raw_bytes: int) -> None:
    text = HandleText(raw_bytes)
    rng = random.Random(raw_bytes)
    for _ in range(40):
        raw = rng.randbytes(raw_bytes)
        encoded = text.encode(raw)
        assert len(encoded) == text.chars
        assert text.decode(encoded) == raw
        for at in range(len(encoded)):
            for ch in _ALPHABET + "+/=.!":
                changed = encoded[:at] + ch.encode() + encoded[at + 1 :]
                assert text.decode(changed) == _canonical(text, raw_bytes, changed), (raw, at, ch)


def test_empty_and_padded_texts_are_refused() -> None:
    text = HandleText(55)
    encoded = text.encode(bytes(55))
    assert text.decode(b"") is None
    assert text.decode(encoded + b"==") is None
