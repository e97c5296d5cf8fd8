"""The text of a signed handle (receipt handle, recall handle): base64url without padding,
with exactly one spelling.

binascii directly: the base64 module's url-safe wrappers cost twice as much (every pop and
ack encodes or decodes one per message). Strict mode alone still accepts "+" and "/" (they
are translated along with "-" and "_") and ignores the unused bits of the last character, so
16 or more strings would decode to the same bytes: a decoded text is re-encoded and compared.
"""

from __future__ import annotations

import binascii

_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


class HandleText:
    """Encoding and strict decoding of handles of one raw length."""

    __slots__ = ("_padding", "chars")

    def __init__(self, raw_bytes: int) -> None:
        self.chars = -(-raw_bytes * 4 // 3)
        """Length of an encoded handle."""
        self._padding = b"=" * (-self.chars % 4)

    def encode(self, raw: bytes) -> bytes:
        """The canonical text of `raw`."""
        return binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE)[: self.chars]

    def decode(self, encoded: bytes) -> bytes | None:
        """The bytes `encoded` is the canonical text of, or None if it is not one."""
        try:
            raw = binascii.a2b_base64(
                (encoded + self._padding).translate(_FROM_URLSAFE), strict_mode=True
            )
        except (binascii.Error, ValueError):
            return None
        return raw if self.encode(raw) == encoded else None
