"""The C loops of a run's receipt handles (broker_core/pop/_receipt_runs.c) answer what
receipt.py's Python answers: the same texts, the same handles, the same refusals, and they
accept no text the Python refuses. Run where the build has them (`make test`); the pure
Python build (`make test-python`) runs receipt.py's own loops through test_core_receipt.py."""

from __future__ import annotations

import base64
import struct

import pytest

from popmq import _compiled
from popmq.broker_core.errors import InvalidReceiptHandleError
from popmq.broker_core.pop import receipt
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle

SECRET = b"s" * 32
NAME = "broker-a"
PREFIX = NAME + "."
CK_ID = (2 << 40) | 99
DEADLINE = 1_700_000_030_000
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

built = pytest.mark.skipif(
    receipt._RUN_LOOPS is None, reason="the C loops are not loaded (pure Python or not built)"
)


def _pair() -> tuple[ReceiptCodec, ReceiptCodec]:
    """A codec running the C loops, and one running receipt.py's, over the same secret."""
    return (
        ReceiptCodec(SECRET, broker_name=NAME),
        ReceiptCodec(SECRET, broker_name=NAME, native=False),
    )


def _run(codec: ReceiptCodec, first: int, count: int) -> list[str]:
    return codec.encode_checkpoint(7, 3, 5, list(range(first, first + count)), CK_ID, DEADLINE)


def _outcomes(codec: ReceiptCodec, texts: list[str]) -> list[ReceiptHandle | str]:
    return [h if isinstance(h, ReceiptHandle) else str(h) for h in codec.decode_all(texts)]


def _raw(text: str) -> bytes:
    payload = text.partition(".")[2]
    return base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))


def test_a_compiled_build_loads_the_c_loops() -> None:
    """Where the mypyc modules load compiled, so do the C loops: a build that dropped them
    would pass every other test on the Python loops."""
    if _compiled.state()[0]:
        assert receipt._RUN_LOOPS is not None
    else:
        pytest.skip(f"not compiled here: {_compiled.state()[1]}")


@built
@pytest.mark.parametrize("count", [4, 5, 31, 32, 33, 64, 65, 100, 256])
@pytest.mark.parametrize("first", [0, 2**40 + 7, 2**64 - 256])
def test_a_runs_texts_are_what_the_python_writes(first: int, count: int) -> None:
    native, python = _pair()
    texts = _run(native, first, count)
    assert texts == _run(python, first, count)
    assert {_raw(text)[0] for text in texts} == {receipt.VERSION_RUN}


@built
@pytest.mark.parametrize(
    "offsets",
    [
        list(range(2**64 - 3, 2**64 + 1)),  # the last offset does not fit 64 bits
        list(range(-1, 3)),  # a negative offset
        list(range(0, 65_537)),  # an index past 16 bits
    ],
    ids=["past-64-bits", "negative", "index-past-16-bits"],
)
def test_a_run_out_of_its_fields_ranges_raises_as_the_python_does(offsets: list[int]) -> None:
    raised: list[type[Exception]] = []
    for codec in _pair():
        with pytest.raises((OverflowError, struct.error)) as caught:
            codec.encode_checkpoint(7, 3, 5, offsets, CK_ID, DEADLINE)
        raised.append(caught.type)
    assert raised[0] is raised[1]


@built
def test_the_c_loops_check_the_handles_of_kept_runs_themselves() -> None:
    """The acks of this broker's pops: every handle accepted by C, none left to Python."""
    native, _ = _pair()
    texts = _run(native, 1_000, 70)
    assert receipt._RUN_LOOPS is not None
    found = receipt._RUN_LOOPS.verify(texts, PREFIX, native._streams, ReceiptHandle)
    expected = [ReceiptHandle(7, 3, 5, 1_000 + i, CK_ID, i, DEADLINE) for i in range(len(texts))]
    assert found == expected
    assert all(type(handle) is ReceiptHandle for handle in found)


def _edits(text: str) -> list[str]:
    """Every text one character away from `text` (each position, each character that could
    stand there or could not), and some of other lengths."""
    edited: list[str] = []
    for at in range(len(text)):
        for char in (*ALPHABET, "+", "/", "=", ".", "é", "\x00"):
            if char != text[at]:
                edited.append(text[:at] + char + text[at + 1 :])
    edited += [text[:-1], text + "A", text[1:], "x" + text, "", PREFIX, text.upper()]
    return edited


@built
def test_no_edited_text_is_accepted_and_each_is_refused_as_the_python_refuses() -> None:
    native, python = _pair()
    texts = _run(native, 500, 40)
    assert _run(python, 500, 40) == texts
    for text in (texts[0], texts[33], texts[39]):
        edits = _edits(text)
        assert receipt._RUN_LOOPS is not None
        accepted = receipt._RUN_LOOPS.verify(edits, PREFIX, native._streams, ReceiptHandle)
        assert accepted == [None] * len(edits)
        assert _outcomes(native, edits) == _outcomes(python, edits)


class _Text(str):
    """A str subclass: the C loops leave it to the Python, which accepts it."""


@built
def test_a_batch_mixing_every_kind_of_text_decodes_as_the_python_decodes() -> None:
    native, python = _pair()
    kept = _run(native, 10, 8)
    assert _run(python, 10, 8) == kept
    # Neither codec has kept these streams: another codec's pop (or a restart).
    elsewhere = _run(ReceiptCodec(SECRET, broker_name=NAME), 2_000, 40)
    single = native.encode(ReceiptHandle(7, 3, 5, 42, CK_ID, 0, DEADLINE))  # version 3
    scattered = native.encode_checkpoint(7, 3, 5, [1, 5, 9, 13], CK_ID, DEADLINE)
    other = _run(ReceiptCodec(SECRET, broker_name="broker-b"), 10, 4)
    forged = _run(ReceiptCodec(b"t" * 32, broker_name=NAME), 10, 4)
    raw = _raw(kept[3])
    flipped = base64.urlsafe_b64encode(raw[:45] + bytes([raw[45] ^ 1]) + raw[46:]).decode()
    batch = [
        *kept[:3],
        elsewhere[0],
        single,
        *scattered[:2],
        PREFIX + flipped.rstrip("="),
        other[0],
        forged[1],
        _Text(kept[3]),
        kept[3].partition(".")[2],  # no name: read as an old (version 2) handle
        *elsewhere[33:36],
        *kept[4:],
    ]
    assert _outcomes(native, batch) == _outcomes(python, batch)
    outcomes = _outcomes(native, batch)
    assert [type(o) for o in outcomes].count(str) == 4  # flipped, other, forged, no name
    # The streams both checked in Python are now kept by both: the next acks of that run
    # are C's on the native codec.
    assert native.decode_all(elsewhere[36:]) == python.decode_all(elsewhere[36:])
    assert receipt._RUN_LOOPS is not None
    assert None not in receipt._RUN_LOOPS.verify(
        elsewhere[32:], PREFIX, native._streams, ReceiptHandle
    )


@built
def test_an_index_past_its_offset_is_refused_as_forged() -> None:
    """The first offset of a run is the offset less the index: a handle whose index is past
    its offset names no run, and is refused by the Python, not accepted by C."""
    native, _ = _pair()
    texts = _run(native, 0, 8)
    raw = bytearray(_raw(texts[2]))
    raw[29:31] = (3).to_bytes(2, "big")  # index 3 at offset 2
    text = PREFIX + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        native.decode(text)
    assert isinstance(native.decode_all([text])[0], InvalidReceiptHandleError)
