"""topology.issuers: each ack handle's broker, or its error, as issuer reads it alone."""

from __future__ import annotations

import pytest

from popmq.broker_core import InvalidReceiptHandleError
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle
from popmq.cluster.topology import issuer, issuers, one_issuer

SECRET = b"s" * 32
LEGACY_RECEIPT = "AgAAAAcAAAADAAAABQAAAAAHW80VAAACAAAAAGMABAAAAYvP5d0wd0x7E3sVpikocOeC8x6P2w"


def _receipt(name: str, offset: int) -> str:
    handle = ReceiptHandle(7, 3, 5, offset, (2 << 40) | 99, 4, 1_700_000_030_000)
    return ReceiptCodec(SECRET, broker_name=name).encode(handle)


def _alone(handle: str) -> str | tuple[type, str]:
    try:
        return issuer(handle)
    except InvalidReceiptHandleError as error:
        return (type(error), str(error))


def _together(handles: list[str]) -> list[str | tuple[type, str]]:
    return [
        found if isinstance(found, str) else (type(found), str(found)) for found in issuers(handles)
    ]


def test_a_pops_handles_name_their_brokers_in_order() -> None:
    handles = [_receipt("b1", n) for n in range(32)] + [_receipt("b2", 1), _receipt("b1", 99)]
    assert issuers(handles) == ["b1"] * 32 + ["b2", "b1"]


@pytest.mark.parametrize(
    "bad",
    ["", "junk", LEGACY_RECEIPT, "b1." + LEGACY_RECEIPT, "bad name." + "A" * 74, "b1." + "A" * 74],
)
def test_a_bad_handle_gets_its_own_error_and_the_others_their_broker(bad: str) -> None:
    handles = [_receipt("b1", 1), bad, _receipt("b2", 2)]
    assert _together(handles) == [_alone(h) for h in handles]
    found = issuers(handles)
    assert found[0] == "b1" and found[2] == "b2"
    assert isinstance(found[1], InvalidReceiptHandleError)


def test_one_issuer_names_the_broker_of_a_pops_handles_and_nothing_else() -> None:
    one_pop = [_receipt("b1", n) for n in range(32)]
    assert one_issuer(one_pop) == "b1"
    assert one_issuer([*one_pop, _receipt("b2", 1)]) is None  # two brokers: by index
    assert one_issuer([*one_pop, "b1.junk"]) is None  # a bad one: each gets its own error
    assert one_issuer([*one_pop, LEGACY_RECEIPT]) is None
    assert one_issuer([]) is None
