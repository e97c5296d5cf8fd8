"""The console's topic changes beyond create and delete: adding queues (UpdateTopic) and
purging stored messages (PurgeTopic, every queue or one).

A purge deletes messages for good (offsets stay; groups behind the purge point skip what
was purged), so it asks for the topic's name typed, as delete does. Each runs as the
visitor through `AdminActions`, audited (`topic.update`, `topic.purge`) as over gRPC.

Runs on the event loop with the console (app.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from popmq._gen.popmq.v1 import admin_pb2
from popmq.console import forms

if TYPE_CHECKING:
    from popmq.console.app import Console

MAX_QUEUES = 1024
MAX_QUEUE_ID = 2**31 - 1


class TopicChangePages:
    """The topic-change routes of one console (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.actions = console.actions

    def routes(self) -> list[Route]:
        return [
            Route("/topics/update", self.update, methods=["POST"]),
            Route("/topics/purge", self.purge_page, methods=["GET"]),
            Route("/topics/purge", self.purge, methods=["POST"]),
        ]

    async def update(self, request: Request) -> Response:
        """UpdateTopic: grow the topic to `queues` queues (per broker in cluster mode, or
        on `broker` only)."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        name = forms.text(form, "name", required=True)
        update = admin_pb2.UpdateTopicRequest(
            name=name, queues=forms.required_integer(form, "queues", low=1, high=MAX_QUEUES)
        )
        broker = forms.text(form, "broker")
        if broker:
            update.broker = broker
        answer = await self.actions.call(
            visitor.principal, "UpdateTopic", update, response=admin_pb2.UpdateTopicResponse
        )
        return _to_topic(name, f"topic {name} has {answer.topic.queues} queues")

    async def purge_page(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        name = forms.text(params, "name", required=True)
        queue = forms.integer(params, "queue", low=0, high=MAX_QUEUE_ID)
        return self.console.page(
            request, visitor, "topic_purge.html", name=name, queue="" if queue is None else queue
        )

    async def purge(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        name = forms.text(form, "name", required=True)
        queue = forms.integer(form, "queue", low=0, high=MAX_QUEUE_ID)
        if not forms.confirmed(form, name):
            return self.console.page(
                request,
                visitor,
                "topic_purge.html",
                status=400,
                name=name,
                queue="" if queue is None else queue,
                message="type the topic's name exactly to purge it",
            )
        purge = admin_pb2.PurgeTopicRequest(name=name)
        if queue is not None:
            purge.queue_id = queue
        answer = await self.actions.call(
            visitor.principal, "PurgeTopic", purge, response=admin_pb2.PurgeTopicResponse
        )
        where = "every queue" if queue is None else f"queue {queue}"
        return _to_topic(name, f"purged {answer.purged} messages of topic {name} ({where})")


def _to_topic(name: str, done: str) -> Response:
    return RedirectResponse(
        "/topics/view?" + urlencode({"name": name, "done": done[: forms.MAX_TEXT]}),
        status_code=303,
    )
