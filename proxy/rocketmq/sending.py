"""v2 SendMessage and RecallMessage: a producer's batch converted, checked and stored.

A batch is stored all or none (BrokerAPI.send), so a failure is every entry's. Conversion and
the checks before it run on the server's event loop; the store's write is the broker's.
"""

from __future__ import annotations

import time

from popmq import broker_core  # its exported checks and limits
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import BrokerAPI, NotFoundError
from popmq.proxy.rocketmq import codes, convert
from popmq.proxy.rocketmq.codes import Code, ProtocolError
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.resources import Resources


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Sending:
    """Stores producers' messages and recalls delayed ones.

    Args:
        broker: Stores and recalls.
        config: The v2 front end's limits (entries a request, gzip bodies).
        resources: Topic lookups (TOPIC_NOT_FOUND, the topic's message type).
    """

    def __init__(self, broker: BrokerAPI, config: RocketMQConfig, resources: Resources) -> None:
        self._broker = broker
        self._config = config
        self._resources = resources

    async def send(self, request: sv.SendMessageRequest) -> list[sv.SendResultEntry]:
        """Store the request's messages, all or none; an entry for each."""
        if not request.messages:
            raise ProtocolError(Code.BAD_REQUEST, "messages is empty: send 1 or more messages")
        broker_core.check_count("messages", len(request.messages), self._config.max_request_entries)
        now = _now_ms()
        max_delay = self._broker.server_info().max_delay_s
        budget = convert.InflateBudget(self._config.max_gzip_body_bytes)
        batch = []
        for index, msg in enumerate(request.messages):
            name = convert.topic_name(msg.topic, allow_dlq=False)
            message, kind = convert.new_message(msg, index, now, self._config, max_delay, budget)
            try:
                info = self._resources.topic_info(name)
            except ProtocolError:
                if not self._broker.server_info().auto_create_topics:
                    raise
            else:
                convert.check_type_accepted(info, kind)
            batch.append(message)
        results = await self._broker.send(batch)
        return [
            sv.SendResultEntry(
                status=codes.ok(),
                message_id=r.message_id,
                offset=r.offset,
                recall_handle=r.recall_handle,
            )
            for r in results
        ]

    def failed(self, request: sv.SendMessageRequest, status: pb.Status) -> sv.SendMessageResponse:
        """The answer to a send that stored nothing: every entry shares the failure.

        A request over the entry limit gets the status alone: the answer never grows past
        the limit.
        """
        if len(request.messages) > self._config.max_request_entries:
            return sv.SendMessageResponse(status=status)
        return sv.SendMessageResponse(
            status=status,
            entries=[
                sv.SendResultEntry(status=status, message_id=m.system_properties.message_id)
                for m in request.messages
            ],
        )

    async def recall(self, request: sv.RecallMessageRequest) -> sv.RecallMessageResponse:
        """Cancel a delayed message before it is delivered."""
        topic = convert.topic_name(request.topic, allow_dlq=False)
        if not request.recall_handle:
            raise ProtocolError(Code.BAD_REQUEST, "recall_handle is empty")
        self._resources.topic_info(topic)  # TOPIC_NOT_FOUND before the handle is looked at
        try:
            message_id = await self._broker.recall(topic, request.recall_handle)
        except NotFoundError as exc:
            # The topic exists: what is missing is the delayed message.
            raise ProtocolError(Code.NOT_FOUND, str(exc)) from exc
        return sv.RecallMessageResponse(status=codes.ok(), message_id=message_id)
