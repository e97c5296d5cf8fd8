"""Batched acks of one topic's successes, carried on the topic's receives where possible.

Runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._push.flow_control import FlowControl, Held, HeldMessages
from popmq.sdk._push.options import DEFAULT_RECEIVE_BATCH
from popmq.sdk._push.shared import LOGGER_NAME, Counters
from popmq.sdk.errors import PopMQError
from popmq.sdk.types import ReceivedMessage

logger = logging.getLogger(LOGGER_NAME)

ACK_DELAY_S = 0.005
"""A success waits at most this long for a receive to carry its ack, or others to share its
Ack call."""
MAX_ACK_BATCH = 1024
"""Handles that make a pending batch due at once (the default cache holds 1024 messages)."""

AckHandles = Callable[[list[str]], Awaitable[messaging_pb2.AckResponse]]
"""Acks receipt handles in one call and answers each (the topic's simple consumer)."""


class Acker:
    """Acks the successes of one topic in batches, on the topic's receives where it can.

    The receive loop takes the pending batch whenever it receives, so with a backlog most
    acks ride on a receive (one round trip for both). A batch no receive took within
    ``ACK_DELAY_S`` of its first success, or that reached ``MAX_ACK_BATCH``, is due: it
    goes in an Ack call of its own (python-pubsub batches its acks on a timer too). While
    the loop waits for cache room (``riders_wanted``), a due batch, or one of
    ``DEFAULT_RECEIVE_BATCH``, is handed to the loop instead: its receive frees the room.
    """

    def __init__(
        self,
        topic: str,
        *,
        ack_handles: AckHandles,
        flow: FlowControl,
        held: HeldMessages,
        counters: Counters,
        client_id: str,
    ) -> None:
        self.topic = topic
        self._ack_handles = ack_handles
        self._flow = flow
        self._held = held
        self._counters = counters
        self._client_id = client_id
        self._batch: list[Held] = []
        self._timer: asyncio.TimerHandle | None = None
        # Ack calls in flight, so close can wait for them before closing the channel.
        self._sending: set[asyncio.Task[None]] = set()
        self.riders_wanted = False
        """Set by the receive loop while it waits for cache room."""
        self.ready = False
        """The batch is due and kept for the receive loop (see riders_wanted)."""
        self.ride_failures = 0
        """Acks that rode on a receive and failed (counted by ``ride_failed``)."""

    def add(self, held: Held) -> None:
        """Ack ``held`` soon, in a batch."""
        self._batch.append(held)
        if len(self._batch) >= (DEFAULT_RECEIVE_BATCH if self.riders_wanted else MAX_ACK_BATCH):
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(ACK_DELAY_S, self.flush)

    def flush(self) -> None:
        """The batch is due: hand it to a receive loop waiting for room, or send it now."""
        if self.riders_wanted and self._batch:
            self._cancel_timer()
            self.ready = True
            self._flow.wake()
            return
        self.send(self.take())

    def take(self) -> list[Held]:
        """The pending batch, for a receive to carry (its caller must ack what it takes)."""
        self._cancel_timer()
        self.ready = False
        batch, self._batch = self._batch, []
        return batch

    def send(self, batch: list[Held]) -> None:
        """Ack ``batch`` in an Ack call of its own."""
        if not batch:
            return
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def ride_failed(self, message: ReceivedMessage, error: PopMQError) -> None:
        """An ack that rode on a receive failed: the message will be delivered again."""
        self.ride_failures += 1
        logger.warning(
            "push consumer %s: ack of message %s failed (%s %s); it will be redelivered",
            self._client_id, message.message_id, error.code, error,
        )  # fmt: skip

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def drain(self) -> None:
        """Send what is pending and wait for the Ack calls in flight (at close)."""
        self.riders_wanted = False
        self.flush()
        if self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)

    async def _send(self, batch: list[Held]) -> None:
        try:
            response = await self._ack_handles([h.message.receipt_handle for h in batch])
            for held, result in zip(batch, response.results, strict=True):
                if result.code == "OK":
                    self._counters.acked += 1
                else:
                    logger.warning(
                        "push consumer %s: ack of message %s failed (%s %s); it will be "
                        "redelivered",
                        self._client_id, held.message.message_id, result.code, result.message,
                    )  # fmt: skip
        except PopMQError as exc:
            logger.warning(
                "push consumer %s: acking %d messages of %s failed (%s); they will be "
                "redelivered",
                self._client_id, len(batch), self.topic, exc,
            )  # fmt: skip
        finally:
            for held in batch:
                self._held.forget(held)
