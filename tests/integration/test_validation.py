"""Every bad input gets its exact gRPC status and a message naming what is allowed."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2

from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc

INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
def stubs(endpoint: str):  # type: ignore[no-untyped-def]
    channel = grpc.insecure_channel(endpoint)
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name="orders", queues=2))
    yield admin, messaging_pb2_grpc.MessagingServiceStub(channel)
    channel.close()


def _status(call, request):  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10)
    return info.value.code(), info.value.details()


def _msg(**kw):  # type: ignore[no-untyped-def]
    kw.setdefault("topic", "orders")
    kw.setdefault("body", b"x")
    return messaging_pb2.SendMessagesRequest(messages=[messaging_pb2.OutgoingMessage(**kw)])


def _d(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("", "empty"),
        ("a" * 128, "at most 127"),
        ("bad name", "invalid"),
        ("héllo", "invalid"),
        ("%RETRY%x", "reserved prefix"),
        ("%DLQ%x", "reserved prefix"),
        ("rmq_sys_x", "reserved prefix"),
    ],
)
def test_bad_topic_names_are_invalid_argument(stubs, name: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    admin, _ = stubs
    code, details = _status(admin.CreateTopic, admin_pb2.CreateTopicRequest(name=name, queues=1))
    assert code == INVALID
    assert expected in details


def test_bad_group_name_on_pop_is_invalid_argument(stubs) -> None:  # type: ignore[no-untyped-def]
    _, msg = stubs
    code, details = _status(msg.Pop, messaging_pb2.PopRequest(group="%DLQ%g", topic="orders"))
    assert code == INVALID and "reserved prefix" in details


@pytest.mark.parametrize(
    ("request_kw", "expected"),
    [
        ({"body": b""}, "empty"),
        ({"body": b"x" * (4 * 1024 * 1024 - 64 * 1024 + 1)}, "at most 4128768"),
        ({"properties": {f"k{i}": "v" for i in range(129)}}, "at most 128"),
        ({"properties": {"k": "v" * (16 * 1024)}}, "16 KiB"),
        ({"tag": "a|b"}, "no '|'"),
    ],
)
def test_bad_messages_are_invalid_argument(stubs, request_kw, expected: str) -> None:  # type: ignore[no-untyped-def]
    _, msg = stubs
    code, details = _status(msg.SendMessages, _msg(**request_kw))
    assert code == INVALID
    assert expected in details


def test_send_to_unknown_topic_is_not_found(stubs) -> None:  # type: ignore[no-untyped-def]
    _, msg = stubs
    code, details = _status(msg.SendMessages, _msg(topic="nope"))
    assert code == grpc.StatusCode.NOT_FOUND and "nope" in details


def test_pop_of_unknown_topic_is_not_found(stubs) -> None:  # type: ignore[no-untyped-def]
    _, msg = stubs
    code, _ = _status(msg.Pop, messaging_pb2.PopRequest(group="g", topic="nope"))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("request_kw", "expected"),
    [
        ({"max_messages": 0}, "max_messages 0 is below the minimum 1"),
        ({"max_messages": 33}, "max_messages 33 is above the maximum 32"),
        ({"invisible_duration": _d(0.2)}, "invisible_duration 0.2s is below the minimum 1s"),
        ({"invisible_duration": _d(12 * 3600 + 1)}, "above the maximum 43200s"),
        ({"long_polling_timeout": _d(31)}, "long_polling_timeout 31s is above the maximum 30s"),
        ({"long_polling_timeout": _d(-1)}, "below the minimum 0s"),
    ],
)
def test_out_of_range_pop_arguments_are_rejected_not_clamped(stubs, request_kw, expected) -> None:  # type: ignore[no-untyped-def]
    _, msg = stubs
    request = messaging_pb2.PopRequest(group="g", topic="orders", **request_kw)
    code, details = _status(msg.Pop, request)
    assert code == INVALID
    assert expected in details


def test_change_invisible_time_out_of_range_is_rejected(stubs) -> None:  # type: ignore[no-untyped-def]
    _, msg = stubs
    request = messaging_pb2.ChangeInvisibleTimeRequest(
        group="g", receipt_handle="x", invisible_duration=_d(-0.5)
    )
    code, details = _status(msg.ChangeInvisibleTime, request)
    assert code == INVALID and "below the minimum 0s" in details


@pytest.mark.parametrize(
    ("handle", "expected"),
    [
        ("not-a-handle", "malformed"),
        ("", "empty"),
        ("A" * 74, "signature does not match"),
    ],
)
def test_bad_receipt_handles_get_per_entry_invalid_argument(stubs, handle, expected) -> None:  # type: ignore[no-untyped-def]
    _admin, msg = stubs
    msg.Pop(messaging_pb2.PopRequest(group="g", topic="orders", long_polling_timeout=_d(0)))
    response = msg.Ack(messaging_pb2.AckRequest(group="g", receipt_handles=[handle]))
    (result,) = response.results
    assert result.code == "INVALID_ARGUMENT"
    assert expected in result.message


def test_forged_and_foreign_and_expired_handles_are_rejected(stubs) -> None:  # type: ignore[no-untyped-def]
    _admin, msg = stubs
    msg.SendMessages(_msg(body=b"a"))
    popped = msg.Pop(
        messaging_pb2.PopRequest(
            group="g", topic="orders", invisible_duration=_d(1), long_polling_timeout=_d(1)
        )
    )
    handle = popped.messages[0].receipt_handle
    forged = handle[:-2] + ("A" if handle[-2] != "A" else "B") + handle[-1]
    # Another group that exists: its ack of g's handle names the owner.
    msg.Pop(messaging_pb2.PopRequest(group="other", topic="orders", long_polling_timeout=_d(0)))
    foreign = msg.Ack(messaging_pb2.AckRequest(group="other", receipt_handles=[handle]))
    assert foreign.results[0].code == "INVALID_ARGUMENT"
    assert "belongs to group 'g'" in foreign.results[0].message
    bad = msg.Ack(messaging_pb2.AckRequest(group="g", receipt_handles=[forged]))
    assert bad.results[0].code == "INVALID_ARGUMENT"
    import time

    time.sleep(1.1)
    expired = msg.Ack(messaging_pb2.AckRequest(group="g", receipt_handles=[handle]))
    assert expired.results[0].code == "FAILED_PRECONDITION"
    assert "expired" in expired.results[0].message


def test_ack_without_handles_and_unknown_group(stubs) -> None:  # type: ignore[no-untyped-def]
    _, msg = stubs
    code, _ = _status(msg.Ack, messaging_pb2.AckRequest(group="g", receipt_handles=[]))
    assert code == INVALID
    code, _ = _status(msg.Ack, messaging_pb2.AckRequest(group="never", receipt_handles=["x"]))
    assert code == grpc.StatusCode.NOT_FOUND


def test_create_topic_twice_is_already_exists_and_bad_queue_count_invalid(stubs) -> None:  # type: ignore[no-untyped-def]
    admin, _ = stubs
    code, _ = _status(admin.CreateTopic, admin_pb2.CreateTopicRequest(name="orders", queues=2))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    code, details = _status(admin.CreateTopic, admin_pb2.CreateTopicRequest(name="t", queues=0))
    assert code == INVALID and "queues 0 is below the minimum 1" in details
    code, _ = _status(admin.CreateTopic, admin_pb2.CreateTopicRequest(name="t", queues=1025))
    assert code == INVALID


def test_create_group_bad_settings_are_invalid(stubs) -> None:  # type: ignore[no-untyped-def]
    admin, _ = stubs
    code, details = _status(
        admin.CreateGroup, admin_pb2.CreateGroupRequest(name="g", max_delivery_attempts=0)
    )
    assert code == INVALID and "max_delivery_attempts 0" in details
    code, details = _status(
        admin.CreateGroup, admin_pb2.CreateGroupRequest(name="g", retry_backoff=[_d(0.5)])
    )
    assert code == INVALID and "retry_backoff[0] 0.5s is below the minimum 1s" in details


def test_long_poll_limit_per_group_topic_is_resource_exhausted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from popmq.broker_core.config import BrokerConfig, LongPollingConfig
    from tests.support.server_thread import ServerThread

    server = ServerThread(
        tmp_path / "d", BrokerConfig(long_polling=LongPollingConfig(max_per_key=2))
    )
    endpoint = server.start()
    try:
        channel = grpc.insecure_channel(endpoint)
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        msg = messaging_pb2_grpc.MessagingServiceStub(channel)
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name="t", queues=1))
        request = messaging_pb2.PopRequest(group="g", topic="t", long_polling_timeout=_d(5))
        held = [msg.Pop.future(request, timeout=10) for _ in range(2)]
        deadline = __import__("time").monotonic() + 5
        while server.sync(lambda: server.broker.polling.held) < 2:
            assert __import__("time").monotonic() < deadline
        code, details = _status(msg.Pop, request)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "at most 2" in details
        admin.DeleteTopic(admin_pb2.DeleteTopicRequest(name="t"))
        for future in held:
            with pytest.raises(grpc.RpcError):
                future.result()
        channel.close()
    finally:
        server.stop()
