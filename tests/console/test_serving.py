"""The console served by `popmq serve`: off by default, on with `[console] listen`, in the
server's process and loop, protected mode, TLS with the server's certificate."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from popmq.console import ConsoleConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.runtime.settings import load, parse_assignments
from popmq.security.config import SecurityConfig
from popmq.security.protected import ProtectedModeError
from tests.console.support import AUTHENTICATED, browser, config, serving
from tests.support.certs import CertificateAuthority
from tests.support.run_async import run_async

ROOT = Path(__file__).resolve().parents[2]


def test_the_console_is_off_by_default_and_make_run_keeps_it_off() -> None:
    assert ServerConfig().console == ConsoleConfig()
    assert not ServerConfig().console.enabled
    assert PopMQServer(ServerConfig()).console is None
    run = re.search(r"^run:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert run is not None and "console" not in run.group(1)


def test_set_console_listen_turns_it_on() -> None:
    loaded = load(environ={}, flags=parse_assignments(["console.listen=127.0.0.1:8080"]))
    assert loaded.console.listen == "127.0.0.1:8080"
    assert loaded.console.enabled


def test_serve_prints_the_console_url_serves_it_and_still_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    """The same process and loop as gRPC: uvicorn does not take the server's signal
    handlers, so SIGTERM still stops the server cleanly (exit 0)."""
    process = subprocess.Popen(
        [
            sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "data"), "--set", "console.listen=127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    url = ""
    printed = ""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and not url:
            line = process.stdout.readline()
            printed += line
            match = re.match(r"console listening on (http://127\.0\.0\.1:(\d+))$", line.strip())
            if match:
                assert int(match.group(2)) > 0  # the real port, not 0
                url = match.group(1)
            elif not line and process.poll() is not None:
                break
        assert url, f"no console line in:\n{printed}"
        assert "popmq listening on 127.0.0.1:" in printed  # printed before the console's
        page = httpx.get(url + "/", timeout=10)
        assert page.status_code == 200
        assert "Authentication is off" in page.text
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, printed + output


@run_async
async def test_a_non_loopback_console_without_authentication_is_refused_at_start(
    tmp_path: Path,
) -> None:
    for security in (SecurityConfig(), SecurityConfig(allow_anonymous=True)):
        server = PopMQServer(
            config(
                tmp_path / "data",
                security=security,
                console=ConsoleConfig(listen="0.0.0.0:0"),
            )
        )
        with pytest.raises(ProtectedModeError, match=r"console refuses to listen on 0\.0\.0\.0"):
            await server.start()
        await server.stop()
    # With authentication on it starts (and answers on loopback too).
    async with serving(
        tmp_path / "data", security=AUTHENTICATED, console=ConsoleConfig(listen="0.0.0.0:0")
    ) as server:
        assert server.console is not None
        async with httpx.AsyncClient() as client:
            page = await client.get(f"http://127.0.0.1:{server.console.port}/login")
        assert page.status_code == 200 and 'name="secret_key"' in page.text


@run_async
async def test_a_start_that_fails_after_the_console_bound_closes_the_console_socket(
    tmp_path: Path,
) -> None:
    # The gRPC port is taken (without SO_REUSEPORT, so grpc cannot share it): the start
    # fails after the console bound its socket, and the console's port is free again.
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = PopMQServer(
            dataclasses.replace(config(tmp_path / "data"), listen=f"127.0.0.1:{port}")
        )
        with pytest.raises(Exception, match=str(port)):
            await server.start()
        assert server.console is not None and server.console.port
        with socket.create_server(("127.0.0.1", server.console.port)):
            pass  # bound again: nothing holds it
        await server.stop()


def test_a_refused_console_fails_popmq_serve_with_exit_2_saying_why(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "data"), "--set", "console.listen=0.0.0.0:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "the console refuses to listen on 0.0.0.0:0 without authentication" in result.stderr
    assert not (tmp_path / "data").exists()  # refused before the store opened


@run_async
async def test_the_console_serves_https_with_the_servers_certificate(tmp_path: Path) -> None:
    authority = CertificateAuthority(tmp_path / "certs")
    pair = authority.server()
    security = dataclasses.replace(
        AUTHENTICATED, tls_cert_file=str(pair.cert), tls_key_file=str(pair.key)
    )
    async with serving(tmp_path / "data", security=security) as server:
        assert server.console is not None
        assert server.console.url.startswith("https://127.0.0.1:")
        trust = ssl.create_default_context(cafile=str(authority.cert))
        async with httpx.AsyncClient(verify=trust) as client:
            page = await client.get(server.console.url + "/login")
        assert page.status_code == 200
        async with httpx.AsyncClient() as plain:
            with pytest.raises(httpx.HTTPError):
                await plain.get(server.console.url.replace("https", "http") + "/login")


@run_async
async def test_with_authentication_off_only_loopback_host_names_are_served(
    tmp_path: Path,
) -> None:
    """A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) must not
    drive an open console."""
    async with serving(tmp_path / "data") as server, browser(server) as client:
        assert (await client.get("/")).status_code == 200
        assert server.console is not None
        rebound = await client.get("/", headers={"host": f"evil.example:{server.console.port}"})
        assert rebound.status_code == 421
        assert (await client.get("/", headers={"host": "localhost"})).status_code == 200
