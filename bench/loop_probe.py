"""Counts what a server's event loop is asked to do: callbacks, thread wakes, tasks, futures.

``python -m bench.loop_probe popmq serve ...`` runs ``popmq serve`` (``echo`` instead:
the bench's grpc echo server) on an event loop of the same kind (uvloop's, or asyncio's)
whose ``call_soon``, ``call_soon_threadsafe``, ``call_later``/``call_at``, ``create_task``
and ``create_future`` count their calls. SIGUSR2 writes the counters, as JSON, to the path
in ``BENCH_LOOP_PROBE``; `bench.paced_turns` reads them before and after a window.

What is counted is what reaches the loop through its Python methods: the C Task's steps and
the C Future's done-callbacks are scheduled that way (so each counted ``call_soon`` is one
handle the loop runs, most often one loop iteration of its own on a paced send); uvloop's
own transports and grpc's completion-queue reader are not. Overriding the methods costs
CPU: never measure time under the probe.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
from collections import Counter
from typing import Any

__all__ = ["ENV", "counting_loop_class", "install"]

ENV = "BENCH_LOOP_PROBE"
"""Where SIGUSR2 writes the counters."""

_COUNTS: Counter[str] = Counter()


def counting_loop_class(base: type[Any]) -> type[Any]:
    """A subclass of event loop class `base` that counts its scheduling calls."""

    class CountingLoop(base):  # type: ignore[misc]
        def call_soon(self, callback: Any, *args: Any, context: Any = None) -> Any:
            _COUNTS["call_soon"] += 1
            _COUNTS[f"call_soon {_name(callback)}"] += 1
            return super().call_soon(callback, *args, context=context)

        def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:
            _COUNTS["call_soon_threadsafe"] += 1  # a Counter's += is one bytecode op pair:
            # a lost count under a race is possible and harmless (these are estimates).
            return super().call_soon_threadsafe(callback, *args, context=context)

        def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
            _COUNTS["call_at"] += 1
            return super().call_at(when, callback, *args, context=context)

        def call_later(self, delay: float, callback: Any, *args: Any, context: Any = None) -> Any:
            _COUNTS["call_later"] += 1
            return super().call_later(delay, callback, *args, context=context)

        def create_task(self, coro: Any, **kwargs: Any) -> Any:
            _COUNTS["create_task"] += 1
            _COUNTS[f"create_task {getattr(coro, '__qualname__', type(coro).__name__)}"] += 1
            return super().create_task(coro, **kwargs)

        def create_future(self) -> Any:
            _COUNTS["create_future"] += 1
            return super().create_future()

    return CountingLoop


def _name(callback: Any) -> str:
    """A short name for a scheduled callback: a task step names its coroutine."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task step {getattr(coro, '__qualname__', '?')}"
    if isinstance(owner, asyncio.Future):
        return f"{getattr(callback, '__qualname__', '?')} of a future"
    return str(getattr(callback, "__qualname__", type(callback).__name__))


def _dump(signum: int, frame: Any) -> None:
    path = os.environ.get(ENV)
    if path:
        tmp = path + ".tmp"
        threads = {str(t.native_id): t.name for t in threading.enumerate()}
        with open(tmp, "w") as out:
            json.dump({"counts": dict(_COUNTS), "threads": threads}, out)
        os.replace(tmp, path)


def install() -> None:
    """Count on every loop created from now on (uvloop's and asyncio's own)."""
    signal.signal(signal.SIGUSR2, _dump)
    try:
        import uvloop
    except ImportError:
        pass
    else:
        uvloop.Loop = counting_loop_class(uvloop.Loop)  # type: ignore[misc]
    asyncio.SelectorEventLoop = counting_loop_class(asyncio.SelectorEventLoop)
    asyncio.DefaultEventLoopPolicy._loop_factory = asyncio.SelectorEventLoop  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    install()
    if argv[:1] == ["echo"]:
        from bench import reference

        return reference.main(["echo-server"])
    if argv[:1] == ["popmq"]:
        from popmq.cli.main import main as popmq_main

        return int(popmq_main(argv[1:]) or 0)
    raise SystemExit("usage: python -m bench.loop_probe (echo | popmq ARGS...)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
