"""`popmq dlq redrive`: move a group's dead letters back to their topics, all of them, the
oldest N, or the ones named by queue and offset."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from popmq import Admin, NotFoundError, RedriveOutcome
from popmq.cli import render
from popmq.cli.commands import EXIT_OK, connection

Handler = Callable[[argparse.Namespace], int]
AddClient = Callable[[argparse.ArgumentParser, Handler], argparse.ArgumentParser]
Positive = Callable[[str], int]

_REDRIVE_CHUNK = 1000
"""Dead letters moved per call of `dlq redrive`, so the bar moves and each call is short;
also the most one call may name."""
EXIT_SOME_NOT_FOUND = 3
"""`dlq redrive --message`: some named dead letters were not stored (as a NOT_FOUND error)."""


def add_parsers(commands_: Any, client: AddClient, positive: Positive) -> None:
    """Add `dlq` and its actions (`positive`: the CLI's type of a count of at least 1)."""
    dlq = commands_.add_parser("dlq", help="dead-letter topics")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True)
    redrive = client(
        dlq_commands.add_parser("redrive", help="move %%DLQ%%GROUP back to its topics"),
        dlq_redrive,
    )
    redrive.add_argument("group")
    which = redrive.add_mutually_exclusive_group()
    which.add_argument("--max", type=positive, help="at most N messages (default all)")
    which.add_argument(
        "--message",
        dest="messages",
        action="append",
        type=dead_letter_ref,
        metavar="QUEUE:OFFSET",
        help="only this dead letter (repeat for more; as `message peek` lists them)",
    )


def dead_letter_ref(text: str) -> tuple[int, int]:
    queue, sep, offset = text.partition(":")
    if sep and queue.lstrip("-").isdigit() and offset.lstrip("-").isdigit():
        return int(queue), int(offset)
    raise argparse.ArgumentTypeError(
        f"{text!r} is not QUEUE:OFFSET (e.g. 0:42, as `message peek` lists them)"
    )


def dlq_redrive(args: argparse.Namespace) -> int:
    if args.messages:
        return _dlq_redrive_selected(args)
    started = time.monotonic()
    moved = dropped = remaining = 0
    with Admin(args.endpoint, **connection(args)) as admin:
        try:
            dlq = admin.get_topic(f"%DLQ%{args.group}")
        except NotFoundError:
            raise NotFoundError(
                f"group {args.group!r} has no dead letters: %DLQ%{args.group} is created with "
                "its first dead letter"
            ) from None
        depth = sum(q.message_count for q in dlq.queues)
        total = depth if args.max is None else min(depth, args.max)
        with render.progress(enabled=not args.json) as bar:
            task = bar.add_task(f"redrive %DLQ%{args.group}", total=total)
            while moved + dropped < total:
                result = admin.redrive_dead_letters(
                    args.group, max_messages=min(_REDRIVE_CHUNK, total - moved - dropped)
                )
                moved += result.moved
                dropped += result.dropped
                remaining = result.remaining
                bar.update(task, completed=moved + dropped)
                if result.moved + result.dropped == 0:
                    break  # emptied meanwhile (purged, or another redrive)
    took = time.monotonic() - started
    if args.json:
        render.print_json(
            {"moved": moved, "dropped": dropped, "remaining": remaining, "seconds": took}
        )
    else:
        print(
            f"redrove {moved} {render.plural(moved, 'message')} from %DLQ%{args.group} in "
            f"{took:.2f}s "
            f"(dropped {dropped} whose topic is gone, {remaining} remaining)"
        )
    return EXIT_OK


def _dlq_redrive_selected(args: argparse.Namespace) -> int:
    """Redrive the named dead letters, 1000 per call; each is listed with its outcome."""
    outcomes: list[RedriveOutcome] = []
    remaining = 0
    with Admin(args.endpoint, **connection(args)) as admin:
        for start in range(0, len(args.messages), _REDRIVE_CHUNK):
            result = admin.redrive_dead_letters(
                args.group, messages=args.messages[start : start + _REDRIVE_CHUNK]
            )
            outcomes.extend(result.outcomes)
            remaining = result.remaining
    missing = [o for o in outcomes if o.outcome == "not_found"]
    if args.json:
        render.print_json(
            {
                "outcomes": [
                    {"queue_id": o.queue_id, "offset": o.offset, "outcome": o.outcome}
                    for o in outcomes
                ],
                "remaining": remaining,
            }
        )
    else:
        for o in outcomes:
            print(f"%DLQ%{args.group} queue {o.queue_id} offset {o.offset}: {o.outcome}")
        moved = sum(1 for o in outcomes if o.outcome == "moved")
        print(
            f"redrove {moved} of {len(outcomes)} named "
            f"{render.plural(len(outcomes), 'message')} ({remaining} remaining)"
        )
    if missing:
        print(
            f"{len(missing)} named {render.plural(len(missing), 'message')} not stored "
            "(never, or already redriven, purged or expired)",
            file=sys.stderr,
        )
        return EXIT_SOME_NOT_FOUND
    return EXIT_OK
