"""What the CLI prints: one-line summaries, rich tables for people, JSON for scripts.

Tables and lines go to stdout; progress bars go to stderr, so `popmq ... > file` keeps only
the result. `--json` prints one JSON document built from the SDK's dataclasses.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import sys
import textwrap
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from popmq import (
    BrokerStatus,
    ClusterStatus,
    DeliveryEvent,
    Group,
    GroupInspection,
    LagReport,
    Policy,
    ReceivedMessage,
    SendReceipt,
    ServerInfo,
    StoredMessage,
    Topic,
    TopicDescription,
    TransactionInfo,
    User,
)
from popmq.sdk.cluster_status import format_age

_PIPE_WIDTH = 200
"""Columns when stdout is not a terminal: wide enough that tables never wrap in a file."""


def console() -> Console:
    """A console on the current stdout (tests swap sys.stdout)."""
    tty = sys.stdout.isatty()
    return Console(
        file=sys.stdout, width=None if tty else _PIPE_WIDTH, highlight=False, soft_wrap=not tty
    )


def progress(*, enabled: bool) -> Progress:
    """A progress bar on stderr; shown only on a terminal and when `enabled`."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        disable=not (enabled and sys.stderr.isatty()),
        # Lines printed to stdout are routed above the bar only when stdout is that same
        # terminal; otherwise rich would send them to stderr, and `| head` would get nothing.
        redirect_stdout=sys.stdout.isatty(),
        transient=True,
    )


# -- JSON -----------------------------------------------------------------------------------


_JSON_NAMES = {"deliver_time": "deliver_at"}
"""One JSON name per concept: Message and ReceivedMessage say deliver_at."""


def _toml_value(text: str) -> Any:
    """A TOML value (as ServerInfo.config holds them) as the JSON value it is."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            name = _JSON_NAMES.get(field.name, field.name)
            if isinstance(item, bytes):
                try:
                    out[name] = item.decode("utf-8")
                except UnicodeDecodeError:
                    out[f"{name}_base64"] = base64.b64encode(item).decode("ascii")
                continue
            if field.name == "oldest_unacked_age_s" and not item:
                item = None  # the SDK's 0 means nothing is unacked, not "unacked for 0s"
            elif isinstance(value, ServerInfo) and field.name == "config":
                item = {key: _toml_value(text) for key, text in item.items()}
            out[name] = _jsonable(item)
        return out
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "expression"):  # sdk.Sql
        return {"sql": value.expression}
    return value


def json_data(value: Any) -> Any:
    """What `print_json` prints, as data (a dict for a dataclass), to add fields to."""
    return _jsonable(value)


def print_json(value: Any) -> None:
    print(json.dumps(_jsonable(value), indent=2, sort_keys=False))


class JsonListWriter:
    """Prints ``{"KEY": [items...], other fields}`` as items arrive, byte for byte what
    print_json prints for the whole document, so a long `receive --count --json` can ack
    each batch once its items are out instead of holding every handle to the end."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._count = 0

    def add(self, item: Any) -> None:
        text = textwrap.indent(json.dumps(_jsonable(item), indent=2), "    ")
        head = f"{{\n  {json.dumps(self._key)}: [\n" if self._count == 0 else ",\n"
        sys.stdout.write(head + text)
        self._count += 1

    def close(self, fields: dict[str, Any]) -> None:
        rest = "".join(
            f",\n  {json.dumps(k)}: " + json.dumps(_jsonable(v), indent=2).replace("\n", "\n  ")
            for k, v in fields.items()
        )
        if self._count == 0:
            sys.stdout.write(f"{{\n  {json.dumps(self._key)}: []{rest}\n}}\n")
        else:
            sys.stdout.write(f"\n  ]{rest}\n}}\n")


# -- lines ----------------------------------------------------------------------------------


def plural(count: int, noun: str, nouns: str = "") -> str:
    """The noun for `count` of it: "1 message" but "0 messages", "2 messages"."""
    return noun if count == 1 else nouns or noun + "s"


def _seconds(value: float) -> str:
    return f"{value:g}s"


