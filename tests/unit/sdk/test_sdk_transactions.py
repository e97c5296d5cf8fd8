"""The SDK's transaction pieces that need no server: option checks, receipts without a
transaction, the wire forms of resolutions, and the proxy's refusal of what a producer may
not ask for."""

from __future__ import annotations

import asyncio

import pytest

from popmq import (
    AsyncProducer,
    HalfMessage,
    InvalidArgumentError,
    Producer,
    SendReceipt,
    TransactionInfo,
    TransactionResolution,
)
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import InvalidArgumentError as CoreInvalidArgumentError
from popmq.proxy import convert


def _checker(message: HalfMessage) -> TransactionResolution:
    return TransactionResolution.COMMIT


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"transaction_topics": ["orders"]}, ValueError, "needs a transaction_checker"),
        ({"transaction_checker": 42}, TypeError, "must be callable"),
        (
            {"transaction_checker": _checker, "transaction_topics": "orders"},
            TypeError,
            "not a str",
        ),
        ({"transaction_check_delay_s": 0}, ValueError, "positive"),
        ({"producer_group": "bad group"}, InvalidArgumentError, "producer_group"),
    ],
)
def test_bad_transaction_options_are_refused_at_construction(
    options: dict[str, object], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        Producer("127.0.0.1:1", **options)  # type: ignore[arg-type]


def test_ending_a_receipt_that_was_not_sent_in_a_transaction_is_refused() -> None:
    async def run() -> None:
        async with AsyncProducer("127.0.0.1:1") as producer:
            with pytest.raises(InvalidArgumentError, match="not sent in a transaction"):
                await producer.end_transaction(SendReceipt("m1", "orders", 0, 3), commit=True)

    asyncio.run(run())


def test_a_transaction_from_the_wire_keeps_its_state_source_and_times() -> None:
    wire = messaging_pb2.Transaction(
        transaction_id="broker-a.x",
        topic="orders",
        message_id="m1",
        state=messaging_pb2.TRANSACTION_STATE_DISCARDED,
        checks=15,
        resolved_by=messaging_pb2.TRANSACTION_SOURCE_CHECK_MAX,
        offset=-1,
        discard_offset=7,
    )
    wire.create_time.FromMilliseconds(1_000)
    wire.resolve_time.FromMilliseconds(2_000)
    info = TransactionInfo.from_proto(wire)
    assert (info.state, info.resolved_by, info.checks) == ("discarded", "check_max", 15)
    assert info.next_check_time is None and info.resolve_time is not None
    assert info.resolve_time.timestamp() == 2.0 and info.discard_offset == 7


def test_a_producer_cannot_resolve_as_an_operator_or_leave_the_resolution_out() -> None:
    with pytest.raises(CoreInvalidArgumentError, match=r"AdminService\.ResolveTransaction"):
        convert.client_source(messaging_pb2.TRANSACTION_SOURCE_ADMIN)
    with pytest.raises(CoreInvalidArgumentError, match="say which"):
        convert.commit_flag(messaging_pb2.TRANSACTION_RESOLUTION_UNSPECIFIED)
    assert convert.client_source(messaging_pb2.TRANSACTION_SOURCE_UNSPECIFIED) == "client"
    assert convert.commit_flag(messaging_pb2.TRANSACTION_RESOLUTION_ROLLBACK) is False
