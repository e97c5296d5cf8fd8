"""Receipt and recall handles: signed, named after their broker, and refused when forged,
cut or foreign; handles from before they named their broker still verify."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from popmq.broker_core.errors import (
    InvalidArgumentError,
    InvalidReceiptHandleError,
    ReceiptHandleLostError,
)
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle
from popmq.broker_core.timer import RecallCodec, RecallHandle
from popmq.proxy.rocketmq.codes import Code, code_of

SECRET = b"s" * 32
NAME = "broker-a"
PREFIX = NAME + "."
HANDLE = ReceiptHandle(
    group_id=7,
    topic_id=3,
    queue_id=5,
    offset=123_456_789,
    ck_id=(2 << 40) | 99,
    ck_index=4,
    deadline_ms=1_700_000_030_000,
)


def _raw(text: str) -> bytes:
    """The payload bytes of a handle (after its broker name, if it has one)."""
    payload = text.partition(".")[2] or text
    return base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))


def _text(raw: bytes, prefix: str = PREFIX) -> str:
    return prefix + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _codec(secret: bytes = SECRET, name: str = NAME) -> ReceiptCodec:
    return ReceiptCodec(secret, broker_name=name)


def _recall_codec(secret: bytes = SECRET, name: str = NAME) -> RecallCodec:
    return RecallCodec(secret, broker_name=name)


def test_handle_round_trips_every_field() -> None:
    codec = _codec()
    assert codec.decode(codec.encode(HANDLE)) == HANDLE


def test_handle_round_trips_extreme_values() -> None:
    codec = _codec()
    handle = ReceiptHandle(2**32 - 1, 2**32 - 1, 2**32 - 1, 2**64 - 1, 2**64 - 1, 2**16 - 1, 0)
    assert codec.decode(codec.encode(handle)) == handle


def test_handle_text_is_the_broker_name_then_url_safe_unpadded_base64() -> None:
    text = _codec().encode(HANDLE)
    assert text.startswith("broker-a.")
    assert len(text) == len("broker-a.") + 74  # 55 bytes: 39 of body, 16 of MAC
    assert text.isascii()
    assert not set(text[len(PREFIX) :]) & set("+/=.")


def test_a_handle_verifies_with_a_new_codec_over_the_same_secret() -> None:
    """The secret lives in the data dir, so handles survive a restart."""
    text = _codec().encode(HANDLE)
    assert _codec(bytes(SECRET)).decode(text) == HANDLE


# The payload is a 39-byte body (version, ids, offset, ck id, index, deadline) + 16-byte MAC.
@pytest.mark.parametrize("position", [0, 1, 5, 14, 30, 38, 39, 50, -1])
def test_handle_with_one_flipped_byte_is_refused(position: int) -> None:
    codec = _codec()
    raw = bytearray(_raw(codec.encode(HANDLE)))
    raw[position] ^= 0x01
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        codec.decode(_text(bytes(raw)))


def test_handle_moved_to_another_offset_is_refused() -> None:
    """A client cannot re-point a genuine handle at another message: the MAC covers it."""
    codec = _codec()
    raw = bytearray(_raw(codec.encode(HANDLE)))
    other = bytearray(_raw(codec.encode(ReceiptHandle(7, 3, 5, 1, HANDLE.ck_id, 4, 0))))
    raw[:39] = other[:39]  # body of another handle, MAC of this one
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        codec.decode(_text(bytes(raw)))


@pytest.mark.parametrize("cut", [1, 4, 16, 40])
def test_truncated_handle_is_refused(cut: int) -> None:
    codec = _codec()
    text = codec.encode(HANDLE)
    with pytest.raises(InvalidReceiptHandleError, match="malformed"):
        codec.decode(text[:-cut])


def test_handle_with_extra_bytes_is_refused() -> None:
    codec = _codec()
    with pytest.raises(InvalidReceiptHandleError, match="wrong length"):
        codec.decode(_text(_raw(codec.encode(HANDLE)) + b"\x00"))
    with pytest.raises(InvalidReceiptHandleError, match="wrong length"):
        codec.decode(codec.encode(HANDLE) + "A")


@pytest.mark.parametrize("text", ["not a handle!", "%%%%", "A", "caf\u00e9-\u2603", "====", "  "])
def test_non_base64_handle_is_refused(text: str) -> None:
    with pytest.raises(InvalidReceiptHandleError, match="malformed"):
        _codec().decode(text)


def test_empty_handle_is_refused() -> None:
    with pytest.raises(InvalidReceiptHandleError, match="empty"):
        _codec().decode("")


def test_handle_signed_with_another_secret_is_refused() -> None:
    text = _codec(b"t" * 32).encode(HANDLE)
    with pytest.raises(InvalidReceiptHandleError, match="another popmq server"):
        _codec().decode(text)


def test_invalid_handle_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _codec().decode("x")
    assert info.value.code == "INVALID_ARGUMENT"


# -- one spelling per handle ------------------------------------------------------------------

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_JUNK = [" ", "\n", "\t", "=", ".", "!", "+", "/", "\x00", "\u00e9", "A", "-"]


# Inserted into the broker name, a name character makes another broker's name.
_REFUSED = r"malformed|was issued by broker '"


def _positions(text: str) -> list[int]:
    """The ends, both sides of the separator, the middle of the payload."""
    dot = text.find(".")
    return sorted({0, 1, dot, dot + 1, len(text) // 2, len(text) - 1, len(text)} - {-1})


def _with_both_urlsafe_chars(encode: Callable[[int], str]) -> str:
    """A genuine handle whose payload holds both "-" and "_" (so "+" and "/" can stand in)."""
    for n in range(10_000):
        payload = encode(n).partition(".")[2]
        if "-" in payload and "_" in payload:
            return payload
    raise AssertionError("no handle with both - and _ in 10,000 tries")


def test_every_other_last_character_of_a_handle_is_refused() -> None:
    """The last character carries 4 unused bits: 15 other spellings decoded the same bytes."""
    codec = _codec()
    text = codec.encode(HANDLE)
    variants = [text[:-1] + c for c in _ALPHABET if c != text[-1]]
    assert len(variants) == 63
    for variant in variants:
        with pytest.raises(
            InvalidReceiptHandleError,
            match=r"^receipt handle (is malformed|signature does not match)",
        ):
            codec.decode(variant)
    assert codec.decode(text) == HANDLE


@pytest.mark.parametrize("junk", _JUNK)
def test_a_handle_with_an_inserted_character_is_refused(junk: str) -> None:
    codec = _codec()
    text = codec.encode(HANDLE)
    for at in _positions(text):
        with pytest.raises(InvalidReceiptHandleError, match=_REFUSED):
            codec.decode(text[:at] + junk + text[at:])


def test_a_handle_spelled_with_the_standard_alphabet_is_refused() -> None:
    codec = _codec()
    payload = _with_both_urlsafe_chars(
        lambda n: codec.encode(HANDLE._replace(offset=n)),
    )
    for variant in (PREFIX + payload.replace("-", "+"), PREFIX + payload.replace("_", "/")):
        with pytest.raises(InvalidReceiptHandleError, match="malformed"):
            codec.decode(variant)


RECALL = RecallHandle(topic_id=3, due_ms=1_700_000_030_000, seq=42)


def test_recall_handle_round_trips_and_has_one_spelling() -> None:
    codec = _recall_codec()
    text = codec.encode(RECALL)
    assert codec.decode(text) == RECALL
    for variant in [text[:-1] + c for c in _ALPHABET if c != text[-1]]:
        with pytest.raises(
            InvalidArgumentError, match=r"^recall_handle (is malformed|signature does not match)"
        ):
            codec.decode(variant)


@pytest.mark.parametrize("junk", _JUNK)
def test_a_recall_handle_with_an_inserted_character_is_refused(junk: str) -> None:
    codec = _recall_codec()
    text = codec.encode(RECALL)
    for at in _positions(text):
        with pytest.raises(InvalidArgumentError, match=_REFUSED):
            codec.decode(text[:at] + junk + text[at:])


def test_a_recall_handle_spelled_with_the_standard_alphabet_is_refused() -> None:
    codec = _recall_codec()
    payload = _with_both_urlsafe_chars(lambda n: codec.encode(RecallHandle(3, n, n)))
    for variant in (PREFIX + payload.replace("-", "+"), PREFIX + payload.replace("_", "/")):
        with pytest.raises(InvalidArgumentError, match="recall_handle is malformed"):
            codec.decode(variant)


def test_a_lost_delivery_is_an_invalid_receipt_handle_for_rocketmq_clients() -> None:
    lost = ReceiptHandleLostError("no longer tracked")
    assert lost.code == "FAILED_PRECONDITION"
    assert code_of(lost) == Code.INVALID_RECEIPT_HANDLE


# -- handles name their broker ------------------------------------------------------------------


def test_a_handle_of_another_broker_is_refused_naming_both_brokers() -> None:
    text = _codec(name="broker-b").encode(HANDLE)
    with pytest.raises(InvalidReceiptHandleError) as info:
        _codec().decode(text)
    assert str(info.value).startswith(
        "receipt handle was issued by broker 'broker-b'; this is broker 'broker-a'"
    )
    assert info.value.code == "INVALID_ARGUMENT"
    assert code_of(info.value) == Code.INVALID_RECEIPT_HANDLE


def test_a_handle_renamed_to_this_broker_is_refused() -> None:
    """The MAC covers the name: a handle of broker-b cannot be relabelled as broker-a's,
    even between brokers sharing a secret."""
    text = _codec(name="broker-b").encode(HANDLE)
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        _codec().decode(PREFIX + text.partition(".")[2])


def test_a_name_and_a_body_cannot_trade_bytes() -> None:
    """The name is length-prefixed under the MAC: broker "ab" with a body is not broker
    "a" with "b" + that body."""
    short, long = _codec(name="a"), _codec(name="ab")
    assert short.decode(short.encode(HANDLE)) == HANDLE
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        short.decode("a." + long.encode(HANDLE).partition(".")[2])


def test_a_handle_with_a_malformed_broker_name_is_malformed() -> None:
    payload = _codec().encode(HANDLE).partition(".")[2]
    for name in ("", "bro ker", "bro%ker", "b" * 65, "bröker"):
        with pytest.raises(InvalidReceiptHandleError, match="malformed"):
            _codec().decode(f"{name}.{payload}")


@pytest.mark.parametrize("name", ["", "a b", "a.b", "50%", "x" * 65, "café"])
def test_a_codec_refuses_a_broker_name_outside_the_alphabet(name: str) -> None:
    with pytest.raises(ValueError, match="broker name"):
        ReceiptCodec(SECRET, broker_name=name)
    with pytest.raises(ValueError, match="broker name"):
        RecallCodec(SECRET, broker_name=name)


def test_the_longest_broker_name_is_64_characters() -> None:
    codec = _codec(name="b" * 64)
    text = codec.encode(HANDLE)
    assert len(text) == 64 + 1 + 74
    assert codec.decode(text) == HANDLE


# -- handles issued before handles named their broker (version 2 receipts, version 1 recalls) --

# Captured from main at 87672cd (ReceiptCodec(SECRET).encode(HANDLE) and
# RecallCodec(SECRET).encode(RECALL)): the layouts every broker issued until then.
LEGACY_RECEIPT = "AgAAAAcAAAADAAAABQAAAAAHW80VAAACAAAAAGMABAAAAYvP5d0wd0x7E3sVpikocOeC8x6P2w"
LEGACY_RECALL = "AQAAAAMAAAGLz-XdMAAAAAAAAAAqbzDsVtuXVVCdre5i"


def test_a_handle_issued_before_names_still_verifies() -> None:
    assert _codec().decode(LEGACY_RECEIPT) == HANDLE
    # whatever the broker is called now: the secret is what tells its own handles
    assert _codec(name="broker-z").decode(LEGACY_RECEIPT) == HANDLE


def test_a_handle_issued_before_names_is_still_checked() -> None:
    with pytest.raises(InvalidReceiptHandleError, match="another popmq server"):
        _codec(b"t" * 32).decode(LEGACY_RECEIPT)
    raw = bytearray(_raw(LEGACY_RECEIPT))
    raw[20] ^= 0x01
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        _codec().decode(_text(bytes(raw), prefix=""))
    for variant in [LEGACY_RECEIPT[:-1] + c for c in _ALPHABET if c != LEGACY_RECEIPT[-1]]:
        with pytest.raises(InvalidReceiptHandleError, match=r"malformed|does not match"):
            _codec().decode(variant)


def test_old_and_new_layouts_cannot_stand_in_for_each_other() -> None:
    new_payload = _codec().encode(HANDLE).partition(".")[2]
    for text in (new_payload, PREFIX + LEGACY_RECEIPT):
        with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
            _codec().decode(text)


def test_a_recall_handle_names_its_broker_and_refuses_another() -> None:
    text = _recall_codec().encode(RECALL)
    assert text.startswith(PREFIX)
    assert len(text) == len(PREFIX) + 44
    foreign = _recall_codec(name="broker-b").encode(RECALL)
    with pytest.raises(InvalidArgumentError) as info:
        _recall_codec().decode(foreign)
    assert str(info.value).startswith(
        "recall_handle was issued by broker 'broker-b'; this is broker 'broker-a'"
    )
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(InvalidArgumentError, match="signature does not match"):
        _recall_codec().decode(PREFIX + foreign.partition(".")[2])


def test_a_stored_recall_handle_of_a_renamed_broker_decodes_with_any_issuer() -> None:
    """The message index keeps recall handles: after a rename the broker still reads its
    own, but only those its secret signed."""
    old_name = _recall_codec(name="broker-old").encode(RECALL)
    assert _recall_codec().decode(old_name, any_issuer=True) == RECALL
    other_secret = _recall_codec(b"t" * 32, name="broker-old").encode(RECALL)
    with pytest.raises(InvalidArgumentError, match="signature does not match"):
        _recall_codec().decode(other_secret, any_issuer=True)


def test_a_recall_handle_issued_before_names_still_verifies() -> None:
    assert _recall_codec().decode(LEGACY_RECALL) == RECALL
    assert _recall_codec().decode(LEGACY_RECALL, any_issuer=True) == RECALL
    with pytest.raises(InvalidArgumentError, match="signature does not match"):
        _recall_codec(b"t" * 32).decode(LEGACY_RECALL)
    with pytest.raises(InvalidArgumentError, match="signature does not match"):
        _recall_codec().decode(PREFIX + LEGACY_RECALL)


def test_a_checkpoints_handles_are_each_what_encode_writes() -> None:
    codec = ReceiptCodec(SECRET, broker_name=NAME)
    offsets = [0, 1, HANDLE.offset, 2**40 + 3, 2**64 - 1]
    shared = (HANDLE.group_id, HANDLE.topic_id, HANDLE.queue_id)
    texts = codec.encode_checkpoint(*shared, offsets, HANDLE.ck_id, HANDLE.deadline_ms)
    expected = [
        HANDLE._replace(offset=offset, ck_index=index) for index, offset in enumerate(offsets)
    ]
    assert texts == [codec.encode(handle) for handle in expected]
    assert [codec.decode(text) for text in texts] == expected
    assert codec.encode_checkpoint(*shared, [], HANDLE.ck_id, HANDLE.deadline_ms) == []


def _outcome(codec: ReceiptCodec, text: str) -> ReceiptHandle | str:
    try:
        return codec.decode(text)
    except InvalidReceiptHandleError as exc:
        return str(exc)


def _outcomes(codec: ReceiptCodec, texts: list[str]) -> list[ReceiptHandle | str]:
    return [h if isinstance(h, ReceiptHandle) else str(h) for h in codec.decode_all(texts)]


def test_handles_decoded_together_are_each_what_decode_answers() -> None:
    codec = _codec()
    good = codec.encode_checkpoint(7, 3, 5, [10, 11, 12], HANDLE.ck_id, HANDLE.deadline_ms)
    assert codec.decode_all(good) == [codec.decode(text) for text in good]
    raw = _raw(good[1])
    flipped = _text(raw[:20] + bytes([raw[20] ^ 1]) + raw[21:])
    last = good[2][:-1] + ("B" if good[2][-1] == "A" else "A")  # unused bits set, or not
    other = _codec(name="broker-b").encode(HANDLE)
    old = base64.urlsafe_b64encode(b"\x02" + raw[1:]).rstrip(b"=").decode()
    refused = [
        flipped,  # the MAC does not match: only this one is refused
        last,
        good[0][:-1] + "+",  # the standard alphabet
        good[0][:-1] + "é",  # not ASCII
        good[0][:-1] + "=",
        good[0][:-1],  # cut
        other,  # another broker's
        old,  # no broker name (and not signed as one)
        "",
    ]
    for bad in refused:
        texts = [good[0], bad, good[2]]
        assert _outcomes(codec, texts) == [_outcome(codec, t) for t in texts]
        assert isinstance(_outcomes(codec, texts)[1], str)
    # One refused by its MAC does not make the others be decoded one by one, or fail.
    assert _outcomes(codec, [good[0], flipped]) == [codec.decode(good[0]), _outcome(codec, flipped)]


# -- version 4: the handles of a run of adjacent offsets ---------------------------------------

# Captured from main at 29036fe (ReceiptCodec(SECRET, broker_name=NAME).encode_checkpoint(7,
# 3, 5, [10, 11, 12, 13], HANDLE.ck_id, HANDLE.deadline_ms)): the version 3 handles a broker
# of the previous build issued for such a run, in flight across an upgrade.
PREVIOUS_BUILD_RUN = [
    "broker-a.AwAAAAcAAAADAAAABQAAAAAAAAAKAAACAAAAAGMAAAAAAYvP5d0wUPwMz-Pjq1y6fP3AByVvCw",
    "broker-a.AwAAAAcAAAADAAAABQAAAAAAAAALAAACAAAAAGMAAQAAAYvP5d0wvWTr3JQ050v52uK-ADYwTA",
    "broker-a.AwAAAAcAAAADAAAABQAAAAAAAAAMAAACAAAAAGMAAgAAAYvP5d0wuZ6qqwxSECbA_iIYBeyh0Q",
    "broker-a.AwAAAAcAAAADAAAABQAAAAAAAAANAAACAAAAAGMAAwAAAYvP5d0wrNBHFt3lf_ngTh0fNEBEuQ",
]


def _run(codec: ReceiptCodec, first: int, count: int) -> list[str]:
    offsets = list(range(first, first + count))
    return codec.encode_checkpoint(7, 3, 5, offsets, HANDLE.ck_id, HANDLE.deadline_ms)


def _run_handle(first: int, index: int) -> ReceiptHandle:
    return HANDLE._replace(offset=first + index, ck_index=index)


def test_handles_of_the_previous_build_still_verify() -> None:
    expected = [_run_handle(10, index) for index in range(4)]
    assert [_codec().decode(text) for text in PREVIOUS_BUILD_RUN] == expected
    assert _codec().decode_all(PREVIOUS_BUILD_RUN) == expected


def test_a_runs_handles_are_version_4_and_each_verifies_alone_on_a_new_codec() -> None:
    """Three blocks of 32 handles; a new codec has kept no stream (a restart)."""
    texts = _run(_codec(), 2**40, 70)
    assert {_raw(text)[0] for text in texts} == {4}
    assert all(len(text) == len(PREFIX) + 74 for text in texts)
    expected = [_run_handle(2**40, index) for index in range(70)]
    assert [_codec().decode(text) for text in reversed(texts)] == expected[::-1]
    assert _codec().decode_all(texts) == expected


def test_short_runs_and_scattered_offsets_get_what_encode_writes() -> None:
    codec = _codec()
    for offsets in ([5], [5, 6, 7], [5, 6, 8, 9], [9, 8, 7, 6]):
        texts = codec.encode_checkpoint(7, 3, 5, offsets, HANDLE.ck_id, HANDLE.deadline_ms)
        expected = [
            HANDLE._replace(offset=offset, ck_index=index) for index, offset in enumerate(offsets)
        ]
        assert texts == [codec.encode(handle) for handle in expected]


@pytest.mark.parametrize("fresh", [False, True], ids=["kept", "restarted"])
def test_a_runs_handle_with_any_byte_flipped_is_refused(fresh: bool) -> None:
    codec = _codec()
    texts = _run(codec, 1_000, 40)
    checker = _codec() if fresh else codec
    for text in (texts[0], texts[33], texts[39]):
        raw = _raw(text)
        for position in range(len(raw)):
            for bit in (0x01, 0x80):
                edited = bytearray(raw)
                edited[position] ^= bit
                with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
                    checker.decode(_text(bytes(edited)))
        assert checker.decode(text) == _run_handle(1_000, texts.index(text))


def test_a_runs_handle_cannot_be_moved_within_its_run_or_take_anothers_mac() -> None:
    codec = _codec()
    texts = _run(codec, 500, 32)
    raws = [_raw(text) for text in texts]
    # Offset and index moved together keep the run's first offset: the MAC is another slice.
    moved = _raw(codec.encode(_run_handle(500, 3)._replace(offset=504, ck_index=4)))
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        codec.decode(_text(b"\x04" + moved[1:39] + raws[3][39:]))
    # A body of one handle with the MAC of another.
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        codec.decode(_text(raws[5][:39] + raws[6][39:]))
    # An index past the run's first offset (a negative first offset).
    early = _raw(codec.encode(HANDLE._replace(offset=2, ck_index=3)))
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        codec.decode(_text(b"\x04" + early[1:39] + raws[0][39:]))


def test_a_runs_handles_are_refused_by_another_secret_or_broker_name() -> None:
    texts = _run(_codec(), 0, 8)
    with pytest.raises(InvalidReceiptHandleError, match="another popmq server"):
        _codec(b"t" * 32).decode(texts[2])
    renamed = _codec(name="broker-b")
    with pytest.raises(InvalidReceiptHandleError, match="issued by broker 'broker-a'"):
        renamed.decode(texts[2])
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        renamed.decode("broker-b." + texts[2].partition(".")[2])
    with pytest.raises(InvalidReceiptHandleError, match="signature does not match"):
        _codec().decode(texts[2].partition(".")[2])  # no name: checked as version 2


def test_handles_of_many_runs_verify_after_the_kept_streams_start_over() -> None:
    codec = _codec()
    runs = [_run(codec, 100 * n, 4) for n in range(5000)]  # more runs than streams kept
    for n in (0, 2500, 4999):
        assert codec.decode_all(runs[n]) == [_run_handle(100 * n, i) for i in range(4)]
