"""Boot: the broker's identity (name, receipt key, boot epoch) and the recovery of in-flight
state from the store.

Recovery rebuilds consumer offsets and persisted checkpoints; its cost grows with in-flight
state only, never with the number of stored messages.
"""

from __future__ import annotations

import logging
from pathlib import Path

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import data_dir, keys
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.errors import DataDirError, StoreFullError
from popmq.broker_core.handle_text import broker_name_problem
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.pop.superseded import SupersededHandles
from popmq.broker_core.store import Batch, Store

log = logging.getLogger(__name__)

_SECRET_KEY = b"secret:receipt"
_BOOT_KEY = b"boot:epoch"
_NAME_KEY = b"broker:name"
"""meta family: the name of the broker that owns the store (UTF-8), written at its first
start; the name its handles carry, so a start under another name is refused."""


class BootIdentity:
    """The broker's name, the receipt key and this boot's epoch (the high bits of checkpoint
    and timer ids).

    Args:
        store: The opened store.
        directory: The data dir (it holds the receipt key).
        broker_name: The configured name (BrokerConfig.broker_name).
        allow_rename: Start even when the store belongs to a broker of another name, and
            make the store the configured name's (BrokerConfig.allow_rename).
        save: Count this boot in the store (False: a read-only view writes nothing).

    Raises:
        DataDirError: The store belongs to a broker of another name and `allow_rename` is
            off, or its stored name is unreadable; or the receipt key is unusable.
    """

    def __init__(
        self,
        store: Store,
        directory: Path,
        *,
        broker_name: str,
        allow_rename: bool = False,
        save: bool = True,
    ) -> None:
        self._directory = directory
        self.broker_name = broker_name
        self.secret = b""
        self.epoch = 0
        self._boot_unsaved = True
        self._save = save
        self._check_name(store, allow_rename)
        self._load(store)

    @property
    def unsaved(self) -> bool:
        """The epoch is not stored yet (read-only open): the next write must carry it."""
        return self._boot_unsaved

    def _check_name(self, store: Store, allow_rename: bool) -> None:
        """Compare the configured name with the store's; a store without one adopts it.

        Handles carry the name and the MAC covers it: a broker started under another name
        refuses every handle issued before, so a rename must be asked for.
        """
        stored = self._stored_name(store)
        if stored is None or stored == self.broker_name:
            return
        if not allow_rename:
            raise DataDirError(
                f"data dir {self._directory} belongs to broker {stored!r}, not "
                f"{self.broker_name!r}: its receipt and recall handles name {stored} and "
                f'would be refused. Start it with broker.broker_name = "{stored}", or rename '
                "it with broker.allow_rename = true (handles issued under the old name then "
                "fail as issued by another broker)"
            )
        log.warning(
            "data dir %s renamed from broker %r to %r (broker.allow_rename): handles issued "
            "under %r are refused from now on",
            self._directory,
            stored,
            self.broker_name,
            stored,
        )

    def _stored_name(self, store: Store) -> str | None:
        """The name the store belongs to; None for a store from before names were kept."""
        raw = store.get("meta", _NAME_KEY)
        if raw is None:
            return None
        name = raw.decode("utf-8", errors="replace")
        problem = broker_name_problem(name)
        if problem is not None:
            raise DataDirError(
                f"the broker name stored in {self._directory} is unreadable ({problem}); "
                "restore the data dir from a backup"
            )
        return name

    def _load(self, store: Store) -> None:
        """Load the receipt key (data_dir.py) and count this boot in the epoch.

        An older store's key moves out of RocksDB into `receipt.key` (its handles stay
        valid) and is purged from the database files. On a store that opened read-only
        (full disk) the new epoch rides along with the first write that succeeds
        (`save_boot`): ids made before it are never persisted without it.
        """
        legacy = store.get("meta", _SECRET_KEY)
        self.secret = data_dir.load_receipt_key(self._directory, legacy)
        epoch_bytes = store.get("meta", _BOOT_KEY)
        self.epoch = (keys.decode_u32(epoch_bytes) if epoch_bytes else 0) + 1
        self._boot_unsaved = True
        if store.read_only or not self._save:
            return
        batch = store.batch()
        self.save_boot(batch)
        try:
            store.write(batch, sync=True)
        except StoreFullError:
            return  # the disk filled since the open: the first write that succeeds saves it
        self._boot_unsaved = False
        if legacy is not None:
            store.purge("meta")
            log.info("receipt key moved from the database to %s", data_dir.KEY_FILE)

    def save_boot(self, batch: Batch) -> None:
        """Flush hook: put the boot epoch and the broker name (and drop a legacy key) until a
        write carried them. The name rides with every boot's epoch: one key, and a store
        without one, or renamed, gets it the same way."""
        if self._boot_unsaved:
            batch.put("meta", _BOOT_KEY, keys.encode_u32(self.epoch))
            batch.put("meta", _NAME_KEY, self.broker_name.encode("utf-8"))
            batch.delete("meta", _SECRET_KEY)

    def boot_saved(self, grown: list[tuple[int, int]]) -> None:
        self._boot_unsaved = False


def recover(
    store: Store,
    *,
    queues: ConsumeQueues,
    checkpoints: LiveCheckpoints,
    superseded: SupersededHandles,
    offsets: QueueOffsets,
    now: int,
    write: bool = True,
) -> int:
    """Rebuild offsets and persisted checkpoints; cost grows with in-flight state only.

    `now` (the broker's clock) expires superseded handles whose old deadline passed. With
    `write` (not for a read-only view), stale checkpoint entries are deleted."""
    for key, value in store.scan("offsets", b"", b"\xff" * 13):
        group_id, topic_id, queue_id = keys.parse_offset_key(key)
        queues.new_queue(group_id, topic_id, queue_id, keys.decode_u64(value))
    count = 0
    stale = store.batch()
    superseded.recover(store, now, stale)
    for key, _ in store.scan("revive", b"", b"\xff" * 17):
        _, ck_id = keys.parse_revive_key(key)
        data = store.get("checkpoints", keys.checkpoint_key(ck_id))
        record = records_pb2.CheckpointRecord.FromString(data) if data else None
        cq = None
        if record is not None:
            where = (record.group_id, record.topic_id, record.queue_id)
            cq = queues.get(*where)
            if cq is None:
                # The group never committed an offset in this queue: it starts where a
                # new group starts, the earliest retained message.
                cq = queues.new_queue(*where, offsets.min_offset(*where[1:]))
        if record is None or cq is None:
            stale.delete("revive", key)
            stale.delete("checkpoints", keys.checkpoint_key(ck_id))
            continue
        ck = Checkpoint.from_record(record, cq)
        if ck.done:
            stale.delete("revive", key)
            stale.delete("checkpoints", keys.checkpoint_key(ck_id))
            continue
        if ck.chained and ck.range_start >= cq.committed:
            cq.recovered.append((ck.range_start, ck.range_end))
        cq.add(ck)
        if ck.fifo_group:
            cq.fifo_enqueue(ck)
        checkpoints.recovered(ck)
        count += 1
    for cq in queues.values():
        cq.recovered.sort()
        cq.pop_offset = cq.committed
        cq.advance()
    if write and len(stale) and not store.read_only:  # else the next start drops them
        store.write(stale, sync=False)
    return count
