"""POP mode: one long-polling receive loop per subscribed topic.

A receive asks only for the room flow control leaves, carries the topic's pending acks,
and hands what it got to invisible-time renewal and the dispatcher. Runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time

from popmq.sdk._push.acker import Acker
from popmq.sdk._push.dispatcher import Dispatcher
from popmq.sdk._push.flow_control import FlowControl, Held, HeldMessages
from popmq.sdk._push.invisible_renewal import InvisibleRenewal
from popmq.sdk._push.shared import LOGGER_NAME, RETRY_MAX_S, RETRY_MIN_S, Counters
from popmq.sdk.consumer import AsyncSimpleConsumer
from popmq.sdk.errors import PopMQError

logger = logging.getLogger(LOGGER_NAME)


class PopReceiver:
    """Receives one topic's messages while there is room, for as long as it runs."""

    def __init__(
        self,
        topic: str,
        *,
        consumer: AsyncSimpleConsumer,
        acker: Acker,
        flow: FlowControl,
        held: HeldMessages,
        renewal: InvisibleRenewal,
        dispatcher: Dispatcher,
        counters: Counters,
        batch_size: int,
        invisible_s: float,
        wait_s: float,
        client_id: str,
    ) -> None:
        self.topic = topic
        self._consumer = consumer
        self._acker = acker
        self._flow = flow
        self._held = held
        self._renewal = renewal
        self._dispatcher = dispatcher
        self._counters = counters
        self._batch_size = batch_size
        self._invisible_s = invisible_s
        self._wait_s = wait_s
        self._client_id = client_id

    async def run(self) -> None:
        """Receive until cancelled (close cancels it, even in a held long poll)."""
        acker = self._acker
        flow = self._flow
        backoff = RETRY_MIN_S
        while True:
            riders = self._take_riders()
            if flow.room() == 0:
                # Full: wait for room, or for a batch of acks to carry (which frees room).
                acker.riders_wanted = True
                try:
                    await flow.wait_until(lambda: flow.room() > 0 or acker.ready)
                finally:
                    acker.riders_wanted = False
                riders += self._take_riders()
            room = flow.room()
            if room == 0:  # still over max_cached_bytes: ack them on their own
                acker.send(riders)
                continue
            self._counters.receive_calls += 1
            failures = acker.ride_failures
            try:
                messages = await self._consumer.receive(
                    max_messages=min(room, self._batch_size),
                    invisible_duration_s=self._invisible_s,
                    wait_s=self._wait_s,
                    ack=[held.message for held in riders],
                )
            except PopMQError as exc:
                acker.send(riders)  # they may have been acked; acking again is harmless
                logger.warning(
                    "push consumer %s: receive from %s failed (%s); retrying in %.1fs",
                    self._client_id, self.topic, exc, backoff,
                )  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)
                continue
            except BaseException:
                acker.send(riders)  # cancelled (close): the acks still go out
                raise
            rode = len(riders) - (acker.ride_failures - failures)
            self._counters.acked += rode
            self._counters.acked_on_receive += rode
            backoff = RETRY_MIN_S
            now = time.monotonic()
            for message in messages:
                held = Held(message, self._consumer, len(message.body), now)
                self._counters.received += 1
                self._held.add(held)
                self._renewal.schedule(held, now)
                self._dispatcher.enqueue(held)

    def _take_riders(self) -> list[Held]:
        """The acks to carry on the next receive; their cache room is free from now."""
        riders = self._acker.take()
        for held in riders:
            self._held.forget(held)
        return riders
