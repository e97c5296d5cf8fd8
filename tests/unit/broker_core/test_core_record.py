"""MessageRecord: the read-only view of a stored message that the broker API delivers."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import MessageRecord

FIELDS: dict[str, Any] = {
    "message_id": "0A0B0C0D0E0F00000001",
    "body": b"\x00payload" * 128,
    "tag": "TagA",
    "keys": ("order-1", "order-2"),
    "properties": {"amount": "7", "region": "eu"},
    "born_time_ms": 1_700_000_000_001,
    "store_time_ms": 1_700_000_000_002,
    "delivery_attempt": 3,
    "origin_topic": "orders",
    "origin_queue_id": 2,
    "origin_offset": 41,
    "message_group": "g1",
    "deliver_at_ms": 1_700_000_060_000,
    "body_encoding": "zlib",
    "dedup_id": "refund-7",
    "born_host": "10.0.0.7",
}


def _stored(**changes: Any) -> records_pb2.StoredMessage:
    return records_pb2.StoredMessage(**{**FIELDS, **changes})


def test_every_stored_field_reads_through_the_view() -> None:
    record = MessageRecord(_stored())
    for name, value in FIELDS.items():
        got = getattr(record, name)
        assert (dict(got) if name == "properties" else got) == value, name
    assert isinstance(record.keys, tuple)
    assert record.stored_size == _stored().ByteSize()


def test_the_view_covers_every_field_of_the_stored_record() -> None:
    """A field added to StoredMessage must be added to the view (or left out on purpose)."""
    names = {f.name for f in records_pb2.StoredMessage.DESCRIPTOR.fields}
    assert names == set(FIELDS)
    # A read-only attribute of the class: a property, or its C form when the module is compiled.
    assert all(inspect.isdatadescriptor(getattr(MessageRecord, n)) for n in names)


def test_an_empty_record_reads_as_defaults() -> None:
    record = MessageRecord(records_pb2.StoredMessage())
    assert (record.message_id, record.body, record.tag) == ("", b"", "")
    assert (record.keys, dict(record.properties)) == ((), {})
    assert (record.delivery_attempt, record.deliver_at_ms, record.origin_topic) == (0, 0, "")


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_no_field_can_be_set_or_deleted(name: str) -> None:
    record = MessageRecord(_stored())
    with pytest.raises(AttributeError):
        setattr(record, name, FIELDS[name])
    with pytest.raises(AttributeError):
        delattr(record, name)
    assert getattr(record, name) is not None


def test_no_attribute_can_be_added() -> None:
    record = MessageRecord(_stored())
    with pytest.raises(AttributeError):
        record.extra = 1  # type: ignore[attr-defined]


def test_keys_and_properties_cannot_be_mutated() -> None:
    stored = _stored()
    record = MessageRecord(stored)
    with pytest.raises(TypeError):
        record.properties["amount"] = "8"  # type: ignore[index]
    with pytest.raises(TypeError):
        del record.properties["amount"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        record.properties.clear()  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        record.keys.append("k")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        record.keys[0] = "k"  # type: ignore[index]
    assert dict(stored.properties) == FIELDS["properties"]
    assert tuple(stored.keys) == FIELDS["keys"]


def test_from_bytes_round_trips_to_an_equal_record() -> None:
    record = MessageRecord(_stored())
    data = record.to_bytes()
    # Map entries serialize in no fixed order (it varies with PYTHONHASHSEED): compare the
    # parsed records, not the bytes.
    assert records_pb2.StoredMessage.FromString(data) == _stored()
    again = MessageRecord.from_bytes(data)
    assert again == record
    assert MessageRecord.from_bytes(again.to_bytes()) == record
    assert {n: getattr(again, n) for n in FIELDS if n != "properties"} == {
        n: v for n, v in FIELDS.items() if n != "properties"
    }
    assert MessageRecord.from_bytes(b"") == MessageRecord(records_pb2.StoredMessage())


def test_from_bytes_rejects_bytes_that_are_not_a_record() -> None:
    with pytest.raises(ValueError, match=r"3 bytes are not a stored message record"):
        MessageRecord.from_bytes(b"\xff\xff\xff")


def test_equality_is_by_value() -> None:
    assert MessageRecord(_stored()) == MessageRecord(_stored())
    # Map entries in another order are the same record.
    swapped = _stored(properties={"region": "eu", "amount": "7"})
    assert MessageRecord(swapped) == MessageRecord(_stored())
    assert MessageRecord(_stored(delivery_attempt=4)) != MessageRecord(_stored())
    assert MessageRecord(_stored(body=b"other")) != MessageRecord(_stored())
    assert MessageRecord(_stored()) != _stored()  # the view is not the proto
    with pytest.raises(TypeError):
        hash(MessageRecord(_stored()))


def test_repr_names_the_fields_and_not_the_body() -> None:
    text = repr(MessageRecord(_stored()))
    assert text.startswith("MessageRecord(message_id='0A0B0C0D0E0F00000001', body=<1024 bytes>")
    assert "payload" not in text
    parts = [
        "tag='TagA'",
        "delivery_attempt=3",
        "keys=('order-1', 'order-2')",
        "properties={'amount': '7', 'region': 'eu'}",
        "origin_topic='orders'",
    ]
    assert [p for p in parts if p not in text] == []
    assert repr(MessageRecord(records_pb2.StoredMessage())) == (
        "MessageRecord(message_id='', body=<0 bytes>)"
    )


def test_the_view_does_not_copy_the_record() -> None:
    """Wrapping is one reference: a field is read from the record when asked for."""
    stored = _stored()
    record = MessageRecord(stored)
    stored.tag = "TagB"  # the core never does this after wrapping; it shows there is no copy
    assert record.tag == "TagB"


def test_a_view_pickles_by_value() -> None:
    record = MessageRecord(_stored())
    assert pickle.loads(pickle.dumps(record)) == record
