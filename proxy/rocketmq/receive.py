"""apache.rocketmq.v2 ReceiveMessage: writing a receive's messages, bounded per client and
server-wide.

A receive is one server-streaming call: a status, the messages, then the delivery timestamp.
`context.write` returns once grpc took a message and blocks only when the client's HTTP/2
window is full, so a client that opens receives and never reads them leaves each holding
its popped messages (up to a batch of the largest bodies), and without a bound a client that
kept opening them took the server past 1 GB.

Admission: a bound checked after the pop comes too late, since a wave of receives
woken in one event-loop turn all take before any of them is written. So a receive reserves
bytes before it pops: each client id's budget is `MAX_UNREAD_BYTES_PER_CLIENT` for the bytes
reserved by its running pops and those of its popped messages not yet written together, and
the server's `PoppedBytes` (proxy/memory.py, shared with popmq.v1 PopStreams) bounds all of
them. A receive is granted up to one whole answer (`ANSWER_BYTES`) of what both have free,
which the broker's pop may not pass (`max_bytes`), and takes what is there at once; finding
nothing, it waits for messages as a probe granted nothing (`max_bytes` 0), so parked receives
hold no bytes and any number may park. A probe, or a pop whose next message is larger than
its grant, gets the broker's AnswerBoundError (it took nothing, and says how many bytes it
needs) and waits, first come first served among the client's receives, until that much is
free; a new receive meanwhile starts as a probe. A receive whose long-polling time runs out
while it waits answers MESSAGE_NOT_FOUND, as a long poll that found nothing. What a pop did
not use of its grant is given back as it returns; its messages' bytes count until each is
written. So a client holds at most its budget, and all clients and streams together the
server's, however many receives it opens or are woken at once.

Ends: a write that fails (the client went away) or a call cancelled midway makes the
receive's messages visible again soon (`release_later`, RocketMQ nacks them with 1 s too),
releases their bytes at once and ends without an ERROR log (grpc_calls/write_errors.py).
Everything runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import MAX_RESPONSE_BYTES, AnswerBoundError, PopMQError, PoppedMessage
from popmq.grpc_calls.errors import INTERNAL_MESSAGE
from popmq.grpc_calls.write_errors import WRITE_FAILED, after_failed_write
from popmq.proxy.memory import PoppedBytes
from popmq.proxy.rocketmq import codes, convert
from popmq.proxy.rocketmq.codes import Code
from popmq.proxy.rocketmq.inflight import Inflight
from popmq.proxy.rocketmq.receiving import Plan

log = logging.getLogger(__name__)

MAX_UNREAD_BYTES_PER_CLIENT = 16 * 1024 * 1024
"""Bytes of popped messages one client id may hold in receives not yet written; about four
of the largest bodies, enough for a consumer that reads to never wait on it."""

ANSWER_BYTES = MAX_RESPONSE_BYTES
"""The most one receive's pop takes (broker_core/budget.py): a receive granted this much is
not bounded further, and may take one message however large."""

Prepare = Callable[[sv.ReceiveMessageRequest, grpc.aio.ServicerContext, str], Plan]
"""Checks a receive and says how to pop for it (receiving.py)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _size(message: PoppedMessage) -> int:
    """What a popped message holds in memory, near enough: its stored record."""
    return message.record.stored_size


@dataclass(slots=True)
class _Client:
    """One client id's receives."""

    unread: int = 0
    """Bytes of its popped messages not yet written."""
    reserved: int = 0
    """Bytes reserved by its receives' running pops."""
    waiting: deque[tuple[int, asyncio.Future[int]]] = field(default_factory=deque)
    """Its receives waiting for bytes, in order: (bytes needed, future of the grant)."""
    calls: int = 0
    """Its receives in progress (the entry goes when none is left)."""
    admit: Callable[[], None] = lambda: None
    """Grants the waiting receives what is free (registered with the server's budget)."""


