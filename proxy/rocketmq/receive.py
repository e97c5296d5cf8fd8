"""apache.rocketmq.v2 ReceiveMessage: writing a receive's messages, bounded per client.

A receive is one server-streaming call: a status, the messages, then the delivery timestamp.
`context.write` returns once grpc took a message and blocks only when the client's HTTP/2
window is full, so a client that opens receives and never reads them leaves each holding
its popped messages (up to a batch of the largest bodies), and without a bound a client that
kept opening them took the server past 1 GB (issue 20).

Bound: each client id may hold `MAX_UNREAD_BYTES_PER_CLIENT` of popped messages not yet
written. Past it, the client's receives that wait for messages are cancelled where they are
parked (they took nothing) and, like new receives of that client, wait without popping until
its writes bring the held bytes down to half, or until the call's time runs out (then they
answer MESSAGE_NOT_FOUND, as a long poll that found nothing). So a client holds at most the
bound plus the batches that were popped when it was reached, however many receives it opens.

Ends: a write that fails (the client went away) or a call cancelled midway makes the
receive's messages visible again soon (`release_later`, RocketMQ nacks them with 1 s too),
releases their bytes at once and ends without an ERROR log (proxy/write_errors.py).
Everything runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import PopMQError, PoppedMessage
from popmq.proxy.errors import INTERNAL_MESSAGE
from popmq.proxy.rocketmq import codes, convert
from popmq.proxy.rocketmq.codes import Code
from popmq.proxy.rocketmq.inflight import Inflight
from popmq.proxy.write_errors import WRITE_FAILED, after_failed_write

log = logging.getLogger(__name__)

MAX_UNREAD_BYTES_PER_CLIENT = 16 * 1024 * 1024
"""Bytes of popped messages one client id may hold in receives not yet written; about four
of the largest bodies, enough for a consumer that reads to never wait on it."""

_DEADLINE_MARGIN_S = 0.05
"""A receive waiting for room answers this long before the caller's deadline."""

