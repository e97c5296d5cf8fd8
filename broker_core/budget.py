"""The byte budget of one answer that carries messages (pop, pull, peek, query by key).

A gRPC client receives 4 MiB per message by default (grpc's max_receive_message_length),
so an answer must stay below that however large its messages are: a batch stops before
the message that would pass validation.MAX_RESPONSE_BYTES, and the next call gets it. The
first message always fits, because a body is at most validation.MAX_BODY_BYTES.

A caller that reserved fewer bytes for the answer (a PopStream's admission,
proxy/stream_session.py) passes them as a `strict` limit: then even the first message must
fit, and `refused` says how many bytes the smallest message it refused needed, so the caller
can ask again with at least that many. A caller that can reserve more at the moment it is
needed (a PopStream's probe, woken by an arrival) passes `reserve`: asked once, for the bytes
the first message needs, it returns the bytes it reserved (at least those, or 0: none), so
the pop takes the message at once instead of refusing it and being started again.
"""

from __future__ import annotations

from collections.abc import Callable

from popmq.broker_core.validation import MAX_RESPONSE_BYTES, MESSAGE_OVERHEAD_BYTES

Reserve = Callable[[int], int]
"""`reserve(needed)`: reserve at least `needed` bytes for the answer now; returns the bytes
reserved (the answer's new bound), or 0 when it could not."""

FIRST_READ = 4
"""Stored messages read at first, before their sizes are known (a message may be 4 MiB)."""


class ResponseBudget:
    """Bytes left in one answer; `take` each stored record before adding it.

    `reads` sizes the next multi-get by the stored sizes seen so far, so filling an answer
    reads about what fits and not, say, 256 messages of 4 MiB to return one.
    """

    __slots__ = (
        "left", "refused", "reserve", "reserved", "seen", "seen_bytes", "strict", "taken",
    )  # fmt: skip

    def __init__(
        self,
        limit: int = MAX_RESPONSE_BYTES,
        *,
        strict: bool = False,
        reserve: Reserve | None = None,
    ) -> None:
        self.left = limit
        self.taken = 0
        self.seen = 0
        self.seen_bytes = 0
        self.strict = strict
        """A reserved bound: the first message must fit it too."""
        self.refused = 0
        """Bytes (with the overhead) of the smallest message refused, 0 if none was."""
        self.reserve = reserve
        """Asked once, when the first message does not fit a strict bound (module doc)."""
        self.reserved = 0
        """What `reserve` granted (the caller holds it until the answer is done), 0 if none."""

    def reads(self, wanted: int) -> int:
        """How many of the `wanted` next stored messages to read at once (at least one)."""
        if not self.seen:
            # Under a reserved bound, one at first: a probe (bound 0) reads one message.
            return 1 if self.strict else max(1, min(wanted, FIRST_READ))
        average = self.seen_bytes / self.seen + MESSAGE_OVERHEAD_BYTES
        return max(1, min(wanted, int(self.left // average) + 1))

    def saw(self, stored_bytes: int) -> None:
        """Note the size of a stored message read (taken or not: filtered, deleted)."""
        self.seen += 1
        self.seen_bytes += stored_bytes

    def take(self, stored_bytes: int) -> bool:
        """Count a message of `stored_bytes` (its stored record) if it fits; False if not."""
        cost = stored_bytes + MESSAGE_OVERHEAD_BYTES
        if cost > self.left and not self.taken and self.reserve is not None:
            reserve, self.reserve = self.reserve, None
            granted = reserve(cost)
            if granted >= cost:
                self.left = self.reserved = granted
        if cost > self.left and (self.taken or self.strict):
            if not self.refused or cost < self.refused:
                self.refused = cost
            return False
        self.left -= cost
        self.taken += 1
        return True
