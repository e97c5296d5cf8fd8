"""The console's group pages: the list, a group's settings and POP-aware lag, offset reset,
the dead-letter browse and redrive, and delete.

Each page and form runs as its visitor through `AdminActions` (access control, the admin
servicer, its audit line), as `popmq admin` would over gRPC. The list, like the topics
list, takes ListGroups's access check and reads the broker's groups itself: the servicer
would convert all 10,000 of them to messages for a page that shows 50. Only the page's
rows then get their settings and lag read.

Lag as POP has it, per queue and broker (GetGroupLag): `lag` counts what the group has not
finished (max offset - consumer offset), of which `inflight` are popped and not yet acked
or redelivered; "ready" is the rest. The retry queue's lag is the retry backlog; the
oldest unacked age is the age of the message at the consumer offset; the DLQ depth counts
the group's dead letters.

Runs on the event loop with the console (app.py).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core import GroupInfo, PopMQError
from popmq.console import forms
from popmq.console.actions import ActionRefused, broker_read
from popmq.console.messages import message_rows, queue_brokers
from popmq.console.runtime import Runtime
from popmq.security.model import Action, ResourceType

if TYPE_CHECKING:
    from popmq.console.app import Console, Visitor


DLQ_PREFIX = "%DLQ%"
MAX_REDRIVE = 1_000_000
"""RedriveDeadLetters's largest max_messages."""
MAX_REDRIVE_SELECTED = 1000
"""The most dead letters one RedriveDeadLetters may name."""
MAX_DELIVERY_ATTEMPTS = 1000
MAX_BACKOFF_S = 12 * 3600
FILTER_TYPES = {
    "tag": messaging_pb2.FILTER_TYPE_TAG,
    "sql": messaging_pb2.FILTER_TYPE_SQL,
}
CONSUME_FROM = {
    "first": admin_pb2.CONSUME_FROM_FIRST_OFFSET,
    "last": admin_pb2.CONSUME_FROM_LAST_OFFSET,
}
RESET_TARGETS = {
    "earliest": admin_pb2.RESET_TARGET_EARLIEST,
    "latest": admin_pb2.RESET_TARGET_LATEST,
    "timestamp": admin_pb2.RESET_TARGET_TIMESTAMP,
    "offsets": admin_pb2.RESET_TARGET_OFFSETS,
}


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One row of the groups list: settings, and lag when the visitor may read it."""

    name: str
    fifo: bool
    max_delivery_attempts: int
    topics: tuple[str, ...]
    auto_created: bool
    created: str
    lag: Any = None
    """The group's `LagReport` (broker_core), None when not read (not allowed, or failed)."""

    @property
    def totals(self) -> tuple[int, int, int]:
        """(unacked, in flight, retry backlog) over the group's topics."""
        if self.lag is None:
            return (0, 0, 0)
        topics = self.lag.topics
        return (
            sum(t.lag for t in topics),
            sum(t.inflight for t in topics),
            sum(t.retry_backlog for t in topics),
        )


@dataclass(frozen=True, slots=True)
class LagRow:
    """One queue of a group's lag page (GetGroupLag's QueueLag), with its ready count."""

    topic: str
    queue_id: int
    retry: bool
    broker: str
    consumer_offset: int
    max_offset: int
    lag: int
    inflight: int
    ready: int
    oldest_unacked: str
    """Its age, "1h 2m 3s"."""
    retention_skipped: int


def search_groups(groups: Sequence[GroupInfo], query: str) -> list[GroupInfo]:
    """`groups` whose name holds `query` (any case), sorted by name."""
    needle = query.casefold()
    found = [g for g in groups if needle in g.name.casefold()] if needle else list(groups)
    found.sort(key=lambda g: g.name)
    return found


def _seconds(value: Duration) -> float:
    return value.seconds + value.nanos / 1e9


def _span(seconds: float) -> str:
    """A duration as "1h 2m 3s" (whole seconds; "0s" for none)."""
    whole = int(seconds)
    if whole <= 0:
        return "0s" if seconds <= 0 else f"{seconds:.1f}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    if whole or not parts:
        parts.append(f"{whole}s")
    return " ".join(parts)


