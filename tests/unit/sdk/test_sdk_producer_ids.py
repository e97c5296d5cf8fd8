"""Client-assigned message ids: the server's format, unique across threads and a fork, ordered."""

from __future__ import annotations

import os
import re
import threading

import pytest

from popmq.sdk import _message_id
from popmq.sdk._message_id import MESSAGE_ID_LENGTH, MessageIdGenerator, new_message_id

ID_PATTERN = re.compile(r"^01[0-9A-F]{32}$")


def _fields(message_id: str) -> tuple[str, int, int, int]:
    """(node, pid16, seconds, sequence) of an id."""
    return (
        message_id[2:14],
        int(message_id[14:18], 16),
        int(message_id[18:26], 16),
        int(message_id[26:34], 16),
    )


def test_ids_have_rocketmqs_layout_with_this_process_pid() -> None:
    message_id = new_message_id()

    assert len(message_id) == MESSAGE_ID_LENGTH
    assert ID_PATTERN.match(message_id)
    _, pid16, seconds, _ = _fields(message_id)
    assert pid16 == os.getpid() & 0xFFFF
    # Seconds since 2021-01-01: some time after 2025 and well before the field overflows.
    assert 4 * 365 * 86_400 < seconds < 0xFFFFFFFF


def test_ids_of_one_generator_increase_strictly_as_strings() -> None:
    generator = MessageIdGenerator()

    ids = [generator.next() for _ in range(20_000)]

    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_batches_of_ids_continue_one_strictly_increasing_sequence() -> None:
    generator = MessageIdGenerator()

    ids = []
    for size in (1, 32, 7, 1, 500, 3):
        batch = generator.next_many(size)
        assert len(batch) == size
        ids += batch
        ids.append(generator.next())

    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(ID_PATTERN.match(i) for i in ids)
    # Within one second the sequence runs on without gaps from batch to batch.
    seconds = [_fields(i)[2] for i in ids]
    if seconds[0] == seconds[-1]:
        assert [_fields(i)[3] for i in ids] == list(range(len(ids)))


def test_a_batch_that_would_wrap_the_sequence_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = MessageIdGenerator()
    monkeypatch.setattr(_message_id.time, "monotonic", lambda: generator._monotonic_start)
    generator.next()
    generator._sequence = 0xFFFFFFF0  # as if 2^32 - 16 ids were made in this second
    assert len(generator.next_many(15)) == 15
    with pytest.raises(RuntimeError, match="2\\^32"):
        generator.next_many(1)


def test_ids_are_unique_and_ordered_per_thread_across_threads() -> None:
    generator = MessageIdGenerator()
    per_thread: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(len(per_thread))

    def make(out: list[str]) -> None:
        start.wait()
        out.extend(generator.next() for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in per_thread]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    everything = [i for ids in per_thread for i in ids]
    assert len(set(everything)) == 8 * 5_000
    for ids in per_thread:
        assert ids == sorted(ids)


def test_two_generators_in_one_process_never_share_a_node() -> None:
    # A new node per generator (random salt) is what keeps processes whose low 16 pid
    # bits collide apart.
    nodes = {_fields(MessageIdGenerator().next())[0] for _ in range(200)}

    assert len(nodes) == 200


def test_a_forked_child_makes_ids_of_its_own() -> None:
    parent_before = [new_message_id() for _ in range(1_000)]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its ids and leave without running pytest's cleanup
        try:
            os.close(read_end)
            payload = "\n".join(new_message_id() for _ in range(1_000)).encode()
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as source:
        child_ids = source.read().decode().split("\n")
    _, status = os.waitpid(pid, 0)
    parent_after = [new_message_id() for _ in range(1_000)]

    assert os.waitstatus_to_exitcode(status) == 0
    assert len(child_ids) == 1_000
    assert all(ID_PATTERN.match(i) for i in child_ids)
    assert not set(child_ids) & (set(parent_before) | set(parent_after))
    child_node, child_pid16, _, _ = _fields(child_ids[0])
    parent_node, _, _, _ = _fields(parent_after[0])
    assert child_node != parent_node
    assert child_pid16 == pid & 0xFFFF
    assert child_ids == sorted(child_ids)
    assert parent_before + parent_after == sorted(parent_before + parent_after)
