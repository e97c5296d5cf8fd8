"""What only the broker knows right now, on the console's pages: a group's runtime section
(AdminService.InspectGroup) and a message's delivery history (GetMessageHistory).

Both run as the visitor through `AdminActions`, as `popmq group inspect` and `popmq message
history` do over gRPC: InspectGroup needs GROUP GET (and TOPIC GET when a topic is named),
GetMessageHistory TOPIC GET (and GROUP GET for one group's steps). A page whose visitor may
not read a section still shows the rest, with a "not allowed" note in the section's place;
a bad page size or page token is the page's own error (400), so a typo never shows another
page of rows than the one asked for.

Deadlines are shown against the server's `now` of the answer ("in 12 s", "3 s ago") and
as UTC times: the browser's clock may differ from the broker's.

Runs on the event loop with the console (app.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from google.protobuf.timestamp_pb2 import Timestamp

from popmq._gen.popmq.v1 import admin_pb2
from popmq.broker_core import PopMQError
from popmq.console import forms
from popmq.console.actions import ActionRefused

if TYPE_CHECKING:
    from popmq.console.app import Console, Visitor

MAX_INFLIGHT_PAGE = 1000
"""InspectGroup's largest in-flight page (its page_size range is 1..1000)."""
DEFAULT_INFLIGHT_PAGE = 50
"""In-flight rows a group's page shows unless asked for another page size."""
MAX_TOKEN = 200
"""The longest page token accepted: the server's are far shorter (a cluster's names its
broker before the broker's own), so a longer one is refused before it is sent."""


def _ms(value: Timestamp) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def relative(when_ms: int, now_ms: int) -> str:
    """`when_ms` against the server's `now_ms`: "in 12 s", "3 s ago", "now"; "" for unset."""
    if when_ms <= 0:
        return ""
    seconds = round((when_ms - now_ms) / 1000)
    if seconds == 0:
        return "now"
    return f"in {seconds} s" if seconds > 0 else f"{-seconds} s ago"


def seconds_text(millis: int) -> str:
    """A duration as "1.2 s" (under a minute) or "3 min 4 s"."""
    if millis < 60_000:
        return f"{millis / 1000:.1f} s"
    whole = millis // 1000
    return f"{whole // 60} min {whole % 60} s"


@dataclass(frozen=True, slots=True)
class Deadline:
    """A time as the runtime tables show it: against the server's now, and in UTC."""

    relative: str
    utc: str

    @classmethod
    def of(cls, value: Timestamp, now_ms: int, *, present: bool = True) -> Deadline:
        millis = _ms(value) if present else 0
        return cls(relative(millis, now_ms), forms.utc(millis))


def message_link(topic: str, queue_id: int, offset: int) -> str:
    return "/messages/view?" + urlencode({"topic": topic, "queue": queue_id, "offset": offset})


def message_id_link(topic: str, message_id: str) -> str:
    """The page of a message found by its id (QueryMessage): a retry copy in flight keeps
    the id of the message first sent, and retry queues cannot be browsed."""
    return "/messages/view?" + urlencode({"topic": topic, "id": message_id})


@dataclass(frozen=True, slots=True)
class InflightRow:
    message: admin_pb2.InflightMessage
    popped: Deadline
    invisible_until: Deadline
    link: str


@dataclass(frozen=True, slots=True)
class ConsumerRow:
    """One client's messages in flight (every page's), with its earliest deadline."""

    consumer: admin_pb2.ConsumerInflight
    earliest: Deadline


@dataclass(frozen=True, slots=True)
class HeadRow:
    head: admin_pb2.BlockedHead
    deadline: Deadline
    link: str


@dataclass(frozen=True, slots=True)
class ReviveRow:
    revive: admin_pb2.ReviveLag
    lag: str
    oldest_due: Deadline
    next_deadline: Deadline


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One step of a message's delivery history as the timeline shows it."""

    event: admin_pb2.DeliveryEvent
    time: str
    invisible_until: str
    """UTC, "" when the step sets no deadline."""
    invisible_for: str
    """How long after the step that deadline is ("30.0 s")."""
    anchor: str
    """The row's id when it is a retry copy's first step (its copy link points here)."""
    copy_link: str
    """The copy's page (a dead letter) or its first step on this page (a retry copy)."""


