"""Types of _receipt_runs.c: the per-handle loops of a run's receipt handles (receipt.py)."""

from collections.abc import Sequence
from typing import TypeVar

_Handle = TypeVar("_Handle", bound=tuple[int, ...])

def encode(
    prefix: str, shared: bytes, first: int, count: int, streams: list[bytes], /
) -> list[str]: ...
def verify(
    texts: Sequence[str],
    prefix: str,
    streams: dict[tuple[int, int, int, int, int, int, int], bytes],
    handle_type: type[_Handle],
    /,
) -> list[_Handle | None]: ...
