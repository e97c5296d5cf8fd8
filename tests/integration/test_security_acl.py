"""Users and policies on a real server: the `popmq user` / `popmq acl` CLI, durability in the
store across a restart, audit lines without secrets, and the authorizer over the server's
own store deciding real requests (the receipt-handle group rule included).

Authentication is off here (the gate is the authn part's): every call is the anonymous
SUPER, so the admin RPCs run, and the authorizer is asked directly for a NORMAL principal.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from popmq import Admin, Policy, Producer
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.broker_core import PermissionDeniedError
from popmq.security.model import Principal, UserType
from popmq.security.store import AclAuthorizer, LocalSecurityStore
from tests.integration.test_admin_cli import Cli
from tests.support.server_thread import ServerThread

ACK = "/popmq.v1.MessagingService/Ack"
POP = "/popmq.v1.MessagingService/Pop"
SEND = "/popmq.v1.MessagingService/SendMessages"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def audit_lines() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("popmq.audit")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_cli_manages_users_and_policies_durably_and_audited_without_secrets(
    server: ServerThread, capsys: pytest.CaptureFixture[str], audit_lines: _Lines
) -> None:
    popmq = Cli(server.endpoint, capsys)
    created = popmq.json("user", "create", "billing-app", "--generate-secret")
    secret = created.pop("secret_key")  # shown once, at creation, because it was generated
    assert len(secret) >= 8
    assert created["secret_fingerprint"] == hashlib.sha256(secret.encode()).hexdigest()[:16]
    assert (created["user_type"], created["enabled"]) == ("normal", True)

    granted = popmq("acl", "grant", "billing-app", "topic:orders", "--actions", "SUB")
    assert granted.startswith("granted ALLOW sub on topic:orders to billing-app")
    popmq("acl", "grant", "billing-app", "group:billing-*", "--actions", "sub,get")
    denied = popmq.json(
        "acl", "grant", "billing-app", "topic:orders", "--actions", "sub", "--deny",
        "--source", "10.0.0.0/8",
    )  # fmt: skip
    assert [p["decision"] for p in denied["policies"]] == ["allow", "allow", "deny"]
    listed = popmq.json("acl", "list", "billing-app")
    assert listed == {"billing-app": denied["policies"]}
    assert listed["billing-app"][1] == {
        "resource_type": "group",
        "name": "billing-",
        "pattern": "prefixed",
        "actions": ["sub", "get"],
        "decision": "allow",
        "source_cidrs": [],
    }
    popmq(
        "acl", "revoke", "billing-app", "topic:orders", "--deny", "--source", "10.0.0.0/8"
    )  # fmt: skip
    missing = popmq("acl", "revoke", "billing-app", "topic:other", "--actions", "pub", code=3)
    assert "user 'billing-app' has no ALLOW policy on topic 'other'" in missing
    popmq("user", "update", "billing-app", "--disable")
    users = popmq.json("user", "list")
    assert [(u["access_key"], u["enabled"], u["policy_count"]) for u in users] == [
        ("billing-app", False, 2)
    ]
    assert "secret_key" not in users[0] and secret not in popmq("user", "list")
    assert secret not in popmq("user", "describe", "billing-app", "--json")

    # Durable: the store is the broker's RocksDB; a restart reads the users back.
    popmq.endpoint = server.restart()
    assert popmq.json("acl", "list") == {"billing-app": listed["billing-app"][:2]}
    assert popmq.json("user", "describe", "billing-app")["enabled"] is False
    popmq("user", "delete", "billing-app")
    assert popmq.json("user", "list") == []

    events = [json.loads(line) for line in audit_lines.lines]
    assert [(e["event"], e["result"]) for e in events if e["result"] == "ok"] == [
        ("user.create", "ok"),
        ("acl.grant", "ok"),
        ("acl.grant", "ok"),
        ("acl.grant", "ok"),
        ("acl.revoke", "ok"),
        ("user.update", "ok"),
        ("user.delete", "ok"),
    ]
    assert [e["result"] for e in events if e["event"] == "acl.revoke"] == ["ok", "NOT_FOUND"]
    assert events[0]["request"] == {  # no secret_key field
        "access_key": "billing-app",
        "user_type": "USER_TYPE_NORMAL",
        "enabled": True,
    }
    assert events[2]["request"]["policy"]["actions"] == ["ACTION_SUB", "ACTION_GET"]
    assert all(secret not in line for line in audit_lines.lines)


def test_cli_refuses_bad_resources_and_actions_saying_what_is_allowed(
    endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    popmq = Cli(endpoint, capsys)
    popmq("user", "create", "app", "--generate-secret")
    assert "use some of pub, sub" in popmq(
        "acl", "grant", "app", "topic:a", "--actions", "x", code=2
    )
    assert "TYPE:NAME, TYPE:PREFIX*" in popmq(
        "acl", "grant", "app", "queue:a", "--actions", "pub", code=4
    )
    assert "is not a network" in popmq(
        "acl", "grant", "app", "topic:a", "--actions", "pub", "--source", "10.0.0.1/8", code=4
    )


def _principal(access_key: str) -> Principal:
    return Principal(access_key, UserType.NORMAL, "ipv4:127.0.0.1:50000")


def test_a_user_with_pub_on_a_may_send_to_a_only_and_receive_nothing(server: ServerThread) -> None:
    store = server.server.security_store  # type: ignore[union-attr]
    assert isinstance(store, LocalSecurityStore)
    authorizer = AclAuthorizer(store)
    with Admin(server.endpoint) as admin:
        admin.create_user("producer", "producer-secret")
        admin.grant_policy("producer", Policy.of("topic:a", ["pub"]))
    app = _principal("producer")

    def send(topic: str) -> messaging_pb2.SendMessagesRequest:
        return messaging_pb2.SendMessagesRequest(
            messages=[messaging_pb2.OutgoingMessage(topic=topic, body=b"x")]
        )

    authorizer.authorize(app, authorizer.checks(SEND, send("a")))
    with pytest.raises(PermissionDeniedError, match="may not PUB topic 'b': no policy allows"):
        authorizer.authorize(app, authorizer.checks(SEND, send("b")))
    with pytest.raises(PermissionDeniedError, match="may not SUB topic 'a'"):
        authorizer.authorize(
            app, authorizer.checks(POP, messaging_pb2.PopRequest(topic="a", group="g"))
        )
    # A change made through the admin RPC applies to the next check at once.
    with Admin(server.endpoint) as admin:
        admin.grant_policy("producer", Policy.of("topic:a", ["pub"], deny=True))
    with pytest.raises(PermissionDeniedError, match="policy DENY PUB on topic 'a' denies it"):
        authorizer.authorize(app, authorizer.checks(SEND, send("a")))


def test_a_receipt_handle_is_usable_only_in_its_group_by_a_user_allowed_to_sub_it(
    server: ServerThread,
) -> None:
    store = server.server.security_store  # type: ignore[union-attr]
    authorizer = AclAuthorizer(store)  # type: ignore[arg-type]
    with Admin(server.endpoint) as admin:
        admin.create_topic("orders")
        admin.create_group("mine")
        admin.create_group("theirs")
        admin.create_user("consumer", "consumer-secret")
        admin.grant_policy("consumer", Policy.of("topic:orders", ["sub"]))
        admin.grant_policy("consumer", Policy.of("group:mine", ["sub"]))
    with Producer(server.endpoint) as producer:
        producer.send("orders", b"x")
    app = _principal("consumer")
    with grpc.insecure_channel(server.endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        pop = messaging_pb2.PopRequest(topic="orders", group="mine", max_messages=1)
        authorizer.authorize(app, authorizer.checks(POP, pop))
        popped: Any = stub.Pop(pop)
        handle = popped.messages[0].receipt_handle

        # Naming another group: the user may not SUB it, so the gate refuses the ack...
        ack_theirs = messaging_pb2.AckRequest(group="theirs", receipt_handles=[handle])
        with pytest.raises(PermissionDeniedError, match="may not SUB group 'theirs'"):
            authorizer.authorize(app, authorizer.checks(ACK, ack_theirs))
        # ...and a user who may SUB both groups still cannot use the handle in the other
        # one: the broker refuses a handle whose signed group is not the request's.
        [result] = stub.Ack(ack_theirs).results
        assert result.code == "INVALID_ARGUMENT" and "belongs to group 'mine'" in result.message
        ack_mine = messaging_pb2.AckRequest(group="mine", receipt_handles=[handle])
        authorizer.authorize(app, authorizer.checks(ACK, ack_mine))
        assert [r.code for r in stub.Ack(ack_mine).results] == ["OK"]
