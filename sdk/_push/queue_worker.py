"""Queue-exclusive mode: one task per assigned queue reads it by offset, in order.

Network work runs on the event loop; a sync listener runs each pulled batch on one
consume thread (one hand-off per batch), reading only a flag and the clock from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from google.protobuf import timestamp_pb2

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._channel import Connection
from popmq.sdk._push.flow_control import FlowControl
from popmq.sdk._push.listener import ListenerRunner
from popmq.sdk._push.options import PushConsumerOptions
from popmq.sdk._push.shared import LOGGER_NAME, RETRY_MAX_S, RETRY_MIN_S, Counters
from popmq.sdk.errors import NotFoundError, PopMQError
from popmq.sdk.types import ReceivedMessage, duration_from_seconds

logger = logging.getLogger(LOGGER_NAME)

COMMIT_INTERVAL_S = 1.0
"""While busy, a queue worker commits its offset at most this often; it commits at once when
it catches up and before it lets go of the queue (RocketMQ persists offsets every 5 s). A
crash repeats at most this much."""
_IDLE_POLL_MIN_S = 0.01
_IDLE_POLL_MAX_S = 0.5
_COMMIT_ATTEMPTS = 5


class _StartNotCommittedError(PopMQError):
    """The start offset of a new group could not be committed; the worker tries again."""

    retriable = True


@dataclass(frozen=True, eq=False)
class WorkerContext:
    """What every queue worker of one consumer shares."""

    conn: Connection
    """The consumer's connection (reads and commits are repeated on its next endpoint after
    an UNAVAILABLE: they change nothing, or set the same offset again)."""
    group: str
    client_id: str
    options: PushConsumerOptions
    flow: FlowControl
    counters: Counters
    runner: ListenerRunner


class QueueWorker:
    """Consumes one assigned queue in offset order and commits the group's offset."""

    def __init__(
        self,
        context: WorkerContext,
        topic: str,
        queue_id: int,
        fence: float,
        matches: Callable[[str], bool],
        on_done: Callable[[QueueWorker], None],
    ) -> None:
        self._ctx = context
        # Called when the task ends, whatever the reason: the queue is free again.
        self._on_done = on_done
        self.topic = topic
        self.queue_id = queue_id
        self.fence = fence
        """Monotonic time the claim on the queue ends (with a margin): start nothing past it."""
        self.stopping = False
        self.task: asyncio.Task[None] | None = None
        # Set by stop(), so an idle or retrying worker wakes at once.
        self._stop = asyncio.Event()
        self.matches = matches
        """The topic's tag filter (queue-exclusive filters run here, not on the server)."""

    def stop(self) -> None:
        """Finish the current message, commit, then end (and report the queue released)."""
        self.stopping = True
        self._stop.set()

    def may_continue(self) -> bool:
        """False once told to stop or once the claim ran out (which stops the worker)."""
        if self.stopping:
            return False
        if time.monotonic() >= self.fence:
            logger.warning(
                "push consumer %s: claim on %s queue %d ran out without renewal; stopping",
                self._ctx.client_id, self.topic, self.queue_id,
            )  # fmt: skip
            self.stop()
            return False
        return True

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def run(self) -> None:
        """Consume until stopped or the claim ends; always reports back through on_done."""
        try:
            await self._run()
        finally:
            self._on_done(self)

    async def _run(self) -> None:
        ctx = self._ctx
        offset = await self._start_offset()
        if offset is None:
            return
        committed = offset
        commit_due = time.monotonic() + COMMIT_INTERVAL_S
        idle = _IDLE_POLL_MIN_S
        backoff = RETRY_MIN_S
        try:
            while self.may_continue():
                room = await ctx.flow.wait_for_room()
                if not self.may_continue():
                    break
                ctx.counters.receive_calls += 1
                try:
                    response = await self._pull(offset, min(room, ctx.options.pull_batch_size))
                except PopMQError as exc:
                    logger.warning(
                        "push consumer %s: pulling %s queue %d failed: %s",
                        ctx.client_id, self.topic, self.queue_id, exc,
                    )  # fmt: skip
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, RETRY_MAX_S)
                    continue
                backoff = RETRY_MIN_S
                if not response.messages:
                    offset = max(offset, response.next_offset)
                    if offset != committed and await self._commit(offset):
                        committed = offset  # caught up: lag tools see it at once
                    if not await self._await_arrival(offset):
                        await self._sleep(idle)  # the wait failed: poll, backing off
                        idle = min(idle * 2, _IDLE_POLL_MAX_S)
                    continue
                idle = _IDLE_POLL_MIN_S
                size = sum(len(m.body) for m in response.messages)
                ctx.flow.add(size, len(response.messages))
                try:
                    offset = await self._consume_batch(response, offset)
                finally:
                    ctx.flow.remove(size, len(response.messages))
                if offset != committed and time.monotonic() >= commit_due:
                    commit_due = time.monotonic() + COMMIT_INTERVAL_S
                    if await self._commit(offset):
                        committed = offset
        finally:
            if offset != committed:
                await self._commit(offset)

    async def _consume_batch(
        self, response: messaging_pb2.PullMessagesResponse, offset: int
    ) -> int:
        """Process a pulled batch in order; returns the offset after the last one done."""
        wires = list(response.messages)
        self._ctx.counters.received += len(wires)
        attempt = 1
        while wires:
            done, failed = await self._run_in_order(wires, attempt)
            if done:
                offset = wires[done - 1].offset + 1
                wires = wires[done:]
                attempt = 1
            if not failed:
                if wires:
                    return offset  # told to stop: the next owner starts at wires[0]
                break
            attempt += 1
            # Retried in place: the queue waits.
            await self._sleep(self._ctx.options.orderly_retry_delay_s)
            if not self.may_continue():
                return offset  # not done: the next owner starts at this message
        return max(offset, response.next_offset)

    async def _run_in_order(
        self, wires: Sequence[messaging_pb2.PulledMessage], attempt: int
    ) -> tuple[int, bool]:
        """Call the listener for ``wires`` in order until one fails or the worker must stop.

        ``attempt`` is the delivery attempt of the first message. Returns how many were
        done (succeeded or filtered out) and whether the next one failed. A sync listener
        runs the whole run on one consume thread: one hand-off per batch, not per message.
        """
        runner = self._ctx.runner
        async with runner.slots:
            if runner.is_async:
                done = 0
                for wire in wires:
                    if not self.may_continue():
                        return done, False
                    if self.matches(wire.tag):
                        message = _received_message(wire, attempt if done == 0 else 1)
                        if not await runner.call(message):
                            return done, True
                    done += 1
                return done, False
            done, failed, succeeded = await runner.in_thread(self._invoke_in_order, wires, attempt)
        self._ctx.counters.succeeded += succeeded
        self._ctx.counters.failed += int(failed)
        return done, failed

    def _invoke_in_order(
        self, wires: Sequence[messaging_pb2.PulledMessage], attempt: int
    ) -> tuple[int, bool, int]:
        """On a consume thread: (done, failed, succeeded) for a run of one queue's messages."""
        succeeded = 0
        for done, wire in enumerate(wires):
            # Read from this thread: a plain flag and the monotonic clock, no loop state.
            if self.stopping or time.monotonic() >= self.fence:
                return done, False, succeeded
            if not self.matches(wire.tag):
                continue
            if not self._ctx.runner.invoke(_received_message(wire, attempt if done == 0 else 1)):
                return done, True, succeeded
            succeeded += 1
        return len(wires), False, succeeded

    async def _await_arrival(self, offset: int) -> bool:
        """Long-poll until the queue has a message at ``offset``, the wait ends, or stop.

        Returns False when the wait failed (the caller then polls with a backoff).
        """
        ctx = self._ctx
        wait = min(ctx.options.wait_s, max(0.0, self.fence - time.monotonic()))
        request = messaging_pb2.AwaitMessagesRequest(
            topic=self.topic,
            positions=[messaging_pb2.QueueOffset(queue_id=self.queue_id, offset=offset)],
            long_polling_timeout=duration_from_seconds(wait, name="wait_s"),
        )
        call = asyncio.ensure_future(
            ctx.conn.call("AwaitMessages", request, wait + ctx.options.timeout_s, retry=True)
        )
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait([call, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            call.cancel()  # when told to stop: do not hold the call any longer
            results: list[object] = await asyncio.gather(call, stopped, return_exceptions=True)
        outcome = results[0]
        if not isinstance(outcome, BaseException) or isinstance(outcome, asyncio.CancelledError):
            return True
        if not isinstance(outcome, PopMQError):
            raise outcome
        error = outcome
        logger.warning(
            "push consumer %s: waiting for messages on %s queue %d failed: %s",
            ctx.client_id, self.topic, self.queue_id, error,
        )  # fmt: skip
        return False

    async def _pull(self, offset: int, max_messages: int) -> messaging_pb2.PullMessagesResponse:
        request = messaging_pb2.PullMessagesRequest(
            topic=self.topic, queue_id=self.queue_id, offset=offset, max_messages=max_messages
        )
        response: messaging_pb2.PullMessagesResponse = await self._ctx.conn.call(
            "PullMessages", request, self._ctx.options.timeout_s, retry=True
        )
        return response

    async def _start_offset(self) -> int | None:
        """The group's committed offset, or where consume_from says (committed at once)."""
        backoff = RETRY_MIN_S
        while self.may_continue():
            try:
                return await self._resolve_start()
            except PopMQError as exc:
                logger.warning(
                    "push consumer %s: reading the offset of %s queue %d failed: %s",
                    self._ctx.client_id, self.topic, self.queue_id, exc,
                )  # fmt: skip
                await self._sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)
        return None

    async def _resolve_start(self) -> int:
        ctx = self._ctx
        timeout_s = ctx.options.timeout_s
        try:
            response: messaging_pb2.GetOffsetResponse = await ctx.conn.call(
                "GetOffset",
                messaging_pb2.GetOffsetRequest(group=ctx.group, topic=self.topic),
                timeout_s,
                retry=True,
            )
            current = next((o for o in response.offsets if o.queue_id == self.queue_id), None)
        except NotFoundError:
            current = None  # the group does not exist yet
        if current is not None and current.committed:
            return int(current.offset)
        start_from = ctx.options.consume_from
        if isinstance(start_from, datetime):
            stamp = timestamp_pb2.Timestamp()
            stamp.FromDatetime(start_from)
            at: messaging_pb2.GetOffsetsAtTimeResponse = await ctx.conn.call(
                "GetOffsetsAtTime",
                messaging_pb2.GetOffsetsAtTimeRequest(topic=self.topic, time=stamp),
                timeout_s,
                retry=True,
            )
            start = next(o.offset for o in at.offsets if o.queue_id == self.queue_id)
        else:
            probe = await self._pull(0, 1)
            start = probe.min_offset if start_from == "first" else probe.max_offset
        # Commit the start now: a later owner must continue here, not at a newer "last".
        if not await self._commit(start):
            raise _StartNotCommittedError(f"offset {start} of queue {self.queue_id}")
        return int(start)

    async def _commit(self, offset: int) -> bool:
        """Commit the group's offset; a retriable failure is retried a few times.

        Returns False when it could not: the offset is committed with a later batch, or
        (when stopping) the next owner repeats the uncommitted messages: at least once.
        """
        ctx = self._ctx
        request = messaging_pb2.CommitOffsetRequest(
            group=ctx.group,
            topic=self.topic,
            offsets=[messaging_pb2.QueueOffset(queue_id=self.queue_id, offset=offset)],
        )
        backoff = RETRY_MIN_S
        for attempt in itertools.count(1):
            try:
                await ctx.conn.call("CommitOffset", request, ctx.options.timeout_s, retry=True)
            except PopMQError as exc:
                if not exc.retriable or attempt >= _COMMIT_ATTEMPTS:
                    logger.warning(
                        "push consumer %s: committing offset %d of %s queue %d failed: %s",
                        ctx.client_id, offset, self.topic, self.queue_id, exc,
                    )  # fmt: skip
                    return False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)
            else:
                return True
        return False


def _received_message(wire: messaging_pb2.PulledMessage, attempt: int) -> ReceivedMessage:
    """A pulled message as the listener sees it: no receipt handle; attempts are local."""
    return ReceivedMessage.from_proto(
        messaging_pb2.ReceivedMessage(
            message_id=wire.message_id,
            topic=wire.topic,
            queue_id=wire.queue_id,
            offset=wire.offset,
            body=wire.body,
            tag=wire.tag,
            keys=list(wire.keys),
            properties=dict(wire.properties),
            born_time=wire.born_time,
            store_time=wire.store_time,
            delivery_attempt=attempt,
            message_group=wire.message_group,
            body_encoding=wire.body_encoding,
            born_host=wire.born_host,
        )
    )
