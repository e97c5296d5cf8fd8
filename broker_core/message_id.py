"""Message ids in RocketMQ 5's format: 34 hex characters, unique and time-ordered.

`01` + 6-byte node id + 2-byte pid + 4-byte seconds since 2021-01-01 + 4-byte sequence.
The server assigns one when a producer sends none.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time

_EPOCH_2021 = 1_609_459_200


class MessageIdGenerator:
    """Generates ids for one process; the node id is random per generator."""

    def __init__(self, node: bytes | None = None) -> None:
        self._prefix = "01" + (node or secrets.token_bytes(6)).hex() + f"{os.getpid() & 0xFFFF:04X}"
        self._sequence = itertools.count()

    def next(self) -> str:
        seconds = int(time.time()) - _EPOCH_2021
        seq = next(self._sequence) & 0xFFFFFFFF
        return f"{self._prefix}{seconds & 0xFFFFFFFF:08X}{seq:08X}".upper()
