"""The allocation strategies give RocketMQ's results for the same sorted inputs."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from popmq.proxy.allocation import (
    MessageQueue,
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_by_config,
    allocate_by_machine_room,
    allocate_consistent_hash,
    allocate_machine_room_nearby,
    md5_hash,
)

Q = [f"q{i}" for i in range(1, 9)]  # q1..q8, as in docs/push-consumer.md's table
C = ["c1", "c2", "c3"]


def table(
    strategy: Callable[[Sequence[str], Sequence[str], str], list[str]],
    queues: Sequence[str],
    clients: Sequence[str],
) -> dict[str, list[str]]:
    return {c: strategy(queues, clients, c) for c in clients}


def test_average_gives_contiguous_blocks_with_the_extra_queues_first() -> None:
    assert table(allocate_averagely, Q, C) == {
        "c1": ["q1", "q2", "q3"],
        "c2": ["q4", "q5", "q6"],
        "c3": ["q7", "q8"],
    }
    queues = [f"q{i}" for i in range(10)]
    clients = ["a", "b", "c", "d"]
    assert table(allocate_averagely, queues, clients) == {
        "a": ["q0", "q1", "q2"],
        "b": ["q3", "q4", "q5"],
        "c": ["q6", "q7"],
        "d": ["q8", "q9"],
    }


def test_average_by_circle_deals_round_robin() -> None:
    assert table(allocate_averagely_by_circle, Q, C) == {
        "c1": ["q1", "q4", "q7"],
        "c2": ["q2", "q5", "q8"],
        "c3": ["q3", "q6"],
    }


@pytest.mark.parametrize("strategy", [allocate_averagely, allocate_averagely_by_circle])
def test_consumers_beyond_the_queue_count_sit_idle(
    strategy: Callable[[Sequence[str], Sequence[str], str], list[str]],
) -> None:
    clients = ["c1", "c2", "c3", "c4", "c5"]
    assert table(strategy, ["q1", "q2", "q3"], clients) == {
        "c1": ["q1"],
        "c2": ["q2"],
        "c3": ["q3"],
        "c4": [],
        "c5": [],
    }
    assert table(strategy, ["q1"], ["c1"]) == {"c1": ["q1"]}
    assert table(strategy, Q, ["c1"]) == {"c1": Q}


@pytest.mark.parametrize(
    "strategy", [allocate_averagely, allocate_averagely_by_circle, allocate_consistent_hash]
)
def test_consumer_not_in_the_list_gets_nothing_and_empty_inputs_are_errors(
    strategy: Callable[[Sequence[str], Sequence[str], str], list[str]],
) -> None:
    assert strategy(Q, C, "stranger") == []
    with pytest.raises(ValueError, match="client id is empty"):
        strategy(Q, C, "")
    with pytest.raises(ValueError, match="queue list is empty"):
        strategy([], C, "c1")
    with pytest.raises(ValueError, match="client list is empty"):
        strategy(Q, [], "c1")


@pytest.mark.parametrize(
    "strategy", [allocate_averagely, allocate_averagely_by_circle, allocate_consistent_hash]
)
def test_every_queue_has_exactly_one_owner(
    strategy: Callable[[Sequence[str], Sequence[str], str], list[str]],
) -> None:
    rng = random.Random(7)
    for _ in range(200):
        queues = [f"q{i:03d}" for i in range(rng.randint(1, 40))]
        clients = sorted({f"c{rng.randint(0, 999):03d}" for _ in range(rng.randint(1, 20))})
        owned = [q for c in clients for q in strategy(queues, clients, c)]
        assert sorted(owned) == queues


def test_md5_hash_is_the_first_four_digest_bytes() -> None:
    # Expected values from `printf %s KEY | md5sum`, an implementation independent of ours.
    assert md5_hash("c1-0") == 0xE7A7EB0B
    assert md5_hash("MessageQueue [topic=t, brokerName=broker-a, queueId=0]") == 0x02C04AB7


def test_consistent_hash_routes_each_queue_to_the_next_point_on_the_ring() -> None:
    # One point per client (md5sum): c2 0x31831c51 < c3 0xe35f4bd2 < c1 0xe7a7eb0b. Queue
    # strings hash to q0 0x02c04ab7, q1 0x0472fb6c, q2 0x8aee53f2, q3 0xa9158b8b,
    # q4 0x2ab122a2, q5 0x6fe55e69, so q0 q1 q4 fall before c2's point and the rest before
    # c3's; c1's point follows every queue and gets none.
    queues = [MessageQueue("t", "broker-a", i) for i in range(6)]
    owners = {
        c: [q.queue_id for q in allocate_consistent_hash(queues, C, c, virtual_nodes=1)] for c in C
    }
    assert owners == {"c1": [], "c2": [0, 1, 4], "c3": [2, 3, 5]}
    # Without c3 its queues move to the next point (c1); c2 keeps exactly what it had.
    without = {
        c: [q.queue_id for q in allocate_consistent_hash(queues, ["c1", "c2"], c, virtual_nodes=1)]
        for c in ["c1", "c2"]
    }
    assert without == {"c1": [2, 3, 5], "c2": [0, 1, 4]}


def test_consistent_hash_moves_only_the_changed_members_queues() -> None:
    queues = [MessageQueue("topic_test", "brokerName", i) for i in range(20)]
    clients = [f"CID-{i}" for i in range(10)]

    def owners(members: list[str]) -> dict[MessageQueue, str]:
        return {q: c for c in members for q in allocate_consistent_hash(queues, members, c)}

    before = owners(clients)
    assert sorted(before) == queues
    after_leave = owners(clients[1:])
    for queue, owner in before.items():
        if owner != clients[0]:
            assert after_leave[queue] == owner
    after_join = owners([*clients[1:], "CID-NEW"])
    for queue, owner in after_join.items():
        if owner != "CID-NEW":
            assert after_leave[queue] == owner


def test_consistent_hash_rejects_a_negative_virtual_node_count() -> None:
    with pytest.raises(ValueError, match="virtual_nodes"):
        allocate_consistent_hash(Q, C, "c1", virtual_nodes=-1)
    assert allocate_consistent_hash(Q, C, "c1", virtual_nodes=0) == []


def test_message_queue_sorts_and_prints_like_rocketmq() -> None:
    queues = [
        MessageQueue("b", "broker-a", 0),
        MessageQueue("a", "broker-b", 1),
        MessageQueue("a", "broker-a", 10),
        MessageQueue("a", "broker-a", 2),
    ]
    assert [str(q) for q in sorted(queues)] == [
        "MessageQueue [topic=a, brokerName=broker-a, queueId=2]",
        "MessageQueue [topic=a, brokerName=broker-a, queueId=10]",
        "MessageQueue [topic=a, brokerName=broker-b, queueId=1]",
        "MessageQueue [topic=b, brokerName=broker-a, queueId=0]",
    ]


def test_by_config_returns_the_configured_queues_as_given() -> None:
    assert allocate_by_config(["q5", "q2"]) == ["q5", "q2"]
    assert allocate_by_config([]) == []


def test_by_machine_room_matches_rocketmqs_published_example() -> None:
    # RocketMQ's AllocateMessageQueueByMachineRoomTest: 10 queues, the first 5 on
    # room1@broker-a, consumers serve room1 -> CID_PREFIX0 {0, 1, 4}, CID_PREFIX1 {2, 3}.
    queues = [
        MessageQueue("topic", "room1@broker-a" if i < 5 else "room2@broker-b", i) for i in range(10)
    ]
    clients = ["CID_PREFIX0", "CID_PREFIX1"]
    result = {
        c: [q.queue_id for q in allocate_by_machine_room(queues, clients, c, {"room1"})]
        for c in clients
    }
    assert result == {"CID_PREFIX0": [0, 1, 4], "CID_PREFIX1": [2, 3]}
    # Both rooms served: 10 queues split 5/5; a broker name without "room@" is never taken.
    both = {
        c: [q.queue_id for q in allocate_by_machine_room(queues, clients, c, {"room1", "room2"})]
        for c in clients
    }
    assert both == {"CID_PREFIX0": [0, 1, 2, 3, 4], "CID_PREFIX1": [5, 6, 7, 8, 9]}
    plain = [MessageQueue("topic", "broker-a", 0)]
    assert allocate_by_machine_room(plain, clients, "CID_PREFIX0", {"broker-a"}) == []
    assert allocate_by_machine_room(queues, clients, "stranger", {"room1"}) == []


def _room(name: str) -> str:
    return name.split("-")[0]


def nearby(queues: list[MessageQueue], clients: list[str]) -> dict[str, list[str]]:
    return {
        c: [
            f"{_room(q.broker_name)}:{q.queue_id}"
            for q in allocate_machine_room_nearby(
                queues,
                clients,
                c,
                queue_room=lambda q: _room(q.broker_name),
                client_room=_room,
            )
        ]
        for c in clients
    }


def _rooms_queues(rooms: list[str], per_room: int) -> list[MessageQueue]:
    return sorted(
        MessageQueue("topic_test", f"{room}-brokerName", i)
        for room in rooms
        for i in range(per_room)
    )


def test_machine_room_nearby_keeps_queues_in_their_room() -> None:
    queues = _rooms_queues(["IDC1", "IDC2"], 3)
    clients = ["IDC1-CID-0", "IDC1-CID-1", "IDC2-CID-0"]
    assert nearby(queues, clients) == {
        "IDC1-CID-0": ["IDC1:0", "IDC1:1"],
        "IDC1-CID-1": ["IDC1:2"],
        "IDC2-CID-0": ["IDC2:0", "IDC2:1", "IDC2:2"],
    }


def test_machine_room_nearby_shares_a_room_without_consumers() -> None:
    queues = _rooms_queues(["IDC1", "IDC2", "IDC3"], 2)
    clients = ["IDC1-CID-0", "IDC2-CID-0"]
    # IDC3 has no consumer: its queues are split among all members (AVERAGE).
    assert nearby(queues, clients) == {
        "IDC1-CID-0": ["IDC1:0", "IDC1:1", "IDC3:0"],
        "IDC2-CID-0": ["IDC2:0", "IDC2:1", "IDC3:1"],
    }
    # A consumer in a room without brokers only helps with orphaned rooms' queues.
    with_idle = nearby(queues, [*clients, "IDC9-CID-0"])
    assert with_idle == {
        "IDC1-CID-0": ["IDC1:0", "IDC1:1", "IDC3:0"],
        "IDC2-CID-0": ["IDC2:0", "IDC2:1", "IDC3:1"],
        "IDC9-CID-0": [],
    }
    assert nearby(_rooms_queues(["IDC3"], 3), ["IDC1-CID-0", "IDC9-CID-0"]) == {
        "IDC1-CID-0": ["IDC3:0", "IDC3:1"],
        "IDC9-CID-0": ["IDC3:2"],
    }


def test_machine_room_nearby_every_queue_has_exactly_one_owner() -> None:
    rng = random.Random(11)
    for _ in range(100):
        broker_rooms = [f"IDC{i}" for i in range(1, rng.randint(1, 5) + 1)]
        client_rooms = [f"IDC{i}" for i in range(1, rng.randint(1, 6) + 1)]
        queues = _rooms_queues(broker_rooms, rng.randint(1, 10))
        clients = sorted(
            f"{room}-CID-{i}" for room in client_rooms for i in range(rng.randint(1, 4))
        )
        owned = [q for qs in nearby(queues, clients).values() for q in qs]
        assert sorted(owned) == sorted(f"{_room(q.broker_name)}:{q.queue_id}" for q in queues)


def test_machine_room_nearby_rejects_an_empty_room() -> None:
    queues = [MessageQueue("t", "broker-a", 0)]
    with pytest.raises(ValueError, match="machine room of queue"):
        allocate_machine_room_nearby(
            queues, ["c1"], "c1", queue_room=lambda q: "", client_room=lambda c: "r"
        )
    with pytest.raises(ValueError, match="machine room of client"):
        allocate_machine_room_nearby(
            queues, ["c1"], "c1", queue_room=lambda q: "r", client_room=lambda c: ""
        )
