"""When a proxy's connection to a broker last went down, from the channel's own state changes.

A proxy holds a broker whose registration vanished while its connection is up (RouteCache's
`answering`). That trusts the connection, not who is on its other end: another broker
started on the same host and port within the hold would be reached for the vanished one's
queues. A connection that has stayed up since the registration was seen is the same one,
to the same process; `ConnectionDrops` tells the two apart by watching every change of the
channel's state (a poll could miss a restart between two looks). Runs on the loop: each
wake-up is one state read.

A channel without a call for gRPC's client idle timeout (30 min by default: a broker given
no traffic at all, since the hop streams stay open once used) goes IDLE, which counts as a
drop too: such a broker is not held, and drops out until it registers again, as every
broker did before.
"""

from __future__ import annotations

import time

import grpc


class ConnectionDrops:
    """The last time (monotonic) a channel's connection left READY; None: never since the
    watch began."""

    def __init__(self) -> None:
        self.last_drop: float | None = None

    async def watch(self, channel: grpc.aio.Channel) -> None:
        """Note every drop of `channel`'s connection until cancelled (or the channel closes).

        A change away from READY is a drop even when the state is READY again by the time
        it is read: the connection in between was another one."""
        state = channel.get_state()
        while True:
            await channel.wait_for_state_change(state)
            if state is grpc.ChannelConnectivity.READY:
                self.last_drop = time.monotonic()
            state = channel.get_state()
            if state is grpc.ChannelConnectivity.SHUTDOWN:
                return

    def up_since(self, since: float) -> bool:
        """Whether no drop was seen at or after `since` (monotonic)."""
        return self.last_drop is None or self.last_drop < since
