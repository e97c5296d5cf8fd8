"""Where the broker is in its life, shared by the components that must stop waiting."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Lifecycle:
    """Flags the facade sets and the pop and offset readers check (loop thread only)."""

    closing: bool = False
    """close() began: pops return at once."""
    draining: bool = False
    """release_waiters() was called: held pops and waits answer now, and no new one waits."""
