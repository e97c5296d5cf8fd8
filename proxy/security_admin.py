"""The user and policy RPCs of popmq.v1.AdminService, over a SecurityStore.

`UserAdmin` is mixed into proxy/admin.py's AdminServicer: CreateUser, UpdateUser,
DeleteUser, GetUser, ListUsers, GrantPolicy, RevokePolicy, ListPolicies. Only SUPER users
may call them, whatever a NORMAL user is granted (a NORMAL user allowed to create users
could create a SUPER one): the gate's table asks CLUSTER UPDATE / GET of them, and these
handlers refuse any principal that is not SUPER. Secrets go in, never out: a user is
shown with the fingerprint of its secret. Every mutation writes an audit line (event
"user.create", "user.update", "user.delete", "acl.grant", "acl.revoke"; audit.py's
`audited`), successful or not; the audit line drops the `secret_key` field by its name.
"""

from __future__ import annotations

import grpc

from popmq._gen.popmq.v1 import admin_pb2
from popmq.broker_core import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from popmq.grpc_calls.errors import rpc
from popmq.proxy import convert
from popmq.security.audit import audited
from popmq.security.model import (
    Action,
    Decision,
    Pattern,
    Policy,
    ResourceType,
    UserType,
    current_principal,
)
from popmq.security.records import UserRecord
from popmq.security.store import SecurityStore


def _require_super() -> None:
    principal = current_principal()
    if not principal.is_super:
        raise PermissionDeniedError(
            f"user {principal.access_key!r} may not manage users and policies: only SUPER users may"
        )


# -- conversions ----------------------------------------------------------------------------


def _suffix(enum: object, value: int, prefix: str, field: str) -> str:
    name_of = getattr(enum, "Name")  # noqa: B009 - protobuf enum wrappers type Name loosely
    try:
        name: str = name_of(value)
    except ValueError:
        raise InvalidArgumentError(
            f"{field} {value} is not a known value", field=field, value=value
        ) from None
    return name.removeprefix(prefix)


def user_type_from_proto(value: int) -> UserType | None:
    """The type a request asks for; None for USER_TYPE_UNSPECIFIED."""
    if value == admin_pb2.USER_TYPE_UNSPECIFIED:
        return None
    return UserType(_suffix(admin_pb2.UserType, value, "USER_TYPE_", "user_type"))


def policy_from_proto(policy: admin_pb2.Policy, *, for_revoke: bool = False) -> Policy:
    """A request's policy in the model's terms (store.check_policy checks the rest)."""
    if policy.resource_type == admin_pb2.RESOURCE_TYPE_UNSPECIFIED:
        allowed = "RESOURCE_TYPE_ANY, _CLUSTER, _TOPIC or _GROUP"
        raise InvalidArgumentError(
            f"policy.resource_type is unset: use {allowed}",
            field="policy.resource_type",
            allowed=allowed,
        )
    kind = ResourceType(
        _suffix(admin_pb2.ResourceType, policy.resource_type, "RESOURCE_TYPE_", "resource_type")
    )
    if policy.pattern == admin_pb2.RESOURCE_PATTERN_UNSPECIFIED:
        pattern = Pattern.LITERAL if policy.name else Pattern.ANY
    else:
        pattern = Pattern(
            _suffix(admin_pb2.ResourcePattern, policy.pattern, "RESOURCE_PATTERN_", "pattern")
        )
    actions: set[Action] = set()
    for i, action in enumerate(policy.actions):
        if action == admin_pb2.ACTION_UNSPECIFIED:
            raise InvalidArgumentError(
                f"policy.actions[{i}] is ACTION_UNSPECIFIED: use ACTION_PUB, _SUB, _CREATE, "
                "_UPDATE, _DELETE, _GET, _LIST or _ALL",
                field="policy.actions",
            )
        actions.add(Action(_suffix(admin_pb2.Action, action, "ACTION_", "policy.actions")))
    if not actions and not for_revoke:
        raise InvalidArgumentError(
            "policy.actions is empty: give at least one action to grant",
            field="policy.actions",
        )
    decision = Decision.ALLOW
    if policy.decision != admin_pb2.DECISION_UNSPECIFIED:
        decision = Decision(
            _suffix(admin_pb2.Decision, policy.decision, "DECISION_", "policy.decision")
        )
    return Policy(
        kind, pattern, policy.name, frozenset(actions), decision, tuple(policy.source_cidrs)
    )


_ACTION_ORDER = list(Action)
"""Actions in their declared order (PUB, SUB, CREATE, ...): how a policy shows them."""


