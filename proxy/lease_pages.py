"""A lease's pages as the broker fills them, what a lease token may be, and the lease
table's small checks and errors (proxy/leases.py).

A LeasePop page may ask for more messages than the broker's pop.max_batch: `page_popper`
fills it with several pops. Everything here runs on the proxy's event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from popmq.broker_core import (
    MAX_POP_BATCH,
    MAX_RESPONSE_BYTES,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PoppedMessage,
    check_batch_size,
)
from popmq.coordination.errors import CoordinationUnavailableError
from popmq.proxy.lease_outage import held_bytes
from popmq.proxy.lease_store import LeaseMeta, PageId

__all__ = [
    "MAX_PAGE_MESSAGES",
    "MAX_TOKEN_LENGTH",
    "ChunkPop",
    "PageUnrecordedError",
    "check_token",
    "check_usable",
    "page_content",
    "page_popper",
    "page_size",
    "parse_page_id",
    "unknown_lease",
    "unrecorded",
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


def page_content(messages: Sequence[PoppedMessage]) -> tuple[list[str], list[int]]:
    """A page entry's content: the messages' receipt handles and invisible deadlines."""
    return [m.receipt_handle for m in messages], [m.invisible_until_ms for m in messages]


def check_usable(meta: LeaseMeta, topic: str) -> None:
    """Refuse a lease of another topic, or one acked."""
    if meta.topic != topic:
        raise InvalidArgumentError(
            f"lease {meta.token!r} holds messages of topic {meta.topic!r}, not {topic!r}"
        )
    if meta.acked:
        raise FailedPreconditionError(
            f"lease {meta.token!r} was acknowledged; its messages are done"
        )


def parse_page_id(text: str) -> PageId:
    """A page id a request named, INVALID_ARGUMENT if it is not one."""
    try:
        return PageId.parse(text)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None


class PageUnrecordedError(CoordinationUnavailableError):
    """A page was popped but its write to the coordinator failed without an answer."""

    incarnation = ""
    """The lease incarnation it was written under."""
    until = 0
    """Its messages' invisible deadline (ms)."""


def unrecorded(
    token: str, page: int, error: CoordinationUnavailableError, incarnation: str, until: int
) -> PageUnrecordedError:
    """A page popped under `incarnation` whose write failed without an answer."""
    error_ = PageUnrecordedError(
        f"page {page} of lease {token!r} was popped but may not be recorded: {error}; its "
        "messages stay invisible until their deadline (or replay once the coordinator is "
        "back); retry"
    )
    error_.incarnation, error_.until = incarnation, until
    return error_


def unknown_lease(token: str) -> NotFoundError:
    """What an ack or renewal of a lease the coordinator does not hold answers."""
    return NotFoundError(
        f"lease {token!r} is unknown: it expired or was never popped (a restart of `popmq "
        "serve` forgets leases)"
    )