Pop = Callable[
    [sv.ReceiveMessageRequest, grpc.aio.ServicerContext, str],
    Awaitable[tuple[list[PoppedMessage], str, bool]],
]
"""Validates a receive and pops for it: (messages, group, auto_renew)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _size(message: PoppedMessage) -> int:
    """What a popped message holds in memory, near enough: its stored record."""
    return message.record.ByteSize()


@dataclass(slots=True)
class _Client:
    """One client id's receives."""

    unread: int = 0
    """Bytes of its popped messages not yet written."""
    receiving: dict[asyncio.Task[tuple[list[PoppedMessage], str, bool]], bool] = field(
        default_factory=dict
    )
    """Its receives popping now -> whether they were cancelled to make it wait."""
    room: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while it is under the bound."""
    calls: int = 0
    """Its receives in progress (the entry goes when none is left)."""


class Receiver:
    """Runs ReceiveMessage calls: pops (through `pop`), writes, bounds each client.

    Args:
        pop: The service's validation and pop for one receive.
        inflight: Tracks every delivered message (renewal and release).
        address: This server's HOST:PORT, for the messages' endpoints.
        release_later: Makes messages popped for a receive that failed visible again soon.
    """

    max_unread_bytes: int = MAX_UNREAD_BYTES_PER_CLIENT
    """The per-client bound (an attribute, so a test can lower it for one receiver)."""

    def __init__(
        self,
        pop: Pop,
        inflight: Inflight,
        address: Callable[[], str],
        release_later: Callable[[str, list[PoppedMessage]], None],
    ) -> None:
        self._pop = pop
        self._inflight = inflight
        self._address = address
        self._release_later = release_later
        # Client id -> its receives; an entry lives while it has a call in progress.
        # Touched on the loop only.
        self._clients: dict[str, _Client] = {}

    @property
    def clients(self) -> int:
        """Client ids with a receive in progress."""
        return len(self._clients)

    def unread_bytes(self, client_id: str) -> int:
        """Bytes the client's receives hold unwritten now (0 when it has none)."""
        client = self._clients.get(client_id)
        return 0 if client is None else client.unread

    async def receive(
        self, request: sv.ReceiveMessageRequest, context: grpc.aio.ServicerContext, client_id: str
    ) -> None:
        """Serve one ReceiveMessage call."""
        client = self._clients.get(client_id)
        if client is None:
            client = self._clients[client_id] = _Client()
            client.room.set()
        client.calls += 1
        try:
            await self._serve(request, context, client_id, client)
        finally:
            client.calls -= 1
            if not client.calls:
                del self._clients[client_id]

    async def _serve(
        self,
        request: sv.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,
        client_id: str,
        client: _Client,
    ) -> None:
        try:
            popped, group, auto_renew = await self._pop_with_room(
                request, context, client_id, client
            )
        except PopMQError as exc:
            await self._write_quietly(
                context, sv.ReceiveMessageResponse(status=codes.status_of(exc, codes.TOPIC))
            )
            return
        except Exception:
            log.exception("ReceiveMessage failed unexpectedly")
            internal = pb.Status(code=Code.INTERNAL_SERVER_ERROR, message=INTERNAL_MESSAGE)
            await self._write_quietly(context, sv.ReceiveMessageResponse(status=internal))
            return
        now = _now_ms()
        for message in popped:
            self._inflight.track(client_id, group, message, auto_renew)
        sizes = [_size(m) for m in popped]
        client.unread += sum(sizes)
        if client.unread >= self.max_unread_bytes:
            self._make_wait(client)
        written = 0
        try:
            if not popped:
                await context.write(
                    sv.ReceiveMessageResponse(
                        status=pb.Status(code=Code.MESSAGE_NOT_FOUND, message="no new message")
                    )
                )
            else:
                await context.write(sv.ReceiveMessageResponse(status=codes.ok()))
                host = self._address()
                for message, size in zip(popped, sizes, strict=True):
                    await context.write(
                        sv.ReceiveMessageResponse(
                            message=convert.popped_message(message, now, host)
                        )
                    )
                    written += 1
                    self._unread_less(client, size)
            await context.write(
                sv.ReceiveMessageResponse(delivery_timestamp=convert.timestamp(_now_ms()))
            )
        except WRITE_FAILED:
            # The client went away: its messages come back soon, and the call ends quietly.
            self._unread_less(client, sum(sizes[written:]))
            self._release_later(group, popped)
            del popped
            await after_failed_write("ReceiveMessage")
        except BaseException:
            # The call was cancelled or broke, and a client drops a receive that failed
            # midway: these are made visible again soon instead of after their invisible
            # time (RocketMQ nacks them with 1 s too).
            self._unread_less(client, sum(sizes[written:]))
            self._release_later(group, popped)
            raise

    async def _pop_with_room(
        self,
        request: sv.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,
        client_id: str,
        client: _Client,
    ) -> tuple[list[PoppedMessage], str, bool]:
        """Pop once the client is under its bound; a pop cancelled because the client went
        over it took nothing, and waits again (module doc)."""
        while True:
            if not client.room.is_set():
                remaining = context.time_remaining()
                wait = None if remaining is None else max(0.0, remaining - _DEADLINE_MARGIN_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(client.room.wait(), wait)
                if not client.room.is_set():
                    # Its time ran out while the client did not read: nothing found.
                    group = convert.group_name(request.group)
                    return [], group, request.auto_renew
            task = asyncio.ensure_future(self._pop(request, context, client_id))
            client.receiving[task] = False
            try:
                await asyncio.wait({task})
            except BaseException:
                if not task.done():
                    task.cancel()
                elif not task.cancelled() and task.exception() is None:
                    popped, group, _ = task.result()
                    self._release_later(group, popped)  # popped for a call that ended
                raise
            finally:
                made_to_wait = client.receiving.pop(task)
            if task.cancelled() and made_to_wait:
                continue
            return task.result()

    def _make_wait(self, client: _Client) -> None:
        client.room.clear()
        for task, made_to_wait in client.receiving.items():
            if not made_to_wait:
                client.receiving[task] = True
                task.cancel()

    def _unread_less(self, client: _Client, size: int) -> None:
        client.unread -= size
        if not client.room.is_set() and client.unread <= self.max_unread_bytes // 2:
            client.room.set()

    @staticmethod
    async def _write_quietly(
        context: grpc.aio.ServicerContext, response: sv.ReceiveMessageResponse
    ) -> None:
        try:
            await context.write(response)
        except WRITE_FAILED:
            await after_failed_write("ReceiveMessage")