def policy_to_proto(policy: Policy) -> admin_pb2.Policy:
    return admin_pb2.Policy(
        resource_type=f"RESOURCE_TYPE_{policy.resource_type.value}",
        pattern=f"RESOURCE_PATTERN_{policy.pattern.value}",
        name=policy.name,
        actions=[f"ACTION_{a.value}" for a in sorted(policy.actions, key=_ACTION_ORDER.index)],
        decision=f"DECISION_{policy.decision.value}",
        source_cidrs=policy.source_cidrs,
    )


def user_to_proto(record: UserRecord) -> admin_pb2.User:
    return admin_pb2.User(
        access_key=record.access_key,
        user_type=f"USER_TYPE_{record.user_type.value}",
        enabled=record.enabled,
        secret_fingerprint=record.fingerprint,
        policy_count=len(record.policies),
        create_time=convert.timestamp(record.create_time_ms),
        update_time=convert.timestamp(record.update_time_ms),
    )


class UserAdmin:
    """The user and policy RPCs (a mixin of AdminServicer, which sets `_security_store`)."""

    _security_store: SecurityStore | None = None

    def _users(self) -> SecurityStore:
        _require_super()
        if self._security_store is None:
            raise FailedPreconditionError("this server keeps no users (no security store)")
        return self._security_store

    @rpc
    @audited("user.create")
    async def CreateUser(
        self, request: admin_pb2.CreateUserRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateUserResponse:
        store = self._users()
        record = await store.create_user(
            request.access_key,
            request.secret_key,
            user_type=user_type_from_proto(request.user_type) or UserType.NORMAL,
            enabled=request.enabled if request.HasField("enabled") else True,
        )
        return admin_pb2.CreateUserResponse(user=user_to_proto(record))

    @rpc
    @audited("user.update")
    async def UpdateUser(
        self, request: admin_pb2.UpdateUserRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.UpdateUserResponse:
        store = self._users()
        record = await store.update_user(
            request.access_key,
            secret_key=request.secret_key if request.HasField("secret_key") else None,
            user_type=user_type_from_proto(request.user_type),
            enabled=request.enabled if request.HasField("enabled") else None,
        )
        return admin_pb2.UpdateUserResponse(user=user_to_proto(record))

    @rpc
    @audited("user.delete")
    async def DeleteUser(
        self, request: admin_pb2.DeleteUserRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteUserResponse:
        await self._users().delete_user(request.access_key)
        return admin_pb2.DeleteUserResponse()

    @rpc
    async def GetUser(
        self, request: admin_pb2.GetUserRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetUserResponse:
        record = self._record(self._users(), request.access_key)
        return admin_pb2.GetUserResponse(
            user=user_to_proto(record), policies=[policy_to_proto(p) for p in record.policies]
        )

    @rpc
    async def ListUsers(
        self, request: admin_pb2.ListUsersRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListUsersResponse:
        records = self._users().records()
        return admin_pb2.ListUsersResponse(
            users=[user_to_proto(records[k]) for k in sorted(records)]
        )

    @rpc
    @audited("acl.grant")
    async def GrantPolicy(
        self, request: admin_pb2.GrantPolicyRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GrantPolicyResponse:
        store = self._users()
        record = await store.grant(request.access_key, policy_from_proto(request.policy))
        return admin_pb2.GrantPolicyResponse(policies=[policy_to_proto(p) for p in record.policies])

    @rpc
    @audited("acl.revoke")
    async def RevokePolicy(
        self, request: admin_pb2.RevokePolicyRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.RevokePolicyResponse:
        store = self._users()
        policy = policy_from_proto(request.policy, for_revoke=True)
        record = await store.revoke(request.access_key, policy)
        return admin_pb2.RevokePolicyResponse(
            policies=[policy_to_proto(p) for p in record.policies]
        )

    @rpc
    async def ListPolicies(
        self, request: admin_pb2.ListPoliciesRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListPoliciesResponse:
        store = self._users()
        if request.access_key:
            chosen = [self._record(store, request.access_key)]
        else:
            records = store.records()
            chosen = [records[k] for k in sorted(records)]
        return admin_pb2.ListPoliciesResponse(
            users=[
                admin_pb2.UserPolicies(
                    access_key=r.access_key, policies=[policy_to_proto(p) for p in r.policies]
                )
                for r in chosen
            ]
        )

    @staticmethod
    def _record(store: SecurityStore, access_key: str) -> UserRecord:
        record = store.record(access_key)
        if record is None:
            raise NotFoundError(
                f"user {access_key!r} does not exist", field="access_key", value=access_key
            )
        return record
