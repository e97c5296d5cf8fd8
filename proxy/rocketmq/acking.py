"""v2 AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue.

Clients name a message by the receipt handle they were given; the proxy may have renewed it
since (inflight.py), so each call first maps it to the broker's current one, and tells
inflight what became of it. Runs on the server's event loop; the broker writes.
"""

from __future__ import annotations

from popmq import broker_core  # its exported checks and limits
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import BrokerAPI, PopMQError
from popmq.proxy.rocketmq import codes, convert
from popmq.proxy.rocketmq.codes import Code, ProtocolError, UnsupportedError
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.inflight import Inflight


class Acks:
    """Settles received messages: acked, made invisible for longer, or dead-lettered.

    Args:
        broker: Acks, changes invisible times, dead-letters.
        config: The v2 front end's limits (entries a request).
        inflight: The client's handles and the broker's current ones.
    """

    def __init__(self, broker: BrokerAPI, config: RocketMQConfig, inflight: Inflight) -> None:
        self._broker = broker
        self._config = config
        self._inflight = inflight

    async def ack(self, request: sv.AckMessageRequest) -> sv.AckMessageResponse:
        """Ack each entry; a status each, and the entries' common one (or MULTIPLE_RESULTS)."""
        group = convert.group_name(request.group)
        convert.topic_name(request.topic)
        if not request.entries:
            raise ProtocolError(Code.BAD_REQUEST, "entries is empty: ack 1 or more messages")
        limit = self._config.max_request_entries
        if len(request.entries) > limit:
            raise ProtocolError(
                Code.BAD_REQUEST,
                f"entries has {len(request.entries)} entries: at most {limit} are allowed",
            )
        handles = []
        for index, entry in enumerate(request.entries):
            if not entry.receipt_handle:
                raise ProtocolError(
                    Code.INVALID_RECEIPT_HANDLE, f"entries[{index}].receipt_handle is empty"
                )
            handles.append(await self._inflight.current_handle(group, entry.receipt_handle))
        outcomes = await self._broker.ack(group, handles)
        results = []
        for entry, error in zip(request.entries, outcomes, strict=True):
            status = codes.ok() if error is None else codes.status_of(error)
            if status.code in (Code.OK, Code.INVALID_RECEIPT_HANDLE):
                self._inflight.acked(group, entry.receipt_handle)
            results.append(
                sv.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status
                )
            )
        return sv.AckMessageResponse(
            status=codes.overall([r.status for r in results]), entries=results
        )

    async def change_invisible(
        self, request: sv.ChangeInvisibleDurationRequest
    ) -> sv.ChangeInvisibleDurationResponse:
        """Make a received message invisible for `invisible_duration` from now (a new handle)."""
        group = convert.group_name(request.group)
        convert.topic_name(request.topic)
        if request.HasField("suspend") and request.suspend:
            raise UnsupportedError(
                "suspend (redeliver without counting a delivery attempt) is not supported by "
                "popmq: every redelivery counts"
            )
        if not request.receipt_handle:
            raise ProtocolError(Code.INVALID_RECEIPT_HANDLE, "receipt_handle is empty")
        if not request.HasField("invisible_duration"):
            raise ProtocolError(Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required")
        invisible = convert.seconds(
            "invisible_duration", request.invisible_duration, Code.ILLEGAL_INVISIBLE_TIME
        )
        # 0 s is allowed, as RocketMQ's proxy allows it: a client gives a failed message back
        # with its retry delay, which can be 0 (the Node.js client's always is).
        broker_core.check_invisible(invisible, 0, self._broker.server_info().pop.max_invisible_s)
        current = await self._inflight.current_handle(group, request.receipt_handle)
        try:
            handle, deadline = await self._broker.change_invisible_time(group, current, invisible)
        except PopMQError as exc:
            if codes.code_of(exc) == Code.INVALID_RECEIPT_HANDLE:
                self._inflight.acked(group, request.receipt_handle)
            raise
        self._inflight.changed(group, request.receipt_handle, handle, deadline)
        return sv.ChangeInvisibleDurationResponse(status=codes.ok(), receipt_handle=handle)

    async def dead_letter(
        self, request: sv.ForwardMessageToDeadLetterQueueRequest
    ) -> sv.ForwardMessageToDeadLetterQueueResponse:
        """Move a received message to its group's dead-letter queue now."""
        group = convert.group_name(request.group)
        convert.topic_name(request.topic)
        if not request.receipt_handle:
            raise ProtocolError(Code.INVALID_RECEIPT_HANDLE, "receipt_handle is empty")
        current = await self._inflight.current_handle(group, request.receipt_handle)
        await self._broker.dead_letter(group, current)
        self._inflight.acked(group, request.receipt_handle)
        return sv.ForwardMessageToDeadLetterQueueResponse(status=codes.ok())
