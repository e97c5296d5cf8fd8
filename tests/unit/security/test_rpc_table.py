"""The RPC -> (resource, action) table (security/rpc_table.py): complete, well-formed,
and what key requests need; docs/security.md shows exactly this table."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as v2def
from popmq._gen.apache.rocketmq.v2 import service_pb2 as v2
from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core import InvalidArgumentError
from popmq.grpc_calls.errors import Undecodable, UndecodableRequestError
from popmq.proxy.send_request import SendRequest, SendStreamRequest
from popmq.security import rpc_table
from popmq.security.model import Action, Check, Resource, ResourceType

DOCS = Path(__file__).resolve().parents[3] / "docs" / "security.md"
SERVICES = [
    messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"],
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"],
    v2.DESCRIPTOR.services_by_name["MessagingService"],
]
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
PUB, SUB, GET = Action.PUB, Action.SUB, Action.GET


def served_methods() -> dict[str, descriptor.MethodDescriptor]:
    return {
        f"/{service.full_name}/{method.name}": method
        for service in SERVICES
        for method in service.methods
    }


def test_every_rpc_of_the_served_services_has_a_rule() -> None:
    methods = served_methods()
    missing = sorted(set(methods) - set(rpc_table.TABLE))
    assert not missing, f"RPCs without an access rule in security/rpc_table.py: {missing}"
    unknown = sorted(set(rpc_table.TABLE) - set(methods))
    assert not unknown, f"rules for RPCs no service has: {unknown}"
    assert {s.full_name for s in SERVICES} == set(rpc_table.SERVICES)


def _field(message: descriptor.Descriptor, name: str) -> descriptor.FieldDescriptor:
    field = message.fields_by_name.get(name)
    assert field is not None, f"{message.full_name} has no field {name!r}"
    return field


@pytest.mark.parametrize("method", sorted(served_methods()))
def test_every_rule_names_fields_its_request_has(method: str) -> None:
    request = served_methods()[method].input_type
    for need in rpc_table.TABLE[method].needs:
        assert need.actions, method
        message = request
        for segment in need.when.split(".") if need.when else ():
            field = _field(message, segment)
            assert field.message_type is not None and not field.is_repeated, (method, segment)
            message = field.message_type
        if not need.path:
            continue
        message = request
        segments = need.path.split(".")
        for i, segment in enumerate(segments):
            field = _field(message, segment.removesuffix("[]"))
            assert field.is_repeated == segment.endswith("[]"), (method, need.path)
            if i < len(segments) - 1:
                assert field.message_type is not None, (method, need.path)
                message = field.message_type
            else:
                assert field.type == descriptor.FieldDescriptor.TYPE_STRING, (method, need.path)


@pytest.mark.parametrize("method", sorted(served_methods()))
def test_every_rule_runs_on_an_empty_request(method: str) -> None:
    # An empty request is refused by its handler; here it must only not crash the rule.
    request_class = {
        s.full_name: m for s, m in zip(SERVICES, (messaging_pb2, admin_pb2, v2), strict=True)
    }[method[1:].partition("/")[0]]
    request = getattr(request_class, served_methods()[method].input_type.name)()
    for check in rpc_table.checks(method, request):
        assert isinstance(check, Check)


def checks_of(method: str, request: object) -> list[Check]:
    return list(rpc_table.checks(method, request))


def topic(name: str, action: Action, *alternatives: Action) -> Check:
    return Check(Resource(TOPIC, name), action, alternatives)


def group(name: str, action: Action, *alternatives: Action) -> Check:
    return Check(Resource(GROUP, name), action, alternatives)


def test_v1_send_needs_pub_on_every_topic_once() -> None:
    request = messaging_pb2.SendMessagesRequest(
        messages=[
            messaging_pb2.OutgoingMessage(topic="a"),
            messaging_pb2.OutgoingMessage(topic="b"),
            messaging_pb2.OutgoingMessage(topic="a"),
        ]
    )
    assert checks_of("/popmq.v1.MessagingService/SendMessages", request) == [
        topic("a", PUB),
        topic("b", PUB),
    ]


def test_v1_sends_as_the_server_reads_them_need_the_same() -> None:
    """SendMessages and SendStream requests reach the gate as send_request.py reads them
    (not generated messages): they are checked all the same."""
    send = messaging_pb2.SendMessagesRequest(
        messages=[messaging_pb2.OutgoingMessage(topic=t) for t in ("a", "b", "a")]
    )
    read = SendRequest.FromString(send.SerializeToString())
    assert checks_of("/popmq.v1.MessagingService/SendMessages", read) == [
        topic("a", PUB),
        topic("b", PUB),
    ]
    stream = messaging_pb2.SendStreamRequest(request_id=1, send=send).SerializeToString()
    method = "/popmq.v1.MessagingService/SendStream"
    assert checks_of(method, SendStreamRequest.FromString(stream)) == [
        topic("a", PUB),
        topic("b", PUB),
    ]
    assert checks_of(method, SendStreamRequest.FromString(b"\x08\x01")) == []  # no send


def test_v1_pop_needs_sub_on_topic_and_group_and_acks_the_group() -> None:
    pop = messaging_pb2.PopRequest(group="g", topic="t", ack_receipt_handles=["h"])
    assert checks_of("/popmq.v1.MessagingService/Pop", pop) == [topic("t", SUB), group("g", SUB)]
    ack = messaging_pb2.AckRequest(group="g", receipt_handles=["h"])
    assert checks_of("/popmq.v1.MessagingService/Ack", ack) == [group("g", SUB)]


def test_v1_pop_stream_rule_applies_per_request_message() -> None:
    method = "/popmq.v1.MessagingService/PopStream"
    pop = messaging_pb2.PopStreamRequest(
        request_id=1, pop=messaging_pb2.PopRequest(group="g", topic="t")
    )
    ack = messaging_pb2.PopStreamRequest(request_id=2, ack=messaging_pb2.AckRequest(group="g2"))
    cancel = messaging_pb2.PopStreamRequest(request_id=1, cancel=messaging_pb2.PopStreamCancel())
    assert checks_of(method, pop) == [topic("t", SUB), group("g", SUB)]
    assert checks_of(method, ack) == [group("g2", SUB)]
    assert checks_of(method, cancel) == []


def test_v1_heartbeat_needs_the_group_and_each_topic() -> None:
    request = messaging_pb2.HeartbeatRequest(client_id="c", group="g", topics=["t1", "t2"])
    assert checks_of("/popmq.v1.MessagingService/Heartbeat", request) == [
        group("g", SUB),
        topic("t1", SUB),
        topic("t2", SUB),
    ]


def test_v1_admin_mapping() -> None:
    admin = "/popmq.v1.AdminService/"
    cases = {
        "CreateTopic": (admin_pb2.CreateTopicRequest(name="t"), [topic("t", Action.CREATE)]),
        "PurgeTopic": (admin_pb2.PurgeTopicRequest(name="t"), [topic("t", Action.DELETE)]),
        "ListTopics": (admin_pb2.ListTopicsRequest(), [topic("", Action.LIST)]),
        "ResetOffsets": (
            admin_pb2.ResetOffsetsRequest(group="g", topic="t"),
            [group("g", Action.UPDATE), topic("t", SUB)],
        ),
        "PeekMessages": (admin_pb2.PeekMessagesRequest(topic="t"), [topic("t", SUB)]),
        "GetServerInfo": (
            admin_pb2.GetServerInfoRequest(),
            [Check(Resource(CLUSTER), GET)],
        ),
        "CreateUser": (
            admin_pb2.CreateUserRequest(access_key="a"),
            [Check(Resource(CLUSTER), Action.UPDATE)],
        ),
        "ListPolicies": (admin_pb2.ListPoliciesRequest(), [Check(Resource(CLUSTER), GET)]),
    }
    for method, (request, expected) in cases.items():
        assert checks_of(admin + method, request) == expected, method
    peek = admin_pb2.PeekMessagesRequest(topic="t", group="g")
    assert checks_of(admin + "PeekMessages", peek) == [topic("t", SUB), group("g", GET)]


def _resource(name: str) -> v2def.Resource:
    return v2def.Resource(name=name)


def test_v2_mapping_follows_rocketmq() -> None:
    v2m = "/apache.rocketmq.v2.MessagingService/"
    queue = v2def.MessageQueue(topic=_resource("t"))
    cases = {
        "SendMessage": (
            v2.SendMessageRequest(
                messages=[v2def.Message(topic=_resource("t")), v2def.Message(topic=_resource("u"))]
            ),
            [topic("t", PUB), topic("u", PUB)],
        ),
        "EndTransaction": (v2.EndTransactionRequest(topic=_resource("t")), [topic("t", PUB)]),
        "RecallMessage": (v2.RecallMessageRequest(topic=_resource("t")), [topic("t", PUB)]),
        "ReceiveMessage": (
            v2.ReceiveMessageRequest(group=_resource("g"), message_queue=queue),
            [topic("t", SUB), group("g", SUB)],
        ),
        "AckMessage": (
            v2.AckMessageRequest(group=_resource("g"), topic=_resource("t")),
            [topic("t", SUB), group("g", SUB)],
        ),
        "ForwardMessageToDeadLetterQueue": (
            v2.ForwardMessageToDeadLetterQueueRequest(group=_resource("g"), topic=_resource("t")),
            [topic("t", SUB), group("g", SUB)],
        ),
        "QueryAssignment": (
            v2.QueryAssignmentRequest(group=_resource("g"), topic=_resource("t")),
            [topic("t", SUB), group("g", SUB)],
        ),
        "ChangeInvisibleDuration": (
            v2.ChangeInvisibleDurationRequest(group=_resource("g"), topic=_resource("t")),
            [group("g", SUB)],
        ),
        "Heartbeat": (v2.HeartbeatRequest(group=_resource("g")), [group("g", SUB)]),
        "NotifyClientTermination": (
            v2.NotifyClientTerminationRequest(group=_resource("g")),
            [group("g", SUB)],
        ),
        "QueryRoute": (v2.QueryRouteRequest(topic=_resource("t")), [topic("t", PUB, SUB)]),
    }
    for method, (request, expected) in cases.items():
        assert checks_of(v2m + method, request) == expected, method
    producer = v2.HeartbeatRequest(client_type=v2def.PRODUCER)
    assert checks_of(v2m + "Heartbeat", producer) == []
    assert checks_of(v2m + "NotifyClientTermination", v2.NotifyClientTerminationRequest()) == []


def test_v2_telemetry_checks_settings_commands_only() -> None:
    method = "/apache.rocketmq.v2.MessagingService/Telemetry"
    publishing = v2.TelemetryCommand(
        settings=v2def.Settings(
            publishing=v2def.Publishing(topics=[_resource("a"), _resource("b")])
        )
    )
    subscription = v2.TelemetryCommand(
        settings=v2def.Settings(
            subscription=v2def.Subscription(
                group=_resource("g"),
                subscriptions=[v2def.SubscriptionEntry(topic=_resource("t"))],
            )
        )
    )
    other = v2.TelemetryCommand(thread_stack_trace=v2.ThreadStackTrace(nonce="n"))
    assert checks_of(method, publishing) == [topic("a", PUB), topic("b", PUB)]
    assert checks_of(method, subscription) == [group("g", SUB), topic("t", SUB)]
    assert checks_of(method, other) == []


def test_unmapped_method_needs_all_on_the_cluster() -> None:
    assert checks_of("/popmq.v1.AdminService/NoSuchThing", admin_pb2.ListTopicsRequest()) == [
        Check(Resource(CLUSTER), Action.ALL)
    ]


def test_undecodable_request_needs_nothing_its_handler_refuses_it() -> None:
    undecodable = Undecodable(UndecodableRequestError("junk"))
    assert isinstance(undecodable.error, InvalidArgumentError)
    assert checks_of("/popmq.v1.MessagingService/Pop", undecodable) == []


def test_docs_show_the_table_of_the_code() -> None:
    text = DOCS.read_text()
    start, end = "<!-- rpc-table:start -->\n", "<!-- rpc-table:end -->"
    assert start in text and end in text, f"{DOCS} lacks the rpc-table markers"
    shown = text[text.index(start) + len(start) : text.index(end)]
    assert shown == rpc_table.markdown_table(), (
        "docs/security.md's RPC table differs from security/rpc_table.py: paste the "
        "output of `python -m popmq.security.rpc_table` between its markers"
    )
