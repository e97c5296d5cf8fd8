"""Security records: the proxy's users with their policies, kept in the embedded broker's
store in local mode (in cluster mode they live in etcd).

Their encoding is the proxy's (security/store.py); the broker stores bytes under
`keys.SECURITY_PREFIX` in the meta family. Reading them all is a scan of that prefix, on the
loop (a handful of users); a change is one write batch, fsynced.
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
