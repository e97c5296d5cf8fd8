"""What the MessageRecord view costs per delivered message, against the storage proto it wraps.

``python -m bench.record_view_cost [--number 20000] [--repeat 15]``

Popped, pulled and peeked values used to carry the storage proto (records_pb2.StoredMessage)
and the proxy's converters read it directly. They now carry `MessageRecord`, a read-only
view over that proto, and the converters read the view. Per message, for a 1 KiB body with
2 properties and a tag, this times:

- building the value the broker API hands out: wrapping the parsed record in the view, and
  (the design it was chosen over) copying its 16 fields into a frozen dataclass;
- building a popmq.v1 ReceivedMessage and an apache.rocketmq.v2 Message: with the
  converters as they were before the view (copied below from commit 7e7c94d) on the proto,
  and with the proxy's converters on a freshly wrapped view (wrapping included).

Reported: the best of ``--repeat`` runs of ``--number`` messages each (the least disturbed
by other load), in microseconds per message.

It measures the Python build (``POPMQ_PURE_PYTHON=1`` where the hot path is compiled,
popmq/_compiled.py): the old paths hand the proto to converters and a PoppedMessage typed
for the view, which compiled code refuses.
"""

from __future__ import annotations

import argparse
import hashlib
import timeit
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, cast

from popmq import _compiled
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.popmq.store.v1 import records_pb2
from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core import DLQ_PREFIX, MessageRecord, PoppedMessage
from popmq.proxy import convert
from popmq.proxy.convert import set_time
from popmq.proxy.rocketmq import convert as v2_convert
from popmq.proxy.rocketmq.convert import delivered_body, duration


def stored_message() -> records_pb2.StoredMessage:
    """A 1 KiB message with 2 properties and a tag, as the pop path parses it."""
    return records_pb2.StoredMessage(
        message_id="0A0000017F0000000000C3A1B2D4E5F6",
        body=bytes(range(256)) * 4,
        tag="TagA",
        properties={"amount": "42", "region": "eu-west"},
        born_time_ms=1_700_000_000_000,
        store_time_ms=1_700_000_000_004,
        delivery_attempt=1,
        dedup_id="0A0000017F0000000000C3A1B2D4E5F6",
        born_host="10.0.0.7",
    )


@dataclass(frozen=True, slots=True)
class CopiedRecord:
    """The design the view was measured against: every field copied at construction."""

    message_id: str
    body: bytes
    tag: str
    keys: Sequence[str]
    properties: Mapping[str, str]
    born_time_ms: int
    store_time_ms: int
    delivery_attempt: int
    origin_topic: str
    origin_queue_id: int
    origin_offset: int
    message_group: str
    deliver_at_ms: int
    body_encoding: str
    dedup_id: str
    born_host: str

    @classmethod
    def of(cls, r: records_pb2.StoredMessage) -> CopiedRecord:
        return cls(
            r.message_id, r.body, r.tag, tuple(r.keys), MappingProxyType(dict(r.properties)),
            r.born_time_ms, r.store_time_ms, r.delivery_attempt, r.origin_topic,
            r.origin_queue_id, r.origin_offset, r.message_group, r.deliver_at_ms,
            r.body_encoding, r.dedup_id, r.born_host,
        )  # fmt: skip


# -- the converters before the view (proxy/convert.py, proxy/rocketmq/convert.py at 7e7c94d) --


def old_fill_received_message(out: messaging_pb2.ReceivedMessage, popped: PoppedMessage) -> None:
    """convert.fill_received_message as it was, when popped.record was the proto."""
    record = cast(records_pb2.StoredMessage, popped.record)
    out.message_id = record.message_id
    out.topic = popped.topic
    out.queue_id = popped.queue_id
    out.offset = popped.offset
    out.body = record.body
    out.delivery_attempt = record.delivery_attempt
    out.receipt_handle = popped.receipt_handle
    _old_copy_record(record, out)
    set_time(out.invisible_until, popped.invisible_until_ms)
    if record.deliver_at_ms:
        set_time(out.deliver_time, record.deliver_at_ms)
    if record.born_host:
        out.born_host = record.born_host


def _old_copy_record(
    record: records_pb2.StoredMessage,
    out: messaging_pb2.ReceivedMessage | messaging_pb2.PulledMessage | admin_pb2.StoredMessage,
) -> None:
    set_time(out.born_time, record.born_time_ms)
    set_time(out.store_time, record.store_time_ms)
    if record.tag:
        out.tag = record.tag
    if record.keys:
        out.keys.extend(record.keys)
    if record.properties:
        out.properties.update(record.properties)
    if record.message_group:
        out.message_group = record.message_group
    if record.body_encoding:
        out.body_encoding = record.body_encoding


