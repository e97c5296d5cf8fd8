"""Authentication and access control together, on a real server: users made through the admin
API are signed in by the gate and checked against their policies on popmq.v1 and
apache.rocketmq.v2, receipt handles stay with their group, GetServerInfo's config is SUPER's
alone, and refusals are counted and audited."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from popmq import (
    Admin,
    Credentials,
    PermissionDeniedError,
    Policy,
    Producer,
    SimpleConsumer,
    UnauthenticatedError,
)
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as v2pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as v2
from popmq._gen.apache.rocketmq.v2 import service_pb2_grpc as v2_grpc
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.security import audit, signing
from popmq.security.config import SecurityConfig
from tests.support.server_thread import ServerThread

ROOT = Credentials("root", "r00t-s3cret")
PRODUCER = Credentials("producer", "producer-s3cret")
BILLING = Credentials("billing", "billing-s3cret")
AUDIT = "audit"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    security = SecurityConfig(
        authentication=True, root_access_key=ROOT.access_key, root_secret_key=ROOT.secret_key
    )
    thread = ServerThread(tmp_path / "data", security=security)
    thread.start()
    with Admin(thread.endpoint, credentials=ROOT) as admin:
        for topic in ("a", "b"):
            admin.create_topic(topic, queues=1)
        admin.create_user(PRODUCER.access_key, PRODUCER.secret_key)
        admin.grant_policy(PRODUCER.access_key, Policy.of("topic:a", ["pub"]))
        admin.create_user(BILLING.access_key, BILLING.secret_key)
        admin.grant_policy(BILLING.access_key, Policy.of("topic:a", ["sub"]))
        admin.grant_policy(BILLING.access_key, Policy.of("group:billing-*", ["sub"]))
    yield thread
    thread.stop()


def test_a_user_with_pub_on_a_sends_to_a_only_and_cannot_receive(server: ServerThread) -> None:
    with Producer(server.endpoint, credentials=PRODUCER) as producer:
        producer.send("a", b"allowed")
        with pytest.raises(PermissionDeniedError) as refused:
            producer.send("b", b"not allowed")
    assert "may not PUB topic 'b'" in refused.value.message
    with (
        SimpleConsumer(server.endpoint, group="billing-x", topic="a", credentials=PRODUCER) as c,
        pytest.raises(PermissionDeniedError) as refused,
    ):
        c.receive(wait_s=0)
    assert "'producer' may not SUB" in refused.value.message
    # The one message sent is there, for a user allowed to read it.
    with SimpleConsumer(
        server.endpoint, group="billing-x", topic="a", credentials=BILLING
    ) as consumer:
        [message] = consumer.receive(wait_s=5)
        assert message.body == b"allowed"
        consumer.ack(message)


def test_unknown_or_missing_credentials_are_unauthenticated(server: ServerThread) -> None:
    with Producer(server.endpoint) as anonymous, pytest.raises(UnauthenticatedError):
        anonymous.send("a", b"x")
    stranger = Credentials("stranger", "whatever-secret")
    with Producer(server.endpoint, credentials=stranger) as producer:
        with pytest.raises(UnauthenticatedError) as refused:
            producer.send("a", b"x")
    assert "'stranger'" in refused.value.message
    assert "whatever" not in refused.value.message


def test_a_disabled_user_is_refused_at_once_and_a_new_deny_applies_to_the_next_call(
    server: ServerThread,
) -> None:
    with Producer(server.endpoint, credentials=PRODUCER) as producer:
        producer.send("a", b"1")
        with Admin(server.endpoint, credentials=ROOT) as admin:
            admin.grant_policy(PRODUCER.access_key, Policy.of("topic:a", ["pub"], deny=True))
        with pytest.raises(PermissionDeniedError):  # DENY and ALLOW, equally specific
            producer.send("a", b"2")
        with Admin(server.endpoint, credentials=ROOT) as admin:
            admin.revoke_policy(PRODUCER.access_key, Policy.of("topic:a", ["pub"], deny=True))
            producer.send("a", b"3")
            admin.update_user(PRODUCER.access_key, enabled=False)
        # Its open SendStream is refused per message (PERMISSION_DENIED), a new call when it
        # signs in (UNAUTHENTICATED).
        with pytest.raises(PermissionDeniedError) as refused:
            producer.send("a", b"4")
        assert "'producer' is disabled" in refused.value.message
    with Producer(server.endpoint, credentials=PRODUCER, multiplex=False) as producer:
        with pytest.raises(UnauthenticatedError) as signing_in:
            producer.send("a", b"5")
    assert "disabled" in signing_in.value.message


def _signed(credentials: Credentials) -> list[tuple[str, str]]:
    return list(signing.headers(credentials.access_key, credentials.secret_key).items())


def test_a_receipt_handle_works_only_for_its_group(server: ServerThread) -> None:
    with Admin(server.endpoint, credentials=ROOT) as admin:
        admin.create_group(AUDIT)
        admin.grant_policy(BILLING.access_key, Policy.of("group:audit", ["sub"]))
    with Producer(server.endpoint, credentials=ROOT) as producer:
        producer.send("a", b"m")
    with SimpleConsumer(
        server.endpoint, group="billing-1", topic="a", credentials=BILLING
    ) as consumer:
        [message] = consumer.receive(wait_s=5)
    handle = message.receipt_handle
    with grpc.insecure_channel(server.endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        # PRODUCER may not SUB any group: refused before the handle is looked at.
        with pytest.raises(grpc.RpcError) as refused:
            stub.Ack(
                messaging_pb2.AckRequest(group="billing-1", receipt_handles=[handle]),
                metadata=_signed(PRODUCER),
                timeout=5,
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "SUB group 'billing-1'" in str(refused.value.details())
        # BILLING may SUB group audit, but the handle is billing-1's.
        response = stub.Ack(
            messaging_pb2.AckRequest(group=AUDIT, receipt_handles=[handle]),
            metadata=_signed(BILLING),
            timeout=5,
        )
        [result] = response.results
        assert result.code != "OK"
        assert "billing-1" in result.message
        # Its own group's ack goes through.
        response = stub.Ack(
            messaging_pb2.AckRequest(group="billing-1", receipt_handles=[handle]),
            metadata=_signed(BILLING),
            timeout=5,
        )
        assert [r.code for r in response.results] == ["OK"]


def _v2_send(endpoint: str, topic: str, metadata: list[tuple[str, str]]) -> v2.SendMessageResponse:
    message = v2pb.Message(
        topic=v2pb.Resource(name=topic),
        body=b"v2",
        system_properties=v2pb.SystemProperties(
            message_id="01" + "0" * 30, body_encoding=v2pb.Encoding.IDENTITY
        ),
    )
    with grpc.insecure_channel(endpoint) as channel:
        stub = v2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        response: v2.SendMessageResponse = stub.SendMessage(
            v2.SendMessageRequest(messages=[message]), metadata=metadata, timeout=5
        )
        return response


def test_v2_answers_40300_naming_the_resource_and_action(server: ServerThread) -> None:
    allowed = _v2_send(server.endpoint, "a", _signed(PRODUCER))
    assert allowed.status.code == v2pb.Code.OK, allowed.status
    refused = _v2_send(server.endpoint, "b", _signed(PRODUCER))
    assert refused.status.code == v2pb.Code.FORBIDDEN, refused.status
    assert "PUB topic 'b'" in refused.status.message


def test_admin_is_checked_and_only_super_users_see_the_config(server: ServerThread) -> None:
    before = audit.denied_count("/popmq.v1.AdminService/DeleteTopic", "PERMISSION_DENIED")
    audited = audit.audit_count("topic.delete", "PERMISSION_DENIED")
    with Admin(server.endpoint, credentials=PRODUCER) as admin:
        with pytest.raises(PermissionDeniedError) as refused:
            admin.delete_topic("a")
        assert "DELETE topic 'a'" in refused.value.message
        with pytest.raises(PermissionDeniedError):
            admin.create_user("sneaky", "sneaky-secret", user_type="super")
    assert audit.denied_count("/popmq.v1.AdminService/DeleteTopic", "PERMISSION_DENIED") == (
        before + 1
    )
    assert audit.audit_count("topic.delete", "PERMISSION_DENIED") == audited + 1
    with Admin(server.endpoint, credentials=ROOT) as admin:
        admin.grant_policy(PRODUCER.access_key, Policy.of("cluster", ["get"]))
        assert admin.server_info().config  # SUPER
    deadline = time.monotonic() + 5
    with Admin(server.endpoint, credentials=PRODUCER) as admin:
        info = admin.server_info()
        assert time.monotonic() < deadline
    assert not info.config  # NORMAL, even allowed GET on the cluster
    with Admin(server.endpoint, credentials=ROOT) as admin:
        assert "sneaky" not in [u.access_key for u in admin.list_users()]


def test_a_stream_follows_its_user_being_disabled_or_demoted(server: ServerThread) -> None:
    ops = Credentials("ops", "ops-s3cret-key")
    with Admin(server.endpoint, credentials=ROOT) as admin:
        admin.create_user(ops.access_key, ops.secret_key, user_type="super")
    with Producer(server.endpoint, credentials=ops) as producer:  # one SendStream
        producer.send("b", b"as super")
        with Admin(server.endpoint, credentials=ROOT) as admin:
            admin.update_user(ops.access_key, user_type="normal")
        with pytest.raises(PermissionDeniedError) as refused:
            producer.send("b", b"demoted, no policies")
        assert "'ops' may not PUB topic 'b'" in refused.value.message
        with Admin(server.endpoint, credentials=ROOT) as admin:
            admin.update_user(ops.access_key, user_type="super")
        producer.send("b", b"super again")
        with Admin(server.endpoint, credentials=ROOT) as admin:
            admin.delete_user(ops.access_key)
        with pytest.raises(PermissionDeniedError) as refused:
            producer.send("b", b"deleted")
        assert "'ops' is deleted" in refused.value.message


def _v2_stub(channel: grpc.Channel) -> v2_grpc.MessagingServiceStub:
    return v2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]


def test_a_client_id_belongs_to_the_user_that_used_it_first(server: ServerThread) -> None:
    """Another user cannot end (or rewrite) a v2 client's session by naming its client id."""
    client = [("x-mq-client-id", "victim-host@4242@0@abc")]
    with grpc.insecure_channel(server.endpoint) as channel:
        stub = _v2_stub(channel)
        heartbeat = v2.HeartbeatRequest(
            group=v2pb.Resource(name="billing-1"), client_type=v2pb.ClientType.SIMPLE_CONSUMER
        )
        ok = stub.Heartbeat(heartbeat, metadata=_signed(BILLING) + client, timeout=5)
        assert ok.status.code == v2pb.Code.OK, ok.status
        for request in (v2.NotifyClientTerminationRequest(), v2.HeartbeatRequest()):
            method = getattr(stub, type(request).__name__.removesuffix("Request"))
            refused = method(request, metadata=_signed(PRODUCER) + client, timeout=5)
            assert refused.status.code == v2pb.Code.FORBIDDEN, refused.status
            assert "client id 'victim-host@4242@0@abc'" in refused.status.message
        # Its own user still may, and root may end any session.
        again = stub.Heartbeat(heartbeat, metadata=_signed(BILLING) + client, timeout=5)
        assert again.status.code == v2pb.Code.OK, again.status
        ended = stub.NotifyClientTermination(
            v2.NotifyClientTerminationRequest(), metadata=_signed(ROOT) + client, timeout=5
        )
        assert ended.status.code == v2pb.Code.OK, ended.status