def _refusal(exc: ActionRefused) -> str:
    """The note shown in a section's place, or raise what is the page's own error: a gone
    user (the session ends) or a bad argument (400)."""
    if exc.user_gone or exc.code in ("INVALID_ARGUMENT", "OUT_OF_RANGE"):
        raise exc
    if exc.code == "PERMISSION_DENIED":
        return f"Not allowed: {exc.message}"
    return f"{exc.code}: {exc.message}"


def inflight_paging(params: Mapping[str, object]) -> tuple[str, int, str]:
    """(topic, page size, page token) of a group page's runtime section; a page size out of
    1..MAX_INFLIGHT_PAGE or an overlong token refused (400)."""
    topic = forms.text(params, "topic")
    size = forms.integer(params, "size", low=1, high=MAX_INFLIGHT_PAGE, default=None)
    token = str(params.get("token") or "").strip()
    if len(token) > MAX_TOKEN:
        raise forms.invalid(
            f"token is {len(token)} characters long: not a page token this server issued"
        )
    return topic, size or DEFAULT_INFLIGHT_PAGE, token


class Runtime:
    """The runtime section of a group's page and the history of a message's page."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.actions = console.actions

    async def group_values(
        self, visitor: Visitor, name: str, params: Mapping[str, object]
    ) -> dict[str, Any]:
        """What group_runtime.html shows: InspectGroup's answer for `params`'s topic, page
        size and page token (see `inflight_paging`)."""
        topic, size, token = inflight_paging(params)
        values: dict[str, Any] = {
            "runtime_topic": topic,
            "runtime_size": size,
            "runtime_token": token,
            "runtime_refusal": "",
            "runtime_denied": False,
            "runtime_poll": "/groups/view?"
            + urlencode(
                {"name": name, "part": "runtime", "topic": topic, "size": size, "token": token}
            ),
        }
        try:
            view = await self.actions.call(
                visitor.principal,
                "InspectGroup",
                admin_pb2.InspectGroupRequest(
                    group=name, topic=topic, page_size=size, page_token=token
                ),
                response=admin_pb2.InspectGroupResponse,
            )
        except ActionRefused as exc:
            values["runtime_refusal"] = _refusal(exc)
            values["runtime_denied"] = exc.code == "PERMISSION_DENIED"
            return values
        now = _ms(view.now)
        here = {"name": name, "topic": topic, "size": size}
        values.update(
            now=forms.utc(now),
            held=list(view.held_polls),
            held_total=sum(h.count for h in view.held_polls),
            revive=[
                ReviveRow(
                    r,
                    seconds_text(r.lag.seconds * 1000 + r.lag.nanos // 1_000_000),
                    Deadline.of(r.oldest_due, now, present=r.HasField("oldest_due")),
                    Deadline.of(r.next_deadline, now, present=r.HasField("next_deadline")),
                )
                for r in view.revive
            ],
            heads=[
                HeadRow(
                    h,
                    Deadline.of(h.invisible_until, now, present=h.HasField("invisible_until")),
                    message_link(h.topic, h.queue_id, h.offset),
                )
                for h in view.blocked_heads
            ],
            blocked_groups=view.blocked_groups,
            inflight=[
                InflightRow(
                    m,
                    Deadline.of(m.pop_time, now, present=m.HasField("pop_time")),
                    Deadline.of(m.invisible_until, now, present=m.HasField("invisible_until")),
                    message_id_link(m.topic, m.message_id)
                    if m.retry
                    else message_link(m.topic, m.queue_id, m.offset),
                )
                for m in view.inflight
            ],
            consumers=[
                ConsumerRow(
                    c,
                    Deadline.of(
                        c.earliest_invisible_until,
                        now,
                        present=c.HasField("earliest_invisible_until"),
                    ),
                )
                for c in view.consumers
            ],
            consumer_count=view.consumer_count,
            clustered=any(r.broker for r in view.revive),
            next_page="/groups/view?" + urlencode({**here, "token": view.next_page_token})
            if view.next_page_token
            else "",
            first_page="/groups/view?" + urlencode(here) if token else "",
        )
        return values

    async def history_values(
        self, visitor: Visitor, message: admin_pb2.StoredMessage, group: str
    ) -> dict[str, Any]:
        """What a message page's history section shows: every group's steps (whose groups
        the select offers), or `group`'s only.

        The broker finds a history by message id, and a redriven dead letter is stored
        again under the same id: it then answers the newest copy's steps. When its "stored"
        step is not this message's queue and offset, the section says so and links to that
        copy instead of showing another message's steps as this one's."""
        topic, message_id = message.topic, message.message_id
        values: dict[str, Any] = {
            "history_group": group,
            "history_groups": [],
            "history": [],
            "history_refusal": "",
            "history_elsewhere": "",
        }
        try:
            every = await self._history(visitor, topic, message_id, "")
            stored = [e for e in every if e.event == "stored"]
            here = (message.queue_id, message.offset)
            if stored and all((e.queue_id, e.offset) != here for e in stored):
                values["history_elsewhere"] = message_link(
                    topic, stored[-1].queue_id, stored[-1].offset
                )
                values["history_elsewhere_at"] = (stored[-1].queue_id, stored[-1].offset)
                return values
            groups = sorted({e.group for e in every if e.group} | ({group} if group else set()))
            values["history_groups"] = groups
            events = await self._history(visitor, topic, message_id, group) if group else every
        except ActionRefused as exc:
            values["history_refusal"] = _refusal(exc)
            return values
        values["history"] = await self._history_rows(events)
        values["history_clustered"] = any(e.broker for e in events)
        return values

    async def _history(
        self, visitor: Visitor, topic: str, message_id: str, group: str
    ) -> Sequence[admin_pb2.DeliveryEvent]:
        answer = await self.actions.call(
            visitor.principal,
            "GetMessageHistory",
            admin_pb2.GetMessageHistoryRequest(topic=topic, message_id=message_id, group=group),
            response=admin_pb2.GetMessageHistoryResponse,
        )
        return list(answer.events)

    async def _history_rows(self, events: Sequence[admin_pb2.DeliveryEvent]) -> list[HistoryRow]:
        # A retry copy's link points at the copy's first step below it: retry queues are not
        # browsable (PeekMessages reads user and dead-letter topics only), and its steps are
        # what is known of it.
        firsts: dict[tuple[str, str, int], str] = {}
        for i, e in enumerate(events):
            if e.retry:
                firsts.setdefault((e.broker, e.group, e.offset), f"step-{i + 1}")
        dlq_queues: dict[str, dict[int, str]] = {}
        rows: list[HistoryRow] = []
        for i, e in enumerate(events):
            anchor = f"step-{i + 1}"
            link = ""
            if e.event == "retry" and e.to_offset >= 0:
                target = firsts.get((e.broker, e.group, e.to_offset), "")
                link = f"#{target}" if target else ""
            elif e.event == "dead_letter" and e.to_offset >= 0:
                if e.to_topic not in dlq_queues:
                    dlq_queues[e.to_topic] = await self._brokers(e.to_topic)
                link = message_link(
                    e.to_topic, _queue_of(dlq_queues[e.to_topic], e.broker), e.to_offset
                )
            until = _ms(e.invisible_until) if e.HasField("invisible_until") else 0
            rows.append(
                HistoryRow(
                    e,
                    forms.utc(_ms(e.time)),
                    forms.utc(until),
                    seconds_text(until - _ms(e.time)) if until else "",
                    anchor,
                    link,
                )
            )
        return rows

    async def _brokers(self, topic: str) -> dict[int, str]:
        """The broker of each queue of `topic` ({} from `popmq serve` or when it is gone),
        as messages.queue_brokers reads it (that module imports this one)."""
        try:
            _, queues = await self.console.broker.get_topic(topic)
        except PopMQError:
            return {}
        return {q.queue_id: q.broker for q in queues if q.broker}


def _queue_of(brokers: Mapping[int, str], broker: str) -> int:
    """The queue id of a dead-letter copy: queue 0 of the broker that recorded it, which in
    cluster mode is the lowest global id of that broker's queues of the topic."""
    if not broker:
        return 0
    ids = [q for q, b in brokers.items() if b == broker]
    return min(ids) if ids else 0
