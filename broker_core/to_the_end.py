"""Work that runs to its end once started, whether or not its caller still waits.

grpc cancels a server handler when its client goes away (a proxy killed mid-call, a
deadline that passed, a proxy's hop stream that ended), and a group-commit job is written
on the next flush whether or not its submitter still waits. Work that writes and then
changes memory to match what it wrote, or holds something until its write commits, would
be cut between the two: the store changed, memory not (docs/architecture.md, "A write whose
caller went away still ends"). Such work runs as a task of its own, awaited shielded: a
cancelled caller stops waiting, the work does not stop.

(The hot paths do without a task: their memory changes run in the writer's `committed`
callback, as pop/ack.py's moves and admin.py's offset reset do.)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

__all__ = ["runs_to_the_end", "to_the_end"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def to_the_end(work: Coroutine[Any, Any, _T]) -> _T:
    """`work`'s result, `work` run as a task of its own that the caller's cancellation does
    not cancel (its error, if it fails after the caller left, is marked retrieved)."""
    task = asyncio.get_running_loop().create_task(work)
    return await asyncio.shield(task)


def runs_to_the_end(
    method: Callable[_P, Coroutine[Any, Any, _T]],
) -> Callable[_P, Coroutine[Any, Any, _T]]:
    """An async function whose every call runs `to_the_end` (admin changes: a task each)."""

    @functools.wraps(method)
    async def call(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await to_the_end(method(*args, **kwargs))

    return call
