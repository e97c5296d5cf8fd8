"""A lease's pages as the broker fills them, and what a lease token may be.

A LeasePop page may ask for more messages than the broker's pop.max_batch: `page_popper`
fills it with several pops. Everything here runs on the proxy's event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from popmq.broker_core import (
    MAX_POP_BATCH,
    MAX_RESPONSE_BYTES,
    InvalidArgumentError,
    PoppedMessage,
    check_batch_size,
)
from popmq.proxy.lease_outage import held_bytes

__all__ = [
    "MAX_PAGE_MESSAGES",
    "MAX_TOKEN_LENGTH",
    "ChunkPop",
    "check_token",
    "page_popper",
    "page_size",
]

MAX_TOKEN_LENGTH = 256
MAX_PAGE_MESSAGES = MAX_POP_BATCH
"""Most messages one page may ask for, whatever the broker's pop.max_batch: a page larger
than one pop is filled by several (`page_popper`)."""


ChunkPop = Callable[[int, float, int | None], Awaitable[list[PoppedMessage]]]
"""`pop(max_messages, wait_s, max_bytes)`: one broker pop of at most pop.max_batch messages
(`max_bytes` None: the default answer bound; else a strict one)."""


def page_size(max_messages: int | None, max_batch: int) -> int:
    """The messages a LeasePop page asks for: `max_messages`, 1..MAX_PAGE_MESSAGES, or by
    default as many as a Pop's default (32, or pop.max_batch when smaller)."""
    if max_messages is None:
        return min(32, max_batch)
    check_batch_size(max_messages, MAX_PAGE_MESSAGES)
    return max_messages


def page_popper(
    pop: ChunkPop, size: int, max_batch: int, wait_s: float
) -> Callable[[], Awaitable[list[PoppedMessage]]]:
    """A page of up to `size` messages made of pops of at most `max_batch`.

    Only the first pop long-polls (`wait_s`); the page stops at the first pop that comes
    back short (nothing more to pop now, or the answer's byte bound), so a short page still
    means the backlog ran out, as a single pop's does. The page's messages stay within one
    answer's bytes (MAX_RESPONSE_BYTES): after the first pop each asks a strict bound of
    what is left. Why a page spans pops: each page is one round trip, one coordinator entry
    and one replay unit, so a reader that wants 1,024 rows pays those once, not 32 times.
    """

    async def pop_page() -> list[PoppedMessage]:
        messages = await pop(min(size, max_batch), wait_s, None)
        left = MAX_RESPONSE_BYTES - held_bytes(messages)
        asked = min(size, max_batch)
        while len(messages) == asked and asked < size and left > 0:
            want = min(max_batch, size - len(messages))
            more = await pop(want, 0.0, left)
            messages += more
            left -= held_bytes(more)
            asked += want
        return messages

    return pop_page


def check_token(token: str) -> None:
    if not token:
        raise InvalidArgumentError(f"lease_token is empty: use 1 to {MAX_TOKEN_LENGTH} characters")
    if len(token) > MAX_TOKEN_LENGTH:
        raise InvalidArgumentError(
            f"lease_token is {len(token)} characters long: at most {MAX_TOKEN_LENGTH} allowed"
        )
    if not token.isprintable():
        raise InvalidArgumentError("lease_token must be printable characters only")
