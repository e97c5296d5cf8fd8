"""The audit line, the audit file, and the count and log of denied requests."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from popmq._gen.popmq.v1 import admin_pb2
from popmq.broker_core import NotFoundError
from popmq.security import audit as audit_module
from popmq.security.audit import (
    AUDITED_METHODS,
    AuditFile,
    SecurityCollector,
    audit,
    audit_count,
    audited,
    denied,
    denied_count,
)
from popmq.security.model import Principal, UserType, set_principal


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(r.getMessage()) for r in self.records]


@pytest.fixture
def audit_lines() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("popmq.audit")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_an_audit_line_names_the_user_source_request_and_result(audit_lines: _Lines) -> None:
    def as_alice() -> None:
        set_principal(Principal("alice", UserType.NORMAL, "ipv4:10.0.0.7:5000"))
        audit("topic.delete", request={"name": "orders", "force": True}, result="ok")

    contextvars.copy_context().run(as_alice)
    (record,) = audit_lines.records
    assert record.levelno == logging.INFO and record.name == "popmq.audit"
    (entry,) = audit_lines.entries()
    assert entry["time"].endswith("Z")
    assert {k: v for k, v in entry.items() if k != "time"} == {
        "event": "topic.delete",
        "user": "alice",
        "source": "ipv4:10.0.0.7:5000",
        "request": {"name": "orders", "force": True},
        "result": "ok",
        "error": "",
    }


def test_anonymous_callers_are_named_and_an_explicit_peer_wins(audit_lines: _Lines) -> None:
    audit("group.create", request={}, result="ALREADY_EXISTS", error="exists", peer="ipv6:[::1]:9")
    (entry,) = audit_lines.entries()
    assert (entry["user"], entry["source"]) == ("anonymous", "ipv6:[::1]:9")
    assert (entry["result"], entry["error"]) == ("ALREADY_EXISTS", "exists")


def test_secret_named_fields_are_never_written_at_any_depth(
    audit_lines: _Lines, tmp_path: Path
) -> None:
    with AuditFile(tmp_path / "audit.log") as file:
        audit(
            "user.create",
            request={
                "access_key": "bob",
                "secret_key": "s3cr3t-1",
                "Password": "s3cr3t-2",
                "user": {"metrics_bearer_token": "s3cr3t-3", "name": "bob"},
                "items": [{"credentials": "s3cr3t-4", "ok": 1}],
            },
            result="ok",
        )
    written = (tmp_path / "audit.log").read_text() + audit_lines.records[0].getMessage()
    assert "s3cr3t" not in written
    (entry,) = audit_lines.entries()
    assert entry["request"] == {"access_key": "bob", "user": {"name": "bob"}, "items": [{"ok": 1}]}
    assert file.path == tmp_path / "audit.log"


def test_long_values_are_cut_so_a_line_stays_small(audit_lines: _Lines) -> None:
    audit(
        "group.update",
        request={"name": "x" * 10_000, "subscriptions": list(range(1000))},
        result="INVALID_ARGUMENT",
    )
    (record,) = audit_lines.records
    assert len(record.getMessage()) < 2000
    (entry,) = audit_lines.entries()
    assert entry["request"]["name"].endswith("(10000 characters)")
    assert entry["request"]["subscriptions"][-1] == "... 1000 items in all"


def test_the_audit_file_is_appended_one_line_each_and_created_private(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    with AuditFile(path):
        audit("topic.create", request={"name": "a"}, result="ok")
    with AuditFile(path):
        audit("topic.create", request={"name": "b\nc"}, result="ok")
    audit("topic.create", request={"name": "after close"}, result="ok")
    lines = path.read_text().splitlines()
    assert [json.loads(line)["request"]["name"] for line in lines] == ["a", "b\nc"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_an_audit_file_that_cannot_be_opened_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot open security\.audit_log_file .*missing"):
        AuditFile(tmp_path / "missing" / "audit.log")


class _Context:
    """What `audited` reads of a grpc.aio.ServicerContext."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:4242"

    def code(self) -> grpc.StatusCode | None:
        return None

    def details(self) -> str:
        return ""


def test_audited_writes_ok_or_the_error_code_and_lets_the_error_through(
    audit_lines: _Lines,
) -> None:
    class Servicer:
        @audited("topic.delete")
        async def DeleteTopic(
            self, request: admin_pb2.DeleteTopicRequest, context: Any
        ) -> admin_pb2.DeleteTopicResponse:
            if request.name == "missing":
                raise NotFoundError("topic missing does not exist")
            return admin_pb2.DeleteTopicResponse()

    servicer = Servicer()
    asyncio.run(servicer.DeleteTopic(admin_pb2.DeleteTopicRequest(name="orders"), _Context()))
    with pytest.raises(NotFoundError):
        asyncio.run(
            servicer.DeleteTopic(
                admin_pb2.DeleteTopicRequest(name="missing", force=True), _Context()
            )
        )
    ok, failed = audit_lines.entries()
    assert ok["request"] == {"name": "orders"} and ok["result"] == "ok"
    assert ok["source"] == "ipv4:127.0.0.1:4242"
    assert failed["request"] == {"name": "missing", "force": True}
    assert (failed["result"], failed["error"]) == ("NOT_FOUND", "topic missing does not exist")