class GroupPages:
    """The group routes of one console (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.actions = console.actions
        self.runtime = Runtime(console)

    def routes(self) -> list[Route]:
        return [
            Route("/groups", self.groups, methods=["GET"]),
            Route("/groups", self.create_group, methods=["POST"]),
            Route("/groups/view", self.group_page, methods=["GET"]),
            Route("/groups/update", self.update_group, methods=["POST"]),
            Route("/groups/reset", self.reset_page, methods=["GET"]),
            Route("/groups/reset", self.reset, methods=["POST"]),
            Route("/groups/delete", self.delete_page, methods=["GET"]),
            Route("/groups/delete", self.delete, methods=["POST"]),
            Route("/groups/dlq", self.dlq_page, methods=["GET"]),
            Route("/groups/redrive", self.redrive, methods=["POST"]),
        ]

    # -- the list ---------------------------------------------------------------------------

    async def groups(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        query = forms.text(params, "q")
        page = forms.page_number(params)
        # ListGroups's access check, then the BrokerAPI read its servicer makes (actions.py).
        self.actions.authorize(visitor.principal, "ListGroups", admin_pb2.ListGroupsRequest())
        listing = await broker_read(self.console.broker.list_groups())
        found = search_groups(listing, query)
        pages = max(1, math.ceil(len(found) / forms.PAGE_SIZE))
        forms.check_page(page, pages)
        shown = found[(page - 1) * forms.PAGE_SIZE : page * forms.PAGE_SIZE]
        rows = await asyncio.gather(*(self._row(visitor, g) for g in shown))
        values: dict[str, Any] = {
            "rows": rows,
            "query": query,
            "page": page,
            "pages": pages,
            "total": len(found),
            "all": len(listing),
            "notice": forms.text(params, "done"),
            "can_create": self.console.may(visitor.principal, Action.CREATE, ResourceType.GROUP),
        }
        template = "groups_table.html" if request.headers.get("hx-request") else "groups.html"
        return self.console.page(request, visitor, template, **values)

    async def create_group(self, request: Request) -> Response:
        """CreateGroup: a name, max delivery attempts, FIFO, the topics it subscribes to
        (with one filter for each, tag or SQL92; none: every message), where it starts in
        them, and its nack backoff (the server's default, a list, or exponential). The
        filter and the backoff's ranges are checked by the API, as for any client."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        name = forms.text(form, "name", required=True)
        create = admin_pb2.CreateGroupRequest(name=name, fifo=form.get("fifo") == "on")
        attempts = forms.integer(form, "max_delivery_attempts", low=1, high=MAX_DELIVERY_ATTEMPTS)
        if attempts is not None:
            create.max_delivery_attempts = attempts
        topics = forms.text(form, "topics").replace(",", " ").split()
        if len(set(topics)) != len(topics):
            raise forms.invalid("a topic is named twice in the subscriptions")
        expression = forms.text(form, "expression")
        kind = str(form.get("filter_type") or "tag")
        if kind not in FILTER_TYPES:
            raise forms.invalid(f"filter_type {kind[:20]!r} is not one of tag, sql")
        if expression and not topics:
            raise forms.invalid("a filter needs a topic to subscribe to")
        create.subscriptions.extend(
            admin_pb2.Subscription(
                topic=t,
                filter=messaging_pb2.FilterExpression(
                    type=FILTER_TYPES[kind], expression=expression
                )
                if expression
                else None,
            )
            for t in topics
        )
        backoff = str(form.get("backoff") or "default")
        if backoff == "list":
            create.retry_backoff.extend(_backoff_list(form))
            if not create.retry_backoff:
                raise forms.invalid("a backoff list needs at least one delay in seconds")
        elif backoff == "exponential":
            create.exponential_backoff.CopyFrom(
                admin_pb2.ExponentialBackoff(
                    initial=_duration(_number(form, "backoff_initial_s")),
                    max=_duration(_number(form, "backoff_max_s")),
                    multiplier=_number(form, "backoff_multiplier"),
                )
            )
        elif backoff != "default":
            raise forms.invalid(
                f"backoff {backoff[:20]!r} is not one of default, list, exponential"
            )
        start = str(form.get("consume_from") or "first")
        if start not in CONSUME_FROM:
            raise forms.invalid(f"consume_from {start[:20]!r} is not one of first, last")
        create.consume_from = CONSUME_FROM[start]
        await self.actions.call(
            visitor.principal, "CreateGroup", create, response=admin_pb2.CreateGroupResponse
        )
        return _to_group(name, f"created group {name}")

    async def _row(self, visitor: Visitor, info: GroupInfo) -> GroupRow:
        broker = self.console.broker
        try:
            settings = broker.group_settings(info.name)
            fifo, topics = settings.fifo, tuple(s.topic for s in settings.subscriptions)
        except PopMQError:  # deleted since the list was read
            fifo, topics = False, ()
        lag = None
        ask = admin_pb2.GetGroupLagRequest(group=info.name)
        if self.actions.allowed(visitor.principal, "GetGroupLag", ask):
            try:
                lag = await broker.lag_report(info.name)
            except PopMQError:
                lag = None  # the row shows no lag rather than failing the whole page
        return GroupRow(
            name=info.name,
            fifo=fifo,
            max_delivery_attempts=info.max_delivery_attempts,
            topics=topics,
            auto_created=info.auto_created,
            created=forms.utc(info.create_time_ms)[:19],
            lag=lag,
        )

    # -- one group --------------------------------------------------------------------------

    async def group_page(self, request: Request) -> Response:
        """Settings (GetGroup), lag per topic and per queue and broker (GetGroupLag), the
        runtime view (InspectGroup: held polls, revive lag, blocked FIFO heads, a page of
        messages in flight, runtime.py), and the forms the visitor may use. With `part=lag`
        or `part=runtime` from htmx, that section alone: the page asks for each every few
        seconds, so the numbers move by themselves."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        name = forms.text(params, "name", required=True)
        part = forms.text(params, "part")
        if part not in ("", "lag", "runtime"):
            raise forms.invalid(f"part {part[:20]!r} is not one of: lag, runtime")
        if part == "lag":
            lag_values = await self._lag_values(visitor, name)
            return self.console.page(request, visitor, "group_lag.html", name=name, **lag_values)
        if part == "runtime":
            runtime = await self.runtime.group_values(visitor, name, params)
            return self.console.page(request, visitor, "group_runtime.html", name=name, **runtime)
        # Checked before any read: a bad page size or token is this page's 400.
        runtime = await self.runtime.group_values(visitor, name, params)
        group = (
            await self.actions.call(
                visitor.principal,
                "GetGroup",
                admin_pb2.GetGroupRequest(name=name),
                response=admin_pb2.GetGroupResponse,
            )
        ).group
        principal = visitor.principal
        return self.console.page(
            request,
            visitor,
            "group.html",
            group=group,
            name=name,
            consume_from=admin_pb2.ConsumeFrom.Name(group.consume_from)
            .removeprefix("CONSUME_FROM_")
            .lower()
            .replace("_", " "),
            created=forms.utc(group.create_time.ToMilliseconds())[:19],
            backoff=" ".join(f"{_seconds(d):g}" for d in group.retry_backoff),
            **await self._lag_values(visitor, name),
            **runtime,
            can_update=self.actions.allowed(
                principal, "UpdateGroup", admin_pb2.UpdateGroupRequest(name=name)
            ),
            can_delete=self.actions.allowed(
                principal, "DeleteGroup", admin_pb2.DeleteGroupRequest(name=name)
            ),
            can_dlq=self.actions.allowed(
                principal, "PeekMessages", admin_pb2.PeekMessagesRequest(topic=DLQ_PREFIX + name)
            ),
            notice=forms.text(params, "done"),
        )

    async def _lag_values(self, visitor: Visitor, name: str) -> dict[str, Any]:
        """What the lag section of a group's page shows (group_lag.html)."""
        lag, lag_refusal = await self._lag(visitor, name)
        topics = list(lag.topics) if lag is not None else []
        return {
            "lag": lag,
            "lag_refusal": lag_refusal,
            "lag_rows": _lag_rows(lag) if lag is not None else [],
            "topic_rows": [(t, _span(_seconds(t.oldest_unacked_age))) for t in topics],
            "resettable": [
                t.topic
                for t in topics
                if self.actions.allowed(
                    visitor.principal,
                    "ResetOffsets",
                    admin_pb2.ResetOffsetsRequest(group=name, topic=t.topic),
                )
            ],
        }

    async def _lag(
        self, visitor: Visitor, name: str
    ) -> tuple[admin_pb2.GetGroupLagResponse | None, str]:
        try:
            answer = await self.actions.call(
                visitor.principal,
                "GetGroupLag",
                admin_pb2.GetGroupLagRequest(group=name),
                response=admin_pb2.GetGroupLagResponse,
            )
        except ActionRefused as exc:
            if exc.user_gone:
                raise
            return None, exc.message
        return answer, ""

    async def update_group(self, request: Request) -> Response:
        """UpdateGroup with the fields the form set: max delivery attempts, the retry
        backoff (seconds, space-separated), FIFO, a subscription to add (or whose filter to
        replace), subscriptions to remove, where the group starts in queues it has never
        consumed."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        name = forms.text(form, "name", required=True)
        update = admin_pb2.UpdateGroupRequest(name=name)
        attempts = forms.integer(
            form, "max_delivery_attempts", low=1, high=MAX_DELIVERY_ATTEMPTS, default=None
        )
        if attempts is not None:
            update.max_delivery_attempts = attempts
        update.retry_backoff.extend(_backoff_list(form))
        if "fifo" in form or form.get("fifo_shown") == "1":
            update.fifo = form.get("fifo") == "on"
        subscribe = forms.text(form, "subscribe")
        if subscribe:
            kind = str(form.get("filter_type") or "tag")
            if kind not in FILTER_TYPES:
                raise forms.invalid(f"filter_type {kind[:20]!r} is not one of tag, sql")
            update.set_subscriptions.append(
                admin_pb2.Subscription(
                    topic=subscribe,
                    filter=messaging_pb2.FilterExpression(
                        type=FILTER_TYPES[kind], expression=forms.text(form, "expression")
                    ),
                )
            )
        update.remove_subscriptions.extend(str(t)[: forms.MAX_TEXT] for t in form.getlist("remove"))
        start = str(form.get("consume_from") or "")
        if start:
            if start not in (*CONSUME_FROM, "timestamp"):
                raise forms.invalid(
                    f"consume_from {start[:20]!r} is not one of first, last, timestamp"
                )
            if start == "timestamp":
                millis = forms.timestamp_ms(form, "consume_from_time")
                if millis is None:
                    raise forms.invalid("starting at a time needs the time")
                update.consume_from = admin_pb2.CONSUME_FROM_TIMESTAMP
                update.consume_from_time.FromMilliseconds(millis)
            else:
                update.consume_from = CONSUME_FROM[start]
        await self.actions.call(
            visitor.principal, "UpdateGroup", update, response=admin_pb2.UpdateGroupResponse
        )
        return _to_group(name, f"updated group {name}")

    # -- offset reset -----------------------------------------------------------------------

    async def reset_page(self, request: Request) -> Response:
        """The reset form of one topic, warning with what the group has in flight there."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        name = forms.text(request.query_params, "name", required=True)
        topic = forms.text(request.query_params, "topic", required=True)
        return await self._reset_form(request, visitor, name, topic)

    async def _reset_form(
        self,
        request: Request,
        visitor: Visitor,
        name: str,
        topic: str,
        *,
        message: str = "",
        status: int = 200,
    ) -> Response:
        lag = await self.actions.call(
            visitor.principal,
            "GetGroupLag",
            admin_pb2.GetGroupLagRequest(group=name, topic=topic),
            response=admin_pb2.GetGroupLagResponse,
        )
        inflight = sum(t.inflight for t in lag.topics)
        return self.console.page(
            request,
            visitor,
            "group_reset.html",
            status=status,
            name=name,
            topic=topic,
            inflight=inflight,
            rows=[r for r in _lag_rows(lag) if not r.retry],
            message=message,
        )

    async def reset(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        name = forms.text(form, "name", required=True)
        topic = forms.text(form, "topic", required=True)
        target = str(form.get("target") or "")
        if target not in RESET_TARGETS:
            raise forms.invalid(f"target {target[:20]!r} is not one of {', '.join(RESET_TARGETS)}")
        force = form.get("force") == "on"
        if force and not forms.confirmed(form, name):
            return await self._reset_form(
                request,
                visitor,
                name,
                topic,
                status=400,
                message="a forced reset drops the deliveries in flight: type the group's name "
                "exactly to force it",
            )
        reset = admin_pb2.ResetOffsetsRequest(
            group=name, topic=topic, target=RESET_TARGETS[target], force=force
        )
        if target == "timestamp":
            millis = forms.timestamp_ms(form, "timestamp")
            if millis is None:
                raise forms.invalid("a reset to a time needs the time")
            reset.timestamp.CopyFrom(Timestamp(seconds=millis // 1000, nanos=millis % 1000 * 10**6))
        elif target == "offsets":
            reset.offsets.update(_offsets(str(form.get("offsets") or "")))
        answer = await self.actions.call(
            visitor.principal, "ResetOffsets", reset, response=admin_pb2.ResetOffsetsResponse
        )
        moved = ", ".join(
            f"queue {q.queue_id} {q.old_offset}→{q.new_offset}" for q in answer.queues[:20]
        )
        done = f"reset group {name} in topic {topic}: {moved or 'nothing moved'}"
        if answer.dropped_inflight:
            done += f"; {answer.dropped_inflight} deliveries in flight dropped"
        return _to_group(name, done)

    # -- delete -----------------------------------------------------------------------------

    async def delete_page(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        name = forms.text(request.query_params, "name", required=True)
        return self.console.page(request, visitor, "group_delete.html", name=name)

    async def delete(self, request: Request) -> Response:
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        name = forms.text(form, "name", required=True)
        if not forms.confirmed(form, name):
            return self.console.page(
                request,
                visitor,
                "group_delete.html",
                status=400,
                name=name,
                message="type the group's name exactly to delete it",
            )
        delete = admin_pb2.DeleteGroupRequest(name=name, force=form.get("force") == "on")
        await self.actions.call(
            visitor.principal, "DeleteGroup", delete, response=admin_pb2.DeleteGroupResponse
        )
        return RedirectResponse(
            "/groups?" + urlencode({"done": f"deleted group {name}"}), status_code=303
        )

    # -- dead letters -----------------------------------------------------------------------

    async def _one_queue(self, topic: str) -> bool:
        """Whether the dead letters of `topic` are all in one queue. The admin API redrives
        the oldest first, queue (broker) by queue; the page lists them by queue id. Only
        when one queue holds them all are "the N oldest listed" the N a redrive moves."""
        try:
            _, queues = await self.console.broker.get_topic(topic)
        except PopMQError:
            return False
        return sum(1 for q in queues if q.max_offset > q.min_offset) <= 1

    async def dlq_page(self, request: Request) -> Response:
        """The oldest dead letters of the group, peeked (PeekMessages of "%DLQ%<group>":
        nothing is consumed), with the redrive forms."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        name = forms.text(params, "name", required=True)
        size = forms.integer(params, "size", low=1, high=256, default=50)
        assert size is not None
        return await self._dlq(request, visitor, name, size)

    async def _dlq(
        self,
        request: Request,
        visitor: Visitor,
        name: str,
        size: int,
        *,
        message: str = "",
        status: int = 200,
    ) -> Response:
        topic = DLQ_PREFIX + name
        principal = visitor.principal
        lag, _ = await self._lag(visitor, name)
        try:
            peeked = await self.actions.call(
                principal,
                "PeekMessages",
                admin_pb2.PeekMessagesRequest(topic=topic, max_messages=size),
                response=admin_pb2.PeekMessagesResponse,
            )
            messages = list(peeked.messages)
        except ActionRefused as exc:
            if exc.code != "NOT_FOUND" or exc.user_gone:
                raise
            messages = []  # no dead letter yet: the topic is made with the first
        can_redrive = self.actions.allowed(
            principal, "RedriveDeadLetters", admin_pb2.RedriveDeadLettersRequest(group=name)
        )
        return self.console.page(
            request,
            visitor,
            "dlq.html",
            status=status,
            name=name,
            topic=topic,
            size=size,
            depth=lag.dlq_depth if lag is not None else None,
            rows=message_rows(messages, await queue_brokers(self.console.broker, topic)),
            can_redrive=can_redrive,
            oldest_first=can_redrive and bool(messages) and await self._one_queue(topic),
            message=message,
        )

    async def redrive(self, request: Request) -> Response:
        """RedriveDeadLetters: all (the group's name typed), or the oldest `count` (a row's
        "up to here", refused if the oldest dead letter is no longer the one shown)."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        name = forms.text(form, "name", required=True)
        redrive = admin_pb2.RedriveDeadLettersRequest(group=name)
        if form.get("selected") == "1":
            return await self._redrive_selected(request, visitor, name, form.getlist("pick"))
        if form.get("all") == "1":
            if not forms.confirmed(form, name):
                return await self._dlq(
                    request,
                    visitor,
                    name,
                    50,
                    status=400,
                    message="type the group's name exactly to redrive all its dead letters",
                )
        else:
            redrive.max_messages = forms.required_integer(form, "count", low=1, high=MAX_REDRIVE)
            head = forms.text(form, "head")
            self.actions.authorize(visitor.principal, "RedriveDeadLetters", redrive)
            oldest = await broker_read(self.console.broker.peek(DLQ_PREFIX + name, max_messages=1))
            if head and (not oldest or oldest[0].record.message_id != head):
                return await self._dlq(
                    request,
                    visitor,
                    name,
                    50,
                    status=409,
                    message="the dead letters changed since the page was shown (the oldest is "
                    "no longer the one listed first): nothing was redriven; look again",
                )
        answer = await self.actions.call(
            visitor.principal,
            "RedriveDeadLetters",
            redrive,
            response=admin_pb2.RedriveDeadLettersResponse,
        )
        done = f"redrove {answer.moved} dead letters of group {name}"
        if answer.dropped:
            done += f" ({answer.dropped} dropped: their topic is gone)"
        done += f"; {answer.remaining} remain"
        return _to_group(name, done)

    async def _redrive_selected(
        self, request: Request, visitor: Visitor, name: str, picks: list[str | UploadFile]
    ) -> Response:
        """RedriveDeadLetters of the rows ticked, by queue and offset; those no longer stored
        (redriven meanwhile, purged, expired) are named on the page shown again."""
        if not picks:
            raise forms.invalid("select at least one dead letter to redrive")
        if len(picks) > MAX_REDRIVE_SELECTED:
            raise forms.invalid(
                f"{len(picks)} dead letters selected: at most {MAX_REDRIVE_SELECTED} at once"
            )
        redrive = admin_pb2.RedriveDeadLettersRequest(group=name)
        for pick in picks:
            queue, _, offset = str(pick).partition(":")
            try:
                redrive.messages.add(queue_id=int(queue, 10), offset=int(offset, 10))
            except ValueError:
                raise forms.invalid(f"{str(pick)[:40]!r} is not QUEUE:OFFSET") from None
        answer = await self.actions.call(
            visitor.principal,
            "RedriveDeadLetters",
            redrive,
            response=admin_pb2.RedriveDeadLettersResponse,
        )
        done = f"redrove {answer.moved} of {len(picks)} selected dead letters of group {name}"
        if answer.dropped:
            done += f" ({answer.dropped} dropped: their topic is gone)"
        missing = [
            f"queue {o.queue_id} offset {o.offset}"
            for o in answer.outcomes
            if o.outcome == admin_pb2.REDRIVE_OUTCOME_NOT_FOUND
        ]
        if missing:
            return await self._dlq(
                request,
                visitor,
                name,
                50,
                status=409,
                message=f"{done}; {len(missing)} no longer stored (redriven meanwhile, purged "
                f"or expired), nothing done with them: {', '.join(missing)}",
            )
        return _to_group(name, done)


def _backoff_list(form: Mapping[str, object]) -> list[Duration]:
    """The form's `retry_backoff`: seconds, space separated (an "s" suffix allowed)."""
    backoff = str(form.get("retry_backoff") or "").split()
    if len(backoff) > 64:
        raise forms.invalid(f"retry backoff has {len(backoff)} entries; at most 64")
    durations = []
    for i, entry in enumerate(backoff):
        try:
            value = float(entry.removesuffix("s"))
        except ValueError:
            raise forms.invalid(
                f"retry backoff entry {i + 1} {entry[:20]!r} is not a number of seconds"
            ) from None
        if not 1 <= value <= MAX_BACKOFF_S or not math.isfinite(value):
            raise forms.invalid(
                f"retry backoff entry {i + 1} {entry[:20]}s is out of range: 1..{MAX_BACKOFF_S}"
            )
        durations.append(_duration(value))
    return durations


def _number(form: Mapping[str, object], name: str) -> float:
    """A required finite number; its range is the API's to check."""
    raw = forms.text(form, name, required=True)
    try:
        value = float(raw)
    except ValueError:
        raise forms.invalid(f"{name} {raw[:20]!r} is not a number") from None
    if not math.isfinite(value) or abs(value) > _LARGEST:
        raise forms.invalid(f"{name} {raw[:20]!r} is out of range")
    return value


_LARGEST = 1e9
"""Beyond any range the API allows (12 h, a factor of 10): only keeps a Duration sane."""


def _duration(seconds: float) -> Duration:
    duration = Duration()
    duration.FromNanoseconds(round(seconds * 1e9))
    return duration


def _lag_rows(lag: admin_pb2.GetGroupLagResponse) -> list[LagRow]:
    return [
        LagRow(
            topic=q.topic,
            queue_id=q.queue_id,
            retry=q.retry,
            broker=q.broker,
            consumer_offset=q.consumer_offset,
            max_offset=q.max_offset,
            lag=q.lag,
            inflight=q.inflight,
            ready=max(0, q.lag - q.inflight),
            oldest_unacked=_span(_seconds(q.oldest_unacked_age)),
            retention_skipped=q.retention_skipped,
        )
        for q in lag.queues
    ]


def _offsets(text: str) -> dict[int, int]:
    """ "0:12, 1:40" as {0: 12, 1: 40}."""
    found: dict[int, int] = {}
    for part in text.replace(",", " ").split():
        queue, sep, offset = part.partition(":")
        if not sep or not queue.isdigit() or not offset.isdigit():
            raise forms.invalid(
                f"offsets entry {part[:30]!r} is not QUEUE:OFFSET (e.g. 0:12, 1:40)"
            )
        if int(queue) in found:
            raise forms.invalid(f"queue {queue} is given twice")
        found[int(queue)] = int(offset)
    if not found:
        raise forms.invalid("a reset to offsets needs QUEUE:OFFSET entries")
    return found


def _to_group(name: str, done: str) -> Response:
    """Back to the group's page after a change (POST, then GET: a reload repeats nothing)."""
    return RedirectResponse(
        "/groups/view?" + urlencode({"name": name, "done": done[: forms.MAX_TEXT]}),
        status_code=303,
    )
