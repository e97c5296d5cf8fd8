"""TrackedServer ends every connection it accepted, on a real loopback socket."""

from __future__ import annotations

import asyncio
import socket

from popmq.runtime.metrics import Metrics, MetricsEndpoint
from popmq.runtime.tracked_server import TrackedServer


def test_close_ends_connections_whose_handlers_never_return() -> None:
    async def scenario() -> tuple[bytes, int]:
        started = asyncio.Event()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            started.set()
            await reader.read()  # holds its connection until the server ends it

        server = TrackedServer(handler)
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await asyncio.wait_for(started.wait(), 5)
        await server.close()
        try:
            read = await asyncio.wait_for(reader.read(), 5)  # the server's side is gone
        finally:
            writer.close()
        return read, len(server._transports)

    assert asyncio.run(scenario()) == (b"", 0)


def test_a_connection_accepted_as_the_server_closes_is_closed_too() -> None:
    # The accept runs in the loop pass before close(); its transport is made in the pass
    # after. asyncio (3.11) fails to make it on a closed Server and leaves the socket open
    # for the garbage collector: the client would wait for an end that never comes.
    async def scenario() -> bytes:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()

        server = TrackedServer(handler)
        await server.start()
        client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        try:
            await asyncio.sleep(0)
            await asyncio.sleep(0)  # the listening socket's accept ran in this pass
            await server.close()
            try:
                return client.recv(1)
            except ConnectionResetError:
                return b""
        finally:
            client.close()

    assert asyncio.run(scenario()) == b""


def test_a_connection_after_close_is_not_served() -> None:
    async def scenario() -> bool:
        served = False

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal served
            served = True

        server = TrackedServer(handler)
        await server.start()
        port = server.port
        await server.close()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except ConnectionError:
            return served
        writer.close()
        return served

    assert asyncio.run(scenario()) is False


def test_the_metrics_endpoint_ends_an_open_scrape_when_it_stops() -> None:
    async def scenario() -> bytes:
        endpoint = MetricsEndpoint(Metrics(), "127.0.0.1", 0)
        port = await endpoint.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")  # the rest of the request never comes
        await writer.drain()
        await asyncio.sleep(0.05)
        await endpoint.stop()
        try:
            return await asyncio.wait_for(reader.read(), 5)  # not its 10 s read timeout
        finally:
            writer.close()

    assert asyncio.run(scenario()) == b""


def test_end_handlers_lets_handlers_finish_then_cancels_the_rest() -> None:
    async def scenario() -> tuple[list[str], int]:
        ended: list[str] = []
        both = asyncio.Event()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            name = (await reader.readline()).decode().strip()
            if name == "quick":
                await both.wait()
                ended.append(name)
                return
            try:
                both.set()
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                ended.append(f"{name} cancelled")
                raise

        server = TrackedServer(handler)
        await server.start()
        clients = []
        for name in ("quick", "slow"):
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(f"{name}\n".encode())
            clients.append(writer)
        await asyncio.wait_for(both.wait(), 5)
        server.stop_listening()
        await server.end_handlers(0.5)
        await server.close()
        for writer in clients:
            writer.close()
        return ended, len(server._handlers)

    assert asyncio.run(scenario()) == (["quick", "slow cancelled"], 0)
