"""v2 offset-based reads for pull consumers: PullMessage, GetOffset, UpdateOffset, QueryOffset.

A pull reads a queue from an offset and changes no state; the consumer keeps its own
position, or commits it with UpdateOffset. When nothing is there yet, a pull waits for an
arrival on its queue up to the long-polling timeout. Runs on the server's event loop; the
broker's reads (a topic's queue offsets, a group's offsets, offsets at a time) are awaited.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from popmq import broker_core  # its exported checks and limits
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import PULL_MAX_MESSAGES, BrokerAPI, QueueStats
from popmq.proxy.rocketmq import codes, convert, metadata
from popmq.proxy.rocketmq.codes import Code, ProtocolError
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.resources import Resources, parsed_filter


def _offset_in(topic: str, stats: list[QueueStats], queue_id: int, offset: int) -> None:
    """broker_core's offset rule (0..the queue's max offset); its field "offset" maps to
    ILLEGAL_OFFSET (codes.FIELD_CODES)."""
    broker_core.check_offset(topic, queue_id, offset, stats[queue_id].max_offset)


class Pulls:
    """Reads queues by offset and keeps groups' committed offsets.

    Args:
        broker: Reads, offsets and the long-polling registry pulls park in.
        config: The v2 front end's settings (the longest long poll).
        resources: Topics, queues and filter checks.
        address: This server's HOST:PORT, the messages' store host.
    """

    def __init__(
        self,
        broker: BrokerAPI,
        config: RocketMQConfig,
        resources: Resources,
        address: Callable[[], str],
    ) -> None:
        self._broker = broker
        self._config = config
        self._resources = resources
        self._address = address

    async def pull(
        self, request: sv.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> list[sv.PullMessageResponse]:
        """The stream's frames: a status, the messages from `offset` on that pass the
        filter, next_offset."""
        convert.group_name(request.group)  # checked: a pull reads no state of its group
        topic = convert.topic_name(request.message_queue.topic)
        filter_type, expression, _ = parsed_filter(request.filter_expression)
        # Capped as a receive's batch is (receiving.py); below 1 is refused by core's rule.
        batch = min(request.batch_size, PULL_MAX_MESSAGES)
        broker_core.check_batch_size(batch, PULL_MAX_MESSAGES, name="batch_size")
        info, stats = await self._resources.topic(topic)
        queue_id = self._resources.queue_id(info, request.message_queue)
        _offset_in(topic, stats, queue_id, request.offset)
        wait = 0.0
        if request.HasField("long_polling_timeout"):
            wait = convert.seconds(
                "long_polling_timeout", request.long_polling_timeout, Code.ILLEGAL_POLLING_TIME
            )
            wait = min(max(wait, 0.0), self._config.max_long_polling_s)
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - metadata.DEADLINE_MARGIN_S))
        # The broker's own long poll (an arrival watch of this queue): a send to another queue
        # neither wakes it nor is spent on it.
        wait = min(wait, self._broker.server_info().long_polling.max_timeout_s)
        result = await self._broker.pull_wait(
            topic,
            queue_id,
            request.offset,
            batch,
            wait_s=wait,
            filter_expression=expression,
            filter_type=filter_type,
        )
        records = result.messages
        host = self._address()
        frames = [
            sv.PullMessageResponse(
                status=codes.ok()
                if records
                else pb.Status(code=Code.MESSAGE_NOT_FOUND, message="no new message")
            )
        ]
        frames.extend(
            sv.PullMessageResponse(
                message=convert.v2_message(
                    record, topic=topic, queue_id=queue_id, offset=offset, store_host=host
                )
            )
            for offset, record in records
        )
        frames.append(sv.PullMessageResponse(next_offset=result.next_offset))
        return frames

    async def get_offset(self, request: sv.GetOffsetRequest) -> sv.GetOffsetResponse:
        """The group's committed offset in the queue; OFFSET_NOT_FOUND when it has none."""
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.message_queue.topic)
        info = self._resources.topic_info(topic)
        queue_id = self._resources.queue_id(info, request.message_queue)
        position = (await self._broker.get_offsets(group, topic))[queue_id]
        if not position.committed:
            raise ProtocolError(
                Code.OFFSET_NOT_FOUND,
                f"group {group!r} has no offset in queue {queue_id} of {topic!r} yet (it would "
                f"start at {position.offset})",
            )
        return sv.GetOffsetResponse(status=codes.ok(), offset=position.offset)

    async def update_offset(self, request: sv.UpdateOffsetRequest) -> sv.UpdateOffsetResponse:
        """Commit the group's offset in the queue."""
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.message_queue.topic)
        info, stats = await self._resources.topic(topic)
        queue_id = self._resources.queue_id(info, request.message_queue)
        _offset_in(topic, stats, queue_id, request.offset)
        await self._broker.commit_offsets(group, topic, [(queue_id, request.offset)])
        return sv.UpdateOffsetResponse(status=codes.ok())

    async def query_offset(self, request: sv.QueryOffsetRequest) -> sv.QueryOffsetResponse:
        """The queue's first or next offset, or the first at a timestamp."""
        topic = convert.topic_name(request.message_queue.topic)
        info, stats = await self._resources.topic(topic)
        queue_id = self._resources.queue_id(info, request.message_queue)
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            offset = stats[queue_id].min_offset
        elif policy == pb.END:
            offset = stats[queue_id].max_offset
        elif policy == pb.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise ProtocolError(Code.BAD_REQUEST, "policy TIMESTAMP needs a timestamp")
            at = convert.timestamp_ms(request.timestamp)
            offset = dict(await self._broker.offsets_at(topic, at))[queue_id]
        else:
            raise ProtocolError(
                Code.BAD_REQUEST,
                f"query_offset_policy {policy} is unknown: use BEGINNING, END or TIMESTAMP",
            )
        return sv.QueryOffsetResponse(status=codes.ok(), offset=offset)
