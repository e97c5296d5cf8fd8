"""The CLI's command handlers: each takes the parsed arguments and returns an exit code.

Client commands talk to a server through the SDK; `serve` runs one. SDK errors propagate to
`popmq.cli.main`, which turns them into exit codes.
"""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from popmq import (
    Admin,
    Credentials,
    Message,
    NotFoundError,
    Policy,
    Producer,
    ReceivedMessage,
    SimpleConsumer,
    Sql,
    Subscription,
)
from popmq.cli import render

EXIT_OK = 0
EXIT_UNHEALTHY = 5
"""`cluster status`: the status was read, and a broker or an etcd endpoint is not healthy."""
_EXIT_INTERRUPTED = 130
"""As popmq.cli.main.EXIT_INTERRUPTED (main imports this module)."""

_SEND_BATCH_BYTES = 1024 * 1024
"""Bodies per send_batch call in `send --count`, well below the 4 MiB request limit."""


# -- serve --------------------------------------------------------------------------------------


def serve(args: argparse.Namespace) -> int:
    # Imported here so client commands work without the server's dependencies (RocksDB).
    from popmq.proxy.server import run_server  # type: ignore[import-not-found, unused-ignore]

    return _run_with_settings(
        args,
        run_server,
        (
            ("server.listen", args.listen),
            ("store.data_dir", args.data_dir),
            ("store.flush", args.flush),
            ("metrics.listen", args.metrics_listen),
            ("log.format", args.log_format),
            ("log.level", args.log_level),
        ),
    )


def broker(args: argparse.Namespace) -> int:
    from popmq.broker.server import (  # type: ignore[import-not-found, unused-ignore]
        run_broker,
    )

    shard = getattr(args, "shard", None)
    return _run_with_settings(
        args,
        run_broker,
        (
            ("broker.broker_name", shard or args.name),
            ("replication.replica", args.name if shard else None),
            ("server.listen", args.listen),
            ("store.data_dir", args.data_dir),
            ("cluster.etcd", args.etcd),
            ("store.flush", args.flush),
            ("metrics.listen", args.metrics_listen),
            ("log.format", args.log_format),
            ("log.level", args.log_level),
        ),
    )


def proxy(args: argparse.Namespace) -> int:
    from popmq.cluster.proxy_server import (  # type: ignore[import-not-found, unused-ignore]
        run_proxy,
    )

    return _run_with_settings(
        args,
        run_proxy,
        (
            ("server.listen", args.listen),
            ("cluster.etcd", args.etcd),
            ("cluster.proxy_name", args.name),
            ("cluster.advertise", args.advertise),
            ("metrics.listen", args.metrics_listen),
            ("log.format", args.log_format),
            ("log.level", args.log_level),
        ),
    )


def _run_with_settings(
    args: argparse.Namespace,
    run: Callable[[Any], int],
    dedicated: Sequence[tuple[str, object]],
) -> int:
    """Load the settings (flags > --set > POPMQ_* > --config file > defaults), then run."""
    from popmq.runtime import settings  # type: ignore[import-not-found, unused-ignore]

    flags = {name: value for name, value in dedicated if value is not None}
    config_file = args.config or os.environ.get("POPMQ_CONFIG")
    try:
        overrides = settings.parse_assignments(args.set)
        overrides.update(flags)  # a dedicated flag beats --set for the same key
        config = settings.load(
            config_file=Path(config_file) if config_file else None,
            environ=os.environ,
            flags=overrides,
        )
    except settings.SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(settings.to_toml(config), end="")
        return EXIT_OK
    code: int = run(config)
    return code


# -- what every client command's SDK client gets ---------------------------------------------


