"""`Batch`: an atomic set of changes to the store, written by Store.write in one WriteBatch.

A module of its own so that it is compiled (popmq/_compiled.py) while store.py is not: a
send puts two or three entries a message through `put`, and an interpreted method call cost
more than the put itself.
"""

from __future__ import annotations

from typing import Any, Final

import rocksdict

PUT: Final = 0
DELETE: Final = 1
DELETE_RANGE: Final = 2
"""Kinds of a recorded change (Batch.ops): what replication ships to followers."""
Op = tuple[int, str, bytes, bytes]
"""A recorded change: (kind, family, key, value); for DELETE_RANGE the value is the end."""


class Batch:
    """An atomic set of changes, written by Store.write in one WriteBatch.

    With `record`, the changes are also kept in `ops` (references, not copies), so a
    replicating store can ship the batch to its followers as it was written.
    """

    __slots__ = ("_batch", "_handles", "generation", "lsn", "ops", "puts", "quorum")

    def __init__(self, handles: dict[str, Any], generation: int, *, record: bool = False) -> None:
        self._batch = rocksdict.WriteBatch(raw_mode=True)
        self._handles = handles
        self.generation = generation
        """The store's open count when made: its family handles die with a reopen."""
        self.puts = 0
        self.ops: list[Op] | None = [] if record else None
        self.lsn = 0
        """Its place in the replication log once written (0: not replicated)."""
        self.quorum = False
        """It stores sends: acknowledged only once the in-sync replicas hold it."""

    def put(self, family: str, key: bytes, value: bytes) -> None:
        self._batch.put(key, value, self._handles[family])
        self.puts += 1
        if self.ops is not None:
            self.ops.append((PUT, family, key, value))

    def delete(self, family: str, key: bytes) -> None:
        self._batch.delete(key, self._handles[family])
        self.puts += 1
        if self.ops is not None:
            self.ops.append((DELETE, family, key, b""))

    def delete_range(self, family: str, start: bytes, end: bytes) -> None:
        self._batch.delete_range(start, end, self._handles[family])
        self.puts += 1
        if self.ops is not None:
            self.ops.append((DELETE_RANGE, family, start, end))

    def __len__(self) -> int:
        return self.puts
