"""The user and policy RPCs (proxy/security_admin.py) called on the servicer: only SUPER
principals may call them, secrets never come back, and requests are checked."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from popmq._gen.popmq.v1 import admin_pb2
from popmq.coordination.local_coordinator import LocalCoordinator
from popmq.proxy.admin import AdminServicer
from popmq.security.model import (
    ANONYMOUS_SUPER,
    Action,
    Pattern,
    Policy,
    Principal,
    ResourceType,
    UserType,
    set_principal,
)
from popmq.security.store import ClusterSecurityStore
from tests.unit.conftest import OpenBroker

SECRET = "the-secret-of-app"


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class Context:
    """The two calls the servicer's error boundary makes on a grpc.aio context."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


Call = Callable[[AdminServicer], Awaitable[Any]]

_EVERYTHING = admin_pb2.Policy(
    resource_type=admin_pb2.RESOURCE_TYPE_ANY,
    pattern=admin_pb2.RESOURCE_PATTERN_ANY,
    actions=[admin_pb2.ACTION_ALL],
)
CALLS: dict[str, Call] = {  # in an order a SUPER user's calls all succeed in
    "CreateUser": lambda s: s.CreateUser(
        admin_pb2.CreateUserRequest(access_key="eve", secret_key=SECRET), Context()
    ),
    "UpdateUser": lambda s: s.UpdateUser(
        admin_pb2.UpdateUserRequest(access_key="app", user_type=admin_pb2.USER_TYPE_SUPER),
        Context(),
    ),
    "GetUser": lambda s: s.GetUser(admin_pb2.GetUserRequest(access_key="app"), Context()),
    "ListUsers": lambda s: s.ListUsers(admin_pb2.ListUsersRequest(), Context()),
    "GrantPolicy": lambda s: s.GrantPolicy(
        admin_pb2.GrantPolicyRequest(access_key="eve", policy=_EVERYTHING), Context()
    ),
    "RevokePolicy": lambda s: s.RevokePolicy(
        admin_pb2.RevokePolicyRequest(access_key="eve", policy=_EVERYTHING), Context()
    ),
    "ListPolicies": lambda s: s.ListPolicies(admin_pb2.ListPoliciesRequest(), Context()),
    "DeleteUser": lambda s: s.DeleteUser(admin_pb2.DeleteUserRequest(access_key="eve"), Context()),
}


def test_every_user_and_policy_rpc_refuses_a_normal_principal(open_broker: OpenBroker) -> None:
    assert set(CALLS) == {
        "CreateUser", "UpdateUser", "DeleteUser", "GetUser", "ListUsers", "GrantPolicy",
        "RevokePolicy", "ListPolicies",
    }  # fmt: skip

    async def scenario() -> None:
        async with open_broker() as broker:
            store = ClusterSecurityStore(LocalCoordinator("t"))
            await store.start()
            await store.create_user("app", SECRET)
            servicer = AdminServicer(broker, security_store=store)
            # A NORMAL user, even one granted everything, may not manage users.
            await store.grant(
                "app",
                Policy(ResourceType.ANY, Pattern.ANY, "", frozenset({Action.ALL})),
            )
            set_principal(Principal("app", UserType.NORMAL, "ipv4:127.0.0.1:5555"))
            before = store.records()
            for name, call in CALLS.items():
                with pytest.raises(Aborted) as caught:
                    await call(servicer)
                assert caught.value.code is grpc.StatusCode.PERMISSION_DENIED, name
                assert caught.value.details == (
                    "user 'app' may not manage users and policies: only SUPER users may"
                ), name
            assert store.records() is before  # nothing changed
            set_principal(ANONYMOUS_SUPER)
            for call in CALLS.values():
                await call(servicer)
            await store.close()

    asyncio.run(scenario())


def test_user_rpcs_never_return_the_secret(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            store = ClusterSecurityStore(LocalCoordinator("t"))
            await store.start()
            servicer = AdminServicer(broker, security_store=store)
            created = await servicer.CreateUser(
                admin_pb2.CreateUserRequest(access_key="app", secret_key=SECRET), Context()
            )
            got = await servicer.GetUser(admin_pb2.GetUserRequest(access_key="app"), Context())
            listed = await servicer.ListUsers(admin_pb2.ListUsersRequest(), Context())
            for response in (created, got, listed):
                assert SECRET.encode() not in response.SerializeToString()
            assert created.user.secret_fingerprint == store.record("app").fingerprint  # type: ignore[union-attr]
            assert created.user.user_type == admin_pb2.USER_TYPE_NORMAL
            assert created.user.enabled
            await store.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (admin_pb2.Policy(actions=[admin_pb2.ACTION_PUB]), "policy.resource_type is unset"),
        (
            admin_pb2.Policy(resource_type=admin_pb2.RESOURCE_TYPE_TOPIC, name="t"),
            "policy.actions is empty",
        ),
        (
            admin_pb2.Policy(
                resource_type=admin_pb2.RESOURCE_TYPE_TOPIC,
                name="t",
                actions=[admin_pb2.ACTION_UNSPECIFIED],
            ),
            "policy.actions[0] is ACTION_UNSPECIFIED",
        ),
        (
            admin_pb2.Policy(resource_type=99, name="t", actions=[admin_pb2.ACTION_PUB]),
            "resource_type 99 is not a known value",
        ),
    ],
)
def test_grant_refuses_malformed_policies(
    open_broker: OpenBroker, policy: admin_pb2.Policy, message: str
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            store = ClusterSecurityStore(LocalCoordinator("t"))
            await store.start()
            await store.create_user("app", SECRET)
            servicer = AdminServicer(broker, security_store=store)
            with pytest.raises(Aborted) as caught:
                await servicer.GrantPolicy(
                    admin_pb2.GrantPolicyRequest(access_key="app", policy=policy), Context()
                )
            assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
            assert message in caught.value.details
            await store.close()

    asyncio.run(scenario())


def test_grant_defaults_pattern_from_the_name_and_decision_to_allow(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            store = ClusterSecurityStore(LocalCoordinator("t"))
            await store.start()
            await store.create_user("app", SECRET)
            servicer = AdminServicer(broker, security_store=store)
            for name in ("orders", ""):
                await servicer.GrantPolicy(
                    admin_pb2.GrantPolicyRequest(
                        access_key="app",
                        policy=admin_pb2.Policy(
                            resource_type=admin_pb2.RESOURCE_TYPE_TOPIC,
                            name=name,
                            actions=[admin_pb2.ACTION_SUB],
                        ),
                    ),
                    Context(),
                )
            listed = await servicer.ListPolicies(
                admin_pb2.ListPoliciesRequest(access_key="app"), Context()
            )
            policies = listed.users[0].policies
            assert [(p.pattern, p.name, p.decision) for p in policies] == [
                (admin_pb2.RESOURCE_PATTERN_LITERAL, "orders", admin_pb2.DECISION_ALLOW),
                (admin_pb2.RESOURCE_PATTERN_ANY, "", admin_pb2.DECISION_ALLOW),
            ]
            await store.close()

    asyncio.run(scenario())


def test_without_a_store_the_user_rpcs_fail_precondition(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            servicer = AdminServicer(broker)
            with pytest.raises(Aborted) as caught:
                await servicer.ListUsers(admin_pb2.ListUsersRequest(), Context())
            assert caught.value.code is grpc.StatusCode.FAILED_PRECONDITION

    asyncio.run(scenario())
