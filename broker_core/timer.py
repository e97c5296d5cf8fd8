"""Delayed messages: recall handles for the timers family (RocketMQ's timer wheel, on RocksDB).

A delayed message waits in the `timers` family under (due time, sequence) until the broker's
timer loop appends it to its queue in one batch with the timer's deletion (see
DelayedMessages below). That batch is written like a send's: fsynced (with `store.flush`
"sync") and, replicated, held by the in-sync followers before it completes (and refused
while too few are in sync), because it rewrites the message's id entry, which answers a
repeated send of it from then on (with a dedup window counted from the delivery).

The send returns a recall handle naming that timer entry, signed like a receipt handle so a
client can neither forge one nor aim it at another topic, and named after the broker like
one (handle_text.py) so a proxy can route a recall by the handle.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import struct
from dataclasses import dataclass

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import jobs, keys, validation
from popmq.broker_core.catalog import Catalog
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.errors import InvalidArgumentError, NotFoundError, PopMQError
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.handle_text import (
    SEPARATOR,
    HandleText,
    broker_name_problem,
    name_field,
)
from popmq.broker_core.log_limit import RepeatedWarning
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.pop.live_checkpoints import CK_SEQ_BITS
from popmq.broker_core.store import Batch, Store
from popmq.broker_core.wakeup import Wakeup

log = logging.getLogger(__name__)

VERSION_UNNAMED = 1
"""Version byte of the recall handles issued before they named their broker (the bare
payload); the message index keeps such handles for as long as their message waits."""
VERSION = 2
"""Version byte of the recall handles issued now (`<broker name>.<payload>`)."""
_BODY = struct.Struct(">BIQQ")
_MAC_BYTES = 12
_DOMAIN = b"popmq-recall"
TEXT: HandleText = HandleText(_BODY.size + _MAC_BYTES)
"""The payload's text (both versions have the same length)."""
_TEXT_CHARS = TEXT.chars
_NOT_BASE64URL = (
    "recall_handle is malformed (not the base64url text the send returned); pass it exactly "
    "as received"
)


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """Which timer entry a recall cancels."""

    topic_id: int
    due_ms: int
    seq: int


class RecallCodec:
    """Encodes and verifies recall handles with the server secret, for the broker
    `broker_name`."""

    def __init__(self, secret: bytes, *, broker_name: str) -> None:
        problem = broker_name_problem(broker_name)
        if problem is not None:
            raise ValueError(problem)
        self.broker_name = broker_name
        self._prefix = broker_name + SEPARATOR
        self._secret = secret
        self._named_domain = _DOMAIN + name_field(broker_name)

    def _mac(self, domain: bytes, body: bytes) -> bytes:
        return hmac.digest(self._secret, domain + body, "sha256")[:_MAC_BYTES]

    def encode(self, handle: RecallHandle) -> str:
        body = _BODY.pack(VERSION, handle.topic_id, handle.due_ms, handle.seq)
        return self._prefix + TEXT.encode(body + self._mac(self._named_domain, body)).decode()

    def decode(self, text: str, *, any_issuer: bool = False) -> RecallHandle:
        """Verify and decode; raises InvalidArgumentError when malformed, forged or issued by
        another broker.

        Strict: the base64 module's decoder drops characters outside the alphabet, so junk
        inserted into a handle used to be accepted. Only the exact text encode() returns is.

        `any_issuer`: accept a handle signed with this secret under another broker name,
        for handles the broker stored itself (the message index) before a rename.
        """
        if not text:
            raise InvalidArgumentError("recall_handle is empty: pass the one the send returned")
        if text.startswith(self._prefix):
            payload, domain, version = text[len(self._prefix) :], self._named_domain, VERSION
        elif SEPARATOR in text:
            issuer, _, payload = text.partition(SEPARATOR)
            _payload_bytes(payload)  # a malformed handle is malformed, whatever it names
            problem = broker_name_problem(issuer)
            if problem is not None:
                raise InvalidArgumentError(
                    "recall_handle is malformed (its broker name is not one a broker can "
                    "have); pass it exactly as the send returned it"
                )
            if not any_issuer:
                raise InvalidArgumentError(
                    f"recall_handle was issued by broker {issuer!r}; this is broker "
                    f"{self.broker_name!r}: recall the message on the broker that issued it"
                )
            domain, version = _DOMAIN + name_field(issuer), VERSION
        else:
            payload, domain, version = text, _DOMAIN, VERSION_UNNAMED
        raw = _payload_bytes(payload)
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        if not hmac.compare_digest(mac, self._mac(domain, body)):
            raise InvalidArgumentError(
                "recall_handle signature does not match: altered, or issued by another server"
            )
        found, topic_id, due_ms, seq = _BODY.unpack(body)
        if found != version:
            raise InvalidArgumentError(f"recall_handle version {found} is not supported")
        return RecallHandle(topic_id, due_ms, seq)


