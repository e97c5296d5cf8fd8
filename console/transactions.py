"""The console's transactions page: open and discarded half messages with their checks,
each one's body and properties (GetHalfMessage, shown safely as the message pages show
bodies), and an operator's commit, rollback and resume.

ListTransactions, ResolveTransaction (commit or roll back, as `popmq admin` does: source
ADMIN, audited `transaction.resolve`) and ResumeTransaction (a discarded transaction
reopened with a fresh check count, audited `transaction.resume`), each run as the visitor
through `AdminActions`. A rollback drops the half message for good, so it asks for the
topic's name typed; a commit publishes it and a resume only reopens it.

Runs on the event loop with the console (app.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.console import forms
from popmq.console.messages import show_body

if TYPE_CHECKING:
    from popmq.console.app import Console

STATES = {
    "open": admin_pb2.TRANSACTION_LIST_STATE_OPEN,
    "discarded": admin_pb2.TRANSACTION_LIST_STATE_DISCARDED,
}
RESOLUTIONS = {
    "commit": messaging_pb2.TRANSACTION_RESOLUTION_COMMIT,
    "rollback": messaging_pb2.TRANSACTION_RESOLUTION_ROLLBACK,
}
MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class TransactionRow:
    """One transaction of the list, with what the visitor may do to it."""

    transaction_id: str
    topic: str
    message_id: str
    producer_group: str
    state: str
    created: str
    checks: int
    next_check: str
    resolved: str
    resolved_by: str
    may_update: bool
    may_read: bool
    """May read its half message (SUB on its topic)."""


def _name(enum: type, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower().replace("_", " ")  # type: ignore[attr-defined]


class TransactionPages:
    """The transaction routes of one console (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.actions = console.actions

    def routes(self) -> list[Route]:
        return [
            Route("/transactions", self.transactions, methods=["GET"]),
            Route("/transactions/resolve", self.resolve_page, methods=["GET"]),
            Route("/transactions/resolve", self.resolve, methods=["POST"]),
            Route("/transactions/resume", self.resume, methods=["POST"]),
            Route("/transactions/view", self.half_message, methods=["GET"]),
        ]

    async def transactions(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        state = forms.text(params, "state") or "open"
        if state not in STATES:
            raise forms.invalid(f"state {state[:20]!r} is not one of {', '.join(STATES)}")
        topic = forms.text(params, "topic")
        limit = forms.integer(params, "limit", low=1, high=MAX_LIMIT, default=100)
        assert limit is not None
        listed = await self.actions.call(
            visitor.principal,
            "ListTransactions",
            admin_pb2.ListTransactionsRequest(state=STATES[state], topic=topic, limit=limit),
            response=admin_pb2.ListTransactionsResponse,
        )
        rows = [
            TransactionRow(
                transaction_id=t.transaction_id,
                topic=t.topic,
                message_id=t.message_id,
                producer_group=t.producer_group,
                state=_name(messaging_pb2.TransactionState, t.state, "TRANSACTION_STATE_"),
                created=forms.utc(t.create_time.ToMilliseconds()),
                checks=t.checks,
                next_check=forms.utc(t.next_check_time.ToMilliseconds())
                if t.HasField("next_check_time")
                else "",
                resolved=forms.utc(t.resolve_time.ToMilliseconds())
                if t.HasField("resolve_time")
                else "",
                resolved_by=_name(
                    messaging_pb2.TransactionSource, t.resolved_by, "TRANSACTION_SOURCE_"
                )
                if t.resolved_by
                else "",
                may_update=self.actions.allowed(
                    visitor.principal,
                    "ResolveTransaction",
                    admin_pb2.ResolveTransactionRequest(
                        transaction_id=t.transaction_id, topic=t.topic
                    ),
                ),
                may_read=self.actions.allowed(
                    visitor.principal,
                    "GetHalfMessage",
                    admin_pb2.GetHalfMessageRequest(transaction_id=t.transaction_id, topic=t.topic),
                ),
            )
            for t in listed.transactions
        ]
        return self.console.page(
            request,
            visitor,
            "transactions.html",
            rows=rows,
            state=state,
            topic=topic,
            limit=limit,
            notice=forms.text(params, "done"),
        )

    async def half_message(self, request: Request) -> Response:
        """An open or discarded transaction's half message (GetHalfMessage: read-only, SUB
        on its topic), its body shown as the message pages show one."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        answer = await self.actions.call(
            visitor.principal,
            "GetHalfMessage",
            admin_pb2.GetHalfMessageRequest(
                transaction_id=forms.text(params, "id", required=True),
                topic=forms.text(params, "topic", required=True),
            ),
            response=admin_pb2.GetHalfMessageResponse,
        )
        message, transaction = answer.message, answer.transaction
        return self.console.page(
            request,
            visitor,
            "transaction_view.html",
            transaction=transaction,
            message=message,
            state=_name(messaging_pb2.TransactionState, transaction.state, "TRANSACTION_STATE_"),
            next_check=forms.utc(transaction.next_check_time.ToMilliseconds())
            if transaction.HasField("next_check_time")
            else "",
            body=show_body(message.body, message.body_encoding),
            born=forms.utc(message.born_time.ToMilliseconds()),
            deliver=forms.utc(message.deliver_time.ToMilliseconds())
            if message.HasField("deliver_time")
            else "",
            properties=sorted(message.properties.items()),
        )

    async def resolve_page(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        return self.console.page(
            request,
            visitor,
            "transaction_resolve.html",
            transaction_id=forms.text(params, "id", required=True),
            topic=forms.text(params, "topic", required=True),
        )

    async def resolve(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        transaction_id = forms.text(form, "id", required=True)
        topic = forms.text(form, "topic", required=True)
        resolution = str(form.get("resolution") or "")
        if resolution not in RESOLUTIONS:
            raise forms.invalid(
                f"resolution {resolution[:20]!r} is not one of {', '.join(RESOLUTIONS)}"
            )
        if resolution == "rollback" and not forms.confirmed(form, topic):
            return self.console.page(
                request,
                visitor,
                "transaction_resolve.html",
                status=400,
                transaction_id=transaction_id,
                topic=topic,
                message="a rollback drops the half message for good: type the topic's name "
                "exactly to roll it back",
            )
        answer = await self.actions.call(
            visitor.principal,
            "ResolveTransaction",
            admin_pb2.ResolveTransactionRequest(
                transaction_id=transaction_id, topic=topic, resolution=RESOLUTIONS[resolution]
            ),
            response=admin_pb2.ResolveTransactionResponse,
        )
        state = _name(
            messaging_pb2.TransactionState, answer.transaction.state, "TRANSACTION_STATE_"
        )
        return _to_list(f"transaction {transaction_id} of {topic}: {state}")

    async def resume(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        transaction_id = forms.text(form, "id", required=True)
        topic = forms.text(form, "topic", required=True)
        await self.actions.call(
            visitor.principal,
            "ResumeTransaction",
            admin_pb2.ResumeTransactionRequest(transaction_id=transaction_id, topic=topic),
            response=admin_pb2.ResumeTransactionResponse,
        )
        return _to_list(f"transaction {transaction_id} of {topic}: open again")


def _to_list(done: str) -> Response:
    return RedirectResponse(
        "/transactions?" + urlencode({"done": done[: forms.MAX_TEXT]}), status_code=303
    )
