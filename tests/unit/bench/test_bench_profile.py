"""The py-spy summary counts only samples that use CPU."""

from __future__ import annotations

from pathlib import Path

from bench.profile import summarize

_WORKER = "Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:81)"
_RAW = "\n".join(
    [
        # An idle executor worker blocked on its queue: anonymous libc frames below the wait.
        f"{_WORKER};_queue_SimpleQueue_get (_queuemodule.c.h:177);"
        "PyThread_acquire_lock_timed (libpython3.11.so.1.0);0x7f00 (libc.so.6) 30",
        # The loop thread waiting in epoll.
        "Runner.run (asyncio/runners.py:118);EpollSelector.select (selectors.py:468) 50",
        # A thread waiting for another's fsync inside rocksdict.
        f"{_WORKER};Store.sync_wal (broker_core/store.py:205);"
        "flush_wal (rocksdict.so);pthread_cond_timedwait (libc.so.6) 5",
        # Busy: a write in the writer thread and an fsync in progress.
        f"{_WORKER};Store.write (broker_core/store.py:190);rocksdb::WriteImpl (rocksdict.so) 6",
        f"{_WORKER};Store.sync_wal (broker_core/store.py:205);fdatasync (libc.so.6) 4",
    ]
)


def test_blocked_and_polling_threads_are_not_busy(tmp_path: Path) -> None:
    raw = tmp_path / "profile.raw"
    raw.write_text(_RAW + "\n")
    profile = summarize(raw)
    assert profile.samples == 10
    shares = {spot.function: spot.self_share for spot in profile.by_python_frame}
    assert shares == {
        "Store.write (broker_core/store.py)": 0.6,
        "Store.sync_wal (broker_core/store.py)": 0.4,
    }
