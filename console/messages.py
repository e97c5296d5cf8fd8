"""The console's message pages: browse a topic without side effects, look messages up, one
message's page, and sending a test message.

Nothing here consumes: browsing is AdminService.PeekMessages (no receipt handle, no change
to any offset or delivery attempt), by queue and offset, or by time (the queues' offsets at
that time, as MessagingService.GetOffsetsAtTime finds them, then a peek from there); a
browse reads at most `MAX_PEEK` messages a queue, never a whole queue. Lookups are
QueryMessage (by id) and QueryMessagesByKey.

A test message is sent as the visitor: MessagingService.SendMessages's access check (PUB on
the topic, counted and logged when refused, as the gRPC gate does) and then the broker's
send, which validates it as a gRPC send's. The sends of the console are logged with their
user (sends have no audit line over gRPC either).

Bodies are shown safely (`BodyView`): UTF-8 text escaped by the templates, JSON
pretty-printed, anything else as a hex dump with its size; a large body is cut, saying so.

Runs on the event loop with the console (app.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core import BrokerAPI, NewMessage, PopMQError
from popmq.console import forms
from popmq.console.actions import MESSAGING_SERVICE, broker_read
from popmq.console.runtime import Runtime

if TYPE_CHECKING:
    from popmq.console.app import Console, Visitor

log = logging.getLogger(__name__)

MAX_PEEK = 256
"""PeekMessages's largest max_messages: a browse's largest page."""
MAX_OFFSET = 2**63 - 1
MAX_QUEUE = 2**31 - 1
"""A queue id's largest value (int32): in cluster mode ids run over every broker's queues,
so the broker, which knows the topic's queues, says which exist."""
TEXT_LIMIT = 64 * 1024
"""Characters of a text or JSON body shown; the rest is cut, saying so."""
HEX_LIMIT = 4096
"""Bytes of a binary body shown as hex."""
_DECODE_LIMIT = 4 * 1024 * 1024
"""Bytes a compressed body is inflated to at most, for the page."""
_CONTROL = frozenset(range(32)) - {9, 10, 13}


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One message of a browse or lookup list."""

    topic: str
    queue_id: int
    offset: int
    message_id: str
    tag: str
    keys: str
    stored: str
    attempt: int
    size: int
    origin_topic: str
    broker: str = ""
    """The broker holding its queue (cluster mode; "" from `popmq serve`)."""

    @property
    def link(self) -> str:
        return "/messages/view?" + urlencode(
            {"topic": self.topic, "queue": self.queue_id, "offset": self.offset}
        )


def message_rows(
    messages: Sequence[admin_pb2.StoredMessage], brokers: Mapping[int, str] | None = None
) -> list[MessageRow]:
    """Rows of a message list; `brokers` names the broker of each queue id (cluster)."""
    brokers = brokers or {}
    return [
        MessageRow(
            topic=m.topic,
            queue_id=m.queue_id,
            offset=m.offset,
            message_id=m.message_id,
            tag=m.tag,
            keys=", ".join(m.keys),
            stored=forms.utc(m.store_time.ToMilliseconds()),
            attempt=m.delivery_attempt,
            size=len(m.body),
            origin_topic=m.origin_topic,
            broker=brokers.get(m.queue_id, ""),
        )
        for m in messages
    ]


async def queue_brokers(broker: BrokerAPI, topic: str) -> dict[int, str]:
    """The broker of each queue of `topic` ({} from `popmq serve`, or when the topic is
    gone): read after the page's own access check, for its queue column."""
    try:
        _, queues = await broker.get_topic(topic)
    except PopMQError:
        return {}
    return {q.queue_id: q.broker for q in queues if q.broker}


@dataclass(frozen=True, slots=True)
class BodyView:
    """A body as the message page shows it.

    Attributes:
        kind: "text", "json", "hex" (binary), or "empty".
        text: What to show (escaped by the template): text, indented JSON, or a hex dump.
        size: The body's size in bytes, as stored.
        truncated: Whether `text` shows only the start.
        note: How it was decoded ("inflated from zlib, 1,234 bytes stored"), or "".
    """

    kind: str
    text: str
    size: int
    truncated: bool
    note: str = ""


def show_body(body: bytes, encoding: str = "") -> BodyView:
    """`body` as text, pretty JSON or hex (see BodyView); a zlib body is inflated first, a
    zstd one (no decoder in the server) shown as stored."""
    size = len(body)
    note = ""
    if encoding == "zlib":
        try:
            inflater = zlib.decompressobj()
            plain = inflater.decompress(body, _DECODE_LIMIT)
        except zlib.error:
            note = "zlib-encoded but does not inflate: shown as stored"
        else:
            cut = bool(inflater.unconsumed_tail)
            note = f"inflated from zlib ({size:,} bytes stored)" + (
                f"; the first {_DECODE_LIMIT:,} inflated bytes" if cut else ""
            )
            body = plain
    elif encoding:
        note = f"{encoding}-encoded: shown as stored"
    if not body:
        return BodyView("empty", "", size, False, note)
    text = _as_text(body) if not note.endswith("as stored") else None
    if text is not None:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return BodyView("text", text[:TEXT_LIMIT], size, len(text) > TEXT_LIMIT, note)
        if text.lstrip()[:1] in ("{", "["):
            return BodyView("json", pretty[:TEXT_LIMIT], size, len(pretty) > TEXT_LIMIT, note)
        return BodyView("text", text[:TEXT_LIMIT], size, len(text) > TEXT_LIMIT, note)
    return BodyView("hex", hex_dump(body[:HEX_LIMIT]), size, len(body) > HEX_LIMIT, note)


