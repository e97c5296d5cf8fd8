"""A replica's durable memory of its shard's last known leader: who, where, which epoch.

etcd says who leads a shard, but a replica that restarts while etcd is down cannot ask it:
without this it could not find its leader, would answer no heartbeat, and the leader (which
counts on its in-sync followers' lease promises while its own etcd lease is lost) would
fence itself although nothing but etcd failed. So a replica writes down the leader it
follows (each time etcd names a new one) and its own term when it is elected, in
`last-leader.json` in its data dir, and at start follows that leader again until etcd says
otherwise.

The remembered epoch is also the newest this replica has seen: the follower refuses a
leader of an older epoch (follower.py), and says the epoch in its hello so that such a
leader refuses it too (service.py). Written when it is elected, before it serves, so a
replica that led at epoch N and restarts never promises anything to a leader older than N.

A leader that stops cleanly (its sends in flight finished) writes down where the shard's
log then stood (`stopped_at`), and so does each follower it released, in its own copy: a
replica elected later with its copy still there (nothing written since, by anyone) takes
the shard over without reconciling its last messages with the other brokers (replica.py),
also after the whole cluster was restarted. Any later leader's record drops it.

A snapshot swap replaces the data dir as a whole: the follower writes the file into the
incoming copy before the swap. A missing, partial or unreadable file is no memory at all
(the replica then waits for etcd, as before), never an error. Writes are blocking file
I/O with fsyncs: callers on the event loop run them in a thread.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FILE = "last-leader.json"
"""The file's name in the data dir."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LastLeader:
    """The last leader a replica followed, or was.

    Attributes:
        replica: The leader replica's name.
        address: Its BrokerService address (HOST:PORT).
        epoch: Its epoch (the create revision of its registration in etcd).
    """

    replica: str
    address: str
    epoch: int
    stopped_at: tuple[int, int] | None = None
    """(epoch, lsn) of this replica's copy when that leader stopped cleanly; None: it did
    not (yet)."""


def read(directory: Path) -> LastLeader | None:
    """The remembered leader, or None (none written, or the file is damaged)."""
    path = directory / FILE
    try:
        leader = _parsed(json.loads(path.read_bytes()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:
        log.warning("ignoring %s: it does not name a leader (%s)", path, exc)
        return None
    if leader.epoch <= 0 or not leader.address:
        log.warning("ignoring %s: it names no leader (%r)", path, leader)
        return None
    return leader


def _parsed(record: object) -> LastLeader:
    if not isinstance(record, dict):
        raise TypeError(f"a record is an object, not {type(record).__name__}")
    return LastLeader(
        replica=str(record["replica"]),
        address=str(record["address"]),
        epoch=int(record["epoch"]),
        stopped_at=_position(record.get("stopped_at")),
    )


def _position(stopped: object) -> tuple[int, int] | None:
    """The clean stop's (epoch, lsn); a damaged one is no clean stop (the leader stays
    remembered: the replica then only reconciles at a takeover)."""
    if stopped is None:
        return None
    if (
        isinstance(stopped, list)
        and len(stopped) == 2
        and all(type(n) is int and n >= 0 for n in stopped)
    ):
        return stopped[0], stopped[1]
    log.warning("ignoring a damaged clean stop in %s: %r", FILE, stopped)
    return None


def write(directory: Path, leader: LastLeader) -> None:
    """Replace the remembered leader durably (a temp file, fsynced, renamed, the dir
    fsynced): a crash leaves the old record or the new one, never a mix."""
    path = directory / FILE
    temp = directory / f".{FILE}.tmp"
    record: dict[str, object] = {
        "replica": leader.replica,
        "address": leader.address,
        "epoch": leader.epoch,
    }
    if leader.stopped_at is not None:
        record["stopped_at"] = list(leader.stopped_at)
    data = json.dumps(record).encode()
    with temp.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    temp.chmod(0o600)
    temp.replace(path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