def age(seconds: float) -> str:
    """A short human age: 0s, 42s, 3m07s, 2h05m (as `popmq cluster status` problems say)."""
    return format_age(seconds)


def format_topic(topic: Topic) -> str:
    """One line describing a topic."""
    return (
        f"topic {topic.name} queues={topic.queues} message_type={topic.message_type} "
        f"kind={topic.kind} created={topic.create_time.isoformat()}"
    )


def format_group(group: Group) -> str:
    """One line describing a consumer group."""
    backoff = ",".join(_seconds(s) for s in group.retry_backoff_s)
    line = (
        f"group {group.name} max_delivery_attempts={group.max_delivery_attempts} "
        f"retry_backoff={backoff} created={group.create_time.isoformat()}"
    )
    if group.fifo:
        line += " fifo=true"
    if group.subscriptions:
        line += " subscriptions=" + ",".join(s.topic for s in group.subscriptions)
    return line


def format_receipt(receipt: SendReceipt) -> str:
    """One line saying where a sent message was stored."""
    return (
        f"sent {receipt.message_id} to {receipt.topic} "
        f"queue {receipt.queue_id} offset {receipt.offset}"
    )


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters but tab, line feed and carriage return: not text a terminal shows."""


def body_text(body: bytes) -> str:
    """A body as people read it: its UTF-8 text, or ``<binary 1,234 bytes>`` when it is not
    text (invalid UTF-8 or control characters), as the nats CLI does, never mojibake."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"<binary {len(body):,} bytes>"
    if _CONTROL.search(text):
        return f"<binary {len(body):,} bytes>"
    return text


def format_message(message: ReceivedMessage) -> str:
    """One line describing a received message, its body as `body_text` shows it."""
    body = body_text(message.body)
    return (
        f"{message.message_id} attempt={message.delivery_attempt} queue={message.queue_id} "
        f"offset={message.offset} tag={message.tag or '-'} body={body}"
    )


# -- tables ---------------------------------------------------------------------------------


def topics_table(topics: Sequence[Topic]) -> None:
    table = Table("name", "queues", "message type", "kind", "created", title="topics")
    for t in topics:
        table.add_row(
            t.name, str(t.queues), t.message_type, t.kind, t.create_time.isoformat(" ", "seconds")
        )
    console().print(table)


def topic_table(description: TopicDescription) -> None:
    t = description.topic
    out = console()
    out.print(format_topic(t))
    brokers = any(q.broker for q in description.queues)  # cluster mode names them
    columns = ["queue", *(["broker"] if brokers else []), "min offset", "max offset"]
    table = Table(*columns, "messages", "last stored", title=f"queues of {t.name}")
    for q in description.queues:
        last = q.last_store_time.isoformat(" ", "milliseconds") if q.last_store_time else "-"
        table.add_row(
            str(q.queue_id),
            *([q.broker] if brokers else []),
            str(q.min_offset),
            str(q.max_offset),
            str(q.message_count),
            last,
        )
    out.print(table)
    groups = ", ".join(description.consumer_groups) or "none"
    out.print(f"consumer groups: {groups}")


def groups_table(groups: Sequence[Group]) -> None:
    table = Table(
        "name", "max attempts", "backoff", "fifo", "subscriptions", "consume from", title="groups"
    )
    for g in groups:
        table.add_row(
            g.name,
            str(g.max_delivery_attempts),
            _backoff(g),
            "yes" if g.fifo else "no",
            ", ".join(s.topic for s in g.subscriptions) or "-",
            _consume_from(g),
        )
    console().print(table)


def _backoff(group: Group) -> str:
    exp = group.exponential_backoff
    if exp is not None:
        return f"exponential {_seconds(exp.initial_s)}..{_seconds(exp.max_s)} x{exp.multiplier:g}"
    delays = group.retry_backoff_s
    shown = ",".join(_seconds(s) for s in delays[:6])
    return shown + (f",... ({len(delays)})" if len(delays) > 6 else "")


