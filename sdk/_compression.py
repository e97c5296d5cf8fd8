"""Body compression: bodies over 4 KiB are sent zlib-compressed when that makes them smaller.

Why zlib and not zstd: it is in the standard library (no native dependency for every
client), and it is what RocketMQ itself writes for a compressed body (``UtilAll.compress``,
java.util.zip.Deflater, level 5, over ``compressMsgBodyOverHowMuch`` = 4 KiB), so a gateway
for the official clients can hand such bodies on without re-encoding. The wire names the
encoding per message (``body_encoding``): "" for a body sent as is, "zlib" otherwise.

Consumers decode transparently. A body that cannot be decoded (an encoding this client does
not know, corrupt data, or more than 4 MiB once inflated, which no producer could have sent)
raises ``BodyDecodeError``; the caller decides what the user sees.
"""

from __future__ import annotations

import zlib

__all__ = [
    "COMPRESSION_LEVEL",
    "COMPRESS_OVER_BYTES",
    "IDENTITY",
    "ZLIB",
    "BodyDecodeError",
    "decode_body",
    "encode_body",
]

COMPRESS_OVER_BYTES = 4 * 1024
"""Bodies longer than this are compressed (RocketMQ ``compressMsgBodyOverHowMuch``)."""
COMPRESSION_LEVEL = 5
"""zlib level (RocketMQ ``compressLevel``): most of level 9's ratio at a fraction of its CPU."""
IDENTITY = ""
ZLIB = "zlib"
_MAX_DECODED_BYTES = 4 * 1024 * 1024


class BodyDecodeError(ValueError):
    """A received body could not be decoded; the message says why."""


def encode_body(body: bytes) -> tuple[bytes, str]:
    """Return the body to send and its encoding: compressed only when that shrinks it."""
    if len(body) <= COMPRESS_OVER_BYTES:
        return body, IDENTITY
    compressed = zlib.compress(body, COMPRESSION_LEVEL)
    if len(compressed) >= len(body):
        return body, IDENTITY
    return compressed, ZLIB


def decode_body(body: bytes, encoding: str, *, max_bytes: int = _MAX_DECODED_BYTES) -> bytes:
    """Return the body as the producer gave it.

    Raises:
        BodyDecodeError: Unknown encoding, corrupt or truncated data, or more than
            ``max_bytes`` once decoded.
    """
    if encoding == IDENTITY:
        return body
    if encoding != ZLIB:
        raise BodyDecodeError(f"body encoding {encoding!r} is not supported (only 'zlib')")
    inflater = zlib.decompressobj()
    try:
        # One byte past the limit tells "too large" from "exactly at the limit".
        decoded = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise BodyDecodeError(f"zlib body is corrupt: {exc}") from exc
    if len(decoded) > max_bytes:
        raise BodyDecodeError(f"zlib body inflates to more than {max_bytes} bytes")
    if not inflater.eof:
        raise BodyDecodeError("zlib body is truncated")
    return decoded
