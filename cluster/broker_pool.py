"""The proxy's connections to the live brokers: one RemoteBroker per broker, by name.

The set follows the route cache's live brokers: a broker that registers gets a channel, a
broker whose lease lapsed loses it (its calls would only time out; unless its connection is
up, which keeps it live for a grace period: RouteCache), and a broker that registered again
at another address gets a new one. Channels connect lazily and reconnect
by themselves (remote_broker.py), so opening one does no I/O and a broker that is slow to
answer never holds the loop.

A name the pool has no connection for is a broker that is not live now: `get` raises a
retriable UnavailableError saying so, which is what an ack of a dead broker's handle gets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from popmq.broker_core import UnavailableError
from popmq.cluster.remote_broker import RemoteBroker
from popmq.coordination.config import HOP_KEEPALIVE_S
from popmq.coordination.coordinator import Entry
from popmq.security.signing import Signer
from popmq.security.tls import ChannelTLS

log = logging.getLogger(__name__)


class BrokerPool:
    """RemoteBrokers by broker name, kept in step with the live members (`sync`).

    Args:
        call_timeout_s: Deadline of a broker call that does not wait (RemoteBroker's).
        keepalive_s: Each connection is pinged this often (`[cluster] hop_keepalive_s`).
        tls: TLS of the connections to brokers; None: plaintext.
        signer: Signs every broker call (RemoteBroker's; the proxy's root credential).
    """

    def __init__(
        self,
        *,
        call_timeout_s: float = 10.0,
        keepalive_s: float = HOP_KEEPALIVE_S,
        tls: ChannelTLS | None = None,
        signer: Signer | None = None,
    ) -> None:
        self._call_timeout_s = call_timeout_s
        self.keepalive_s = keepalive_s
        self._tls = tls
        self._signer = signer
        # name -> (address, remote): changed by sync on the loop thread only.
        self._remotes: dict[str, tuple[str, RemoteBroker]] = {}
        # Closes of remotes that left, held so they run to the end.
        self._closing: set[asyncio.Task[None]] = set()
        self._draining = False
        # name -> when its connection was last seen up (or first looked at), by `unreachable`.
        self._up_at: dict[str, float] = {}
        # name -> (epoch, when sync first saw that registration): changed by sync only.
        self._seen: dict[str, tuple[int, float]] = {}

    def names(self) -> list[str]:
        return sorted(self._remotes)

    def get(self, broker: str) -> RemoteBroker:
        """The connection to a live broker; UnavailableError (retriable) when it is not one."""
        found = self._remotes.get(broker)
        if found is None:
            raise UnavailableError(
                f"broker {broker!r} is not a live member of the cluster now (its lease "
                f"lapsed, or it never registered); live brokers: {self.names() or 'none'}; "
                "retry once it is back"
            )
        return found[1]

    def answering(self, broker: str) -> bool:
        """Whether this proxy's connection to `broker` is up now and has not dropped since
        its registration was seen: the route cache keeps such a broker live for a while
        after its registration vanished (RouteCache's `answering`). A connection that
        dropped may be up again to another process started on the same address."""
        found = self._remotes.get(broker)
        seen = self._seen.get(broker)
        return (
            found is not None
            and seen is not None
            and found[1].connection_up()
            and found[1].drops.up_since(seen[1])
        )

    def unreachable(self, after_s: float) -> list[str]:
        """The live brokers whose connection has not been up for `after_s`, as seen by the
        calls of this method (each asks idle channels to connect): a caller polls it."""
        now = time.monotonic()
        up_at = self._up_at
        down: list[str] = []
        for name, (_, remote) in self._remotes.items():
            if remote.connection_up():
                up_at[name] = now
            elif now - up_at.setdefault(name, now) >= after_s:
                down.append(name)
        for name in [n for n in up_at if n not in self._remotes]:
            del up_at[name]
        return sorted(down)

    async def sync(self, live: Mapping[str, Entry]) -> None:
        """Open connections to brokers that joined (or moved), close those of brokers that
        left. `live` is RouteCache.live_brokers."""
        now = time.monotonic()
        for name, entry in live.items():
            if self._seen.get(name, (0, 0.0))[0] != entry.created_revision:
                self._seen[name] = (entry.created_revision, now)
            addr = entry.value.get("addr")
            if not isinstance(addr, str) or not addr:
                log.warning("broker %s registered no address: %s", name, dict(entry.value))
                continue
            current = self._remotes.get(name)
            if current is not None and current[0] == addr:
                continue
            remote = RemoteBroker(
                addr,
                call_timeout_s=self._call_timeout_s,
                keepalive_s=self.keepalive_s,
                catalog=False,
                name=name,
                tls=self._tls,
                signer=self._signer,
            )
            await remote.start()  # opens the channel; no call is made
            if self._draining:
                remote.release_waiters()
            self._remotes[name] = (addr, remote)
            self._up_at.pop(name, None)  # a new connection: looked at afresh
            log.info("broker %s is live at %s", name, addr)
            if current is not None:
                self._close_later(current[1])
        for name in [n for n in self._seen if n not in live]:
            del self._seen[name]
        for name in [n for n in self._remotes if n not in live]:
            _, remote = self._remotes.pop(name)
            log.info("broker %s left the cluster", name)
            self._close_later(remote)

    def _close_later(self, remote: RemoteBroker) -> None:
        task = asyncio.get_running_loop().create_task(remote.close(), name="popmq-pool-close")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def release_waiters(self) -> None:
        """Answer every held long poll now (empty) and hold no new ones: shutdown is coming."""
        self._draining = True
        for _, remote in self._remotes.values():
            remote.release_waiters()

    async def close(self) -> None:
        remotes = [remote for _, remote in self._remotes.values()]
        self._remotes.clear()
        await asyncio.gather(*(remote.close() for remote in remotes), *self._closing)
