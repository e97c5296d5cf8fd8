"""The stream side of the etcd client (etcd.py): how a stream's step is bounded in time and
how its failures read, and `LeaseKeeper`, which keeps one lease alive on its own keepalive
stream. Everything runs on the event loop; nothing here blocks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio

from popmq._gen.etcd.etcdserverpb import rpc_pb2 as pb
from popmq.coordination.errors import CoordinationUnavailableError

if TYPE_CHECKING:
    from popmq.coordination.etcd import EtcdClient, Lease

logger = logging.getLogger(__name__)

T = TypeVar("T")

_RETRY_PAUSE_S = 0.1
"""Pause after every endpoint failed once, before the next round (within the timeout)."""
_FAILOVER_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def _stream_outage(error: grpc.aio.AioRpcError) -> bool:
    """Whether a stream's error means its endpoint went away (resume elsewhere), not a refusal.

    Besides UNAVAILABLE / DEADLINE_EXCEEDED / CANCELLED, grpc's core reports a connection cut
    while a stream is writing as INTERNAL "Internal error from Core": etcd never said it.
    """
    code = error.code()
    if code in _FAILOVER_CODES or code == grpc.StatusCode.CANCELLED:
        return True
    return code == grpc.StatusCode.INTERNAL and "from Core" in (error.details() or "")


# How a stream (watch, keepalive) fails when its endpoint goes: an error status, no answer in
# time, the end of the stream, or a write to a call that has just ended.
_STREAM_FAILURES = (
    grpc.aio.AioRpcError,
    TimeoutError,
    CoordinationUnavailableError,
    asyncio.InvalidStateError,
)


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel a background task and wait for its end; a cancellation of the caller itself
    still propagates (a bare suppress(CancelledError) would swallow it)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise


async def _bounded(call: Any, step: Awaitable[T], timeout_s: float) -> T:
    """Await one step of a stream call, cancelling the call itself after `timeout_s`.

    Not asyncio.wait_for: cancelling only the awaiting task leaves a gRPC write to a stream
    that is not connected pending until the call ends, so the wait would not end either.
    """
    fired = False

    def expire() -> None:
        nonlocal fired
        fired = True
        call.cancel()

    handle = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        return await step
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if fired and task is not None and not task.cancelling():
            raise TimeoutError(f"no answer within {timeout_s:g}s") from None
        raise
    finally:
        handle.cancel()


async def _read(call: Any, ended: str) -> Any:
    """The next message of a stream; CoordinationUnavailableError(ended) at its end."""
    response = await call.read()
    if response is grpc.aio.EOF:
        raise CoordinationUnavailableError(ended)
    return response


class LeaseKeeper:
    """Keeps one lease alive: a keepalive every TTL/3 on its own stream, failing over.

    The lease counts as lost when etcd says it is gone (expired, revoked) or when no
    keepalive has been answered for a whole TTL (etcd may still hold it, but nobody can tell:
    a member that owns something under the lease must assume it lost it). `wait_lost()`
    returns the reason then; the keeper stops. `close()` stops it without revoking.
    """

    def __init__(self, client: EtcdClient, lease: Lease) -> None:
        self.client = client
        self.lease = lease
        loop = asyncio.get_running_loop()
        self.expires_at = lease.granted_at + lease.ttl_s
        """Loop time when the lease lapses unless renewed (as far as this side knows)."""
        # Resolved with the reason once the lease is lost; failed if the loop dies.
        self._lost: asyncio.Future[str] = loop.create_future()
        self._call: Any = None  # the keepalive stream, reopened after a failure
        self._endpoint = ""  # the endpoint of that stream
        self._task = loop.create_task(self._run(), name=f"etcd-keepalive-{lease.id:x}")
        self._task.add_done_callback(self._done)

    async def wait_lost(self) -> str:
        """Wait until the lease is lost; returns why."""
        return await asyncio.shield(self._lost)

    @property
    def lost(self) -> bool:
        """Whether the lease is lost (or the keeper died)."""
        return self._lost.done()

    async def close(self) -> None:
        """Stop renewing (idempotent); the lease then lapses after its TTL unless revoked."""
        self._close_stream()  # first: a pending write ends only with its call
        await cancel_and_wait(self._task)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._close_stream()
        if self._lost.done():
            return
        if task.cancelled():
            self._lost.set_result("keepalive stopped")
        elif (error := task.exception()) is not None:
            self._lost.set_exception(error)

    def _close_stream(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.lease.ttl_s / 3
        while True:
            remaining = self.expires_at - loop.time()
            if remaining <= 0:
                self._lost.set_result(
                    f"no keepalive answered for the lease's {self.lease.ttl_s}s TTL"
                )
                return
            sent_at = loop.time()
            try:
                ttl = await self._renew(min(self.client.timeout_s, remaining))
            except _STREAM_FAILURES as error:
                logger.debug("keepalive of lease %x failed: %s", self.lease.id, error)
                self._close_stream()
                self.client._fail_over(self._endpoint or self.client._endpoint())
                await asyncio.sleep(min(_RETRY_PAUSE_S * 2, max(remaining, 0.0)))
                continue
            self.client.reachability.answered(self._endpoint)
            if ttl <= 0:
                self._lost.set_result("etcd says the lease expired or was revoked")
                return
            self.expires_at = sent_at + ttl
            await asyncio.sleep(max(0.0, sent_at + interval - loop.time()))

    async def _renew(self, budget_s: float) -> int:
        if self._call is None:
            self._endpoint = self.client._endpoint()
            self._call = self.client._stubs(self._endpoint).lease.LeaseKeepAlive()
        call = self._call
        # Less while another endpoint may answer: a hung member then costs 2 s of the TTL.
        timeout_s = self.client._try_limit(self._endpoint, budget_s)
        # A keepalive left unanswered is how a hung etcd shows (etcd_reachability.py).
        with self.client.reachability.asking(self._endpoint):
            request = pb.LeaseKeepAliveRequest(id=self.lease.id)
            await _bounded(call, call.write(request), timeout_s)
            response = await _bounded(
                call, _read(call, "etcd ended the keepalive stream"), timeout_s
            )
        return int(response.ttl)