def _consume_from(group: Group) -> str:
    if group.consume_from == "timestamp" and group.consume_from_time is not None:
        return group.consume_from_time.isoformat(" ", "seconds")
    return group.consume_from


def group_table(group: Group) -> None:
    table = Table("setting", "value", title=f"group {group.name}")
    table.add_row("max delivery attempts", str(group.max_delivery_attempts))
    table.add_row("retry backoff", ",".join(_seconds(s) for s in group.retry_backoff_s))
    if group.exponential_backoff is not None:
        table.add_row("backoff policy", _backoff(group))
    table.add_row("fifo", "yes" if group.fifo else "no")
    table.add_row("consume from", _consume_from(group))
    table.add_row("auto created", "yes" if group.auto_created else "no")
    table.add_row("created", group.create_time.isoformat(" ", "seconds"))
    for s in group.subscriptions:
        shown = f"sql: {s.filter.expression}" if not isinstance(s.filter, str) else s.filter
        table.add_row(f"subscription {s.topic}", shown)
    console().print(table)


def lag_tables(group: str, report: LagReport) -> None:
    out = console()
    brokers = any(q.broker for q in report.queues)  # cluster mode names them
    table = Table(
        "topic", "queue", *(["broker"] if brokers else []), "consumer offset", "max offset",
        "lag", "in flight", "oldest unacked", title=f"lag of group {group}",
    )  # fmt: skip
    for q in report.queues:
        table.add_row(
            q.topic,
            "retry" if q.retry else str(q.queue_id),
            *([q.broker] if brokers else []),
            str(q.consumer_offset),
            str(q.max_offset),
            str(q.lag),
            str(q.inflight),
            age(q.oldest_unacked_age_s) if q.oldest_unacked_age_s else "-",
        )
    out.print(table)
    summary = Table(
        "topic", "lag", "in flight", "retry backlog", "oldest unacked", title="per topic"
    )
    for t in report.topics:
        summary.add_row(
            t.topic,
            str(t.lag),
            str(t.inflight),
            str(t.retry_backlog),
            age(t.oldest_unacked_age_s) if t.oldest_unacked_age_s else "-",
        )
    out.print(summary)
    out.print(f"dead letters in %DLQ%{group}: {report.dlq_depth}")


def _when(at: datetime | None, now: datetime) -> str:
    """A time relative to the server's now: "in 25s", "3s ago", "-" for none."""
    if at is None:
        return "-"
    delta = (at - now).total_seconds()
    return f"in {age(delta)}" if delta >= 0 else f"{age(-delta)} ago"


def _client(client_id: str) -> str:
    """A client id as a table cell: markup escaped (ids are free text), "unknown" for none."""
    return escape(client_id) if client_id else "unknown"


def inspection_tables(group: str, view: GroupInspection) -> None:
    out = console()
    brokers = any(r.broker for r in view.revive)  # cluster mode names them
    b = ["broker"] if brokers else []
    polls = Table("topic", "queue", *b, "held pops", title=f"long polls held by group {group}")
    for h in view.held_polls:
        queue = "all" if h.queue_id < 0 else str(h.queue_id)
        polls.add_row(h.topic, queue, *([h.broker] if brokers else []), str(h.count))
    out.print(polls)
    consumers = Table(
        "consumer", "in flight", "earliest visible again",
        title=f"in flight per consumer (every page): {view.consumer_count} client"
        + ("s" if view.consumer_count != 1 else "")
        + (f", the {len(view.consumers)} with the most shown"
           if view.consumer_count > len(view.consumers) else ""),
    )  # fmt: skip
    for c in view.consumers:
        consumers.add_row(
            _client(c.client_id), str(c.count), _when(c.earliest_invisible_until, view.now)
        )
    out.print(consumers)
    inflight = Table(
        "topic", "queue", *b, "offset", "message id", "attempt", "consumer", "popped",
        "visible again", title="in flight",
    )  # fmt: skip
    for m in view.inflight:
        inflight.add_row(
            m.topic,
            "retry" if m.retry else str(m.queue_id),
            *([m.broker] if brokers else []),
            str(m.offset),
            m.message_id,
            str(m.delivery_attempt),
            "-" if m.waiting else _client(m.client_id),
            _when(m.pop_time, view.now),
            "waiting (FIFO)" if m.waiting else _when(m.invisible_until, view.now),
        )
    out.print(inflight)
    if view.next_page_token:
        out.print(f"more in flight: --page-token {view.next_page_token}")
    revive = Table(
        *b, "revive lag", "oldest due", "next deadline", "live checkpoints",
        title="redelivery (every group)",
    )  # fmt: skip
    for r in view.revive:
        revive.add_row(
            *([r.broker] if brokers else []),
            age(r.lag_s),
            _when(r.oldest_due, view.now),
            _when(r.next_deadline, view.now),
            str(r.live_checkpoints),
        )
    out.print(revive)
    heads = Table(
        "topic", "queue", *b, "message group", "offset", "message id", "attempt", "head",
        "waiting behind", title=f"blocked FIFO message groups: {view.blocked_groups}",
    )  # fmt: skip
    for head in view.blocked_heads:
        state = "in flight" if head.delivered else "backoff"
        heads.add_row(
            head.topic,
            str(head.queue_id),
            *([head.broker] if brokers else []),
            head.message_group,
            str(head.offset),
            head.message_id,
            str(head.delivery_attempt),
            f"{state}, {_when(head.invisible_until, view.now)}",
            str(head.waiting),
        )
    out.print(heads)


