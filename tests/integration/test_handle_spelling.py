"""Handles over the wire (popmq.v1): one spelling (no sibling strings ack), the broker's
name in every handle, another broker's refused, handles from before names still valid."""

from __future__ import annotations

import dataclasses

import pytest

from popmq import Admin, InvalidArgumentError, Producer, SimpleConsumer
from popmq.broker_core import issuer_of
from tests.old_handles import old_recall_handle, old_receipt_handle, renamed
from tests.support.server_thread import ServerThread

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


def test_handles_name_the_broker_another_brokers_are_refused_old_ones_still_work(
    server: ServerThread, endpoint: str
) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("t", queues=1)
        admin.create_group("g")
        producer.send("t", b"a")
        producer.send("t", b"b")
    with SimpleConsumer(endpoint, group="g", topic="t") as consumer:
        first, second = consumer.receive(max_messages=2, invisible_duration_s=60, wait_s=5)
        assert issuer_of(first.receipt_handle) == "broker-a"
        foreign = dataclasses.replace(
            first, receipt_handle=renamed(first.receipt_handle, "broker-b")
        )
        with pytest.raises(
            InvalidArgumentError,
            match=r"^receipt handle was issued by broker 'broker-b'; this is broker 'broker-a'",
        ):
            consumer.ack(foreign)
        old = old_receipt_handle(server.data_dir, first.receipt_handle)
        assert issuer_of(old) is None
        consumer.ack(dataclasses.replace(first, receipt_handle=old))
        changed = dataclasses.replace(
            second, receipt_handle=old_receipt_handle(server.data_dir, second.receipt_handle)
        )
        consumer.change_invisible_duration(changed, 30)
        assert issuer_of(changed.receipt_handle) == "broker-a"
        consumer.ack(changed)
        assert consumer.receive(invisible_duration_s=60, wait_s=0) == []


def test_recall_handles_name_the_broker_and_old_ones_still_recall(
    server: ServerThread, endpoint: str
) -> None:
    server.call(lambda: server.broker.create_topic("later", 1, message_type="delay"))
    with Producer(endpoint) as producer:
        kept = producer.send("later", b"kept", delay_s=600)
        dropped = producer.send("later", b"dropped", delay_s=600)
        assert issuer_of(kept.recall_handle) == "broker-a"
        with pytest.raises(InvalidArgumentError, match="issued by broker 'broker-b'"):
            producer.recall("later", renamed(kept.recall_handle, "broker-b"))
        old = old_recall_handle(server.data_dir, dropped.recall_handle)
        assert producer.recall("later", old) == dropped.message_id
