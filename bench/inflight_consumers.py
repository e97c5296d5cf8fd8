"""What knowing the popping client costs: InspectGroup's per-consumer summary, and a pop's
client id check.

``python -m bench.inflight_consumers [--messages 100000]``

- The summary (broker_core/inspection.py `consumers_inflight`) walks the in-flight maps of
  a group's queues, counting them by checkpoint: CPU ms for one queue holding `--messages`
  in flight among 10 clients, popped 32 a pop (one checkpoint each) and one a checkpoint
  (FIFO messages, nacked or changed deliveries: the worst case).
- The check a pop makes of its client id (validation.check_client_id): CPU ns for an
  empty id, a typical SDK id (``host@pid@random``) and a 255-character one.

CPU time (``time.process_time``), best of 7 runs: the machine's other work barely moves it.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.inspection import consumers_inflight
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.validation import check_client_id

CLIENTS = 10


def _queue(messages: int, per_checkpoint: int) -> ConsumeQueue:
    cq = ConsumeQueue(group="g", group_id=1, topic="t", topic_id=1, queue_id=0, committed=0)
    for i, start in enumerate(range(0, messages, per_checkpoint)):
        offsets = list(range(start, min(messages, start + per_checkpoint)))
        ck = Checkpoint(
            ck_id=i, queue=cq, range_start=start, range_end=offsets[-1] + 1, offsets=offsets,
            pop_time_ms=0, deadline_ms=1000 + i, chained=True,
        )  # fmt: skip
        ck.client_id = f"host-{i % CLIENTS}@1234@0123456789ab"
        cq.add(ck)
    return cq


def _best_s(call: Callable[[], object], number: int) -> float:
    best = float("inf")
    for _ in range(7):
        started = time.process_time()
        for _ in range(number):
            call()
        best = min(best, (time.process_time() - started) / number)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    for per_checkpoint in (32, 1):
        cq = _queue(args.messages, per_checkpoint)
        rows = consumers_inflight([cq])
        assert sum(r.count for r in rows) == args.messages and len(rows) == CLIENTS
        ms = _best_s(functools.partial(consumers_inflight, [cq]), 3) * 1000
        print(
            f"summary of {args.messages:,} in flight, {per_checkpoint} a checkpoint, "
            f"{CLIENTS} clients: {ms:.1f} ms CPU"
        )
    for name, client in (
        ("empty", ""),
        ("host@pid@random", "worker-17.example.com@4242@0123456789ab"),
        ("255 characters", "c" * 255),
    ):
        ns = _best_s(functools.partial(check_client_id, client), 100_000) * 1e9
        print(f"check_client_id({name}): {ns:.0f} ns CPU")


if __name__ == "__main__":
    main()