def test_message_bodies_need_sub_and_lag_of_a_topic_needs_get_on_it(
    server: ServerThread,
) -> None:
    dashboard = Credentials("dashboard", "dashboard-s3cret")
    with Admin(server.endpoint, credentials=ROOT) as admin:
        admin.create_user(dashboard.access_key, dashboard.secret_key)
        admin.grant_policy(dashboard.access_key, Policy.of("topic:a", ["get"]))
        admin.grant_policy(dashboard.access_key, Policy.of("group:*", ["get"]))
        admin.create_group("billing-1")
    with Producer(server.endpoint, credentials=ROOT) as producer:
        producer.send("b", b"salary=1000000")
    with Admin(server.endpoint, credentials=dashboard) as admin:
        admin.get_group_lag("billing-1", "a")  # GET on both
        with pytest.raises(PermissionDeniedError) as refused:
            admin.get_group_lag("billing-1", "b")
        assert "GET topic 'b'" in refused.value.message
        admin.inspect_group("billing-1", "a")  # a group's runtime view reads like its lag
        with pytest.raises(PermissionDeniedError, match="GET topic 'b'"):
            admin.inspect_group("billing-1", "b")
        with pytest.raises(PermissionDeniedError, match="GET topic 'b'"):
            admin.message_history("b", "any-id")
        with pytest.raises(PermissionDeniedError) as refused:
            admin.peek_messages("a")
        assert "SUB topic 'a'" in refused.value.message
