"""The console's users and policies pages, for SUPER users only (the user and policy RPCs
refuse every NORMAL user, whatever its policies; the console offers them none of it).

ListUsers and GetUser show the stored users (the root user of `[security]` is not stored)
with their secret's fingerprint, never the secret; GrantPolicy and RevokePolicy change a
user's access control list. Each runs as the visitor through `AdminActions`, audited
(`acl.grant`, `acl.revoke`) as over gRPC.

Runs on the event loop with the console (app.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from popmq._gen.popmq.v1 import admin_pb2
from popmq.console import forms
from popmq.console.actions import ActionRefused

if TYPE_CHECKING:
    from popmq.console.app import Console, Visitor

RESOURCE_TYPES = ("TOPIC", "GROUP", "CLUSTER", "ANY")
PATTERNS = ("LITERAL", "PREFIXED", "ANY")
ACTIONS = ("PUB", "SUB", "CREATE", "UPDATE", "DELETE", "GET", "LIST", "ALL")
DECISIONS = ("ALLOW", "DENY")
MAX_CIDRS = 32


@dataclass(frozen=True, slots=True)
class PolicyRow:
    """One policy of a user's page, with the fields its revoke form names it by."""

    resource_type: str
    pattern: str
    name: str
    actions: tuple[str, ...]
    decision: str
    cidrs: str

    @classmethod
    def of(cls, policy: admin_pb2.Policy) -> PolicyRow:
        return cls(
            resource_type=admin_pb2.ResourceType.Name(policy.resource_type).removeprefix(
                "RESOURCE_TYPE_"
            ),
            pattern=admin_pb2.ResourcePattern.Name(policy.pattern).removeprefix(
                "RESOURCE_PATTERN_"
            ),
            name=policy.name,
            actions=tuple(admin_pb2.Action.Name(a).removeprefix("ACTION_") for a in policy.actions),
            decision=admin_pb2.Decision.Name(policy.decision).removeprefix("DECISION_"),
            cidrs=" ".join(policy.source_cidrs),
        )


def _choice(form: FormData, name: str, allowed: tuple[str, ...]) -> str:
    value = str(form.get(name) or "")
    if value not in allowed:
        raise forms.invalid(f"{name} {value[:20]!r} is not one of {', '.join(allowed)}")
    return value


def policy_of(form: FormData, *, with_actions: bool) -> admin_pb2.Policy:
    """The policy a grant or revoke form names (see the user page's forms)."""
    resource_type = "RESOURCE_TYPE_" + _choice(form, "resource_type", RESOURCE_TYPES)
    pattern = "RESOURCE_PATTERN_" + _choice(form, "pattern", PATTERNS)
    decision = "DECISION_" + _choice(form, "decision", DECISIONS)
    cidrs = forms.text(form, "cidrs").replace(",", " ").split()
    if len(cidrs) > MAX_CIDRS:
        raise forms.invalid(f"{len(cidrs)} source networks; at most {MAX_CIDRS}")
    actions: list[str] = []
    if with_actions:
        chosen = [str(a) for a in form.getlist("actions")]
        if not chosen:
            raise forms.invalid("choose at least one action to grant")
        for action in chosen:
            if action not in ACTIONS:
                raise forms.invalid(f"action {action[:20]!r} is not one of {', '.join(ACTIONS)}")
            actions.append("ACTION_" + action)
    policy = admin_pb2.Policy(
        resource_type=resource_type,
        pattern=pattern,
        name=forms.text(form, "resource_name"),
        decision=decision,
        source_cidrs=cidrs,
        actions=actions,
    )
    return policy


class UserPages:
    """The user routes of one console (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.actions = console.actions

    def routes(self) -> list[Route]:
        return [
            Route("/users", self.users, methods=["GET"]),
            Route("/users/view", self.user_page, methods=["GET"]),
            Route("/users/grant", self.grant, methods=["POST"]),
            Route("/users/revoke", self.revoke, methods=["POST"]),
        ]

    @staticmethod
    def _super_only(visitor: Visitor) -> None:
        """The servicer refuses NORMAL users; the console says so before asking."""
        if not visitor.principal.is_super:
            raise ActionRefused(
                "PERMISSION_DENIED",
                f"user {visitor.principal.access_key!r} is not a SUPER user: only SUPER users "
                "manage users and policies",
            )

    async def users(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        self._super_only(visitor)
        listed = await self.actions.call(
            visitor.principal,
            "ListUsers",
            admin_pb2.ListUsersRequest(),
            response=admin_pb2.ListUsersResponse,
        )
        rows = [
            (
                u,
                admin_pb2.UserType.Name(u.user_type).removeprefix("USER_TYPE_"),
                forms.utc(u.create_time.ToMilliseconds())[:19],
            )
            for u in listed.users
        ]
        return self.console.page(request, visitor, "users.html", rows=rows)

    async def user_page(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        self._super_only(visitor)
        key = forms.text(request.query_params, "key", required=True)
        described = await self.actions.call(
            visitor.principal,
            "GetUser",
            admin_pb2.GetUserRequest(access_key=key),
            response=admin_pb2.GetUserResponse,
        )
        return self.console.page(
            request,
            visitor,
            "user.html",
            user=described.user,
            user_type=admin_pb2.UserType.Name(described.user.user_type).removeprefix("USER_TYPE_"),
            policies=[PolicyRow.of(p) for p in described.policies],
            resource_types=RESOURCE_TYPES,
            patterns=PATTERNS,
            all_actions=ACTIONS,
            decisions=DECISIONS,
            notice=forms.text(request.query_params, "done"),
        )

    async def grant(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        self._super_only(visitor)
        key = forms.text(form, "key", required=True)
        policy = policy_of(form, with_actions=True)
        await self.actions.call(
            visitor.principal,
            "GrantPolicy",
            admin_pb2.GrantPolicyRequest(access_key=key, policy=policy),
            response=admin_pb2.GrantPolicyResponse,
        )
        return _to_user(key, f"granted {PolicyRow.of(policy).actions} to {key}")

    async def revoke(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        self._super_only(visitor)
        key = forms.text(form, "key", required=True)
        policy = policy_of(form, with_actions=False)
        await self.actions.call(
            visitor.principal,
            "RevokePolicy",
            admin_pb2.RevokePolicyRequest(access_key=key, policy=policy),
            response=admin_pb2.RevokePolicyResponse,
        )
        return _to_user(key, f"revoked a policy of {key}")


def _to_user(key: str, done: str) -> Response:
    return RedirectResponse(
        "/users/view?" + urlencode({"key": key, "done": done[: forms.MAX_TEXT]}),
        status_code=303,
    )