def old_v2_message(
    record: records_pb2.StoredMessage,
    *,
    topic: str,
    queue_id: int,
    offset: int,
    store_host: str,
    receipt_handle: str = "",
    invisible_s: float | None = None,
) -> pb.Message:
    body = delivered_body(record.body, record.body_encoding, record.message_id)
    props = pb.SystemProperties(
        message_id=record.message_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=pb.IDENTITY,
        message_type=(
            pb.FIFO if record.message_group else pb.DELAY if record.deliver_at_ms else pb.NORMAL
        ),
        store_host=store_host,
        queue_id=record.origin_queue_id if record.origin_topic else queue_id,
        queue_offset=record.origin_offset if record.origin_topic else offset,
        delivery_attempt=record.delivery_attempt,
    )
    set_time(props.born_timestamp, record.born_time_ms)
    set_time(props.store_timestamp, record.store_time_ms)
    if record.keys:
        props.keys.extend(record.keys)
    if record.born_host:
        props.born_host = record.born_host
    if receipt_handle:
        props.receipt_handle = receipt_handle
    if invisible_s is not None:
        props.invisible_duration.CopyFrom(duration(invisible_s))
    if record.tag:
        props.tag = record.tag
    if record.message_group:
        props.message_group = record.message_group
    if record.deliver_at_ms:
        set_time(props.delivery_timestamp, record.deliver_at_ms)
    if topic.startswith(DLQ_PREFIX) and record.origin_topic:
        props.dead_letter_queue.CopyFrom(
            pb.DeadLetterQueue(topic=record.origin_topic, message_id=record.message_id)
        )
    message = pb.Message(topic=pb.Resource(name=topic), system_properties=props, body=body)
    if record.properties:
        message.user_properties.update(record.properties)
    return message


# -- the measurement ------------------------------------------------------------------------


def main(number: int = 20_000, repeat: int = 15) -> str:
    compiled, _ = _compiled.state()
    if compiled:
        raise SystemExit(
            "bench.record_view_cost hands the proto to code typed for MessageRecord, which the "
            f"compiled build refuses: run it with {_compiled.PURE_ENV}=1"
        )
    record = stored_message()
    handle, until, host = "broker-a." + "h" * 74, 1_700_000_030_000, "127.0.0.1:8081"

    def us(call: Callable[[], object]) -> float:
        return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6

    # Before the view, PoppedMessage held the proto (built here the same way, as Any).
    def v1_old() -> None:
        popped = PoppedMessage("orders", 3, 1234, cast(Any, record), handle, until)
        old_fill_received_message(messaging_pb2.ReceivedMessage(), popped)

    def v1_view() -> None:
        popped = PoppedMessage("orders", 3, 1234, MessageRecord(record), handle, until)
        convert.fill_received_message(messaging_pb2.ReceivedMessage(), popped)

    # The proxy's converters read the same field names off the proto: the rewrite of the
    # converters apart from the view.
    def v1_new_on_proto() -> None:
        popped = PoppedMessage("orders", 3, 1234, cast(Any, record), handle, until)
        convert.fill_received_message(messaging_pb2.ReceivedMessage(), popped)

    def v2_new_on_proto() -> None:
        v2_convert.v2_message(
            cast(Any, record), topic="orders", queue_id=3, offset=1234, store_host=host,
            receipt_handle=handle, invisible_s=30.0,
        )  # fmt: skip

    def v2_old() -> None:
        old_v2_message(
            record, topic="orders", queue_id=3, offset=1234, store_host=host,
            receipt_handle=handle, invisible_s=30.0,
        )  # fmt: skip

    def v2_view() -> None:
        v2_convert.v2_message(
            MessageRecord(record), topic="orders", queue_id=3, offset=1234, store_host=host,
            receipt_handle=handle, invisible_s=30.0,
        )  # fmt: skip

    # Same answers both ways, or the timing compares different work.
    a, b = messaging_pb2.ReceivedMessage(), messaging_pb2.ReceivedMessage()
    old_fill_received_message(a, PoppedMessage("orders", 3, 1234, cast(Any, record), handle, until))
    convert.fill_received_message(
        b, PoppedMessage("orders", 3, 1234, MessageRecord(record), handle, until)
    )
    assert a == b, "v1 conversions differ"
    v2_args = {"topic": "orders", "queue_id": 3, "offset": 1234, "store_host": host}
    assert old_v2_message(record, **v2_args) == v2_convert.v2_message(  # type: ignore[arg-type]
        MessageRecord(record),
        **v2_args,  # type: ignore[arg-type]
    ), "v2 conversions differ"

    wrap, copy = us(lambda: MessageRecord(record)), us(lambda: CopiedRecord.of(record))
    v1 = (us(v1_old), us(v1_new_on_proto), us(v1_view))
    v2 = (us(v2_old), us(v2_new_on_proto), us(v2_view))
    rows: list[tuple[str, tuple[float | None, ...]]] = [
        ("the API value from the parsed record", (None, None, wrap, copy)),
        ("v1 ReceivedMessage (convert.fill_received_message)", (*v1, None)),
        ("v2 Message (rocketmq convert.v2_message)", (*v2, None)),
    ]
    lines = [
        "| us per message | proto, old converter | proto, new converter | MessageRecord view, "
        "new converter | frozen dataclass copy |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in rows:
        cells = [f"{v:.2f}" if v is not None else "" for v in values]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    lines.append("")
    for name, (old, on_proto, view) in (("v1", v1), ("v2", v2)):
        lines.append(
            f"{name}: view vs old converter on the proto {view - old:+.2f} us per message; "
            f"view vs new converter on the proto {view - on_proto:+.2f} us"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(main(args.number, args.repeat))