def _as_text(body: bytes) -> str | None:
    """`body` as text when it is UTF-8 without control characters (but tab and newlines)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(c) in _CONTROL or c == "\x7f" for c in text[:TEXT_LIMIT]):
        return None
    return text


def hex_dump(data: bytes) -> str:
    """16 bytes a line: offset, hex, and the printable ASCII ("." for the rest)."""
    lines = []
    for start in range(0, len(data), 16):
        chunk = data[start : start + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {hexes:<47}  {shown}")
    return "\n".join(lines)


class MessagePages:
    """The message routes of one console (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.actions = console.actions

    def routes(self) -> list[Route]:
        return [
            Route("/topics/browse", self.browse, methods=["GET"]),
            Route("/topics/lookup", self.lookup, methods=["GET"]),
            Route("/topics/send", self.send, methods=["POST"]),
            Route("/messages/view", self.message_page, methods=["GET"]),
        ]

    async def _peek(
        self, visitor: Visitor, request: admin_pb2.PeekMessagesRequest
    ) -> list[admin_pb2.StoredMessage]:
        answer = await self.actions.call(
            visitor.principal, "PeekMessages", request, response=admin_pb2.PeekMessagesResponse
        )
        return list(answer.messages)

    async def browse(self, request: Request) -> Response:
        """Peek: from a queue's offset (or its start), or from a time (a queue's or every
        queue's first message stored at or after it)."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        topic = forms.text(params, "name", required=True)
        queue = forms.integer(params, "queue", low=0, high=MAX_QUEUE)
        offset = forms.integer(params, "offset", low=0, high=MAX_OFFSET)
        at_ms = forms.timestamp_ms(params, "at")
        size = forms.integer(params, "size", low=1, high=MAX_PEEK, default=20)
        assert size is not None
        if offset is not None and queue is None:
            raise forms.invalid("an offset needs a queue: offsets are per queue")
        if offset is not None and at_ms is not None:
            raise forms.invalid("give an offset or a time, not both")
        if at_ms is not None:
            messages = await self._from_time(visitor, topic, queue, at_ms, size)
        else:
            peek = admin_pb2.PeekMessagesRequest(topic=topic, max_messages=size)
            if queue is not None:
                peek.queue_id = queue
            if offset is not None:
                peek.offset = offset
            messages = await self._peek(visitor, peek)
        rows = message_rows(messages, await queue_brokers(self.console.broker, topic))
        following = ""
        if queue is not None and rows and len(rows) == size:
            following = "/topics/browse?" + urlencode(
                {"name": topic, "queue": queue, "offset": rows[-1].offset + 1, "size": size}
            )
        return self.console.page(
            request,
            visitor,
            "browse.html",
            topic=topic,
            rows=rows,
            queue="" if queue is None else queue,
            offset="" if offset is None else offset,
            at=str(params.get("at") or "").strip(),
            size=size,
            following=following,
            how=_how(queue, offset, at_ms),
        )

    async def _from_time(
        self, visitor: Visitor, topic: str, queue: int | None, at_ms: int, size: int
    ) -> list[admin_pb2.StoredMessage]:
        # GetOffsetsAtTime's check (SUB or GET on the topic), then the broker read it makes.
        self.actions.authorize(
            visitor.principal,
            "GetOffsetsAtTime",
            messaging_pb2.GetOffsetsAtTimeRequest(topic=topic),
            service=MESSAGING_SERVICE,
        )
        starts = await broker_read(self.console.broker.offsets_at(topic, at_ms))
        if queue is not None:
            starts = [(q, o) for q, o in starts if q == queue]
            if not starts:
                raise forms.invalid(f"topic {topic!r} has no queue {queue}")
        found = await asyncio.gather(
            *(
                self._peek(
                    visitor,
                    admin_pb2.PeekMessagesRequest(
                        topic=topic, queue_id=q, offset=o, max_messages=size
                    ),
                )
                for q, o in starts
            )
        )
        merged = [m for batch in found for m in batch]
        merged.sort(key=lambda m: (m.store_time.ToMilliseconds(), m.queue_id, m.offset))
        return merged[:size]

    async def lookup(self, request: Request) -> Response:
        """QueryMessage (`id`) or QueryMessagesByKey (`key`) in a topic."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        topic = forms.text(params, "name", required=True)
        message_id = forms.text(params, "id")
        key = forms.text(params, "key")
        if bool(message_id) == bool(key):
            raise forms.invalid("give a message id or a key (one of them)")
        if message_id:
            found = await self.actions.call(
                visitor.principal,
                "QueryMessage",
                admin_pb2.QueryMessageRequest(topic=topic, message_id=message_id),
                response=admin_pb2.QueryMessageResponse,
            )
            messages = [found.message]
            how = f"message id {message_id}"
        else:
            by_key = await self.actions.call(
                visitor.principal,
                "QueryMessagesByKey",
                admin_pb2.QueryMessagesByKeyRequest(topic=topic, key=key),
                response=admin_pb2.QueryMessagesByKeyResponse,
            )
            messages = list(by_key.messages)
            how = f"key {key}"
        return self.console.page(
            request,
            visitor,
            "browse.html",
            topic=topic,
            rows=message_rows(messages, await queue_brokers(self.console.broker, topic)),
            queue="",
            offset="",
            at="",
            size=20,
            following="",
            how=how,
        )

    async def message_page(self, request: Request) -> Response:
        """One stored message, by queue and offset (PeekMessages) or by id (QueryMessage):
        system fields, properties, the body shown safely, and its delivery history
        (runtime.py; every group's steps, or `group`'s)."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        params = request.query_params
        topic = forms.text(params, "topic", required=True)
        message_id = forms.text(params, "id")
        group = forms.text(params, "group")
        if message_id:
            if "queue" in params or "offset" in params:
                raise forms.invalid("give a message id or a queue and offset, not both")
            found = await self.actions.call(
                visitor.principal,
                "QueryMessage",
                admin_pb2.QueryMessageRequest(topic=topic, message_id=message_id),
                response=admin_pb2.QueryMessageResponse,
            )
            messages = [found.message]
            queue, offset = found.message.queue_id, found.message.offset
        else:
            queue = forms.required_integer(params, "queue", low=0, high=MAX_QUEUE)
            offset = forms.required_integer(params, "offset", low=0, high=MAX_OFFSET)
            messages = await self._peek(
                visitor,
                admin_pb2.PeekMessagesRequest(
                    topic=topic, queue_id=queue, offset=offset, max_messages=1
                ),
            )
        if not messages or messages[0].offset != offset:
            return self.console.page(
                request,
                visitor,
                "message.html",
                status=404,
                title="Not found",
                message=f"NOT_FOUND: topic {topic!r} queue {queue} has no message at offset "
                f"{offset} (never stored, or removed by retention, a purge or a redrive)",
            )
        message = messages[0]
        return self.console.page(
            request,
            visitor,
            "message_view.html",
            message=message,
            body=show_body(message.body, message.body_encoding),
            born=forms.utc(message.born_time.ToMilliseconds()),
            stored=forms.utc(message.store_time.ToMilliseconds()),
            deliver=forms.utc(message.deliver_time.ToMilliseconds())
            if message.HasField("deliver_time")
            else "",
            properties=sorted(message.properties.items()),
            broker=(await queue_brokers(self.console.broker, topic)).get(queue, ""),
            **await Runtime(self.console).history_values(visitor, message, group),
        )

    async def send(self, request: Request) -> Response:
        """Send one test message as the visitor (see the module docstring)."""
        visitor = self.console.visitor(request)
        if visitor is None:
            return self.console.to_login(request)
        form = await self.console.check_csrf(request, visitor)
        topic = forms.text(form, "name", required=True)
        body = str(form.get("body") or "").encode()
        tag = forms.text(form, "tag")
        keys = tuple(k for k in forms.text(form, "keys").replace(",", " ").split() if k)
        group = forms.text(form, "message_group")
        properties = _properties(str(form.get("properties") or ""))
        outgoing = messaging_pb2.OutgoingMessage(
            topic=topic,
            body=body,
            tag=tag,
            keys=keys,
            properties=properties,
            message_group=group,
        )
        principal = self.actions.authorize(
            visitor.principal,
            "SendMessages",
            messaging_pb2.SendMessagesRequest(messages=[outgoing]),
            service=MESSAGING_SERVICE,
        )
        (result,) = await broker_read(
            self.console.broker.send(
                [
                    NewMessage(
                        topic=topic,
                        body=body,
                        tag=tag,
                        keys=keys,
                        properties=properties,
                        message_group=group,
                        born_host="console",
                    )
                ]
            )
        )
        log.info(
            "console test message %s sent to topic %r by user %r from %s",
            result.message_id,
            topic,
            principal.access_key or "anonymous",
            principal.source,
        )
        return RedirectResponse(
            "/messages/view?"
            + urlencode({"topic": topic, "queue": result.queue_id, "offset": result.offset}),
            status_code=303,
        )


def _properties(text: str) -> dict[str, str]:
    """ "k=v" lines as a dict; refused when a line has no "=" or a key repeats."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise forms.invalid(f"properties line {number} is not KEY=VALUE")
        if key in found:
            raise forms.invalid(f"property {key[:40]!r} is given twice")
        found[key] = value.strip()
    return found


def _how(queue: int | None, offset: int | None, at_ms: int | None) -> str:
    where = "every queue" if queue is None else f"queue {queue}"
    if at_ms is not None:
        return f"{where}, from {forms.utc(at_ms)} UTC"
    if offset is not None:
        return f"{where}, from offset {offset}"
    return f"{where}, from the oldest stored"
