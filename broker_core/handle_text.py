"""The text of a signed handle (receipt handle, recall handle): base64url without padding,
with exactly one spelling, after the name of the broker that issued it.

A handle reads `<broker name>.<payload>`: the name is plain text so that a proxy in front
of several brokers can route an ack or a recall by the handle alone, without the broker's
secret (handles.issuer_of); the payload's MAC covers the name, so a client cannot move a
handle to another broker either. Handles issued before names existed are the bare payload
(no "."), and stay valid on the broker whose secret signed them. "." is in neither the
name's alphabet nor base64url's, so the text splits one way only.

binascii directly: the base64 module's url-safe wrappers cost twice as much (every pop and
ack encodes or decodes one per message). Strict mode alone still accepts "+" and "/" (they
are translated along with "-" and "_") and ignores the unused bits of the last character, so
16 or more strings would decode to the same bytes. So a text decodes only if every character
is base64url's, its last one leaves the unused bits zero, and it spells the handle's length
(half the cost, compiled, of re-encoding the decoded bytes to compare).
"""

from __future__ import annotations

import binascii
import re
from typing import Final

_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_ALPHABET: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
# By byte value, the 6 bits its base64url character stands for (0 for any other byte).
_SIXES: Final = bytes(max(_ALPHABET.find(bytes((b,))), 0) for b in range(256))

SEPARATOR = "."
"""Between the broker name and the payload of a handle."""
MAX_BROKER_NAME_LENGTH = 64
"""Longest broker name: every receipt handle carries it, so it is kept short."""
BROKER_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
"""Letters, digits, "_" and "-": topic-name characters without "%", URL-safe, no separator."""


def broker_name_problem(name: str) -> str | None:
    """Why `name` cannot be a broker name, or None when it can."""
    if not name:
        return f"broker name is empty: use 1 to {MAX_BROKER_NAME_LENGTH} characters"
    if len(name) > MAX_BROKER_NAME_LENGTH:
        return (
            f"broker name is {len(name)} characters long: at most "
            f"{MAX_BROKER_NAME_LENGTH} are allowed"
        )
    if not BROKER_NAME_PATTERN.fullmatch(name):
        return f"broker name {name!r} is invalid: use only letters, digits, '_' and '-'"
    return None


def name_field(name: str) -> bytes:
    """The bytes of `name` a named handle's MAC covers: length-prefixed, so that name and
    body cannot trade bytes."""
    raw = name.encode("ascii")
    return bytes((len(raw),)) + raw


class HandleText:
    """Encoding and strict decoding of handles of one raw length."""

    __slots__ = ("_last_ok", "_padding", "_raw_bytes", "chars")

    def __init__(self, raw_bytes: int) -> None:
        self.chars = -(-raw_bytes * 4 // 3)
        """Length of an encoded handle."""
        self._padding = b"=" * (-self.chars % 4)
        self._raw_bytes = raw_bytes
        # By byte value, 1 for the characters a text may end with: those whose unused low bits
        # (2 or 4 of the last character's 6 when the bytes do not fill it) are zero.
        unused = (self.chars * 6 - raw_bytes * 8) % 6
        last_ok = bytearray(256)
        for i, c in enumerate(_ALPHABET):
            if i % (1 << unused) == 0:
                last_ok[c] = 1
        self._last_ok = bytes(last_ok)

    def encode(self, raw: bytes) -> bytes:
        """The canonical text of `raw`."""
        return binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE)[: self.chars]

    def encode_padded(self, raw: bytes) -> bytes:
        """`raw`'s base64url text with its padding: of payloads each filled to a whole
        number of 3-byte groups, the texts of each, one after another."""
        return binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE)

    def decode_joined(self, encoded: bytes, stride: int) -> bytes | None:
        """`decode` of many texts at once: `encoded` holds texts of `chars` characters, each
        followed by "A"s (zero bits) to `stride` characters, a whole number of base64 groups.
        Their bytes, one after another (each one's a slice of them, its raw length first),
        or None if one of the texts is not a canonical text."""
        last_ok = self._last_ok
        for last in range(self.chars - 1, len(encoded), stride):
            if not last_ok[encoded[last]]:
                return None
        if encoded.translate(None, _ALPHABET):  # what is left is not base64url
            return None
        try:
            return binascii.a2b_base64(encoded.translate(_FROM_URLSAFE), strict_mode=True)
        except (binascii.Error, ValueError):
            return None

    def first_bytes_joined(self, encoded: bytes, stride: int) -> bytes | None:
        """The first byte of each text's bytes, `encoded` laid out as `decode_joined` takes
        it, or None if one of the texts is not a canonical text: `decode_joined`'s checks,
        with only the first two characters of each text read as bytes (a router needs only a
        handle's version byte, and base64 decoding the rest cost it more than the checks)."""
        last_ok = self._last_ok
        size = len(encoded)
        last = self.chars - 1
        while last < size:  # a while loop: compiled, a range with a variable step is not
            if not last_ok[encoded[last]]:
                return None
            last += stride
        if encoded.translate(None, _ALPHABET):  # what is left is not base64url
            return None
        # Every character is base64url's and the texts fill whole groups: decoding them
        # cannot fail, so the first byte of each is what its first 12 bits say.
        sixes = _SIXES
        firsts: list[int] = []
        start = 0
        while start < size:
            firsts.append((sixes[encoded[start]] << 2) | (sixes[encoded[start + 1]] >> 4))
            start += stride
        return bytes(firsts)

    def decode(self, encoded: bytes) -> bytes | None:
        """The bytes `encoded` is the canonical text of, or None if it is not one."""
        if not encoded or not self._last_ok[encoded[-1]]:
            return None
        if encoded.translate(None, _ALPHABET):  # what is left is not base64url
            return None
        try:
            raw = binascii.a2b_base64(
                (encoded + self._padding).translate(_FROM_URLSAFE), strict_mode=True
            )
        except (binascii.Error, ValueError):
            return None
        return raw if len(raw) == self._raw_bytes else None
