"""The modules the build compiles with mypyc, the C extensions it builds, and the switch that
keeps them Python.

setup.py compiles `MODULES` into C extensions next to their sources (an editable install
builds them in place; a wheel carries both). Compiled, a message costs 11 % fewer
instructions to send and 23 % fewer to pop and ack (docs/architecture.md, "Compiled hot
path"; `python -m bench.compiled_cost --compare`). The Python sources stay the definition:
every compiled module is also importable as Python, and the tests pass on both
(`make test`, `make test-python`).

Python sources are loaded instead of the extensions when:

- ``POPMQ_PURE_PYTHON=1`` is set at build time (nothing is compiled; extensions an earlier
  build left in a checkout stay, so set it at import time too, or ``make clean``) or at
  import time (the extensions are ignored): the way to run, debug or profile the code as
  written;
- in a checkout, one of the sources is newer than its extension (edited since the last
  build): compiled modules call each other's C code directly, so one stale extension would
  silently run old code. The whole set falls back to Python until ``make compile``.

A few loops are C written by hand (`NATIVE`: the per-handle work of a run's receipt handles
and the walk that writes a delivery's wire bytes, where mypyc's code still handles Python
objects), built with MODULES under the same switch.
Each is an accelerator its Python module imports where it can and runs without, answering
the same; it is hidden in the same cases (its .c file standing for its source).

This module is read by setup.py before popmq exists, so it imports only the standard library.
"""

from __future__ import annotations

# Plain os.path, no pathlib: every `import popmq` runs this, the CLI's and the SDK's too.
import importlib.machinery
import importlib.util
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

PURE_ENV = "POPMQ_PURE_PYTHON"
"""Set to 1 to build without compiling, or to import the Python sources of a compiled build."""

MODULES = (
    # The send path: the servicer's conversion, the sender, the group-commit writer, and the
    # index and key encodings each message goes through.
    "popmq.proxy.messaging",
    "popmq.proxy.send_request",
    "popmq.proxy.ack_request",
    "popmq.proxy.convert",
    "popmq.proxy.send_stream",
    "popmq.proxy.pop_stream",
    "popmq.broker_core.send",
    "popmq.broker_core.group_commit",
    "popmq.broker_core.write_batch",
    "popmq.broker_core.offsets",
    "popmq.broker_core.keys",
    "popmq.broker_core.validation",
    "popmq.broker_core.message_index",
    "popmq.broker_core.message_id",
    "popmq.broker_core.dedup",
    "popmq.broker_core.catalog",
    "popmq.broker_core.autocreate",
    "popmq.broker_core.stats",
    "popmq.broker_core.types",
    "popmq.broker_core.record",
    "popmq.broker_core.record_wire",
    # The pop and ack path: reading queues, receipt handles, live checkpoints and the buffer.
    "popmq.broker_core.pop.reader",
    "popmq.broker_core.pop.ack",
    "popmq.broker_core.pop.receipt",
    "popmq.broker_core.pop.live_checkpoints",
    "popmq.broker_core.pop.checkpoint_buffer",
    "popmq.broker_core.pop.retry",
    "popmq.broker_core.pop.checkpoint",
    "popmq.broker_core.pop.superseded",
    "popmq.broker_core.pop.context",
    "popmq.broker_core.handle_text",
    "popmq.broker_core.budget",
    "popmq.broker_core.consume_queue",
    "popmq.broker_core.consume_queues",
    "popmq.broker_core.filters",
    "popmq.broker_core.queue_lock",
    "popmq.broker_core.group_settings",
    "popmq.broker_core.clock",
    # The streams a client's pops, acks and sends ride (serve and proxy), and a cluster
    # proxy's routing of them: which broker issued a handle, the sweep over brokers, the hop
    # streams and their frames, the topology each request is routed by and the pool of
    # brokers it is routed to.
    "popmq.proxy.stream_session",
    "popmq.broker_core.handles",
    "popmq.cluster.cluster_pop",
    "popmq.cluster.pop_wire",
    "popmq.cluster.hop_stream",
    "popmq.cluster.hop_frames",
    "popmq.cluster.topology",
    "popmq.cluster.broker_pool",
    # A cluster proxy's send: the route to a broker, the attempts and their fault table, the
    # sends whose outcome is in doubt, and a remote broker's sends, pops and acks.
    "popmq.cluster.cluster_send",
    "popmq.cluster.hop_calls",
    "popmq.cluster.fault_tolerance",
    "popmq.cluster.in_doubt",
    # The cluster hop's pop and ack answers and its sends, on both sides of it, and how a
    # broker serves its streams.
    "popmq.broker.hop_wire",
    "popmq.broker.send_wire",
    "popmq.broker.hop_serve",
    # What every request of every server goes through: its body's checked decoding.
    "popmq.grpc_calls.deserializers",
)
"""Compiled by setup.py, named as imported. Left out on purpose: broker.py (a facade called
once per batch, whose methods' signatures are checked against the BrokerAPI Protocol with
`inspect.signature`, which compiled methods do not carry), store.py (tests replace a Store's
methods on the instance, which a compiled class forbids; its time is in RocksDB),
long_polling.py (a test replaces LongPolling.notify on the instance to cancel a pop right
after its wake-up; it runs once per batch), errors.py, and everything off the hot path."""

