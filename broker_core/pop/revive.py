"""Revive: redeliver what was popped and not acked in time.

The revive loop takes due checkpoints off the revive timer (live_checkpoints.py) in chunks
and copies every unresolved message to the group's retry queue (or, past
max_delivery_attempts, to its dead-letter topic: where a copy goes is retry.py's); a FIFO
message is redelivered in place instead (fifo.py). The loop also expires superseded handles
whose old deadline passed.

It enforces crash-safety rule 3 (see broker.py): a revive writes the retry (or dead-letter)
copies and deletes the checkpoint in one batch, and touches memory only after that batch
committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from popmq.broker_core import jobs, keys
from popmq.broker_core.catalog import KIND_DLQ, Catalog, GroupInfo, TopicInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.errors import PopMQError
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.log_limit import RepeatedWarning
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.pop.fifo import Fifo
from popmq.broker_core.pop.history import DEAD_LETTER, REDELIVER, RETRY
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.pop.retry import Retries, redelivery_copy, store_copy
from popmq.broker_core.pop.superseded import SupersededHandles
from popmq.broker_core.stats import BrokerStats
from popmq.broker_core.store import Batch, Store

log = logging.getLogger(__name__)

REVIVE_CHUNK = 128
"""Messages revived (or delayed messages fired) per write batch: each chunk holds the event
loop for a few ms, so pops and acks keep flowing through a revive storm."""
RETRY_DELAY_MS = 1000
"""Delay before a revive (or a delayed-message delivery) that failed to write is tried again."""


class Reviver:
    """The revive loop and the revive of one chunk of due checkpoints."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        writer: GroupCommitWriter,
        checkpoints: LiveCheckpoints,
        superseded: SupersededHandles,
        fifo: Fifo,
        retries: Retries,
        polling: LongPolling,
        stats: BrokerStats,
        clock: Clock,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._writer = writer
        self._checkpoints = checkpoints
        self._superseded = superseded
        self._fifo = fifo
        self._retries = retries
        self._polling = polling
        self._stats = stats
        self._clock = clock
        # Background retries while writes fail (a full disk): a warning per change or 30 s.
        self._warning = RepeatedWarning(log)

    async def loop(self) -> None:
        """Expire superseded handles, revive due checkpoints a chunk at a time, sleep until
        the next deadline."""
        while True:
            now = self._clock.now_ms()
            expired = self._superseded.expire(now)
            if expired:
                self._writer.submit(jobs.delete_meta(expired), sync=False).add_done_callback(
                    jobs.ignore_result
                )
            due = self._checkpoints.due(now, REVIVE_CHUNK)
            if due:
                try:
                    await self.revive(due)
                except PopMQError as exc:
                    self._warning.warn("revive of checkpoints failed, retrying: %s", exc)
                    for ck in due:
                        self._checkpoints.retry_later(ck, RETRY_DELAY_MS)
                continue
            await self._checkpoints.wait_due(now)

    async def revive(self, due: list[Checkpoint]) -> None:
        """Copy every unresolved message of the due checkpoints to its retry queue (or DLQ)."""
        plan: list[tuple[Checkpoint, list[tuple[int, TopicInfo, bytes]]]] = []
        notify: list[tuple[str, str | None]] = []
        stamp = self._clock.now_ms()
        stored = self._revived_records(due)
        for ck in due:
            cq = ck.queue
            group = self._catalog.groups_by_id.get(cq.group_id)
            source = self._catalog.topics_by_id.get(cq.topic_id)
            if group is None or source is None:
                self._checkpoints.untrack(ck)
                continue
            user_topic = self._retries.user_topic(source)
            if ck.fifo_group:
                fifo_moves = await self._revive_fifo(ck, group, source, user_topic, stamp, notify)
                if fifo_moves:
                    plan.append((ck, fifo_moves))
                continue
            moves: list[tuple[int, TopicInfo, bytes]] = []
            for index in ck.unresolved():
                offset = ck.offsets[index]
                owner = cq.inflight.get(offset)
                if owner is not ck:
                    if owner is not None and not self._checkpoints.is_live(owner.ck_id):
                        continue  # being moved by ChangeInvisibleTime right now
                    # Another live checkpoint owns the message (or nobody does): this entry
                    # is stale and must neither redeliver it nor linger in the store.
                    moves.append((index, source, b""))
                    continue
                data = stored.get((cq.topic_id, cq.queue_id, offset))
                if data is None or user_topic is None:
                    moves.append((index, source, b""))  # deleted meanwhile: nothing to redeliver
                    continue
                copy = redelivery_copy(data, source.name, cq.queue_id, offset, stamp)
                target, wake = await self._retries.send_on(group, user_topic, copy)
                notify.append(wake)
                moves.append((index, target, copy.SerializeToString()))
            plan.append((ck, moves))

        # (checkpoint, index, copy's topic, copy's offset) for the history, once committed
        copied: list[tuple[Checkpoint, int, TopicInfo, int]] = []

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            copied.clear()
            for ck, moves in plan:
                for index, target, data in moves:
                    if data:
                        copied.append((ck, index, target, store_copy(batch, offsets, target, data)))
                if ck.persisted and len(moves) == len(ck.unresolved()):
                    batch.delete("checkpoints", keys.checkpoint_key(ck.ck_id))
                    batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))
                    self._checkpoints.written(ck)

        def revived(_: object) -> None:
            # In the flush's callback: it runs even when this call was cancelled meanwhile
            # (Broker.close stops the loop), and the copies are stored by then, so the
            # deliveries must end here too (or a later revive, after a restart if need be,
            # would copy them again).
            history = self._checkpoints.history
            for ck, index, target, to_offset in copied:
                kind = DEAD_LETTER if target.kind == KIND_DLQ else RETRY
                offset = ck.offsets[index]
                history.copied(stamp, kind, ck, offset, ck.attempt, (target.topic_id, to_offset))
            for ck, moves in plan:
                for index, _, _ in moves:
                    ck.resolved |= 1 << index
                    ck.revived |= 1 << index
                    ck.queue.release(ck, index)
                if ck.done:
                    self._checkpoints.forget(ck)
                    if ck.chained:
                        self._checkpoints.advance(ck.queue)
                    elif ck.fifo_group and ck.queue.fifo_remove(ck):
                        user_topic_name = self._catalog.user_topic_name(ck.queue.topic_id)
                        notify.append((user_topic_name, ck.queue.group))
                else:
                    self._checkpoints.finish(ck)
            for (topic_name, group_name), count in Counter(notify).items():
                self._polling.notify(topic_name, count, group=group_name)

        written = self._writer.submit(apply, sync=False, committed=revived)
        await asyncio.shield(written)  # a cancelled call does not cancel its write

    def _revived_records(self, due: list[Checkpoint]) -> dict[tuple[int, int, int], bytes]:
        """The stored messages the due (non-FIFO) checkpoints still own, read in one multi-get.

        Keyed by (topic id, queue id, offset); a message deleted meanwhile is absent.
        """
        wanted: list[tuple[int, int, int]] = []
        for ck in due:
            cq = ck.queue
            if ck.fifo_group:
                continue
            for index in ck.unresolved():
                offset = ck.offsets[index]
                if cq.inflight.get(offset) is ck:
                    wanted.append((cq.topic_id, cq.queue_id, offset))
        if not wanted:
            return {}
        values = self._store.multi_get("messages", [keys.message_key(*at) for at in wanted])
        return {at: value for at, value in zip(wanted, values, strict=True) if value is not None}

    async def _revive_fifo(
        self,
        ck: Checkpoint,
        group: GroupInfo,
        source: TopicInfo,
        user_topic: TopicInfo | None,
        stamp: int,
        notify: list[tuple[str, str | None]],
    ) -> list[tuple[int, TopicInfo, bytes]]:
        """A FIFO checkpoint is due: redeliver in place, re-arm a held one, or dead-letter.

        Returns the dead-letter move for the revive batch (the checkpoint is resolved only
        after that batch commits); in-place changes are memory plus the next flush.
        """
        cq = ck.queue
        offset = ck.offsets[0]
        if ck.done:
            return []
        owner = cq.inflight.get(offset)
        if owner is not ck:
            if owner is not None and not self._checkpoints.is_live(owner.ck_id):
                return []  # being moved by ChangeInvisibleTime right now
            self._fifo.finish(ck, acked=False)  # stale: another checkpoint owns it
            return []
        if not ck.held and ck.attempt >= group.max_delivery_attempts:
            data = self._store.get("messages", keys.message_key(cq.topic_id, cq.queue_id, offset))
            if data is None:
                self._fifo.finish(ck, acked=False)
                return []
            copy = redelivery_copy(data, source.name, cq.queue_id, offset, stamp)
            target = await self._retries.dead_letter(group, copy)
            notify.append((target.name, None))
            self._stats.dead_lettered[(group.name, user_topic.name if user_topic else "")] += 1
            return [(0, target, copy.SerializeToString())]
        if ck.held:  # only the hold timer ran out: hold again, same attempt
            attempt, not_before = ck.attempt, ck.not_before_ms
        else:  # invisible time passed unacked: redeliver in place, next attempt
            attempt, not_before = ck.attempt + 1, stamp
            self._stats.revived[(group.name, user_topic.name if user_topic else "")] += 1
        new = self._fifo.checkpoint(
            cq, offset, group=ck.fifo_group, attempt=attempt, held=True, now=stamp,
            deadline=0, not_before=not_before,
        )  # fmt: skip
        if not ck.held:
            self._checkpoints.history.copied(stamp, REDELIVER, ck, offset, attempt, (0, 0))
        cq.inflight[offset] = new
        cq.fifo_replace(ck, new)
        ck.resolved = ck.full
        ck.revived = ck.full
        self._checkpoints.finish(ck)
        if user_topic is not None and cq.fifo.get(ck.fifo_group, [None])[0] is new:
            notify.append((user_topic.name, group.name))
        return []
