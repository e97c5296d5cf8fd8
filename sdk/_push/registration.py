"""The consumer's registration with the server: Heartbeat and NotifyClientTermination."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._channel import Connection
from popmq.sdk._push.options import STRATEGIES, PushConsumerOptions
from popmq.sdk._push.shared import LOGGER_NAME
from popmq.sdk.errors import PopMQError
from popmq.sdk.types import duration_from_seconds, seconds_from_duration

logger = logging.getLogger(LOGGER_NAME)


class Registration:
    """Registers one consumer (its mode, strategy and topics) and keeps it registered."""

    def __init__(
        self,
        *,
        conn: Connection,
        client_id: str,
        group: str,
        topics: Sequence[str],
        options: PushConsumerOptions,
    ) -> None:
        self._conn = conn
        self._client_id = client_id
        self._group = group
        self._topics = list(topics)
        self._exclusive = options.mode == "queue_exclusive"
        self._strategy = options.strategy
        self._machine_room = options.machine_room
        self._configured: Mapping[str, Sequence[int]] = options.configured_queues or {}
        self._timeout_s = options.timeout_s
        self.interval_s = options.heartbeat_interval_s
        """The heartbeat interval asked for; the caller stores what the server grants."""

    async def heartbeat(self) -> float:
        """One Heartbeat; returns the interval the server wants.

        Raises:
            NotFoundError: A topic does not exist.
            FailedPreconditionError: The group consumes a topic in another mode or with
                another strategy.
        """
        exclusive = self._exclusive
        request = messaging_pb2.HeartbeatRequest(
            client_id=self._client_id,
            group=self._group,
            topics=self._topics,
            mode=(
                messaging_pb2.CONSUME_MODE_QUEUE_EXCLUSIVE
                if exclusive
                else messaging_pb2.CONSUME_MODE_POP
            ),
            strategy=(
                STRATEGIES[self._strategy]
                if exclusive
                else messaging_pb2.ASSIGNMENT_STRATEGY_UNSPECIFIED
            ),
            heartbeat_interval=duration_from_seconds(self.interval_s, name="heartbeat_interval_s"),
            machine_room=self._machine_room,
        )
        for topic, queue_ids in self._configured.items():
            request.configured_queues[topic].queue_ids.extend(queue_ids)
        # Idempotent: repeated on the next endpoint after an UNAVAILABLE (a proxy that has
        # not seen this consumer yet registers it).
        response: messaging_pb2.HeartbeatResponse = await self._conn.call(
            "Heartbeat", request, self._timeout_s, retry=True
        )
        return seconds_from_duration(response.heartbeat_interval)

    async def run_pop_heartbeats(self) -> None:
        """POP mode: keep the registration (it takes no part in assignment)."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.heartbeat()
            except PopMQError as exc:
                logger.warning("push consumer %s: heartbeat failed: %s", self._client_id, exc)

    async def unregister(self) -> None:
        """NotifyClientTermination, best effort: the server forgets silent clients anyway."""
        with contextlib.suppress(PopMQError):
            await self._conn.call(
                "NotifyClientTermination",
                messaging_pb2.NotifyClientTerminationRequest(
                    client_id=self._client_id, group=self._group
                ),
                self._timeout_s,
                retry=True,
            )
