"""v2 consumers in the server's client registry, the one popmq.v1 consumers are members of.

v2 heartbeats name a group but no topics: a consumer's topics come from its Telemetry
settings (and the topics it asked assignments for), so a heartbeat, an assignment query and
a settings frame all end here. Push consumers of FIFO groups are queue-exclusive members
(assignments.py), all others POP members. Runs on the server's event loop; a session that
ends by silence is unregistered by a task of its own (Sessions tells it synchronously).
"""

from __future__ import annotations

import asyncio
import logging

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.broker_core import BrokerAPI, NotFoundError, PopMQError
from popmq.proxy.rocketmq import settings
from popmq.proxy.rocketmq.assignments import ConsumerAssignments
from popmq.proxy.rocketmq.resources import Resources
from popmq.proxy.rocketmq.sessions import ClientSession

log = logging.getLogger(__name__)


class Membership:
    """Registers v2 consumers for the topics they consume, and ends them.

    Args:
        broker: Where the consumed topics are looked up (their queue counts).
        resources: The groups' fifo flags.
        assignments: The registry and the FIFO queue claims.
    """

    def __init__(
        self, broker: BrokerAPI, resources: Resources, assignments: ConsumerAssignments
    ) -> None:
        self._broker = broker
        self._resources = resources
        self._assignments = assignments
        # Unregistrations of sessions that ended by silence, still running (held so they
        # run; close() waits for them).
        self._endings: set[asyncio.Task[None]] = set()

    async def register(self, session: ClientSession, group: str) -> None:
        """Register a consumer for the topics it consumes that exist (none: nothing to do)."""
        if session.client_type not in settings.CONSUMER_TYPES:
            return
        queue_counts: dict[str, int] = {}
        for topic in session.topics():
            try:
                info = self._broker.topic_info(topic)
            except NotFoundError:
                continue  # its route query fails: nothing to assign until it exists
            queue_counts[topic] = info.queues
        if not queue_counts:
            return
        exclusive = session.client_type == pb.PUSH_CONSUMER and self._resources.policy(group).fifo
        await self._assignments.register(
            session.client_id, group, queue_counts, exclusive=exclusive
        )

    async def end(self, client_id: str) -> None:
        """The client said goodbye: its registrations and claims end."""
        await self._assignments.end_client(client_id)

    def session_ended(self, session: ClientSession) -> None:
        """Sessions' `on_end`: a session ended by silence (termination ends the client
        first). The client may be calling another proxy of the cluster now: its claims
        end only if its last registry call came through this one."""
        if not self._assignments.knows(session.client_id):
            return
        task = asyncio.get_running_loop().create_task(self._end_silent(session.client_id))
        self._endings.add(task)
        task.add_done_callback(self._endings.discard)

    async def _end_silent(self, client_id: str) -> None:
        try:
            await self._assignments.end_client(client_id, if_last_here=True)
        except PopMQError as error:  # the coordinator is away: its claims run out instead
            log.warning("could not unregister silent client %s: %s", client_id, error)

    async def close(self) -> None:
        """Wait for the unregistrations under way."""
        if self._endings:
            await asyncio.wait(set(self._endings))