class Receiver:
    """Runs ReceiveMessage calls: admits, pops (through `prepare`'s plan), writes.

    Args:
        prepare: The service's checks of one receive, and how to pop for it.
        inflight: Tracks every delivered message (renewal and release).
        address: This server's HOST:PORT, for the messages' endpoints.
        release_later: Makes messages popped for a receive that failed visible again soon.
        popped_bytes: The server-wide budget the receives' bytes count in too (none when
            None).
    """

    max_unread_bytes: int = MAX_UNREAD_BYTES_PER_CLIENT
    """The per-client budget (an attribute, so a test can lower it for one receiver)."""

    def __init__(
        self,
        prepare: Prepare,
        inflight: Inflight,
        address: Callable[[], str],
        release_later: Callable[[str, list[PoppedMessage]], None],
        popped_bytes: PoppedBytes | None = None,
    ) -> None:
        self._prepare = prepare
        self._inflight = inflight
        self._address = address
        self._release_later = release_later
        self._pool = popped_bytes
        # Client id -> its receives; an entry lives while it has a call in progress.
        # Touched on the loop only.
        self._clients: dict[str, _Client] = {}

    @property
    def clients(self) -> int:
        """Client ids with a receive in progress."""
        return len(self._clients)

    def unread_bytes(self, client_id: str) -> int:
        """Bytes the client's receives hold now, reserved or popped and unwritten (0 when it
        has none)."""
        client = self._clients.get(client_id)
        return 0 if client is None else client.unread + client.reserved

    async def receive(
        self, request: sv.ReceiveMessageRequest, context: grpc.aio.ServicerContext, client_id: str
    ) -> None:
        """Serve one ReceiveMessage call."""
        client = self._clients.get(client_id)
        if client is None:
            client = self._clients[client_id] = _Client()
            client.admit = lambda: self._admit(client)
        client.calls += 1
        try:
            await self._serve(request, context, client_id, client)
        finally:
            client.calls -= 1
            if not client.calls:
                del self._clients[client_id]
                if self._pool is not None:
                    self._pool.unwait(client.admit)

    async def _serve(
        self,
        request: sv.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,
        client_id: str,
        client: _Client,
    ) -> None:
        try:
            plan = self._prepare(request, context, client_id)
            popped, sizes = await self._take(plan, client)
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
        group = plan.group
        now = _now_ms()
        written = 0
        try:
            for message in popped:
                self._inflight.track(client_id, group, message, plan.auto_renew)
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

    async def _take(self, plan: Plan, client: _Client) -> tuple[list[PoppedMessage], list[int]]:
        """Pop with bytes reserved first (module doc, "Admission"); returns the messages and
        their sizes, which count in the client's unread bytes from now on. Empty when the
        long-polling time ran out."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + plan.wait_s
        demand = 0  # bytes the next pop must be granted: its message did not fit
        probe = False  # it found nothing at once: it waits for messages taking nothing
        while True:
            left = max(0.0, give_up - loop.time())
            if demand:
                granted = await self._wait_for_bytes(client, demand, left)
                if granted is None:
                    return [], []  # its time ran out while the client did not read
                grant = granted
            elif probe or client.waiting or self._free(client) <= 0:
                grant = 0  # the bytes go to those that wait for them, in order
            else:
                grant = min(ANSWER_BYTES, self._free(client))
                self._reserve(client, grant)
            # Granted bytes are never held by a parked pop: it takes what is there at once.
            try:
                popped = await self._pop(
                    plan, 0.0 if grant else left, None if grant >= ANSWER_BYTES else grant
                )
            except AnswerBoundError as short:
                # It took nothing: it waits until the budget has what its message needs.
                self._unreserve(client, grant)
                demand, probe = min(ANSWER_BYTES, short.needed_bytes), False
                continue
            except BaseException:
                self._unreserve(client, grant)
                raise
            sizes = [_size(m) for m in popped]
            self._hold(client, sum(sizes))  # before the grant goes: no needless wake-up
            self._unreserve(client, grant)
            if popped or not grant or left <= 0.001:
                return popped, sizes
            demand, probe = 0, True

    async def _pop(self, plan: Plan, wait_s: float, max_bytes: int | None) -> list[PoppedMessage]:
        """Run one pop; messages it took for a call that ended meanwhile come back soon."""
        task = asyncio.ensure_future(plan.pop(wait_s, max_bytes))
        try:
            await asyncio.wait({task})
        except BaseException:
            if not task.done():
                task.cancel()
            elif not task.cancelled() and task.exception() is None:
                self._release_later(plan.group, task.result())  # popped for nobody
            raise
        try:
            return task.result()
        finally:
            # Not kept by an exception's traceback (this frame) while the task keeps the
            # exception: that cycle held each refused pop's records until a GC ran.
            del task

    async def _wait_for_bytes(self, client: _Client, demand: int, left: float) -> int | None:
        """Wait in line until `demand` bytes are free and reserved for this receive: the
        grant, or None when `left` seconds passed first."""
        granted: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        client.waiting.append((demand, granted))
        if self._pool is not None:
            self._pool.wait(client.admit)
        self._admit(client)
        try:
            await asyncio.wait({granted}, timeout=left)
        except BaseException:
            if granted.done() and not granted.cancelled():
                self._unreserve(client, granted.result())
            granted.cancel()
            raise
        if not granted.done():
            granted.cancel()  # _admit drops it from the line
            self._admit(client)  # those after it may fit
            return None
        return granted.result()

    def _admit(self, client: _Client) -> None:
        """Grant the client's waiting receives, in order, while the budgets have room."""
        while client.waiting:
            demand, granted = client.waiting[0]
            if granted.done():
                client.waiting.popleft()  # its call ended, or its time ran out
                continue
            free = min(ANSWER_BYTES, self._free(client))
            if free < demand:
                break
            client.waiting.popleft()
            self._reserve(client, free)
            granted.set_result(free)
        if not client.waiting and self._pool is not None:
            self._pool.unwait(client.admit)

    def _free(self, client: _Client) -> int:
        """Bytes the client may still reserve: its own budget's, and the server's."""
        free = self.max_unread_bytes - client.unread - client.reserved
        return free if self._pool is None else min(free, self._pool.free())

    def _reserve(self, client: _Client, size: int) -> None:
        client.reserved += size
        if self._pool is not None:
            self._pool.hold(size)

    def _unreserve(self, client: _Client, size: int) -> None:
        if not size:
            return
        client.reserved -= size
        if self._pool is not None:
            self._pool.let_go(size)
        if client.waiting:
            self._admit(client)

    def _hold(self, client: _Client, size: int) -> None:
        client.unread += size
        if self._pool is not None:
            self._pool.hold(size)

    def _unread_less(self, client: _Client, size: int) -> None:
        if not size:
            return
        client.unread -= size
        if self._pool is not None:
            self._pool.let_go(size)
        if client.waiting:
            self._admit(client)

    @staticmethod
    async def _write_quietly(
        context: grpc.aio.ServicerContext, response: sv.ReceiveMessageResponse
    ) -> None:
        try:
            await context.write(response)
        except WRITE_FAILED:
            await after_failed_write("ReceiveMessage")
