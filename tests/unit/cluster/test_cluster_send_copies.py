"""The cluster send path's message copies are what dataclasses.replace would make."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from popmq.broker_core import NewMessage
from popmq.cluster.cluster_send import _variant, _with_queue


def _every_field_set() -> NewMessage:
    """A message whose every field holds a value other than its default, whatever fields
    NewMessage has now."""
    values: dict[str, Any] = {
        "topic": "orders",
        "body": b"\x00body",
        "tag": "t1",
        "keys": ("k1", "k2"),
        "properties": {"p": "v"},
        "message_id": "01ABC",
        "born_time_ms": 1_700_000_000_123,
        "message_group": "g-7",
        "deliver_at_ms": 1_700_000_060_000,
        "dedup_id": "dedup-1",
        "body_encoding": "zlib",
        "born_host": "host-1",
        "queue_id": 3,
    }
    names = {f.name for f in dataclasses.fields(NewMessage)}
    missing = names - values.keys()
    assert not missing, f"give the new NewMessage fields {sorted(missing)} a value here"
    return NewMessage(**values)


def _as_dict(message: NewMessage) -> dict[str, Any]:
    return {f.name: getattr(message, f.name) for f in dataclasses.fields(NewMessage)}


@pytest.mark.parametrize(("message_id", "queue_id"), [("02NEW", 5), ("02NEW", None), ("", 0)])
def test_variant_copies_every_field_as_replace_does(message_id: str, queue_id: int | None) -> None:
    message = _every_field_set()
    copy = _variant(message, message_id, queue_id)
    expected = dataclasses.replace(message, message_id=message_id, queue_id=queue_id)
    assert type(copy) is NewMessage
    assert _as_dict(copy) == _as_dict(expected)
    assert copy is not message
    assert message.message_id == "01ABC"  # the original is left as it was
    assert message.queue_id == 3


def test_with_queue_keeps_the_message_already_on_its_queue() -> None:
    message = _every_field_set()
    assert _with_queue(message, 3) is message
    moved = _with_queue(message, 4)
    assert _as_dict(moved) == _as_dict(dataclasses.replace(message, queue_id=4))