def connection(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of the SDK clients of a client command: its TLS and credentials (set
    by popmq.cli.main from the --tls* flags, --access-key, --secret-key[-file] and POPMQ_*;
    False and None: plaintext, unsigned)."""
    return {"tls": args.tls, "credentials": args.credentials}


# -- auth ---------------------------------------------------------------------------------------


def auth_headers(args: argparse.Namespace) -> int:
    """Print grpcurl's -H arguments that sign calls as the given access key."""
    credentials: Credentials | None = args.credentials
    if credentials is None:
        print(
            "error: popmq auth headers needs credentials: --access-key (or POPMQ_ACCESS_KEY) "
            "and POPMQ_SECRET_KEY or --secret-key-file FILE",
            file=sys.stderr,
        )
        return 2
    # The middle of the next N minutes: a server with max_clock_skew_s >= N x 30 s accepts
    # the headers all that time; one without it (the default) accepts them for ever.
    signed_at = time.time() + args.minutes * 30.0
    headers = dict(credentials.metadata(signed_at))
    if args.json:
        render.print_json(headers)
    else:
        print(" ".join(f"-H {shlex.quote(f'{key}: {value}')}" for key, value in headers.items()))
    print(
        f"note: signed for {headers['x-mq-date-time']} (UTC, the middle of the next "
        f"{args.minutes} minutes). A server without security.max_clock_skew_s accepts these "
        "headers for ever: keep them as secret as the secret key. One with "
        "max_clock_skew_s = W accepts them from W seconds before that time to W seconds "
        f"after (all {args.minutes} minutes when W >= {args.minutes * 30})",
        file=sys.stderr,
    )
    return EXIT_OK


# -- topics -------------------------------------------------------------------------------------


def topic_create(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        topic = admin.create_topic(args.name, queues=args.queues, message_type=args.type)
    render.print_json(topic) if args.json else print(render.format_topic(topic))
    return EXIT_OK


def topic_update(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        topic = admin.update_topic(args.name, args.queues, broker=args.broker)
    render.print_json(topic) if args.json else print(render.format_topic(topic))
    return EXIT_OK


def _missing_topic(name: str, error: NotFoundError) -> NotFoundError:
    """The server's "does not exist; create it first" without the advice, which does not fit
    a command that removes the topic (or a %DLQ% / %RETRY% topic nobody creates)."""
    return (
        NotFoundError(f"topic {name!r} does not exist")
        if "create it first" in error.message
        else error
    )


def topic_delete(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        try:
            admin.delete_topic(args.name, force=args.force)
        except NotFoundError as exc:
            raise _missing_topic(args.name, exc) from None
    if args.json:
        render.print_json({"deleted": args.name})
    else:
        print(f"deleted topic {args.name}")
    return EXIT_OK


def topic_describe(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        description = admin.get_topic(args.name)
    render.print_json(description) if args.json else render.topic_table(description)
    return EXIT_OK


def topic_list(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        topics = admin.list_topics()
    render.print_json(topics) if args.json else render.topics_table(topics)
    return EXIT_OK


def topic_purge(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        try:
            purged = admin.purge_topic(args.name, args.queue)
        except NotFoundError as exc:
            raise _missing_topic(args.name, exc) from None
    if args.json:
        render.print_json({"topic": args.name, "queue_id": args.queue, "purged": purged})
    else:
        where = f"queue {args.queue} of {args.name}" if args.queue is not None else args.name
        print(f"purged {purged} {render.plural(purged, 'message')} from {where}")
    return EXIT_OK


# -- groups -------------------------------------------------------------------------------------


def _subscriptions(args: argparse.Namespace) -> list[Subscription]:
    subs = [Subscription(topic, expression or "*") for topic, expression in args.subscribe]
    subs += [Subscription(topic, Sql(expression)) for topic, expression in args.subscribe_sql]
    return subs


def group_create(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        group = admin.create_group(
            args.name,
            max_delivery_attempts=args.max_delivery_attempts,
            retry_backoff_s=args.backoff,
            exponential_backoff=args.exponential_backoff,
            fifo=args.fifo,
            subscriptions=_subscriptions(args),
            consume_from=args.consume_from,
        )
    render.print_json(group) if args.json else print(render.format_group(group))
    return EXIT_OK


def group_update(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        group = admin.update_group(
            args.name,
            max_delivery_attempts=args.max_delivery_attempts,
            retry_backoff_s=args.backoff,
            exponential_backoff=args.exponential_backoff,
            fifo=args.fifo,
            set_subscriptions=_subscriptions(args),
            remove_subscriptions=args.unsubscribe,
            consume_from=args.consume_from,
        )
    render.print_json(group) if args.json else print(render.format_group(group))
    return EXIT_OK


def group_delete(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        admin.delete_group(args.name, force=args.force)
    if args.json:
        render.print_json({"deleted": args.name})
    else:
        print(f"deleted group {args.name}")
    return EXIT_OK


def group_describe(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        group = admin.get_group(args.name)
    render.print_json(group) if args.json else render.group_table(group)
    return EXIT_OK


def group_list(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        groups = admin.list_groups()
    render.print_json(groups) if args.json else render.groups_table(groups)
    return EXIT_OK


def lag(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        report = admin.lag_report(args.group, args.topic)
    render.print_json(report) if args.json else render.lag_tables(args.group, report)
    return EXIT_OK


def offsets_reset(args: argparse.Namespace) -> int:
    target: Any = dict(args.offset) if args.offset else args.to
    with Admin(args.endpoint, **connection(args)) as admin:
        result = admin.reset_offsets(args.group, args.topic, target, force=args.force)
    if args.json:
        render.print_json(result)
        return EXIT_OK
    for change in result.queues:
        print(
            f"queue {change.queue_id}: {change.old_offset} -> {change.new_offset} "
            f"({change.new_offset - change.old_offset:+d})"
        )
    if result.dropped_inflight:
        dropped = result.dropped_inflight
        print(f"dropped {dropped} in-flight {render.plural(dropped, 'delivery', 'deliveries')}")
    return EXIT_OK


# -- messages -----------------------------------------------------------------------------------


def message_get(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        message = admin.query_message(args.topic, args.message_id)
    render.print_json(message) if args.json else render.message_detail(message)
    return EXIT_OK


def message_find(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        messages = admin.query_messages_by_key(args.topic, args.key)
    if args.json:
        render.print_json(messages)
    elif not messages:
        print(f"no messages of {args.topic} with key {args.key}")
    else:
        render.messages_table(messages, title=f"messages of {args.topic} with key {args.key}")
    return EXIT_OK


def message_peek(args: argparse.Namespace) -> int:
    if args.offset is not None and args.queue is None:
        print(
            "error: --offset needs --queue: offsets are per queue (e.g. --queue 0 --offset 0)",
            file=sys.stderr,
        )
        return 2
    with Admin(args.endpoint, **connection(args)) as admin:
        messages = admin.peek_messages(
            args.topic,
            queue_id=args.queue,
            offset=args.offset,
            group=args.group,
            max_messages=args.max,
        )
    if args.json:
        render.print_json(messages)
    else:
        count = f"{len(messages)} {render.plural(len(messages), 'message')}"
        render.messages_table(messages, title=f"{count} of {args.topic}")
    return EXIT_OK


def server_info(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        info = admin.server_info()
    render.print_json(info) if args.json else render.server_table(info)
    return EXIT_OK


def cluster_status(args: argparse.Namespace) -> int:
    """Prints the status; exits EXIT_UNHEALTHY (after printing it) when a broker is down,
    unreachable, HELD (its registration lost, still routed to until it registers again) or
    QUARANTINED by the answering proxy (a send to it went unanswered and its connection is
    down), or an etcd endpoint did not answer, for scripts and probes."""
    with Admin(args.endpoint, **connection(args)) as admin:
        status = admin.cluster_status()
    render.print_json(status) if args.json else render.cluster_tables(status)
    problems = status.problems
    for problem in problems:
        print(f"popmq: {problem}", file=sys.stderr)
    return EXIT_UNHEALTHY if problems else EXIT_OK


# -- users and policies -------------------------------------------------------------------------


def _new_secret(args: argparse.Namespace) -> tuple[str | None, bool]:
    """The secret key the command sets (None: keep it) and whether it was generated."""
    if args.generate_secret:
        return secrets.token_urlsafe(24), True
    if args.user_secret_file:
        text = Path(args.user_secret_file).read_text(encoding="utf-8")
        return text.rstrip("\r\n"), False
    if args.user_secret_stdin:
        if sys.stdin.isatty():
            return getpass.getpass("secret key: "), False
        return sys.stdin.readline().rstrip("\r\n"), False
    return None, False


def _print_user(user: Any, secret: str | None, *, as_json: bool, verb: str) -> None:
    if as_json:
        data = render.json_data(user)
        if secret is not None:
            data["secret_key"] = secret
        render.print_json(data)
        return
    print(f"{verb} {render.format_user(user)}")
    if secret is not None:
        print(f"secret key (shown only now): {secret}")


def user_create(args: argparse.Namespace) -> int:
    secret, generated = _new_secret(args)
    assert secret is not None  # the parser requires a source
    with Admin(args.endpoint, **connection(args)) as admin:
        user = admin.create_user(
            args.user,
            secret,
            user_type="super" if args.super else "normal",
            enabled=not args.disabled,
        )
    _print_user(user, secret if generated else None, as_json=args.json, verb="created user")
    return EXIT_OK


def user_update(args: argparse.Namespace) -> int:
    secret, generated = _new_secret(args)
    with Admin(args.endpoint, **connection(args)) as admin:
        user = admin.update_user(
            args.user, secret_key=secret, user_type=args.user_type, enabled=args.enabled
        )
    _print_user(user, secret if generated else None, as_json=args.json, verb="updated user")
    return EXIT_OK


def user_delete(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        admin.delete_user(args.user)
    if args.json:
        render.print_json({"deleted": args.user})
    else:
        print(f"deleted user {args.user} and its policies")
    return EXIT_OK


def user_describe(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        user = admin.get_user(args.user)
        policies = admin.list_policies(args.user)[args.user]
    if args.json:
        data = render.json_data(user)
        data["policies"] = render.json_data(policies)
        render.print_json(data)
    else:
        print(render.format_user(user))
        render.policies_table({args.user: policies})
    return EXIT_OK


def user_list(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        users = admin.list_users()
    render.print_json(users) if args.json else render.users_table(users)
    return EXIT_OK


def _policy(args: argparse.Namespace) -> Policy:
    return Policy.of(args.resource, args.actions, deny=args.deny, source_cidrs=args.source_cidrs)


def acl_grant(args: argparse.Namespace) -> int:
    policy = _policy(args)
    with Admin(args.endpoint, **connection(args)) as admin:
        policies = admin.grant_policy(args.user, policy)
    if args.json:
        render.print_json({"access_key": args.user, "policies": policies})
    else:
        print(f"granted {render.format_policy(policy)} to {args.user}")
        render.policies_table({args.user: policies})
    return EXIT_OK


def acl_revoke(args: argparse.Namespace) -> int:
    policy = _policy(args)
    with Admin(args.endpoint, **connection(args)) as admin:
        policies = admin.revoke_policy(args.user, policy)
    if args.json:
        render.print_json({"access_key": args.user, "policies": policies})
    else:
        print(f"revoked {render.format_policy(policy)} of {args.user}")
        render.policies_table({args.user: policies})
    return EXIT_OK


def acl_list(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        by_user = admin.list_policies(args.user)
    render.print_json(by_user) if args.json else render.policies_table(by_user)
    return EXIT_OK


# -- send and receive ---------------------------------------------------------------------------


def _body(text: str) -> bytes:
    """The body of `popmq send`: the text itself, stdin's bytes (-) or a file's (@FILE)."""
    if text == "-":
        return sys.stdin.buffer.read()
    if text.startswith("@"):
        return Path(text[1:]).read_bytes()
    return text.encode("utf-8")


def send(args: argparse.Namespace) -> int:
    try:
        body = _body(args.text)
    except OSError as exc:
        print(f"error: {args.text}: {exc.strerror}", file=sys.stderr)
        return 2

    def message(index: int) -> Message:
        def fill(text: str) -> str:
            return text.replace("{n}", str(index)) if args.count > 1 else text

        return Message(
            body.replace(b"{n}", str(index).encode()) if args.count > 1 else body,
            tag=args.tag,
            keys=[fill(key) for key in args.keys],
            properties={key: fill(value) for key, value in args.properties},
            message_group=fill(args.message_group),
            deliver_at=args.deliver_at,
            delay_s=args.delay,
            dedup_id=fill(args.dedup_id),
        )

    with Producer(args.endpoint, **connection(args)) as producer:
        if args.count == 1:
            one = message(0)
            receipt = producer.send(
                args.topic,
                one.body,
                tag=one.tag,
                keys=one.keys,
                properties=one.properties,
                message_group=one.message_group,
                deliver_at=one.deliver_at,
                delay_s=one.delay_s,
                dedup_id=one.dedup_id,
            )
            render.print_json(receipt) if args.json else print(render.format_receipt(receipt))
            return EXIT_OK
        started = time.monotonic()
        per_batch = max(1, min(args.batch, _SEND_BATCH_BYTES // max(1, len(body) + 64)))
        sent = 0
        try:
            with render.progress(enabled=not args.json) as bar:
                task = bar.add_task(f"send to {args.topic}", total=args.count)
                while sent < args.count:
                    size = min(per_batch, args.count - sent)
                    producer.send_batch(args.topic, [message(sent + i) for i in range(size)])
                    sent += size
                    bar.update(task, completed=sent)
        except KeyboardInterrupt:
            # Only batches the server answered are counted; one in flight may be stored too.
            print(
                f"interrupted: {sent} of {args.count} {render.plural(args.count, 'message')} "
                f"stored in {args.topic} (a batch in flight may be stored as well)",
                file=sys.stderr,
            )
            return _EXIT_INTERRUPTED
    took = time.monotonic() - started
    rate = sent / took if took > 0 else float(sent)
    if args.json:
        render.print_json({"topic": args.topic, "sent": sent, "seconds": took})
    else:
        print(
            f"sent {sent} {render.plural(sent, 'message')} to {args.topic} in {took:.2f}s "
            f"({rate:.0f} msg/s)"
        )
    return EXIT_OK


def receive(args: argparse.Namespace) -> int:
    """Receive (and with --ack acknowledge) messages; see the note above _give_back."""
    received: list[ReceivedMessage] = []
    acked = 0
    started = time.monotonic()
    with SimpleConsumer(
        args.endpoint,
        group=args.group,
        topic=args.topic,
        filter=args.filter,
        **connection(args),
    ) as consumer:
        if args.count is None:
            messages = consumer.receive(
                max_messages=args.max, invisible_duration_s=args.invisible, wait_s=args.wait
            )
            return _print_received(args, consumer, messages)
        document = render.JsonListWriter("received") if args.json else None
        with render.progress(enabled=not args.json) as bar:
            task = bar.add_task(f"receive {args.group} <- {args.topic}", total=args.count)
            while len(received) < args.count:
                batch = consumer.receive(
                    max_messages=min(args.max, args.count - len(received)),
                    invisible_duration_s=args.invisible,
                    wait_s=args.wait,
                )
                if not batch:
                    break  # nothing arrived within --wait: stop short and say so
                _emit_each(args, consumer, batch, _print_line if document is None else document.add)
                if args.ack:
                    consumer.ack(batch)
                    acked += len(batch)
                received.extend(batch)
                bar.update(task, completed=len(received))
        took = time.monotonic() - started
    if document is not None:
        document.close({"acked": acked, "seconds": took})
        return EXIT_OK
    noun = render.plural(args.count, "message")
    line = f"received {len(received)} of {args.count} {noun} in {took:.2f}s"
    print(line + (f", acked {acked}" if args.ack else ""))
    return EXIT_OK


def _print_received(
    args: argparse.Namespace, consumer: SimpleConsumer, messages: list[ReceivedMessage]
) -> int:
    if args.json:
        acked = len(messages) if args.ack else 0
        _emit(
            args,
            consumer,
            messages,
            lambda: render.print_json({"received": messages, "acked": acked}),
        )
        if args.ack and messages:
            consumer.ack(messages)
        return EXIT_OK
    if not messages:
        print("no messages")
        return EXIT_OK
    _emit_each(args, consumer, messages, _print_line)
    if args.ack:
        consumer.ack(messages)
        print(f"acked {len(messages)}")
    return EXIT_OK


# -- output that may go away (a closed pipe) -------------------------------------------------
# With --ack a message is acknowledged only after its output reached stdout (the write and
# flush returned), never before: `popmq receive ... --ack | head -2` must not ack messages
# nobody will see. When stdout goes away (BrokenPipeError) the messages whose output did
# not get out are nacked with no delay, so they are delivered again at once instead of
# staying invisible until --invisible passes; the ones that did get out are acked. Output
# that reached a pipe but that the reader then dropped unread cannot be told apart from
# output it read: that is the reader's choice, as with any at-least-once consumer that
# acks after processing. popmq.cli.main then exits quietly (see EXIT_BROKEN_PIPE).


def _give_back(
    args: argparse.Namespace,
    consumer: SimpleConsumer,
    shown: Sequence[ReceivedMessage],
    unseen: Sequence[ReceivedMessage],
) -> None:
    """stdout went away: ack what got out (with --ack), redeliver the rest now."""
    if not args.ack:
        return  # not ours to settle: they come back after --invisible, as without a pipe
    if shown:
        consumer.ack(shown)
    for message in unseen:
        consumer.nack(message, delay_s=0)


def _print_line(message: ReceivedMessage) -> None:
    print(render.format_message(message))  # rich routes stdout above a live bar


def _emit_each(
    args: argparse.Namespace,
    consumer: SimpleConsumer,
    messages: Sequence[ReceivedMessage],
    write: Callable[[ReceivedMessage], None],
) -> None:
    """Write each message and flush it, so a broken pipe says which ones got out."""
    for i, message in enumerate(messages):
        try:
            write(message)
            sys.stdout.flush()
        except BrokenPipeError:
            _give_back(args, consumer, messages[:i], messages[i:])
            raise


def _emit(
    args: argparse.Namespace,
    consumer: SimpleConsumer,
    messages: Sequence[ReceivedMessage],
    write: Callable[[], None],
) -> None:
    """Write one document about `messages`; all or nothing, so a broken pipe gives all back."""
    try:
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        _give_back(args, consumer, [], messages)
        raise


# -- transactions -------------------------------------------------------------------------------


def transaction_list(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        found = admin.list_transactions(
            discarded=args.discarded, topic=args.topic, limit=args.limit
        )
    if args.json:
        render.print_json(found)
    else:
        kind = "discarded" if args.discarded else "open"
        where = f" of {args.topic}" if args.topic else ""
        count = f"{len(found)} {kind} {render.plural(len(found), 'transaction')}{where}"
        render.transactions_table(found, title=count)
    return EXIT_OK


def transaction_show(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        message = admin.half_message(args.transaction_id, topic=args.topic)
    render.print_json(message) if args.json else render.message_detail(message)
    return EXIT_OK


def transaction_commit(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        info = admin.commit_transaction(args.transaction_id, topic=args.topic)
    render.print_json(info) if args.json else print(render.format_transaction(info))
    return EXIT_OK


def transaction_rollback(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        info = admin.rollback_transaction(args.transaction_id, topic=args.topic)
    render.print_json(info) if args.json else print(render.format_transaction(info))
    return EXIT_OK


def transaction_resume(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        info = admin.resume_transaction(args.transaction_id, topic=args.topic)
    render.print_json(info) if args.json else print(render.format_transaction(info))
    return EXIT_OK
