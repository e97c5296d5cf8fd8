"""v2 consumers in the server's client registry, the one popmq.v1 consumers are members of.

v2 heartbeats name a group but no topics: a consumer's topics come from its Telemetry
settings (and the topics it asked assignments for), so a heartbeat, an assignment query and
a settings frame all end here. Push consumers of FIFO groups are queue-exclusive members
(assignments.py), all others POP members. Runs on the server's event loop.
"""

from __future__ import annotations

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.broker_core import BrokerAPI, NotFoundError
from popmq.proxy.rocketmq import settings
from popmq.proxy.rocketmq.assignments import ConsumerAssignments
from popmq.proxy.rocketmq.resources import Resources
from popmq.proxy.rocketmq.sessions import ClientSession


class Membership:
    """Registers v2 consumers for the topics they consume, and ends them.

    Args:
        broker: Where the consumed topics are looked up (their queue counts).
        resources: The groups' fifo flags.
        assignments: The registry and the FIFO queue leases.
    """

    def __init__(
        self, broker: BrokerAPI, resources: Resources, assignments: ConsumerAssignments
    ) -> None:
        self._broker = broker
        self._resources = resources
        self._assignments = assignments

    def register(self, session: ClientSession, group: str) -> None:
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
        self._assignments.register(session.client_id, group, queue_counts, exclusive=exclusive)

    def end(self, client_id: str) -> None:
        """The client is gone: its registrations and leases end."""
        self._assignments.end_client(client_id)

    def session_ended(self, session: ClientSession) -> None:
        """Sessions' `on_end`: a session ended by termination, silence or shutdown."""
        self.end(session.client_id)
