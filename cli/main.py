"""The ``popmq`` command: run the server, manage topics and groups, send and receive.

Exit codes: 0 success, 1 server or connection error, 2 usage error, 3 not found, 4 a
rejected request (invalid argument, failed precondition, already exists).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sdk import (
    Admin,
    AlreadyExistsError,
    FailedPreconditionError,
    Group,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
    Producer,
    ReceivedMessage,
    SendReceipt,
    SimpleConsumer,
    Topic,
)

__all__ = ["main"]

DEFAULT_ENDPOINT = "127.0.0.1:8081"

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_REJECTED = 4
EXIT_INTERRUPTED = 130

# Error class -> exit code; looked up along the raised error's MRO, default EXIT_SERVER_ERROR.
_EXIT_CODES: dict[type[PopMQError], int] = {
    NotFoundError: EXIT_NOT_FOUND,
    InvalidArgumentError: EXIT_REJECTED,
    FailedPreconditionError: EXIT_REJECTED,
    AlreadyExistsError: EXIT_REJECTED,
}


def exit_code_for(error: PopMQError) -> int:
    """Return the process exit code for an SDK error."""
    for cls in type(error).__mro__:
        code = _EXIT_CODES.get(cls)
        if code is not None:
            return code
    return EXIT_SERVER_ERROR


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


def format_topic(topic: Topic) -> str:
    """One line describing a topic."""
    return (
        f"topic {topic.name} queues={topic.queues} message_type={topic.message_type} "
        f"kind={topic.kind} created={topic.create_time.isoformat()}"
    )


def format_group(group: Group) -> str:
    """One line describing a consumer group."""
    backoff = ",".join(_format_seconds(s) for s in group.retry_backoff_s)
    return (
        f"group {group.name} max_delivery_attempts={group.max_delivery_attempts} "
        f"retry_backoff={backoff} created={group.create_time.isoformat()}"
    )


def format_receipt(receipt: SendReceipt) -> str:
    """One line saying where a sent message was stored."""
    return (
        f"sent {receipt.message_id} to {receipt.topic} "
        f"queue {receipt.queue_id} offset {receipt.offset}"
    )


def format_message(message: ReceivedMessage) -> str:
    """One line describing a received message, its body decoded as UTF-8."""
    body = message.body.decode("utf-8", errors="replace")
    return (
        f"{message.message_id} attempt={message.delivery_attempt} queue={message.queue_id} "
        f"offset={message.offset} tag={message.tag} body={body}"
    )


def _serve(args: argparse.Namespace) -> int:
    # Imported here so client commands work without the server's dependencies (RocksDB).
    from proxy.server import run_server  # type: ignore[import-not-found, unused-ignore]

    code: int = run_server(listen=args.listen, data_dir=Path(args.data_dir), flush=args.flush)
    return code


def _topic_create(args: argparse.Namespace) -> int:
    with Admin(args.endpoint) as admin:
        topic = admin.create_topic(args.name, queues=args.queues)
    print(format_topic(topic))
    return EXIT_OK


def _group_create(args: argparse.Namespace) -> int:
    with Admin(args.endpoint) as admin:
        group = admin.create_group(args.name, max_delivery_attempts=args.max_delivery_attempts)
    print(format_group(group))
    return EXIT_OK


def _send(args: argparse.Namespace) -> int:
    with Producer(args.endpoint) as producer:
        receipt = producer.send(
            args.topic,
            args.text.encode("utf-8"),
            tag=args.tag,
            keys=args.keys,
            properties=dict(args.properties),
        )
    print(format_receipt(receipt))
    return EXIT_OK


def _receive(args: argparse.Namespace) -> int:
    with SimpleConsumer(
        args.endpoint, group=args.group, topic=args.topic, filter=args.filter
    ) as consumer:
        messages = consumer.receive(
            max_messages=args.max, invisible_duration_s=args.invisible, wait_s=args.wait
        )
        if not messages:
            print("no messages")
            return EXIT_OK
        for message in messages:
            print(format_message(message))
        if args.ack:
            consumer.ack(messages)
            print(f"acked {len(messages)}")
    return EXIT_OK


Handler = Callable[[argparse.Namespace], int]


def _add_endpoint(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint",
        default=DEFAULT_ENDPOINT,
        help=f"popmq proxy address (default {DEFAULT_ENDPOINT})",
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser; each leaf command sets ``handler``."""
    parser = argparse.ArgumentParser(prog="popmq", description="popmq messaging system")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the server until SIGTERM or SIGINT")
    serve.add_argument("--listen", default="127.0.0.1:8081", help="HOST:PORT to listen on")
    serve.add_argument("--data-dir", default="./data", help="directory for the store")
    serve.add_argument(
        "--flush", choices=("sync", "async"), default="sync", help="fsync before acking a send"
    )
    serve.set_defaults(handler=_serve)

    topic = commands.add_parser("topic", help="manage topics")
    topic_commands = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    topic_create = topic_commands.add_parser("create", help="create a topic")
    topic_create.add_argument("name")
    topic_create.add_argument("--queues", type=int, help="number of queues (server default 8)")
    _add_endpoint(topic_create)
    topic_create.set_defaults(handler=_topic_create)

    group = commands.add_parser("group", help="manage consumer groups")
    group_commands = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    group_create = group_commands.add_parser("create", help="create a consumer group")
    group_create.add_argument("name")
    group_create.add_argument(
        "--max-delivery-attempts", type=int, help="deliveries before dead-lettering (default 17)"
    )
    _add_endpoint(group_create)
    group_create.set_defaults(handler=_group_create)

    send = commands.add_parser("send", help="send one text message")
    send.add_argument("topic")
    send.add_argument("text")
    send.add_argument("--tag", default="")
    send.add_argument("--key", dest="keys", action="append", default=[], help="repeatable")
    send.add_argument(
        "--property",
        dest="properties",
        action="append",
        type=_property,
        default=[],
        metavar="KEY=VALUE",
        help="repeatable",
    )
    _add_endpoint(send)
    send.set_defaults(handler=_send)

    receive = commands.add_parser("receive", help="receive messages for a consumer group")
    receive.add_argument("group")
    receive.add_argument("topic")
    receive.add_argument("--max", type=int, default=32, help="maximum messages (default 32)")
    receive.add_argument(
        "--wait", type=float, default=20.0, help="seconds to wait for a message (default 20)"
    )
    receive.add_argument(
        "--invisible",
        type=float,
        default=30.0,
        help="seconds the messages stay invisible to other consumers (default 30)",
    )
    receive.add_argument("--filter", default="*", help='tag expression (default "*")')
    receive.add_argument("--ack", action="store_true", help="acknowledge what was received")
    _add_endpoint(receive)
    receive.set_defaults(handler=_receive)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``popmq`` command and return its exit code."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except PopMQError as exc:
        print(f"error: {exc.message or exc.code}", file=sys.stderr)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
