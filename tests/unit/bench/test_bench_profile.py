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


_LOOP = (
    "Runner.run (asyncio/runners.py:118);StreamSession._read (popmq/proxy/stream_session.py:352)"
)
_COMPILED_RAW = "\n".join(
    [
        # A compiled method, its wrapper, and the libc time below it.
        f"{_LOOP};CPyPy_reader___Reader____pop_once (__native.c:1);"
        "CPyDef_reader___Reader____pop_once (__native.c:2);0x7f00 (libc.so.6) 6",
        # A compiled generator's helper, its own time.
        f"{_LOOP};CPyDef_ack___ack_Acks_gen_____mypyc_generator_helper__ (__native.c:3) 3",
        # A compiled module-level function.
        f"{_LOOP};CPyDef_receipt____payload_bytes (__native.c:4) 1",
    ]
)


def test_compiled_functions_count_as_popmq_code(tmp_path: Path) -> None:
    raw = tmp_path / "profile.raw"
    raw.write_text(_COMPILED_RAW + "\n")
    profile = summarize(raw)
    assert profile.samples == 10
    charged = {spot.function: spot.self_share for spot in profile.by_python_frame}
    assert charged == {
        "Reader._pop_once (popmq compiled: reader)": 0.6,
        "Acks.ack (popmq compiled: ack)": 0.3,
        "_payload_bytes (popmq compiled: receipt)": 0.1,
    }
    libraries = {spot.function: spot.self_share for spot in profile.by_library}
    assert libraries == {"libc.so.6": 0.6, "popmq compiled": 0.4}
    own = {spot.function for spot in profile.own_by_total}
    # The loop's frames are on every stack: entry points, not hot spots.
    assert own == set(charged)