NATIVE = ("popmq.broker_core.pop._receipt_runs", "popmq.broker_core._delivery_wire")
"""C extensions written by hand, named as imported, each built by setup.py from the .c file
beside where it imports (with MODULES, and under the same switch). Each accelerates loops of
a compiled module that stays their definition and runs its own Python where one cannot be
imported (`choose` hides them under the same switch as MODULES)."""

GROUP = "popmq._native"
"""mypyc's group: one shared library, popmq/_native__mypyc.*.so, holds the compiled code
(inside the package, so a wheel installs nothing beside popmq)."""

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def source_path(module: str, root: str | None = None) -> str:
    """The .py file of `module` (a name in MODULES) under the package directory `root`
    (default: this package's)."""
    return os.path.join(root or _PACKAGE, *module.split(".")[1:]) + ".py"


def c_source_path(module: str, root: str | None = None) -> str:
    """The .c file of `module` (a name in NATIVE) under the package directory `root`."""
    return source_path(module, root)[: -len(".py")] + ".c"


def _extension(module: str) -> str | None:
    stem = source_path(module)[: -len(".py")]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(stem + suffix):
            return stem + suffix
    return None


def state() -> tuple[bool, str]:
    """Whether MODULES load compiled in this process, and why not when they do not."""
    if os.environ.get(PURE_ENV) == "1":
        return False, f"{PURE_ENV}=1"
    extensions = [(m, _extension(m)) for m in MODULES]
    built = [(m, e) for m, e in extensions if e is not None]
    if not built:
        return False, "not compiled"
    if len(built) < len(MODULES):
        missing = next(m for m, e in extensions if e is None)
        return False, f"{missing} was not compiled"
    # Only a checkout links the package's folders to the top level; an installed wheel's
    # files have no meaningful times (and nobody edits them).
    if os.path.islink(os.path.join(_PACKAGE, "broker_core")):
        for module, extension in built:
            if os.path.getmtime(source_path(module)) > os.path.getmtime(extension):
                return False, f"{module} changed since the build"
    return True, "compiled"


def _native_hidden(module: str) -> bool:
    """Whether the C extension `module` (a name in NATIVE) was built but must not load:
    under ``POPMQ_PURE_PYTHON=1``, or in a checkout when its .c file is newer than the build."""
    extension = _extension(module)
    if extension is None:
        return False
    if os.environ.get(PURE_ENV) == "1":
        return True
    return os.path.islink(os.path.join(_PACKAGE, "broker_core")) and os.path.getmtime(
        c_source_path(module)
    ) > os.path.getmtime(extension)


class _SourceFinder:
    """Finds MODULES as their Python sources, ahead of the extension beside each, and hides
    the NATIVE extensions that must not load (their importers then run their own Python)."""

    def __init__(self, *, sources: bool, hidden: frozenset[str]) -> None:
        self._sources = sources
        self._hidden = hidden

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname in self._hidden:
            raise ModuleNotFoundError(f"{fullname} is not loaded here ({state()[1]})")
        if not self._sources or fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


def choose() -> None:
    """Make MODULES import as Python where extensions exist but `state` rules them out, and
    hide the NATIVE extensions that must not load (popmq/__init__ calls it before anything
    imports them)."""
    compiled, why = state()
    sources = not compiled and why != "not compiled"
    hidden = frozenset(m for m in NATIVE if _native_hidden(m))
    if not (sources or hidden):
        return
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder(sources=sources, hidden=hidden))


if __name__ == "__main__":
    # The Makefile's list of what `make compile` rebuilds after (run from the project root).
    print(*(source_path(m, "src/popmq") for m in MODULES))
    print(*(c_source_path(m, "src/popmq") for m in NATIVE))
