"""Request bodies checked as grpc decodes them: one too large, or not the method's message,
becomes INVALID_ARGUMENT (errors.UndecodableRequestError) instead of grpc's UNKNOWN.

Every request of every popmq server goes through `checked_deserializer`'s `decode` (the
proxy's rpc_observer wraps each method's deserializer with it), so it is compiled
(src/popmq/_compiled.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from popmq.grpc_calls.errors import Undecodable, UndecodableRequestError

__all__ = ["checked_deserializer", "request_type_name"]


def request_type_name(deserializer: Callable[[bytes], Any]) -> str:
    """The full name of the message a generated deserializer (`XRequest.FromString`) parses."""
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "request"))


def checked_deserializer(
    deserializer: Callable[[bytes], Any], *, unary: bool, max_bytes: int | None = None
) -> Callable[[bytes], Any]:
    """`deserializer` turning a parse failure, or a body over `max_bytes` (refused before
    it is parsed: parsing holds the event loop), into UndecodableRequestError, which a
    unary-request method gets as an `Undecodable` request and a stream-request method
    as the exception of its read (both reach the handler, which answers INVALID_ARGUMENT)."""
    name = request_type_name(deserializer)

    def decode(raw: bytes) -> Any:
        if max_bytes is not None and len(raw) > max_bytes:
            error = UndecodableRequestError(
                f"request is {len(raw)} bytes: at most {max_bytes} are allowed in one "
                f"{name} message"
            )
            if unary:
                return Undecodable(error)
            raise error
        try:
            return deserializer(raw)
        except (DecodeError, ValueError):  # ValueError: invalid UTF-8 in a string
            error = UndecodableRequestError(
                f"request is not a valid {name} message ({len(raw)} bytes that do not parse); "
                f"send a serialized {name}"
            )
            if unary:
                return Undecodable(error)
            raise error from None

    return decode
