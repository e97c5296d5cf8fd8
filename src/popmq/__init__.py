"""popmq: a RocketMQ-5-style messaging system.

`from popmq import Producer, SimpleConsumer, Message, ...` is the client SDK (popmq.sdk).
The server is popmq.proxy (gRPC) over popmq.broker_core (storage and POP semantics), the
Spark data source is popmq.spark, the command line is popmq.cli (`popmq`).

The SDK's names are imported on first use, so `import popmq.broker_core` loads neither the
SDK nor gRPC. They are listed once, in popmq.sdk's `__all__`: this module has no list of
its own, so a name added there is a name of `popmq` too (`popmq.__all__` is that list).
Generated protobuf code lives in the private popmq._gen.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from popmq import _compiled

# Before anything imports a compiled module: their Python sources instead when asked to
# (POPMQ_PURE_PYTHON=1) or when an extension is older than its source (popmq/_compiled.py).
_compiled.choose()

if TYPE_CHECKING:
    from types import ModuleType

    # What type checkers see: exactly the SDK's names (a star import re-exports them).
    from popmq.sdk import *  # noqa: F403


def _sdk() -> ModuleType:
    return importlib.import_module("popmq.sdk")


def _may_be_sdk_name(name: str) -> bool:
    """False for a private name, and for a submodule not imported yet: `from popmq import
    broker_core` asks for it here first, and it is the import system's to load (asking the
    SDK would load the SDK and gRPC for nothing)."""
    if name == "__all__":
        return True
    if name.startswith("_"):
        return False
    import importlib.util  # only here, so that `import popmq` itself stays cheap

    return importlib.util.find_spec(f"{__name__}.{name}") is None


def __getattr__(name: str) -> Any:
    if _may_be_sdk_name(name):
        sdk = _sdk()
        if name == "__all__" or name in sdk.__all__:
            value = getattr(sdk, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'popmq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_sdk().__all__})
