"""Security records: the proxy's users with their policies, in the embedded broker's store.

In local mode they live in the `meta` family under keys.SECURITY_PREFIX, in the proxy's
encoding (the broker stores bytes, security/store.py reads them); in cluster mode they live
in etcd and never reach a broker.

Threading: on the event loop. The read is a scan of a handful of records; the write is one
batch through the group-commit writer, fsynced.
"""

from __future__ import annotations

from popmq.broker_core import keys
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.store import Batch, Store


def read_all(store: Store) -> dict[str, bytes]:
    """Every stored security record by name."""
    prefix = keys.SECURITY_PREFIX
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    return {key[len(prefix) :].decode(): value for key, value in store.scan("meta", prefix, end)}


async def put(writer: GroupCommitWriter, name: str, value: bytes | None) -> None:
    """Store one security record, or delete it (None): one write batch, fsynced."""
    key = keys.security_meta_key(name)

    def apply(batch: Batch, offsets: QueueOffsets) -> None:
        if value is None:
            batch.delete("meta", key)
        else:
            batch.put("meta", key, value)

    await writer.submit(apply, sync=True)
