"""popmq.v1.AdminService on top of the broker."""

from __future__ import annotations

import grpc

from broker_core.broker import Broker
from broker_core.errors import InvalidArgumentError
from popmq.v1 import admin_pb2, admin_pb2_grpc
from proxy import convert
from proxy.errors import rpc


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """Topics, groups and lag."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @rpc
    async def CreateTopic(
        self, request: admin_pb2.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateTopicResponse:
        if request.message_type not in (
            admin_pb2.MESSAGE_TYPE_UNSPECIFIED,
            admin_pb2.MESSAGE_TYPE_NORMAL,
        ):
            raise InvalidArgumentError(f"message_type {request.message_type} is not supported")
        queues = request.queues if request.HasField("queues") else None
        info = await self._broker.create_topic(request.name, queues)
        return admin_pb2.CreateTopicResponse(topic=convert.topic(info))

    @rpc
    async def GetTopic(
        self, request: admin_pb2.GetTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetTopicResponse:
        info, stats = self._broker.get_topic(request.name)
        return admin_pb2.GetTopicResponse(
            topic=convert.topic(info), queues=[convert.queue_stats(s) for s in stats]
        )

    @rpc
    async def ListTopics(
        self, request: admin_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListTopicsResponse:
        return admin_pb2.ListTopicsResponse(
            topics=[convert.topic(t) for t in self._broker.list_topics()]
        )

    @rpc
    async def DeleteTopic(
        self, request: admin_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteTopicResponse:
        await self._broker.delete_topic(request.name)
        return admin_pb2.DeleteTopicResponse()

    @rpc
    async def CreateGroup(
        self, request: admin_pb2.CreateGroupRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateGroupResponse:
        attempts = (
            request.max_delivery_attempts if request.HasField("max_delivery_attempts") else None
        )
        backoff = [
            convert.seconds(f"retry_backoff[{i}]", d) for i, d in enumerate(request.retry_backoff)
        ]
        info = await self._broker.create_group(
            request.name, max_delivery_attempts=attempts, retry_backoff_s=backoff or None
        )
        return admin_pb2.CreateGroupResponse(group=convert.group(info))

    @rpc
    async def GetGroup(
        self, request: admin_pb2.GetGroupRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetGroupResponse:
        return admin_pb2.GetGroupResponse(group=convert.group(self._broker.get_group(request.name)))

    @rpc
    async def ListGroups(
        self, request: admin_pb2.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListGroupsResponse:
        return admin_pb2.ListGroupsResponse(
            groups=[convert.group(g) for g in self._broker.list_groups()]
        )

    @rpc
    async def GetGroupLag(
        self, request: admin_pb2.GetGroupLagRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetGroupLagResponse:
        rows = self._broker.group_lag(request.group, request.topic)
        return admin_pb2.GetGroupLagResponse(queues=[convert.queue_lag(r) for r in rows])