def history_table(message_id: str, events: Sequence[DeliveryEvent]) -> None:
    brokers = any(e.broker for e in events)  # cluster mode names them
    table = Table(
        "time", "event", "group", *(["broker"] if brokers else []), "queue", "offset",
        "attempt", "client", "visible again / copy", title=f"history of message {message_id}",
    )  # fmt: skip
    for e in events:
        if e.to_topic:
            then = f"{e.to_topic} offset {e.to_offset}"
        else:
            then = _when(e.invisible_until, e.time) if e.invisible_until else "-"
        table.add_row(
            e.time.isoformat(" ", "milliseconds"),
            e.event,
            e.group or "-",
            *([e.broker] if brokers else []),
            "retry" if e.retry else str(e.queue_id),
            str(e.offset),
            str(e.delivery_attempt),
            "-" if e.event == "stored" else _client(e.client_id),
            then,
        )
    console().print(table)


def messages_table(messages: Iterable[StoredMessage], *, title: str) -> None:
    table = Table(
        "queue", "offset", "message id", "tag", "keys", "attempt", "stored", "body", title=title
    )
    for m in messages:
        body = body_text(m.body)
        table.add_row(
            str(m.queue_id),
            str(m.offset),
            m.message_id,
            m.tag or "-",
            ",".join(m.keys) or "-",
            str(m.delivery_attempt),
            m.store_timestamp.isoformat(" ", "milliseconds"),
            body if len(body) <= 60 else body[:57] + "...",
        )
    console().print(table)


def message_detail(message: StoredMessage) -> None:
    table = Table("field", "value", title=f"message {message.message_id}")
    table.add_row("topic", message.topic)
    table.add_row("queue / offset", f"{message.queue_id} / {message.offset}")
    table.add_row("tag", message.tag or "-")
    table.add_row("keys", ", ".join(message.keys) or "-")
    for key, value in sorted(message.properties.items()):
        table.add_row(f"property {key}", value)
    table.add_row("born", message.born_timestamp.isoformat(" ", "milliseconds"))
    table.add_row("stored", message.store_timestamp.isoformat(" ", "milliseconds"))
    table.add_row("delivery attempt", str(message.delivery_attempt))
    if message.message_group:
        table.add_row("message group", message.message_group)
    if message.deliver_time is not None:
        table.add_row("deliver at", message.deliver_time.isoformat(" ", "milliseconds"))
    if message.origin_topic:
        table.add_row(
            "origin",
            f"{message.origin_topic} queue {message.origin_queue_id} "
            f"offset {message.origin_offset}",
        )
    table.add_row("body", body_text(message.body))
    console().print(table)


