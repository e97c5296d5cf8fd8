"""The commands that show what a broker knows right now: `popmq group inspect` (held long
polls, messages in flight, revive lag, blocked FIFO heads) and `popmq message history`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from popmq import Admin
from popmq.cli import render
from popmq.cli.commands import EXIT_OK, connection

Handler = Callable[[argparse.Namespace], int]
AddClient = Callable[[argparse.ArgumentParser, Handler], argparse.ArgumentParser]


def add_parsers(groups: Any, messages: Any, client: AddClient) -> None:
    """Add `group inspect` to the `group` actions and `message history` to `message`'s."""
    inspect = client(
        groups.add_parser("inspect", help="held polls, in flight, revive lag, FIFO heads"),
        group_inspect,
    )
    inspect.add_argument("name")
    inspect.add_argument("--topic", default="", help="only this topic")
    inspect.add_argument("--page-size", type=int, default=0, help="in-flight rows (1..1000)")
    inspect.add_argument("--page-token", default="", help="the next page's token")
    history = client(
        messages.add_parser("history", help="its pops, nacks, retries, dead-lettering"),
        message_history,
    )
    history.add_argument("topic")
    history.add_argument("message_id")
    history.add_argument("--group", default="", help="only this group's steps")


def group_inspect(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        view = admin.inspect_group(
            args.name, args.topic, page_size=args.page_size, page_token=args.page_token
        )
    render.print_json(view) if args.json else render.inspection_tables(args.name, view)
    return EXIT_OK


def message_history(args: argparse.Namespace) -> int:
    with Admin(args.endpoint, **connection(args)) as admin:
        events = admin.message_history(args.topic, args.message_id, group=args.group)
    if args.json:
        render.print_json(events)
    else:
        render.history_table(args.message_id, events)
    return EXIT_OK
