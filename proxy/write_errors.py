"""A streamed write that fails because the call is over: a client's normal behaviour, quiet.

`context.write` raises grpc's ExecuteBatchError when the call ended under it: the client
cancelled, its connection dropped, or grpc refused an answer larger than the client accepts
(the call then ends RESOURCE_EXHAUSTED). grpc.aio learns that the call is over a moment later
and cancels the handler; a handler that returned or raised first has grpc send a status on a
dead call and log `ExecuteBatchError raised in core by servicer method` as an ERROR with a
traceback (issue 20). So a handler whose write failed waits for that cancellation instead.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import cast

log = logging.getLogger(__name__)

WRITE_FAILED = cast(
    type[Exception], importlib.import_module("grpc._cython.cygrpc").ExecuteBatchError
)
"""What a failed `context.write` raises (grpc's own class, not exported by `grpc.aio`)."""

CANCEL_WAIT_S = 1.0
"""How long a handler whose write failed waits for grpc to cancel it (it takes one loop turn
when the client went away); past it, the handler ends."""


async def after_failed_write(method: str) -> None:
    """Wait, after a failed write, for grpc to cancel the handler (the usual end)."""
    await asyncio.sleep(CANCEL_WAIT_S)
    log.debug(
        "%s: a write failed and the call was not cancelled within %gs; ending it",
        method,
        CANCEL_WAIT_S,
    )
