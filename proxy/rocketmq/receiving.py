"""v2 ReceiveMessage's pop: the request checked, its long-polling wait, the pop.

receive.py runs the call (admission, writes, the per-client and server-wide byte budgets)
and asks `Receiving.prepare` how to pop for it: a `Plan`, whose pop it runs with the bytes
it reserved. Simple consumers and push consumers of normal groups pop every queue of the
topic; a push consumer of a FIFO group pops only a queue it holds, and only while it holds
it (assignments.py). Messages popped for a call that ended are made visible again soon by
`Releases`. Runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from popmq import broker_core  # its exported checks and limits
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import BrokerAPI, PoppedMessage, TopicInfo
from popmq.proxy.rocketmq import convert, metadata
from popmq.proxy.rocketmq.assignments import ConsumerAssignments
from popmq.proxy.rocketmq.codes import Code, ProtocolError
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.inflight import Inflight
from popmq.proxy.rocketmq.resources import Resources, check_filter
from popmq.proxy.rocketmq.sessions import Sessions

_DEFAULT_REQUEST_TIMEOUT_S = 3.0
"""A client's request timeout when its settings name none (RocketMQ's default)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How to pop for one checked receive (receive.py runs it, perhaps several times)."""

    group: str
    auto_renew: bool
    wait_s: float
    """Its long-polling time: how long it may wait for messages (and for bytes)."""
    pop: Callable[[float, int | None], Awaitable[list[PoppedMessage]]]
    """Pops, waiting up to the seconds given for messages and taking at most the bytes
    given (Broker.pop's max_bytes: None is a whole answer, 0 a probe that takes nothing)."""


class Releases:
    """Makes messages popped for a call that ended visible again soon, in the background.

    Args:
        inflight: Releases the messages' handles.
    """

    def __init__(self, inflight: Inflight) -> None:
        self._inflight = inflight
        # Releases started by failed stream writes; held so they are not garbage-collected.
        self._background: set[asyncio.Task[int]] = set()

    def later(self, group: str, popped: list[PoppedMessage]) -> None:
        """Start releasing `popped` of `group` (nothing when it is empty)."""
        if not popped:
            return
        task = asyncio.get_running_loop().create_task(
            self._inflight.release_handles(group, [m.receipt_handle for m in popped])
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Wait for the releases started."""
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError):
                await task


class Receiving:
    """Checks a ReceiveMessage request and pops for it.

    Args:
        broker: Pops.
        config: The v2 front end's settings (long polling bounds, auto-renew duration).
        sessions: The connected clients (their type and reported request timeout).
        resources: Topics, queues, group policies and filter checks.
        assignments: The FIFO queue claims.
        release_later: Makes messages popped for a call that ended visible again soon.
    """

    def __init__(
        self,
        broker: BrokerAPI,
        config: RocketMQConfig,
        *,
        sessions: Sessions,
        resources: Resources,
        assignments: ConsumerAssignments,
        release_later: Callable[[str, list[PoppedMessage]], None],
    ) -> None:
        self._broker = broker
        self._config = config
        self._sessions = sessions
        self._resources = resources
        self._assignments = assignments
        self._release_later = release_later

    def polling_s(
        self, request: sv.ReceiveMessageRequest, remaining: float | None, client_id: str
    ) -> float:
        """RocketMQ's rule: the requested wait (or what the deadline leaves after half the
        client's request timeout), clamped to [min, max] long polling, and at most the
        deadline; a deadline shorter than the minimum is ILLEGAL_POLLING_TIME."""
        low, high = self._config.min_long_polling_s, self._config.max_long_polling_s
        if request.HasField("long_polling_timeout"):
            wait = convert.seconds(
                "long_polling_timeout", request.long_polling_timeout, Code.ILLEGAL_POLLING_TIME
            )
        elif remaining is not None:
            wait = remaining - self._request_timeout_s(client_id) / 2
        else:
            wait = high
        wait = min(max(wait, low), high)
        if remaining is not None and wait > remaining:
            if remaining < low:
                raise ProtocolError(
                    Code.ILLEGAL_POLLING_TIME,
                    f"the call's deadline leaves {remaining:.3f}s, less than the minimum long "
                    f"polling time {low:g}s; give the call more time",
                )
            wait = remaining
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - metadata.DEADLINE_MARGIN_S))
        return wait

    def _request_timeout_s(self, client_id: str) -> float:
        """The request timeout the client reported in its settings (RocketMQ default 3 s)."""
        session = self._sessions.get(client_id)
        if session is not None and session.settings is not None:
            if session.settings.HasField("request_timeout"):
                return convert.seconds("request_timeout", session.settings.request_timeout)
        return _DEFAULT_REQUEST_TIMEOUT_S

    def prepare(
        self,
        request: sv.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,
        client_id: str,
    ) -> Plan:
        """receive.Prepare: check the request and say how to pop for it (receive.py decides
        how many bytes each pop may take and how long it waits)."""
        if not client_id:
            raise metadata.client_id_required()
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.message_queue.topic)
        filter_type, expression = check_filter(request.filter_expression)
        # Checked here in v2's words (batch_size; auto_renew's invisible time), before the
        # receive is planned; BrokerAPI.pop checks them again by the core's rule.
        pop = self._broker.server_info().pop
        # RocketMQ's proxy caps a larger batch at its maximum rather than refusing it.
        batch = min(request.batch_size, pop.max_batch)
        broker_core.check_batch_size(batch, pop.max_batch, name="batch_size")
        if request.auto_renew:
            invisible = self._config.auto_renew_invisible_s
        elif request.HasField("invisible_duration"):
            invisible = convert.seconds(
                "invisible_duration", request.invisible_duration, Code.ILLEGAL_INVISIBLE_TIME
            )
        else:
            raise ProtocolError(
                Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required unless auto_renew"
            )
        broker_core.check_invisible(invisible, pop.min_invisible_s, pop.max_invisible_s)
        wait = self.polling_s(request, context.time_remaining(), client_id)
        info = self._resources.topic_info(topic)

        def pop_from(
            wait_s: float, max_bytes: int | None, queue_id: int | None = None
        ) -> Awaitable[list[PoppedMessage]]:
            return self._broker.pop(
                group,
                topic,
                max_messages=batch,
                invisible_s=invisible,
                wait_s=wait_s,
                filter_expression=expression,
                filter_type=filter_type,
                queue_id=queue_id,
                max_bytes=max_bytes,
                client_id=client_id,  # the x-mq-client-id header: recorded with deliveries
            )

        session = self._sessions.get(client_id)
        if (
            session is not None
            and session.client_type == pb.PUSH_CONSUMER
            and self._resources.policy(group).fifo
        ):
            started = False

            def claimed(wait_s: float, max_bytes: int | None) -> Awaitable[list[PoppedMessage]]:
                nonlocal started
                again, started = started, True
                return self._pop_claimed(
                    client_id, group, info, request, wait_s, max_bytes, pop_from, again=again
                )

            return Plan(group, request.auto_renew, wait, claimed)
        # Simple consumers pop all queues, whatever they name; so do push consumers of
        # normal groups.
        return Plan(group, request.auto_renew, wait, pop_from)

    async def _pop_claimed(
        self,
        client_id: str,
        group: str,
        info: TopicInfo,
        request: sv.ReceiveMessageRequest,
        wait: float,
        max_bytes: int | None,
        pop: Callable[[float, int | None, int], Awaitable[list[PoppedMessage]]],
        *,
        again: bool = False,
    ) -> list[PoppedMessage]:
        """A FIFO push consumer's receive: only on a queue it holds, and only while it does
        (the wait ends with the claim: moved at a query, or run out).

        The pop takes that queue's messages and the group's retry copies (which belong to
        no queue), as RocketMQ's pop with a queue id does, so each client gets the messages
        of the queues it holds.
        """
        if request.message_queue.id == -1:
            raise ProtocolError(
                Code.FORBIDDEN,
                f"group {group!r} is a FIFO group: its queues are assigned one by one; query "
                "the assignment again and receive from the queues it returns",
            )
        queue_id = self._resources.queue_id(info, request.message_queue)
        try:
            claim_s = self._assignments.check_receive(client_id, group, info.name, queue_id)
        except ProtocolError:
            if again:
                # A later pop of the same receive (receive.py): the claim ended while it
                # waited for bytes, as if it had ended during its wait.
                return []
            raise
        with self._assignments.receiving(client_id, group, info.name, queue_id) as ended:
            task = asyncio.ensure_future(pop(min(wait, claim_s), max_bytes, queue_id))
            first: set[asyncio.Future[Any]] = {task, ended}
            try:
                await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
                if not task.done():
                    task.cancel()  # the claim ended: the pop is still parked, nothing taken
                    await asyncio.wait({task})
                return [] if task.cancelled() else task.result()
            except BaseException:
                if not task.done():
                    task.cancel()
                elif not task.cancelled() and task.exception() is None:
                    self._release_later(group, task.result())  # popped for nobody
                raise