def server_table(info: ServerInfo) -> None:
    out = console()
    table = Table("", "", title="popmq server", show_header=False)
    table.add_row("version", info.version)
    table.add_row("started", info.start_time.isoformat(" ", "seconds"))
    table.add_row("uptime", age(info.uptime_s))
    table.add_row("data dir", info.data_dir)
    table.add_row("store size", _bytes(info.store_bytes))
    table.add_row("topics", str(info.topics))
    table.add_row("groups", str(info.groups))
    out.print(table)
    if not info.config:  # the server shows its configuration to SUPER users only
        out.print("configuration: shown to SUPER users only")
        return
    config = Table("setting", "value", title="configuration in effect")
    for key, value in info.config.items():
        config.add_row(key, value)
    out.print(config)


def cluster_tables(status: ClusterStatus) -> None:
    """Brokers, proxies and etcd, one table each, then what did not answer and why."""
    out = console()
    local = status.mode == "local"
    if local:
        out.print(f"local server at {status.proxy or '-'} (popmq serve: one broker, no etcd)")
    else:
        out.print(f"cluster {status.cluster}, as proxy {status.proxy} sees it")
    cluster_only = ("epoch", "lease left", "sends")
    columns = [
        "name", "address", "state", "epoch", "lease left", "store", "disk free", "topics",
        "queues", "held polls", "sends",
    ]  # fmt: skip
    brokers = Table(*(c for c in columns if not (local and c in cluster_only)), title="brokers")
    for b in status.brokers:
        cells = {
            "name": b.name,
            "address": b.address or "-",
            "state": broker_state(b),
            "epoch": str(b.epoch) if b.epoch else "-",
            "lease left": age(b.lease_ttl_s) if b.lease_ttl_s is not None else "-",
            "store": _bytes(b.store_bytes) if b.store_bytes is not None else "-",
            "disk free": _bytes(b.disk_free_bytes) if b.disk_free_bytes is not None else "-",
            "topics": str(b.topics),
            "queues": str(b.queues),
            "held polls": str(b.long_polls_held) if b.long_polls_held is not None else "-",
            "sends": _sends(b),
        }
        brokers.add_row(*(cells[c] for c in columns if not (local and c in cluster_only)))
    out.print(brokers)
    if local:
        for b in status.brokers:
            out.print(f"data dir of {b.name}: {b.data_dir}")
        return
    for b in status.brokers:
        if b.error:
            out.print(f"broker {b.name}: {b.error}")
    replicated = [b for b in status.brokers if b.replication is not None]
    if replicated:
        shards = Table(
            "shard", "replica", "role", "epoch", "in sync", "lag (batches)", "lag (bytes)", "lag",
            title="replicas (docs/replication.md)",
        )  # fmt: skip
        for b in replicated:
            r = b.replication
            assert r is not None
            shards.add_row(
                b.name, r.leader, f"leader ({r.mode}, min_insync {r.min_insync})",
                str(r.epoch), "-", "-", "-", "-",
            )  # fmt: skip
            for f in r.followers:
                shards.add_row(
                    b.name, f.name, "follower", str(r.epoch), "yes" if f.in_sync else "NO",
                    str(f.lag_batches), _bytes(f.lag_bytes), age(f.lag_s),
                )  # fmt: skip
        out.print(shards)
    proxies = Table("name", "address", "epoch", "", title="proxies")
    for p in status.proxies:
        proxies.add_row(p.name, p.address, str(p.epoch), "this proxy" if p.this_proxy else "")
    out.print(proxies)
    if status.proxies_stale:
        when = status.proxies_read_time
        out.print(
            "etcd did not answer: proxies as last read"
            + (f" at {when.isoformat(' ', 'seconds')}" if when else " (never read)")
        )
    etcd = Table(
        "endpoint", "state", "version", "db size", "leader", "revision", "alarms", title="etcd"
    )
    for e in status.etcd or []:
        etcd.add_row(
            e.endpoint,
            "up" if e.reachable else "DOWN",
            e.version or "-",
            _bytes(e.db_size_bytes) if e.reachable else "-",
            ("this member" if e.is_leader else f"{e.leader:x}" if e.leader else "none")
            if e.reachable
            else "-",
            str(e.revision) if e.reachable else "-",
            ", ".join(e.errors) or "-",
        )
    out.print(etcd)
    for e in status.etcd or []:
        if e.error:
            out.print(f"etcd {e.endpoint}: {e.error}")
    if status.etcd_reachable is False:
        out.print("etcd is unreachable: brokers are shown as this proxy last saw them in etcd")


