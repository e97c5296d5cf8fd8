"""Queue allocation strategies of RocketMQ's classic push consumer, as pure functions.

Each function answers "which of ``queues`` does ``client`` consume" for one consumer group,
given every member's id. Like RocketMQ's ``AllocateMessageQueueStrategy`` implementations,
they expect both lists already sorted (RocketMQ's rebalance sorts queues by topic, broker
name and queue id, and client ids as strings) so that every member computes the same view,
and for the same sorted inputs they return the same queues in the same order:

- ``allocate_averagely``: AllocateMessageQueueAveragely, contiguous blocks, the first
  ``len(queues) % len(clients)`` clients take one extra queue.
- ``allocate_averagely_by_circle``: AllocateMessageQueueAveragelyByCircle, round robin.
- ``allocate_consistent_hash``: AllocateMessageQueueConsistentHash, a ring of MD5 hashes
  (first 4 digest bytes, big-endian) of ``"<client>-<n>"`` virtual nodes (10 per client by
  default); a queue goes to the first node at or after the hash of its
  ``MessageQueue [topic=..., brokerName=..., queueId=...]`` string, wrapping around.
- ``allocate_by_config``: AllocateMessageQueueByConfig, a fixed list per consumer.
- ``allocate_by_machine_room``: AllocateMessageQueueByMachineRoom, only queues of brokers
  named ``"<room>@<broker>"`` whose room the consumer serves, split into blocks.
- ``allocate_machine_room_nearby``: AllocateMachineRoomNearby, queues of a room go to the
  consumers in that room; a room without live consumers is shared by all of them.

Validation mirrors RocketMQ's: an empty client id, queue list or client list is an error
(``ValueError``); a client that is not in the list gets nothing.
"""

from __future__ import annotations

import bisect
import enum
import hashlib
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "DEFAULT_VIRTUAL_NODES",
    "Allocator",
    "MessageQueue",
    "Strategy",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "allocate_by_config",
    "allocate_by_machine_room",
    "allocate_consistent_hash",
    "allocate_machine_room_nearby",
    "md5_hash",
]

Q = TypeVar("Q")

DEFAULT_VIRTUAL_NODES = 10
"""Virtual nodes per client on the consistent-hash ring (RocketMQ's default constructor)."""

Allocator = Callable[[Sequence[Q], Sequence[str], str], list[Q]]
"""The shape of an allocation strategy: (sorted queues, sorted client ids, client) -> queues."""


class Strategy(enum.Enum):
    """The assignment strategies a queue-exclusive consumer group can use."""

    AVERAGE = "AVERAGE"
    AVERAGE_BY_CIRCLE = "AVERAGE_BY_CIRCLE"
    CONSISTENT_HASH = "CONSISTENT_HASH"
    BY_CONFIG = "BY_CONFIG"
    BY_MACHINE_ROOM = "BY_MACHINE_ROOM"


@dataclass(frozen=True, order=True, slots=True)
class MessageQueue:
    """A queue named the way RocketMQ names it; orders by topic, broker name, queue id.

    ``str()`` gives RocketMQ's ``MessageQueue.toString()``, which the consistent-hash
    strategy hashes, so the ring places queues exactly where RocketMQ clients do.
    """

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return (
            f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, "
            f"queueId={self.queue_id}]"
        )


def _check(queues: Sequence[object], clients: Sequence[str], client: str) -> bool:
    """RocketMQ's argument check: raise on empty inputs; False when client is not a member."""
    if not client:
        raise ValueError("client id is empty")
    if not queues:
        raise ValueError("the queue list is empty")
    if not clients:
        raise ValueError("the client list is empty")
    return client in clients


def allocate_averagely(queues: Sequence[Q], clients: Sequence[str], client: str) -> list[Q]:
    """Contiguous blocks: 8 queues, 3 clients -> c1 q1-q3, c2 q4-q6, c3 q7-q8."""
    if not _check(queues, clients, client):
        return []
    index = clients.index(client)
    total, members = len(queues), len(clients)
    extra = total % members  # this many leading clients take one queue more
    if total <= members:
        size = 1
    elif index < extra:
        size = total // members + 1
    else:
        size = total // members
    start = index * size if index < extra else index * size + extra
    return [queues[(start + i) % total] for i in range(min(size, total - start))]


def allocate_averagely_by_circle(
    queues: Sequence[Q], clients: Sequence[str], client: str
) -> list[Q]:
    """Round robin: 8 queues, 3 clients -> c1 q1 q4 q7, c2 q2 q5 q8, c3 q3 q6."""
    if not _check(queues, clients, client):
        return []
    index = clients.index(client)
    return list(queues[index :: len(clients)])


