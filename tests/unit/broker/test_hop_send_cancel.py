"""A HopSend frame given up while its sends wait for their write (the proxy's stream ended):
the sends are still written once, and the proxy's retry on a new stream is their duplicate."""

from __future__ import annotations

import asyncio

from popmq.broker import BrokerServicer, hop_wire, send_wire
from popmq.broker_core import NewMessage
from popmq.broker_core.send import SendTicket
from tests.unit.conftest import OpenBroker, hold_fsync


def _frame(request_id: int, message: NewMessage) -> bytes:
    send = send_wire.send_request_wire([message])
    part = hop_wire.hop_answer(request_id, hop_wire.HOP_SEND, send)
    return send_wire.frame_wire(send_wire.REQUEST_FRAME_KEY, [part])


def _results_of(answer: bytes | None) -> bytes:
    assert answer is not None
    (part,) = send_wire.frame_from_wire(send_wire.ANSWER_FRAME_KEY, answer) or []
    _request_id, field, payload = hop_wire.hop_answer_from_wire(part)
    assert field == hop_wire.HOP_SEND, payload
    return payload


def test_a_retry_of_a_given_up_frame_before_its_write_is_its_duplicate(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            gate, earlier = await hold_fsync(broker, "orders")
            servicer = BrokerServicer(broker)
            first = asyncio.ensure_future(
                servicer._hop_send_frame(_frame(1, NewMessage("orders", b"first", message_id="M")))
            )
            for _ in range(3):
                await asyncio.sleep(0)
            first.cancel()  # the stream ended before the answer
            retry = asyncio.ensure_future(
                servicer._hop_send_frame(_frame(2, NewMessage("orders", b"retry", message_id="M")))
            )
            for _ in range(3):
                await asyncio.sleep(0)
            gate.set()
            (result,) = send_wire.send_results_from_wire(_results_of(await retry))
            assert result.duplicate and result.message_id == "M"
            for ticket in earlier:
                assert isinstance(ticket, SendTicket)
                await ticket.results()
            stored = await broker.peek("orders", queue_id=0, max_messages=8)
            assert [m.record.body for m in stored] == [b"x", b"y", b"first"]

    asyncio.run(scenario())