def broker_state(broker: BrokerStatus) -> str:
    """up (registered and answering), UNREACHABLE (registered, not answering), HELD (its
    registration lost, the proxy still routing to it until it registers again) or DOWN (not
    registered)."""
    if broker.held_for_s is not None:
        return f"HELD {age(broker.hold_left_s or 0.0)} left"
    if not broker.live:
        return "DOWN"
    return "up" if broker.reachable else "UNREACHABLE"


def _sends(broker: BrokerStatus) -> str:
    """The proxy's fault table view: quarantined since how long (its connection is down, its
    end unknown) or isolated for how long, and failures recorded."""
    if broker.quarantined_for_s is not None:
        shown = f"QUARANTINED {age(broker.quarantined_for_s)} (connection down)"
    elif broker.isolated_for_s > 0:
        shown = f"isolated {age(broker.isolated_for_s)}"
    else:
        shown = "ok"
    if broker.send_failures:
        shown += f", {broker.send_failures} failed"
    return shown


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


# -- users and policies ---------------------------------------------------------------------


def format_user(user: User) -> str:
    state = "enabled" if user.enabled else "DISABLED"
    return (
        f"{user.access_key} ({user.user_type.upper()}, {state}, {user.policy_count} "
        f"{plural(user.policy_count, 'policy', 'policies')}, "
        f"secret fingerprint {user.secret_fingerprint})"
    )


def format_policy(policy: Policy) -> str:
    """ "ALLOW pub,sub on topic:orders from 10.0.0.0/8"."""
    actions = ",".join(policy.actions) or "every action"
    where = f" from {', '.join(policy.source_cidrs)}" if policy.source_cidrs else ""
    return f"{policy.decision.upper()} {actions} on {policy.resource}{where}"


def users_table(users: Sequence[User]) -> None:
    table = Table(
        "access key", "type", "enabled", "policies", "secret fingerprint", "updated", title="users"
    )
    for u in users:
        table.add_row(
            u.access_key,
            u.user_type.upper(),
            "yes" if u.enabled else "NO",
            str(u.policy_count),
            u.secret_fingerprint,
            u.update_time.isoformat(" ", "seconds"),
        )
    console().print(table)


def policies_table(by_user: Mapping[str, Sequence[Policy]]) -> None:
    table = Table("user", "decision", "actions", "resource", "source", title="policies")
    for access_key, policies in by_user.items():
        if not policies:
            table.add_row(access_key, "-", "-", "(none)", "-")
        for p in policies:
            table.add_row(
                access_key,
                p.decision.upper(),
                ",".join(p.actions),
                p.resource,
                ", ".join(p.source_cidrs) or "any",
            )
    console().print(table)


def format_transaction(info: TransactionInfo) -> str:
    """One line for a transaction an operator changed."""
    by = f" by={info.resolved_by}" if info.resolved_by else ""
    return (
        f"transaction {info.transaction_id} topic={info.topic} message_id={info.message_id} "
        f"state={info.state}{by} checks={info.checks}"
    )


def transactions_table(transactions: Sequence[TransactionInfo], *, title: str) -> None:
    table = Table(
        "transaction id", "topic", "message id", "producer group", "created", "checks",
        "next check", "state", title=title,
    )  # fmt: skip
    for t in transactions:
        table.add_row(
            t.transaction_id,
            t.topic,
            t.message_id,
            t.producer_group or "-",
            t.create_time.isoformat(" ", "seconds"),
            str(t.checks),
            t.next_check_time.isoformat(" ", "seconds") if t.next_check_time else "-",
            t.state,
        )
    console().print(table)