def _payload_bytes(payload: str) -> bytes:
    """The bytes of a recall handle's payload text; raises unless it is the one spelling."""
    if len(payload) != _TEXT_CHARS:
        raise InvalidArgumentError(
            f"recall_handle is malformed (wrong length: a payload of {len(payload)} "
            f"characters, not {_TEXT_CHARS}); pass it exactly as the send returned it"
        )
    try:
        raw = TEXT.decode(payload.encode())
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(_NOT_BASE64URL) from exc
    if raw is None:
        raise InvalidArgumentError(_NOT_BASE64URL)
    return raw


# -- the timer loop -------------------------------------------------------------------------

NEVER = 2**63 - 1
"""A time after every real deadline (no timer pending)."""
_CHUNK = 128
"""Delayed messages fired per write batch, so the loop stays free for pops and acks."""
_RETRY_MS = 1000
"""Delay before a delivery that failed to write is tried again."""


class DelayedMessages:
    """Timer entries: their sequence numbers, recall, and the loop that fires due ones."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: Store,
        catalog: Catalog,
        writer: GroupCommitWriter,
        polling: LongPolling,
        codec: RecallCodec,
        epoch: int,
        clock: Clock,
    ) -> None:
        self._config = config
        self._store = store
        self._catalog = catalog
        self._writer = writer
        self._polling = polling
        self._codec = codec
        self._epoch = epoch
        self._clock = clock
        self._seq = 0
        # Earliest due time in the timers family (a lower bound), the loop's wakeup, and
        # timer keys a move or recall is writing right now.
        first = store.first_key("timers", b"", keys.timer_key(NEVER, 0))
        self._next_due_ms = keys.parse_timer_key(first)[0] if first else NEVER
        self._wakeup = Wakeup()
        clock.on_advance(self._wakeup.set)
        self._moving: set[bytes] = set()
        # Background retries while writes fail (a full disk): a warning per change or 30 s.
        self._warning = RepeatedWarning(log)

    def due_at(self, due_ms: int) -> None:
        """A send stored timers due from `due_ms` on: wake the loop if that is sooner."""
        if due_ms < self._next_due_ms:
            self._next_due_ms = due_ms
            self._wakeup.set()

    @property
    def next_due_ms(self) -> int:
        return self._next_due_ms

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message before it is due; returns its message id."""
        validation.check_name("topic", topic)
        info = self._catalog.topic(topic)
        handle = self._codec.decode(recall_handle)
        if handle.topic_id != info.topic_id:
            raise InvalidArgumentError(f"recall_handle belongs to another topic, not {topic!r}")
        key = keys.timer_key(handle.due_ms, handle.seq)
        if key in self._moving:
            raise NotFoundError("the delayed message is being delivered now; it cannot be recalled")
        data = self._store.get("timers", key)
        if data is None:
            raise NotFoundError(
                "no delayed message waits for this recall_handle: it was delivered or recalled"
            )
        record = records_pb2.StoredMessage.FromString(
            records_pb2.TimerRecord.FromString(data).message
        )
        self._moving.add(key)
        try:
            await self._writer.submit(lambda b, _: b.delete("timers", key), sync=True)
        finally:
            self._moving.discard(key)
        return record.message_id

    async def loop(self) -> None:
        """Append due delayed messages to their queues: a batch per chunk, then wake pollers."""
        generation = self._store.generation
        while True:
            if self._store.generation != generation:
                generation = self._reread_next_due(generation)
            now = self._clock.now_ms()
            if self._next_due_ms <= now:
                try:
                    more = await self._fire(now)
                except PopMQError as exc:
                    self._warning.warn("delayed-message delivery failed, retrying: %s", exc)
                    await asyncio.sleep(_RETRY_MS / 1000)
                    continue
                if more:
                    continue
            timeout = 1.0
            if self._next_due_ms < NEVER:
                timeout = min(timeout, max(0.0, (self._next_due_ms - self._clock.now_ms()) / 1000))
            await self._wakeup.wait(timeout)

    def _reread_next_due(self, generation: int) -> int:
        """The store reopened: take the earliest timer from it again; returns the generation
        read (the old one when the store could not be read: tried again next turn).

        A reopen after a failed fsync replays the WAL, and a delivery it lost leaves its
        timers in the family again, due already but below what `_next_due_ms` has moved on
        to: without this they would wait for the next later timer.
        """
        try:
            first = self._store.first_key("timers", b"", keys.timer_key(NEVER, 0))
        except PopMQError as exc:
            self._warning.warn("delayed messages: the reopened store cannot be read: %s", exc)
            return generation
        if first is not None:
            self._next_due_ms = min(self._next_due_ms, keys.parse_timer_key(first)[0])
        return self._store.generation

    async def _fire(self, now: int) -> bool:
        """Move one chunk of due timers; True when more are due."""
        store = self._store
        due: list[tuple[bytes, records_pb2.TimerRecord]] = []
        next_due = NEVER
        for key, value in store.scan("timers", b"", keys.timer_key(NEVER, 0)):
            due_ms, _ = keys.parse_timer_key(key)
            if due_ms > now or len(due) >= _CHUNK:
                next_due = due_ms
                break
            if key in self._moving:
                continue
            due.append((key, records_pb2.TimerRecord.FromString(value)))
        self._next_due_ms = next_due
        if not due:
            return False
        try:
            tap = store.tap
            if tap is not None:
                # Too few in-sync followers refuse it as they refuse a send, before it is
                # written (its timers stay, and the loop retries).
                tap.admit_send()
            return await self._move(due, next_due)
        except PopMQError:
            # Not delivered, or in doubt: the loop looks at these timers again when it
            # retries, not only when the next one is due.
            self._next_due_ms = min(self._next_due_ms, keys.parse_timer_key(due[0][0])[0])
            raise

    async def _move(self, due: list[tuple[bytes, records_pb2.TimerRecord]], next_due: int) -> bool:
        """Append the due timers' messages to their queues in one batch; True when more
        are due."""
        moving = {key for key, _ in due}
        self._moving |= moving
        retention_ms = round(self._config.retention.retention_s * 1000)
        stamp = self._clock.now_ms()

        def apply(batch: Batch, offsets: QueueOffsets) -> list[tuple[str, int]]:
            # It stores messages and rewrites their id entries, which answer a repeated send
            # of a plain delayed message: replicated like a send's batch (`quorum`).
            batch.quorum = True
            notify = []
            for key, timer in due:
                batch.delete("timers", key)
                topic = self._catalog.topics_by_id.get(timer.topic_id)
                if topic is None:
                    continue  # the topic was deleted while the message waited
                queue_id = timer.queue_id % topic.queues
                record = records_pb2.StoredMessage.FromString(timer.message)
                record.store_time_ms = stamp
                jobs.store_indexed(
                    batch, offsets, topic.topic_id, queue_id, record, stamp, retention_ms
                )
                notify.append((topic.name, queue_id))
            return notify

        # Synced like a send: the fired messages become visible, and a repeat of the send is
        # answered from their new id entries, only once those survive a crash (a fire lost
        # to one would fire again, at an offset a consumer or a repeat was already given).
        sync = self._config.store.flush == "sync"
        try:
            moved: list[tuple[str, int]] = await self._writer.submit(apply, sync=sync)
        finally:
            self._moving -= moving
        counts: dict[tuple[str, int], int] = {}
        for where in moved:
            counts[where] = counts.get(where, 0) + 1
        for (name, queue_id), count in counts.items():
            self._polling.notify(name, count, queue_id=queue_id)
        return next_due <= self._clock.now_ms()

    def next_seq(self) -> int:
        self._seq += 1
        return (self._epoch << CK_SEQ_BITS) | self._seq
