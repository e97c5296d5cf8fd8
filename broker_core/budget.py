"""The byte budget of one answer that carries messages (pop, pull, peek, query by key).

A gRPC client receives 4 MiB per message by default (grpc's max_receive_message_length),
so an answer must stay below that however large its messages are: a batch stops before
the message that would pass validation.MAX_RESPONSE_BYTES, and the next call gets it. The
first message always fits, because a body is at most validation.MAX_BODY_BYTES.
"""

from __future__ import annotations

from popmq.broker_core.validation import MAX_RESPONSE_BYTES, MESSAGE_OVERHEAD_BYTES


class ResponseBudget:
    """Bytes left in one answer; `take` each stored record before adding it."""

    __slots__ = ("left", "taken")

    def __init__(self, limit: int = MAX_RESPONSE_BYTES) -> None:
        self.left = limit
        self.taken = 0

    def take(self, stored_bytes: int) -> bool:
        """Count a message of `stored_bytes` (its stored record) if it fits; False if not."""
        cost = stored_bytes + MESSAGE_OVERHEAD_BYTES
        if self.taken and cost > self.left:
            return False
        self.left -= cost
        self.taken += 1
        return True
