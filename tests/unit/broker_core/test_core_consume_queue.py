"""ConsumeQueue: the committed offset passes only finished or persisted checkpoints, in order."""

from __future__ import annotations

import itertools

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.pop.checkpoint import Checkpoint

_ids = itertools.count(1)


def _queue(committed: int = 0) -> ConsumeQueue:
    return ConsumeQueue(
        group="g", group_id=1, topic="orders", topic_id=2, queue_id=3, committed=committed
    )


def _ck(
    cq: ConsumeQueue,
    start: int,
    end: int,
    *,
    offsets: list[int] | None = None,
    persisted: bool = False,
    chained: bool = True,
) -> Checkpoint:
    ck = Checkpoint(
        ck_id=next(_ids),
        queue=cq,
        range_start=start,
        range_end=end,
        offsets=list(range(start, end)) if offsets is None else offsets,
        pop_time_ms=1_000,
        deadline_ms=31_000,
        chained=chained,
    )
    ck.persisted = persisted
    return ck


def _finish(ck: Checkpoint) -> None:
    ck.resolved = ck.full


def test_lock_key_is_topic_at_group_at_queue() -> None:
    assert _queue().lock_key == "orders@g@3"


def test_committed_does_not_pass_an_unfinished_head_even_when_later_ones_are_done() -> None:
    cq = _queue()
    first, second = _ck(cq, 0, 2), _ck(cq, 2, 4)
    cq.add(first)
    cq.add(second)
    _finish(second)
    assert cq.advance() is False
    assert cq.committed == 0


def test_committed_passes_done_and_persisted_checkpoints_in_order_up_to_an_open_one() -> None:
    cq = _queue()
    a, b, c, d = _ck(cq, 0, 2), _ck(cq, 2, 4), _ck(cq, 4, 6), _ck(cq, 6, 8)
    for ck in (a, b, c, d):
        cq.add(ck)
    _finish(b)
    d.persisted = True
    a.persisted = True  # persisted but not acked: the record keeps the messages safe
    assert cq.advance() is True
    assert cq.committed == 4  # past a (persisted) and b (done), not c (open)
    _finish(c)
    assert cq.advance() is True
    assert cq.committed == 8
    assert list(cq.chain) == []


def test_partially_acked_checkpoint_holds_the_offset() -> None:
    cq = _queue()
    ck = _ck(cq, 0, 3)
    cq.add(ck)
    ck.resolved = 0b011
    assert cq.advance() is False
    assert cq.committed == 0


def test_recovered_checkpoint_above_committed_does_not_let_committed_jump() -> None:
    cq = _queue(committed=0)
    recovered = _ck(cq, 5, 7, persisted=True)
    cq.recovered = [(5, 7)]
    cq.add(recovered)
    assert cq.advance() is False
    assert cq.committed == 0  # [0, 5) was never resolved: jumping would lose it
    gap = _ck(cq, 0, 5)
    cq.add(gap)
    assert cq.advance() is False
    _finish(gap)
    assert cq.advance() is True
    assert cq.committed == 7  # contiguous now: past the gap and the recovered range


def test_checkpoints_added_out_of_order_are_passed_in_offset_order() -> None:
    cq = _queue()
    later, earlier = _ck(cq, 3, 6, persisted=True), _ck(cq, 0, 3)
    cq.add(later)
    cq.add(earlier)
    assert [ck.range_start for ck in cq.chain] == [0, 3]
    assert cq.advance() is False
    _finish(earlier)
    assert cq.advance() is True
    assert cq.committed == 6


def test_checkpoint_of_only_filtered_out_messages_is_done_at_once() -> None:
    cq = _queue()
    empty = _ck(cq, 0, 10, offsets=[])
    assert empty.done
    cq.add(empty)
    assert cq.advance() is True
    assert cq.committed == 10


def test_filtered_checkpoint_covers_its_whole_range() -> None:
    cq = _queue()
    ck = _ck(cq, 0, 10, offsets=[2, 7])
    cq.add(ck)
    assert cq.pop_offset == 10
    assert set(cq.inflight) == {2, 7}
    ck.resolved = 0b11
    cq.advance()
    assert cq.committed == 10


def test_unchained_checkpoint_tracks_its_message_but_never_moves_offsets() -> None:
    cq = _queue(committed=4)
    moved = _ck(cq, 2, 3, chained=False, persisted=True)
    cq.add(moved)
    assert list(cq.chain) == []
    assert cq.inflight == {2: moved}
    assert cq.pop_offset == 4
    assert cq.advance() is False


def test_add_moves_the_pop_offset_past_a_checkpoint_starting_at_it() -> None:
    cq = _queue(committed=3)
    cq.add(_ck(cq, 3, 9))
    assert cq.pop_offset == 9
    assert cq.committed == 3


def test_inflight_maps_unresolved_offsets_to_their_owner_and_release_is_owner_only() -> None:
    cq = _queue()
    ck = _ck(cq, 0, 3)
    ck.resolved = 0b010
    cq.add(ck)
    assert cq.inflight == {0: ck, 2: ck}
    newer = _ck(cq, 0, 1, chained=False)
    cq.inflight[0] = newer  # a ChangeInvisibleTime moved offset 0
    cq.release(ck, 0)
    assert cq.inflight[0] is newer  # the old owner cannot release the new owner's message
    cq.release(ck, 2)
    assert 2 not in cq.inflight


def test_read_window_skips_recovered_ranges() -> None:
    cq = _queue(committed=0)
    cq.recovered = [(2, 4), (6, 8)]
    assert cq.read_window(10) == (0, 2)
    cq.add(_ck(cq, 0, 2))
    assert cq.read_window(10) == (4, 6)
    assert cq.pop_offset == 4
    cq.add(_ck(cq, 4, 6))
    assert cq.read_window(10) == (8, 10)
    assert cq.recovered == []


def test_read_window_is_bounded_by_the_max_offset() -> None:
    cq = _queue(committed=5)
    assert cq.read_window(5) == (5, 5)
    assert cq.read_window(7) == (5, 7)
    cq.recovered = [(9, 12)]
    assert cq.read_window(8) == (5, 8)


def test_checkpoint_record_round_trips_with_its_bits() -> None:
    cq = _queue()
    ck = _ck(cq, 10, 20, offsets=[10, 12, 19])
    ck.resolved = 0b101
    ck.acked = 0b001
    record = records_pb2.CheckpointRecord.FromString(ck.to_record())
    assert (record.group_id, record.topic_id, record.queue_id) == (1, 2, 3)
    back = Checkpoint.from_record(record, cq)
    assert (back.ck_id, back.range_start, back.range_end, back.offsets) == (
        ck.ck_id,
        10,
        20,
        [10, 12, 19],
    )
    assert (back.pop_time_ms, back.deadline_ms, back.chained) == (1_000, 31_000, True)
    assert (back.resolved, back.acked) == (0b101, 0b001)
    assert back.unresolved() == [1]
    assert back.persisted is True
    assert not back.done


def test_reset_starts_over_at_the_offset_with_nothing_in_flight() -> None:
    cq = _queue(committed=5)
    ck = _ck(cq, 5, 8)
    cq.add(ck)
    cq.recovered.append((9, 12))
    fifo = _ck(cq, 8, 9, chained=False)
    fifo.fifo_group = "order-1"
    fifo.held = True
    cq.fifo_enqueue(fifo)
    cq.reset(2)
    assert (cq.committed, cq.pop_offset) == (2, 2)
    assert not cq.chain and not cq.inflight and not cq.recovered
    assert not cq.fifo and not cq.fifo_ready and cq.fifo_held == 0
