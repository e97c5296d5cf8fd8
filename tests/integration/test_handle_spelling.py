"""A receipt handle has one spelling over the wire too (issue 20): no sibling strings ack."""

from __future__ import annotations

import dataclasses

import pytest

from popmq import Admin, InvalidArgumentError, Producer, SimpleConsumer

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def test_ack_with_another_spelling_of_a_real_handle_is_refused(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("t", queues=1)
        admin.create_group("g")
        producer.send("t", b"m")
    with SimpleConsumer(endpoint, group="g", topic="t") as consumer:
        [message] = consumer.receive(invisible_duration_s=60, wait_s=5)
        handle = message.receipt_handle
        variants = [handle[:-1] + c for c in _ALPHABET if c != handle[-1]]
        variants += [handle[:10] + junk + handle[10:] for junk in (" ", ".", "=", "\n")]
        for variant in variants:
            with pytest.raises(InvalidArgumentError, match=r"^receipt handle"):
                consumer.ack(dataclasses.replace(message, receipt_handle=variant))
        consumer.ack(message)  # the one true spelling still acks
        assert consumer.receive(invisible_duration_s=60, wait_s=0) == []
