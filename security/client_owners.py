"""Which user a client id belongs to, so one user cannot act as another's client.

RocketMQ 5 clients name themselves with `x-mq-client-id` (popmq.v1's consumer RPCs with a
`client_id` field), and the server keys their sessions by it: a heartbeat rewrites the
session, a termination ends it and gives back every message it holds. Authorization checks
the group a call names, not the id, so without this table any signed-in user who learns an
id (they look like `host@pid@...` and appear in client logs) could end another user's
session and have its messages redelivered. The first user to use an id owns it; another
user's call naming it is refused PERMISSION_DENIED. SUPER users are neither bound nor
refused (operators may end any session).

The table is per server process and bounded (least recently used ids go first): in
cluster mode each proxy keeps its own, and an id unused for long enough to be evicted can be
claimed anew. Runs on the event loop only.
"""

from __future__ import annotations

from collections import OrderedDict

from popmq.broker_core import PermissionDeniedError

MAX_CLIENT_IDS = 100_000
"""Client ids remembered; each entry is two short strings (~200 bytes)."""


class ClientOwners:
    """Client id -> the access key that first used it (least recently used first)."""

    def __init__(self, capacity: int = MAX_CLIENT_IDS) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._owners: OrderedDict[str, str] = OrderedDict()  # client id -> access key

    def claim(self, client_id: str, access_key: str) -> None:
        """Bind `client_id` to `access_key` on first use; refuse another user's use.

        Raises:
            PermissionDeniedError: `client_id` belongs to another user.
        """
        owner = self._owners.get(client_id)
        if owner is None:
            self._owners[client_id] = access_key
            if len(self._owners) > self._capacity:
                self._owners.popitem(last=False)
            return
        if owner != access_key:
            raise PermissionDeniedError(
                f"user {access_key!r} may not use client id {client_id!r}: it is another "
                "user's (each client id belongs to the first user that used it)"
            )
        self._owners.move_to_end(client_id)

    def __len__(self) -> int:
        return len(self._owners)
