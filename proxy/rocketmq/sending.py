"""v2 SendMessage and RecallMessage: a producer's batch converted, checked and stored.

A batch is stored all or none (BrokerAPI.send), so a failure is every entry's. Conversion and
the checks before it run on the server's event loop; the store's write is the broker's.

TRANSACTION messages are half messages (TransactionAPI.send_half): stored, invisible until
their producer's EndTransaction (transactions.py) or a check-back answer commits them. As
RocketMQ's proxy does, the topic name is their producer group, and the message's
orphaned_transaction_recovery_duration is when its first check comes (at most
transactions.max_check_first_s: a longer one is refused, where RocketMQ caps it; no
official client sets it).
"""

from __future__ import annotations

import time

from popmq import broker_core  # its exported checks and limits
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import BrokerAPI, NotFoundError, TransactionAPI
from popmq.proxy.rocketmq import codes, convert
from popmq.proxy.rocketmq.codes import Code, ProtocolError, UnsupportedError
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
        transactions: Stores half messages; None when the broker has no transactions (a
            TRANSACTION message is then refused UNSUPPORTED).
    """

    def __init__(
        self,
        broker: BrokerAPI,
        config: RocketMQConfig,
        resources: Resources,
        transactions: TransactionAPI | None = None,
    ) -> None:
        self._broker = broker
        self._config = config
        self._resources = resources
        self._transactions = transactions

    async def send(self, request: sv.SendMessageRequest) -> list[sv.SendResultEntry]:
        """Store the request's messages, all or none; an entry for each."""
        if not request.messages:
            raise ProtocolError(Code.BAD_REQUEST, "messages is empty: send 1 or more messages")
        broker_core.check_count("messages", len(request.messages), self._config.max_request_entries)
        now = _now_ms()
        max_delay = self._broker.server_info().max_delay_s
        budget = convert.InflateBudget(self._config.max_gzip_body_bytes)
        batch = []
        kinds = []
        for index, msg in enumerate(request.messages):
            name = convert.topic_name(msg.topic, allow_dlq=False)
            message, kind = convert.new_message(msg, index, now, self._config, max_delay, budget)
            try:
                info = self._resources.topic_info(name)
            except ProtocolError:
                if not self._broker.server_info().auto_create_topics:
                    raise
            else:
                convert.check_type_accepted(info, kind, msg)
            batch.append(message)
            kinds.append(kind)
        if pb.TRANSACTION in kinds:
            results = await self._send_half(request, batch, kinds)
        else:
            results = await self._broker.send(batch)
        return [
            sv.SendResultEntry(
                status=codes.ok(),
                message_id=r.message_id,
                offset=r.offset,
                recall_handle=r.recall_handle,
                transaction_id=r.transaction_id,
            )
            for r in results
        ]

    async def _send_half(
        self,
        request: sv.SendMessageRequest,
        batch: list[broker_core.NewMessage],
        kinds: list[pb.MessageType],
    ) -> list[broker_core.SendResult]:
        """Store TRANSACTION messages as half messages, one transaction each."""
        if self._transactions is None:
            raise UnsupportedError(
                "TRANSACTION messages are not supported by this server's broker; send NORMAL, "
                "FIFO or DELAY messages"
            )
        if any(kind != pb.TRANSACTION for kind in kinds):
            raise ProtocolError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a SendMessage with TRANSACTION messages must carry only TRANSACTION messages: "
                "send the others in another request",
            )
        recoveries = {
            convert.seconds(
                f"messages[{i}].orphaned_transaction_recovery_duration",
                m.system_properties.orphaned_transaction_recovery_duration,
            )
            if m.system_properties.HasField("orphaned_transaction_recovery_duration")
            else None
            for i, m in enumerate(request.messages)
        }
        if len(recoveries) > 1:
            raise ProtocolError(
                Code.BAD_REQUEST,
                "the TRANSACTION messages of one SendMessage must have the same "
                "orphaned_transaction_recovery_duration: send the others in another request",
            )
        (first_s,) = recoveries
        # RocketMQ's proxy: "use topicName as producerGroup for transactional checker".
        groups = {m.topic for m in batch}
        return await self._transactions.send_half(
            batch,
            producer_group=batch[0].topic if len(groups) == 1 else "",
            check_first_s=first_s,
        )

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
