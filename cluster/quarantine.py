"""`Quarantine`: a proxy's sends keep off a broker it cannot reach until it can again.

A cut between a proxy and a broker (a one-way partition, a paused host) leaves the TCP
connection silent: nothing fails until the channel's keepalive ping goes unanswered
(`[cluster] hop_keepalive_s`, 1 s by default: a ping a second, the connection dropped when
one goes unanswered for a second), and then every call in flight there fails unanswered.
The fault table's isolation after such a failure is a fixed 10 s, after which a client's
send goes to the broker again and finds the cut again. So instead:

- a send to a broker that failed unanswered (send_outcome.BrokerUnansweredError) while the
  broker's channel is not connected quarantines that broker (FaultTable.unreachable): no new
  send goes there, nor a FIFO send, and a client's repeat of a send that may be stored there
  waits for the quarantine to end, for up to in_doubt_retry_s, since it may go nowhere else
  (SendRouter.send: then it is tried there, or fails as of unknown outcome);
- a probe looks at the broker's connection every `PROBE_INTERVAL_S` (asking an idle channel
  to connect) and ends the quarantine once it is up (FaultTable.reachable); it stops when the
  broker leaves the pool (its lease lapsed, or it registered again: the table forgets it);
- a call that went unanswered on a connected channel (a slow broker, not a cut) quarantines
  nothing: the table's isolation by latency applies, as before.

What is sent meanwhile is decided as before (send_outcome.py): a send the broker provably
did not store goes to another broker at once, one that it may have stored is tried again on
that broker only, for in_doubt_retry_s, then told to the client as of unknown outcome.

Runs on the proxy's event loop; one probe task per quarantined broker at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from popmq.broker_core import UnavailableError
from popmq.cluster.broker_pool import BrokerPool
from popmq.cluster.fault_tolerance import FaultTable
from popmq.cluster.remote_broker import RemoteBroker

__all__ = ["PROBE_INTERVAL_S", "Quarantine"]

log = logging.getLogger(__name__)

PROBE_INTERVAL_S: Final = 0.25
"""How often a quarantined broker's connection is looked at (and an idle one asked to
connect): gRPC retries a connection within 1 s, so a healed cut is seen within about that."""


class Quarantine:
    """Quarantines of the brokers a proxy cannot reach, and their probes (module docstring).

    Args:
        pool: The proxy's connections to the brokers.
        faults: The fault table whose picks the quarantine steers.
    """

    def __init__(self, pool: BrokerPool, faults: FaultTable) -> None:
        self._pool = pool
        self._faults = faults
        # Broker name -> its probe; one per quarantined broker, changed on the loop only.
        self._probes: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    @property
    def probing(self) -> list[str]:
        """The brokers being probed (quarantined by this proxy), by name."""
        return sorted(self._probes)

    def unanswered(self, broker: str, remote: RemoteBroker) -> None:
        """A call to `broker` (through `remote`) ended unanswered: quarantine it if its
        connection is down, and probe it until it is up. A call made through a connection
        the pool has since replaced (the broker registered again, a new leader) says nothing
        of the broker now."""
        if self._closed or remote.connection_up():
            return
        try:
            if self._pool.get(broker) is not remote:
                return
        except UnavailableError:
            return  # it left the cluster
        # Marked even while a probe runs: the table may have forgotten the broker since
        # (it registered again), and that probe would then end at its next look.
        newly = self._faults.unreachable(broker)
        if self._faults.is_reachable(broker):
            return  # the table is disabled
        probe = self._probes.get(broker)
        if probe is not None and not probe.done():
            return
        if newly:
            log.warning(
                "broker %s at %s cannot be reached from this proxy (a call went unanswered and its"
                " connection is down): no new send goes there until it is connected again; check"
                " the network between this proxy and that address",
                broker,
                remote.address,
            )
        task = asyncio.get_running_loop().create_task(
            self._probe(broker), name=f"popmq-quarantine-{broker}"
        )
        self._probes[broker] = task

    async def _probe(self, broker: str) -> None:
        try:
            await self._watch(broker)
        except Exception:
            # Never left quarantined with nobody to lift it: let sends find out again.
            log.exception("the probe of broker %s failed; its quarantine ends", broker)
            self._faults.reachable(broker)
        finally:
            if self._probes.get(broker) is asyncio.current_task():
                del self._probes[broker]

    async def _watch(self, broker: str) -> None:
        while True:
            await asyncio.sleep(PROBE_INTERVAL_S)
            if self._faults.is_reachable(broker):
                return  # forgotten (it left or registered again), or a send got through
            try:
                remote = self._pool.get(broker)
            except UnavailableError:
                return  # it left the cluster: the table forgets it
            if remote.connection_up():
                self._faults.reachable(broker)
                log.info("broker %s is connected again: sends go there again", broker)
                return

    async def close(self) -> None:
        """Stop the probes (the quarantines stay as they are); start no more."""
        self._closed = True
        probes = list(self._probes.values())
        for task in probes:
            task.cancel()
        for task in probes:
            with contextlib.suppress(asyncio.CancelledError):
                await task
