"""bench.security_cost measures what it says: its NORMAL user's policies are what decide.

The benchmark's third configuration claims every call is evaluated against 20 policies and
that Pop's topic check goes through the one with source CIDRs (so the caller's address is
parsed). If a policy stopped matching, the benchmark would time refusals, or a shorter
path, without saying so. No server runs here and no timing is asserted.
"""

from __future__ import annotations

import pytest
from google.protobuf.duration_pb2 import Duration

from bench import security_cost
from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core import PermissionDeniedError
from popmq.proxy.security_admin import policy_from_proto
from popmq.security import acl, rpc_table
from popmq.security.model import Policy, Principal, User, UserType

_REQUESTS = {
    "/popmq.v1.AdminService/ListTopics": admin_pb2.ListTopicsRequest(),
    "/popmq.v1.MessagingService/SendMessages": messaging_pb2.SendMessagesRequest(
        messages=[messaging_pb2.OutgoingMessage(topic="bench", body=b"x")]
    ),
    "/popmq.v1.MessagingService/Pop": messaging_pb2.PopRequest(
        group="g", topic="empty", long_polling_timeout=Duration(seconds=0)
    ),
}


def _policies() -> list[Policy]:
    return [policy_from_proto(p.to_proto()) for p in security_cost.normal_user_policies()]


def _authorize(method: str, source: str) -> None:
    user = User("bench-app", "bench-app-secret-0123456789", UserType.NORMAL)
    principal = Principal(user.access_key, UserType.NORMAL, source)
    checks = rpc_table.checks(method, _REQUESTS[method])
    acl.authorize(principal, user, _policies(), checks)


def test_the_normal_user_holds_twenty_distinct_policies() -> None:
    policies = _policies()
    assert len(policies) == 20
    assert len(set(policies)) == 20
    assert {p.pattern.value for p in policies} == {"LITERAL", "PREFIXED", "ANY"}
    assert any(p.source_cidrs for p in policies)


@pytest.mark.parametrize("method", sorted(_REQUESTS))
def test_the_normal_user_may_make_each_measured_call_from_loopback(method: str) -> None:
    _authorize(method, "ipv4:127.0.0.1:40000")
    _authorize(method, "ipv6:%5B::1%5D:40000")


def test_pop_passes_only_through_the_policy_with_source_cidrs() -> None:
    with pytest.raises(PermissionDeniedError, match="SUB topic 'empty'"):
        _authorize("/popmq.v1.MessagingService/Pop", "ipv4:10.1.2.3:40000")


def test_each_ratio_is_the_median_of_the_per_run_ratios() -> None:
    names = [c.name for c in security_cost.CONFIGURATIONS]
    runs: security_cost.Runs = []
    # Per run, the second configuration costs 2x, 1x, 4x plaintext: median 2x. Its median
    # (300) over plaintext's (200) would say 1.5x.
    for base, other in ((100.0, 200.0), (300.0, 300.0), (200.0, 800.0)):
        run = {}
        for name in names:
            server = other if name == names[1] else base
            run[name] = {
                m: {"server": server, "client": 1.0, "rate": 1.0} for m in security_cost.METHODS
            }
        runs.append(run)
    table = security_cost.render(runs)
    assert f"| {names[1]} | 300 (x2.00) | 300 (x2.00) | 300 (x2.00) |" in table
    assert f"| {names[0]} | 200 (x1.00) | 200 (x1.00) | 200 (x1.00) |" in table
