"""Sampling the popmq server with py-spy while a scenario loads it, and its hot spots.

py-spy attaches to the server's pid with ``--native`` (C frames too: without them, time in
grpc's Cython core, protobuf's upb and the socket syscalls all shows up as the asyncio
``Handle._run`` frame that called it), records collapsed stacks (``--format raw``) and is
stopped with SIGINT when the window ends. Native sampling pauses the process briefly at each
sample, so the profiled window is an extra one, never a measured one.

The summary drops idle samples (a thread waiting in epoll/poll, or blocked on a lock, a
condition or the GIL) and ranks, as shares of the busy samples:
- by the innermost *Python* frame, native time charged to the Python function that called
  it: where the Python code spends, what an optimisation of ours can move;
- by the native library of the innermost frame (libc syscalls, cygrpc, protobuf, rocksdict,
  or Python code itself);
- popmq's own functions by *total* share (anywhere on the stack).

The mypyc-compiled modules run as C: py-spy shows their functions as native frames named
``CPyDef_<module>___<Class>___<method>`` in the build's ``__native`` source. They are popmq
code, so each is named back (``Reader._pop_once (popmq compiled: reader)``) and counted
like a Python frame: charged the native time below it, ranked among popmq's own functions,
and its own time is the library "popmq compiled", not the CPython interpreter.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["HotSpot", "Profile", "PySpy", "summarize"]

# "function (path/to/file.py:123)" -> "function (path/to/file.py)"
_LINE = re.compile(r":\d+\)$")
_LOCATION = re.compile(r"\(([^()]*)\)$")
_STOP_TIMEOUT_S = 30.0
_REPO = Path(__file__).resolve().parents[1]
_IDLE_LEAVES = ("epoll_wait", "epoll_pwait", "poll ", "__poll", "select ", "EpollSelector.select")
_WAITS = (
    "PyThread_acquire_lock_timed",
    "take_gil",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
)
"""A thread with one of these on its stack is blocked (an idle executor worker on its queue's
lock, a thread waiting for the GIL or for another thread's fsync), whatever anonymous libc
frames sit below it: it uses no CPU."""
_OWN_PREFIXES = ("popmq/", "broker_core/", "proxy/", "sdk/")
"""popmq's files as py-spy shows them: under the package, or the top-level folders."""
_COMPILED = re.compile(r"^CPyDef_([A-Za-z0-9]+(?:_[A-Za-z0-9]+)*?)___(\w+?) \(")
_GENERATOR = re.compile(r"^(?P<method>\w+?)_(?P<cls>[A-Z]\w*)_gen_+mypyc_generator_helper__$")
COMPILED_LIBRARY = "popmq compiled"
_WRAPPER_SHARE = 0.8
"""Own functions on more than this share of the stacks are entry points, not hot spots."""


def _py_spy() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.is_file() else shutil.which("py-spy")


@dataclass(frozen=True, slots=True)
class HotSpot:
    function: str
    self_share: float
    """Share of busy samples charged to it (see the ranking it comes from)."""
    total_share: float
    """Share of busy samples with it anywhere on the stack."""


@dataclass(frozen=True, slots=True)
class Profile:
    samples: int
    """Busy samples (idle waits dropped)."""
    by_python_frame: list[HotSpot]
    by_library: list[HotSpot]
    own_by_total: list[HotSpot]


class PySpy:
    """``py-spy record --native`` on a pid for the duration of a ``with`` block."""

    def __init__(self, pid: int, out: Path, *, rate: int = 100) -> None:
        self.pid = pid
        self.out = out
        self.rate = rate
        self._proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return _py_spy() is not None

    def __enter__(self) -> Self:
        binary = _py_spy()
        if binary is None:
            raise RuntimeError("py-spy is not installed (it comes with the bench extra)")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [
                binary, "record", "--pid", str(self.pid), "--rate", str(self.rate),
                "--native", "--format", "raw", "--output", str(self.out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.5)  # attach before the window starts
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _function(frame: str) -> str:
    """``func (/abs/path/file.py:12)`` -> ``func (file path under the repo or site-packages)``."""
    name = _LINE.sub(")", frame.strip())
    for prefix in ("site-packages/", f"{_REPO}/"):
        head, found, tail = name.partition(prefix)
        if found:
            return f"{head.rstrip('(').rstrip()} ({tail}"
    return name


def _compiled(frame: str) -> str | None:
    """A mypyc function's frame as popmq's name for it, or None for any other frame.

    ``CPyDef_reader___Reader____pop_once (__native.c:1)`` -> ``Reader._pop_once (popmq
    compiled: reader)``; a generator's helper is named after its method; a lambda after its
    module. ``CPyPy_`` frames are the Python-callable wrappers around the same functions.
    """
    match = _COMPILED.match(frame)
    if match is None:
        return None
    module, rest = match.groups()
    generator = _GENERATOR.match(rest)
    if generator is not None:
        name = f"{generator['cls']}.{generator['method']}"
    elif "__mypyc_lambda__" in rest:
        name = "<lambda>"
    else:
        owner, found, method = rest.partition("___")
        name = f"{owner}.{method}" if found else owner
    return f"{name} (popmq compiled: {module})"


def _is_waiting(frames: list[str]) -> bool:
    return any(frame.startswith(_WAITS) for frame in frames)


def _is_python(frame: str) -> bool:
    """A Python function's frame, or a compiled popmq function's (named by `_compiled`)."""
    match = _LOCATION.search(frame)
    return match is not None and match.group(1).endswith(".py")


def _is_own(frame: str) -> bool:
    location = frame.partition(" (")[2]
    return location.startswith("popmq compiled") or (
        _is_python(frame) and location.startswith(_OWN_PREFIXES)
    )


def _library(frame: str) -> str:
    """The native library (``libc.so.6``) of a frame, or "Python code"."""
    if frame.endswith(")") and "(popmq compiled: " in frame:
        return COMPILED_LIBRARY
    if _is_python(frame):
        return "Python code"
    match = _LOCATION.search(frame)
    location = match.group(1) if match else frame
    name = location.rsplit("/", 1)[-1]
    if name.endswith((".c", ".h", ".c.h")) or name.startswith("<"):
        return "CPython interpreter"
    return name.split(".cpython-", 1)[0].split(".abi3", 1)[0]


def summarize(raw: Path, *, top: int = 15) -> Profile:
    """The three rankings of a py-spy raw (collapsed) profile, over its busy samples."""
    by_python: Counter[str] = Counter()
    by_library: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [_compiled(f) or _function(f) for f in stack.split(";") if f.strip()]
        # A compiled function's wrapper frame says nothing its CPyDef_ frame does not.
        frames = [f for f in frames if not f.startswith("CPyPy_")]
        if not frames or frames[-1].startswith(_IDLE_LEAVES) or _is_waiting(frames):
            continue
        count = int(count_text)
        samples += count
        python = [f for f in frames if _is_python(f) or "(popmq compiled: " in f]
        by_python[python[-1] if python else frames[-1]] += count
        by_library[_library(frames[-1])] += count
        for name in set(frames):
            total[name] += count
    if samples == 0:
        return Profile(0, [], [], [])

    def rank(counts: Counter[str], limit: int) -> list[HotSpot]:
        return [
            HotSpot(name, n / samples, total.get(name, n) / samples)
            for name, n in counts.most_common(limit)
        ]

    own = Counter(
        {name: n for name, n in total.items() if _is_own(name) and n / samples <= _WRAPPER_SHARE}
    )
    return Profile(
        samples,
        by_python_frame=rank(by_python, top),
        by_library=rank(by_library, 8),
        own_by_total=[
            HotSpot(h.function, by_python.get(h.function, 0) / samples, h.total_share)
            for h in rank(own, top)
        ],
    )
