"""bench.paced_turns reads perf's per-thread syscall summary; bench.loop_probe counts a loop's
scheduling calls."""

from __future__ import annotations

import asyncio

from bench import loop_probe, paced_turns

_PERF_SUMMARY = """
 Summary of events:

 python (4242), 1200 events, 60.0%

   syscall            calls  errors  total       min       avg       max       stddev
                                     (msec)    (msec)    (msec)    (msec)        (%)
   --------------- --------  ------ -------- --------- --------- ---------     ------
   epoll_pwait          300      0   100.000     0.001     0.333     5.000      1.00%
   getpid                 7      0     0.010     0.001     0.001     0.002      0.50%

 popmq-wal-sync (4250), 40 events, 2.0%

   syscall            calls  errors  total       min       avg       max       stddev
                                     (msec)    (msec)    (msec)    (msec)        (%)
   --------------- --------  ------ -------- --------- --------- ---------     ------
   fdatasync             20      0    10.000     0.300     0.500     0.900      2.00%
"""


def test_perf_summary_is_read_per_thread() -> None:
    parsed = paced_turns._parse_perf_summary(_PERF_SUMMARY)
    assert parsed == {4242: {"epoll_pwait": 300, "getpid": 7}, 4250: {"fdatasync": 20}}


async def _wait_for_a_thread_wake() -> None:
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    loop.call_soon_threadsafe(future.set_result, None)
    await future


def test_counting_loop_counts_callbacks_tasks_and_thread_wakes() -> None:
    loop = loop_probe.counting_loop_class(asyncio.SelectorEventLoop)()
    before = dict(loop_probe._COUNTS)
    try:
        loop.run_until_complete(_wait_for_a_thread_wake())
    finally:
        loop.close()
    counts = {k: v - before.get(k, 0) for k, v in loop_probe._COUNTS.items()}
    assert counts["create_task"] == 1  # run_until_complete's task
    assert counts["create_task _wait_for_a_thread_wake"] == 1
    assert counts["create_future"] == 1
    assert counts["call_soon_threadsafe"] == 1
    # The task's first step and its wake-up once the future is done.
    assert counts["call_soon task step _wait_for_a_thread_wake"] == 2