def md5_hash(key: str) -> int:
    """RocketMQ's ring hash: the first 4 bytes of MD5(key), big-endian, unsigned."""
    digest = hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")


def allocate_consistent_hash(
    queues: Sequence[Q],
    clients: Sequence[str],
    client: str,
    *,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    key: Callable[[Q], str] = str,
    hash_function: Callable[[str], int] = md5_hash,
) -> list[Q]:
    """Consistent hashing: adding or removing a client moves only that client's queues.

    Args:
        queues: Every queue, sorted.
        clients: Every member's id, sorted.
        client: The member asking.
        virtual_nodes: Ring points per client (``"<client>-0"``, ``"<client>-1"``, ...).
        key: The string a queue is hashed by; ``str`` of a ``MessageQueue`` is RocketMQ's.
        hash_function: Maps a string to a ring position; RocketMQ's MD5 hash by default.
    """
    if virtual_nodes < 0:
        raise ValueError(f"virtual_nodes must be >= 0, got {virtual_nodes}")
    if not _check(queues, clients, client):
        return []
    ring: dict[int, str] = {}
    # Points each client owns on the ring now; a repeated client id continues its numbering
    # after the points it still owns, and a hash collision hands the point to the later one.
    owned: Counter[str] = Counter()
    for member in clients:
        existing = owned[member]
        for replica in range(existing, existing + virtual_nodes):
            point = hash_function(f"{member}-{replica}")
            previous = ring.get(point)
            if previous is not None:
                owned[previous] -= 1
            ring[point] = member
            owned[member] += 1
    if not ring:
        return []
    points = sorted(ring)
    result = []
    for queue in queues:
        at = bisect.bisect_left(points, hash_function(key(queue)))
        if ring[points[at % len(points)]] == client:
            result.append(queue)
    return result


def allocate_by_config(configured: Sequence[Q]) -> list[Q]:
    """A fixed list per consumer: the consumer's configured queues, as configured.

    RocketMQ returns the configured list whatever the other members hold; the proxy's
    registry (proxy/clients.py) resolves overlaps so a queue still has one owner.
    """
    return list(configured)


def allocate_by_machine_room(
    queues: Sequence[MessageQueue],
    clients: Sequence[str],
    client: str,
    consumer_rooms: Collection[str],
) -> list[MessageQueue]:
    """Queues of brokers named ``"<room>@<broker>"`` whose room is in ``consumer_rooms``.

    The eligible queues are split into equal blocks in client order; the remainder goes
    one each to the first clients, taken from the end of the list (RocketMQ's published
    example: 5 eligible queues, 2 clients -> c0 q0 q1 q4, c1 q2 q3). Every member must be
    configured with the same rooms, as in RocketMQ.
    """
    if client not in clients:
        return []
    index = clients.index(client)
    eligible = []
    for queue in queues:
        parts = queue.broker_name.split("@")
        if len(parts) == 2 and parts[0] in consumer_rooms:
            eligible.append(queue)
    block, rest = divmod(len(eligible), len(clients))
    result = eligible[block * index : block * index + block]
    if rest > index:
        result.append(eligible[index + block * len(clients)])
    return result


def allocate_machine_room_nearby(
    queues: Sequence[Q],
    clients: Sequence[str],
    client: str,
    *,
    queue_room: Callable[[Q], str],
    client_room: Callable[[str], str],
    inner: Allocator[Q] = allocate_averagely,
) -> list[Q]:
    """Nearby machine room first: a room's queues go to that room's consumers (by ``inner``).

    Queues of a room where no member lives are shared by every member (again by ``inner``),
    so a room that lost all its consumers is still consumed. Rooms are visited in sorted
    order. An empty room name for a queue or a client is an error, as in RocketMQ.
    """
    if not _check(queues, clients, client):
        return []
    queues_by_room: dict[str, list[Q]] = {}
    for queue in queues:
        room = queue_room(queue)
        if not room:
            raise ValueError(f"machine room of queue {queue} is empty")
        queues_by_room.setdefault(room, []).append(queue)
    clients_by_room: dict[str, list[str]] = {}
    for member in clients:
        room = client_room(member)
        if not room:
            raise ValueError(f"machine room of client {member!r} is empty")
        clients_by_room.setdefault(room, []).append(member)
    own_room = client_room(client)
    result = []
    own_queues = queues_by_room.pop(own_room, [])
    if own_queues:
        result.extend(inner(own_queues, clients_by_room[own_room], client))
    for room in sorted(queues_by_room):
        if room not in clients_by_room:
            result.extend(inner(queues_by_room[room], clients, client))
    return result
