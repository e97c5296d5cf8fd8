"""`InDoubtSends`: which broker each recent send went to, while a repeat of it may come.

A client repeats a send whose answer it did not get (its deadline passed, its stream broke,
the proxy answered that the outcome is unknown), with the same message ids. The first
send may have been stored, or may still be on its way to its broker; the repeat must go to
that same broker, whose dedup window answers it with the first send's result, and not to the
broker this proxy's rotation would pick next. So the proxy notes, for each message of a send,
the broker it goes to, from the moment the send starts:

- a send that got its answer within `quick_s` forgets its messages at once (its client had
  the answer long before giving up on it), so the memory holds only the sends in flight and
  the slow or failed ones, never the steady stream;
- a slow send or one whose outcome is unknown is kept for `keep_s` (the brokers' dedup
  window: past it a repeat is stored again anyway, wherever it goes).

A message is known by (topic, dedup id), the dedup id being the message id when it has none,
as the broker's dedup window knows it. At most `max_entries` are kept; beyond, the oldest go
(a repeat of one of those is routed as a new send, or looked up when the client marked it).
The memory is this proxy's: a repeat sent through another proxy is looked up on the topic's
brokers there when the client marked it as a repeat, and routed as a new send when it did not
(cluster_send.py; docs/cluster.md says when that happens).

Runs on the proxy's event loop only (state changes between awaits, no lock); time comes from
the fault table's monotonic clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from popmq.broker_core import NewMessage

__all__ = ["InDoubtSends", "Key", "send_keys"]

Key = tuple[str, str]
"""(topic, dedup id): what a broker's dedup window recognises a repeat by."""


def send_keys(messages: Sequence[NewMessage]) -> list[Key]:
    """The dedup keys of a batch's messages (each message needs an id by now)."""
    return [(m.topic, m.dedup_id or m.message_id) for m in messages]


class InDoubtSends:
    """Broker of each recent send by dedup key (module docstring).

    Args:
        clock: Monotonic seconds.
        keep_s: How long a slow or unknown send's messages are remembered.
        quick_s: A send answered within this is forgotten at once.
        max_entries: Messages remembered at most (the oldest go first).
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        keep_s: float = 300.0,
        quick_s: float = 1.0,
        max_entries: int = 100_000,
    ) -> None:
        if keep_s <= 0 or quick_s < 0 or max_entries < 1:
            raise ValueError(
                f"InDoubtSends keep_s {keep_s} must be > 0, quick_s {quick_s} >= 0 and "
                f"max_entries {max_entries} >= 1"
            )
        self._clock = clock
        self._keep_s = keep_s
        self._quick_s = quick_s
        self._max = max_entries
        # key -> (broker, kept until (inf while its send is in flight), outcome unknown),
        # oldest first; changed on the event loop thread only.
        self._entries: dict[Key, tuple[str, float, bool]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def broker_of(self, keys: Sequence[Key]) -> str | None:
        """The broker a recent send of one of `keys` went to, if this proxy remembers one
        (the first found); None: route the send as a new one."""
        entries = self._entries
        if not entries:
            return None
        now = self._clock()
        for key in keys:
            found = entries.get(key)
            if found is None:
                continue
            if found[1] >= now:
                return found[0]
            del entries[key]
        return None

    def sending(self, keys: Sequence[Key], broker: str) -> None:
        """A send of `keys` goes to `broker` now (kept until `done` or `refused`)."""
        entries = self._entries
        for key in keys:
            found = entries.pop(key, None)  # and back at the end: the newest
            unknown = found is not None and found[0] == broker and found[2]
            entries[key] = (broker, _IN_FLIGHT, unknown)
        while len(entries) > self._max:
            del entries[next(iter(entries))]

    def done(self, keys: Sequence[Key], broker: str, *, took_s: float, stored: bool) -> None:
        """The send of `keys` to `broker` ended after `took_s`: stored, or with an unknown
        outcome (not `stored`). A quick stored send is forgotten unless an earlier try's
        outcome was unknown; any other is kept for keep_s."""
        entries = self._entries
        until = self._clock() + self._keep_s
        for key in keys:
            found = entries.get(key)
            if found is None or found[0] != broker:
                continue  # a later send of the key went elsewhere: that one is kept
            if stored and took_s <= self._quick_s and not found[2]:
                del entries[key]
            else:
                entries[key] = (broker, until, found[2] or not stored)

    def refused(self, keys: Sequence[Key], broker: str) -> None:
        """`broker` refused the send of `keys` before storing it: forgotten, unless an
        earlier try there had an unknown outcome."""
        entries = self._entries
        until = self._clock() + self._keep_s
        for key in keys:
            found = entries.get(key)
            if found is None or found[0] != broker:
                continue
            if found[2]:
                entries[key] = (broker, until, True)
            else:
                del entries[key]


_IN_FLIGHT = float("inf")
"""Kept-until of a send still in flight: kept whatever the clock says."""
