"""A proxy's quarantine of a broker it cannot reach (cluster/quarantine.py), on real channels:
a gRPC server on 127.0.0.1 stands in for the broker (a channel is connected once the HTTP/2
handshake is done, whatever the server serves)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from popmq.cluster.broker_pool import BrokerPool
from popmq.cluster.fault_tolerance import FaultTable
from popmq.cluster.quarantine import PROBE_INTERVAL_S, Quarantine
from popmq.cluster.remote_broker import RemoteBroker
from popmq.coordination.config import HOP_KEEPALIVE_S, MIN_HOP_KEEPALIVE_S
from popmq.coordination.coordinator import Entry
from popmq.coordination.routes import QueueRef
from tests.support.brokers import BrokerProcess
from tests.support.ports import free_port

_WAIT_S = 15.0
"""How long a change the probe must see may take at most (gRPC reconnects within ~1 s)."""


async def _listening(port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


def test_an_unreachable_broker_is_quarantined_until_its_connection_is_up_again() -> None:
    async def scenario() -> None:
        server, port = await _listening()
        await server.stop(None)  # nothing listens there now
        pool = BrokerPool()
        entry = Entry("brokers/b1", {"addr": f"127.0.0.1:{port}"}, 1, 1, 1)
        await pool.sync({"b1": entry})
        faults = FaultTable()
        quarantine = Quarantine(pool, faults)
        try:
            quarantine.unanswered("b1", pool.get("b1"))
            assert not faults.is_reachable("b1")
            assert faults.pick("t", {"b1": [0], "b2": [0]}) == QueueRef("b2", 0)
            await asyncio.sleep(1.0)  # probes find nothing: still out
            assert not faults.is_reachable("b1")
            server, _ = await _listening(port)
            try:
                await _until(lambda: faults.is_reachable("b1"), "never let back in")
                assert faults.is_available("b1")
                # Unanswered on a connected channel (a slow broker): no quarantine.
                quarantine.unanswered("b1", pool.get("b1"))
                assert faults.is_reachable("b1")
            finally:
                await server.stop(None)
        finally:
            await quarantine.close()
            await pool.close()

    asyncio.run(scenario())


def test_a_probe_ends_when_its_broker_leaves_the_cluster() -> None:
    async def scenario() -> None:
        server, port = await _listening()
        await server.stop(None)
        pool = BrokerPool()
        await pool.sync({"b1": Entry("brokers/b1", {"addr": f"127.0.0.1:{port}"}, 1, 1, 1)})
        faults = FaultTable()
        quarantine = Quarantine(pool, faults)
        try:
            quarantine.unanswered("b1", pool.get("b1"))
            assert quarantine.probing == ["b1"]
            await pool.sync({})  # its lease lapsed; the table is told on its own
            await _until(lambda: not quarantine.probing, "the probe outlived its broker")
        finally:
            await quarantine.close()
            await pool.close()

    asyncio.run(scenario())


def test_a_broker_forgotten_and_unanswered_again_stays_quarantined() -> None:
    """It registered again (the table forgets it) while its probe still runs, and the next
    send through the new connection went unanswered too: quarantined, with a probe."""

    async def scenario() -> None:
        server, port = await _listening()
        await server.stop(None)
        pool = BrokerPool()
        await pool.sync({"b1": Entry("brokers/b1", {"addr": f"127.0.0.1:{port}"}, 1, 1, 1)})
        faults = FaultTable()
        quarantine = Quarantine(pool, faults)
        try:
            quarantine.unanswered("b1", pool.get("b1"))
            faults.forget("b1")
            quarantine.unanswered("b1", pool.get("b1"))
            await asyncio.sleep(4 * PROBE_INTERVAL_S)  # the first probe has seen the forget
            assert not faults.is_reachable("b1")
            assert quarantine.probing == ["b1"]
        finally:
            await quarantine.close()
            await pool.close()

    asyncio.run(scenario())


def test_a_call_through_a_replaced_connection_quarantines_nothing() -> None:
    """A send that failed on the connection to the broker's old address (before it
    registered again elsewhere) says nothing of the broker now."""

    async def scenario() -> None:
        old_server, old_port = await _listening()
        await old_server.stop(None)
        server, port = await _listening()
        pool = BrokerPool()
        await pool.sync({"b1": Entry("brokers/b1", {"addr": f"127.0.0.1:{old_port}"}, 1, 1, 1)})
        old = pool.get("b1")
        await pool.sync({"b1": Entry("brokers/b1", {"addr": f"127.0.0.1:{port}"}, 2, 2, 2)})
        assert pool.get("b1") is not old
        faults = FaultTable()
        quarantine = Quarantine(pool, faults)
        try:
            quarantine.unanswered("b1", old)
            assert faults.is_reachable("b1") and quarantine.probing == []
        finally:
            await quarantine.close()
            await pool.close()
            await server.stop(None)

    asyncio.run(scenario())


@pytest.mark.parametrize("keepalive_s", [HOP_KEEPALIVE_S, MIN_HOP_KEEPALIVE_S])
def test_a_broker_keeps_a_connection_its_proxy_pings_at_its_hop_keepalive(
    tmp_path: Path, keepalive_s: float
) -> None:
    """A gRPC server closes a connection pinged more often than it allows (GOAWAY
    too_many_pings, after which the channel is idle): a broker allows the proxies' pings,
    at the default `[cluster] hop_keepalive_s` and at the shortest one allowed."""
    process = BrokerProcess(tmp_path / "broker", free_port())
    process.start()

    async def scenario() -> None:
        remote = RemoteBroker(process.address, catalog=False, keepalive_s=keepalive_s)
        await remote.start()
        try:
            await _until(remote.connection_up, "never connected")
            channel = remote._channel  # the channel itself: its state changes are the check
            assert channel is not None
            changes: list[grpc.ChannelConnectivity] = []
            end = time.monotonic() + 10 * keepalive_s  # ten pings, no call
            while (left := end - time.monotonic()) > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await channel.wait_for_state_change(grpc.ChannelConnectivity.READY)
                        changes.append(channel.get_state())
                        break
            assert changes == [], f"the broker closed the connection: {changes}"
        finally:
            await remote.close()

    try:
        asyncio.run(scenario())
    finally:
        process.stop()
