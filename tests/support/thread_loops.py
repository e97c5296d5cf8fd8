"""Event loops a test runs in a thread of its own, and how they end.

A task destroyed with its loop never runs its `finally`, so a connection it holds keeps its
socket until the garbage collector finds it, and the ResourceWarning that follows fails
whichever test runs then. Every such loop ends through `stop_thread_loop`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading


def stop_thread_loop(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread, *, timeout_s: float = 30.0
) -> None:
    """Cancel what is left on `loop` (run by `thread`), let the closes that causes finish,
    then stop the loop, join the thread and close the loop."""
    if thread.is_alive() and loop.is_running():
        try:
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(timeout_s)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass  # a loop that no longer runs its callbacks: stop it all the same
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
    if not loop.is_running():
        loop.close()


async def _cancel_the_rest() -> None:
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    await asyncio.sleep(0.1)  # aborted and closed transports release their sockets
