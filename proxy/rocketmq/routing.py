"""v2 routes and assignments: where a topic's queues are, and which ones a consumer pops.

Every queue is on this proxy (one broker entry, at the address the client used). Normal
groups get one assignment with queue id -1, as RocketMQ's proxy answers them: every receive
pops all queues and the broker balances consumers. Push consumers of FIFO groups get the
queues they claim in the client registry, one assignment each. Runs on the server's event
loop.
"""

from __future__ import annotations

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.proxy.rocketmq import codes, convert, metadata
from popmq.proxy.rocketmq.assignments import ConsumerAssignments
from popmq.proxy.rocketmq.membership import Membership
from popmq.proxy.rocketmq.resources import Resources
from popmq.proxy.rocketmq.sessions import Sessions


class Routing:
    """Answers QueryRoute and QueryAssignment.

    Args:
        resources: Topics, group policies and the broker entry of routes.
        sessions: The connected clients (an assignment query is also a heartbeat).
        membership: Registers the querying consumer before it is given queues.
        assignments: The FIFO queue claims.
    """

    def __init__(
        self,
        resources: Resources,
        *,
        sessions: Sessions,
        membership: Membership,
        assignments: ConsumerAssignments,
    ) -> None:
        self._resources = resources
        self._sessions = sessions
        self._membership = membership
        self._assignments = assignments

    def route(self, request: sv.QueryRouteRequest) -> sv.QueryRouteResponse:
        """The topic's queues, all on this proxy."""
        entry = self._resources.broker_entry(request.endpoints)
        info = self._resources.topic_info(convert.topic_name(request.topic))
        return sv.QueryRouteResponse(
            status=codes.ok(),
            message_queues=[convert.message_queue(info, q, entry) for q in range(info.queues)],
        )

    async def assignment(
        self, request: sv.QueryAssignmentRequest, client_id: str
    ) -> sv.QueryAssignmentResponse:
        """Normal groups: one assignment with queue id -1. FIFO groups: one per queue the
        registry gives this client (a claim each), renewed by the query; only these need
        the caller's `client_id` (CLIENT_ID_REQUIRED when it is "")."""
        entry = self._resources.broker_entry(request.endpoints)
        info = self._resources.topic_info(convert.topic_name(request.topic))
        group = convert.group_name(request.group)
        if not self._resources.policy(group).fifo:
            queue = convert.message_queue(info, -1, entry)
            return sv.QueryAssignmentResponse(
                status=codes.ok(), assignments=[pb.Assignment(message_queue=queue)]
            )
        if not client_id:
            raise metadata.client_id_required()
        session = self._sessions.touch(client_id, group=group)
        if session.client_type == pb.CLIENT_TYPE_UNSPECIFIED:
            session.client_type = pb.PUSH_CONSUMER  # only push consumers ask for assignments
        if info.name not in session.topics():
            session.queried_topics.add(info.name)
        # The query is also a heartbeat, so a client is a member before its first one.
        await self._membership.register(session, group)
        granted = await self._assignments.query(client_id, group, info.name, info.queues)
        return sv.QueryAssignmentResponse(
            status=codes.ok(),
            assignments=[
                pb.Assignment(message_queue=convert.message_queue(info, q, entry)) for q in granted
            ],
        )