def test_every_admin_mutation_is_in_the_audited_table_and_reads_are_not() -> None:
    service = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]
    reads = {
        "GetTopic", "ListTopics", "GetGroup", "ListGroups", "GetGroupLag", "InspectGroup",
        "GetMessageHistory", "PeekMessages",
        "QueryMessage", "QueryMessagesByKey", "GetServerInfo", "GetClusterStatus",
        "GetUser", "ListUsers", "ListPolicies", "ListTransactions", "GetHalfMessage",
    }  # fmt: skip
    for method in service.methods:
        full = f"/popmq.v1.AdminService/{method.name}"
        assert (full in AUDITED_METHODS) != (method.name in reads), (
            f"{method.name}: a new admin RPC must be either audited (a mutation: add it to "
            "AUDITED_METHODS and decorate it with @audited) or listed here as a read"
        )


def test_denied_requests_are_counted_by_method_and_code_and_exported() -> None:
    method = "/popmq.v1.MessagingService/SendMessages"
    before = denied_count(method, "PERMISSION_DENIED")
    denied(method, "PERMISSION_DENIED", peer="ipv4:10.0.0.1:1")
    denied(method, "PERMISSION_DENIED")
    assert denied_count(method, "PERMISSION_DENIED") == before + 2
    registry = CollectorRegistry()
    registry.register(SecurityCollector())
    text = generate_latest(registry).decode()
    assert (
        f'popmq_requests_denied_total{{code="PERMISSION_DENIED",method="{method}"}} '
        f"{float(before + 2)}" in text
    )
    assert "popmq_audit_events_total" in text


def test_a_denied_code_other_than_the_two_is_refused() -> None:
    with pytest.raises(ValueError, match="is not one of PERMISSION_DENIED, UNAUTHENTICATED"):
        denied("/x.Y/Z", "NOT_FOUND")


def test_denied_requests_are_logged_at_most_once_a_minute_per_method_and_code(
    caplog: pytest.LogCaptureFixture,
) -> None:
    method = "/popmq.v1.AdminService/ListTopics-rate-test"
    with caplog.at_level(logging.WARNING, logger=audit_module.__name__):
        for _ in range(5):
            denied(method, "UNAUTHENTICATED", detail="no authorization header")
        denied(method, "PERMISSION_DENIED", detail="no policy")
    lines = [r for r in caplog.records if method in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING]
    assert "UNAUTHENTICATED" in lines[0].getMessage()
    assert "no authorization header" in lines[0].getMessage()
    assert "PERMISSION_DENIED" in lines[1].getMessage()


def test_the_denied_series_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_module, "_MAX_DENIED_SERIES", 0)
    before = denied_count("other", "UNAUTHENTICATED")
    denied("/made.Up/Method1", "UNAUTHENTICATED")
    denied("/made.Up/Method2", "UNAUTHENTICATED")
    assert denied_count("other", "UNAUTHENTICATED") == before + 2
    assert denied_count("/made.Up/Method1", "UNAUTHENTICATED") == 0


def test_a_mutation_refused_permission_denied_is_audited_unauthenticated_is_not(
    audit_lines: _Lines,
) -> None:
    before = audit_count("topic.delete", "PERMISSION_DENIED")
    method = "/popmq.v1.AdminService/DeleteTopic"
    denied(method, "UNAUTHENTICATED", peer="ipv4:10.9.9.9:1")
    assert audit_lines.records == []
    denied(
        method,
        "PERMISSION_DENIED",
        peer="ipv4:10.9.9.9:1",
        detail="DELETE on TOPIC orders",
        request={"name": "orders"},
    )
    (entry,) = audit_lines.entries()
    assert entry["event"] == "topic.delete"
    assert (entry["result"], entry["error"]) == ("PERMISSION_DENIED", "DELETE on TOPIC orders")
    assert entry["source"] == "ipv4:10.9.9.9:1"
    assert audit_count("topic.delete", "PERMISSION_DENIED") == before + 1


def test_a_huge_request_is_read_only_as_far_as_its_audit_line_keeps() -> None:
    subscriptions = [admin_pb2.Subscription(topic=f"t{i:06d}" + "x" * 400) for i in range(20_000)]
    request = admin_pb2.CreateGroupRequest(name="g", subscriptions=subscriptions)
    assert request.ByteSize() > 64 * 1024
    fields = audit_module.request_fields(request)
    kept = fields["subscriptions"]
    assert isinstance(kept, list) and len(kept) == 33
    assert kept[-1] == "... 20000 items in all"
    assert kept[0] == {"topic": "t000000" + "x" * 249 + "... (407 characters)"}
    assert fields["name"] == "g"
