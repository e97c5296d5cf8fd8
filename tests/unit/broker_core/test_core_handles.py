"""issuer_of: the broker a handle names, read without its secret, for a router."""

from __future__ import annotations

import random

import pytest

from popmq.broker_core import issuer_of
from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.handle_text import HandleText
from popmq.broker_core.handles import named_issuers
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle
from popmq.broker_core.timer import RecallCodec, RecallHandle

SECRET = b"s" * 32
HANDLE = ReceiptHandle(7, 3, 5, 123_456_789, (2 << 40) | 99, 4, 1_700_000_030_000)
RECALL = RecallHandle(topic_id=3, due_ms=1_700_000_030_000, seq=42)
# Captured from main at 87672cd, before handles named their broker (test_core_receipt.py).
LEGACY_RECEIPT = "AgAAAAcAAAADAAAABQAAAAAHW80VAAACAAAAAGMABAAAAYvP5d0wd0x7E3sVpikocOeC8x6P2w"
LEGACY_RECALL = "AQAAAAMAAAGLz-XdMAAAAAAAAAAqbzDsVtuXVVCdre5i"
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _receipt(name: str = "broker-a", secret: bytes = SECRET) -> str:
    return ReceiptCodec(secret, broker_name=name).encode(HANDLE)


def _recall(name: str = "broker-a") -> str:
    return RecallCodec(SECRET, broker_name=name).encode(RECALL)


@pytest.mark.parametrize("name", ["broker-a", "b", "shard_07", "B" * 64])
def test_the_issuer_of_a_receipt_and_a_recall_handle_is_read_without_the_secret(
    name: str,
) -> None:
    assert issuer_of(_receipt(name)) == name
    assert issuer_of(_receipt(name, secret=b"t" * 32)) == name
    assert issuer_of(_recall(name)) == name


@pytest.mark.parametrize("name", ["broker-a", "B" * 64])
def test_the_issuer_of_a_runs_handles_is_read_as_of_any_other(name: str) -> None:
    """A pop's run of adjacent offsets gets version 4 handles (receipt.py): routed alike."""
    codec = ReceiptCodec(SECRET, broker_name=name)
    texts = codec.encode_checkpoint(7, 3, 5, range(10, 20), HANDLE.ck_id, HANDLE.deadline_ms)
    assert [issuer_of(text) for text in texts] == [name] * 10
    assert named_issuers([*texts, _receipt(name)]) == [name] * 11
    with pytest.raises(InvalidArgumentError, match="handle is malformed"):
        issuer_of(texts[0].partition(".")[2])  # without its name: version 4, not 2


def test_a_handle_issued_before_names_has_no_issuer() -> None:
    assert issuer_of(LEGACY_RECEIPT) is None
    assert issuer_of(LEGACY_RECALL) is None


def _junk() -> list[str]:
    receipt, recall = _receipt(), _recall()
    payload = receipt.partition(".")[2]
    return [
        "",
        "x",
        ".",
        "broker-a.",
        "." + payload,  # an empty name
        "bro ker." + payload,
        "bro%ker." + payload,
        "b" * 65 + "." + payload,
        "br\u00f6ker." + payload,
        "a.b." + payload,
        receipt + "A",
        receipt[:-1],
        receipt + "\n",
        " " + receipt,
        recall[:-2],
        LEGACY_RECEIPT + "=",
        "broker-a." + LEGACY_RECEIPT,  # an old payload under a name: version 2, not 3
        payload,  # a new payload without its name: version 3, not 2
        "broker-a." + LEGACY_RECALL,
        recall.partition(".")[2],
        payload.replace("A", "+"),
        "A" * 74,  # the right shape, version byte 0
    ]


@pytest.mark.parametrize("text", _junk())
def test_junk_is_refused_rather_than_routed(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="handle is malformed") as info:
        issuer_of(text)
    assert info.value.code == "INVALID_ARGUMENT"


def test_a_second_spelling_of_the_same_bytes_is_refused() -> None:
    """One spelling per handle, as the brokers decode them: the unused low bits of the last
    character must be zero. (Last characters that change data bits spell other bytes: the
    shape is right and only the issuing broker's MAC can refuse them.)"""
    for text in (_receipt(), _recall(), LEGACY_RECEIPT, LEGACY_RECALL):
        payload_chars = len(text.rpartition(".")[2])
        unused = {0: 0, 2: 0b1111, 3: 0b11}[payload_chars % 4]
        last = _ALPHABET.index(text[-1])
        same_bytes = [
            c for c in _ALPHABET if c != text[-1] and (_ALPHABET.index(c) ^ last) <= unused
        ]
        assert len(same_bytes) == unused
        for c in same_bytes:
            with pytest.raises(InvalidArgumentError, match="handle is malformed"):
                issuer_of(text[:-1] + c)


def test_named_issuers_reads_a_batch_as_issuer_of_reads_each() -> None:
    receipts = [_receipt("broker-a"), _receipt("b"), _receipt("broker-a", secret=b"t" * 32)]
    assert named_issuers(receipts) == ["broker-a", "b", "broker-a"]
    assert named_issuers([_recall("shard_07"), _recall("b")]) == ["shard_07", "b"]
    assert named_issuers([_receipt("B" * 64)]) == ["B" * 64]


@pytest.mark.parametrize("text", [*_junk(), LEGACY_RECEIPT, LEGACY_RECALL, _recall()])
def test_named_issuers_leaves_a_batch_with_any_other_text_to_issuer_of(text: str) -> None:
    """Junk, a handle issued before names, or another kind than the first handle's: the
    batch is not read together, whatever the text's place in it."""
    valid = [_receipt(), _receipt("b")]
    for batch in ([text, *valid], [*valid, text], [valid[0], text, valid[1]]):
        assert named_issuers(batch) is None


def test_named_issuers_refuses_every_second_spelling_in_a_batch() -> None:
    receipt = _receipt()
    last = _ALPHABET.index(receipt[-1])
    for c in _ALPHABET:
        if c != receipt[-1] and (_ALPHABET.index(c) ^ last) <= 0b11:
            assert named_issuers([_receipt("b"), receipt[:-1] + c]) is None
    assert named_issuers([]) is None


def test_named_issuers_refuses_a_handle_whose_version_byte_is_another_kinds() -> None:
    """Only a handle's version byte is decoded in a batch: one whose payload is well spelled
    but starts with another version (here an unnamed handle's, named) is still refused."""
    unnamed = LEGACY_RECEIPT  # the version of handles issued before names
    assert named_issuers([_receipt(), "broker-a." + unnamed]) is None
    with pytest.raises(InvalidArgumentError, match="handle is malformed"):
        issuer_of("broker-a." + unnamed)


@pytest.mark.parametrize("raw_bytes", [40, 41, 42, 55])
def test_first_bytes_joined_reads_what_decode_joined_decodes(raw_bytes: int) -> None:
    """Each text's first byte, and None for the same texts decode_joined refuses: random
    texts, and texts with one character changed to anything a client could send."""
    rng = random.Random(raw_bytes)
    text = HandleText(raw_bytes)
    stride = -(-text.chars // 4) * 4
    fill = b"A" * (stride - text.chars)
    refused = 0
    for _ in range(500):
        texts = []
        for _ in range(rng.randint(1, 4)):
            spelled = bytearray(text.encode(rng.randbytes(raw_bytes)))
            if rng.random() < 0.3:
                spelled[rng.randrange(len(spelled))] = rng.choice(b"-_+/=A.z\x80 ")
            texts.append(bytes(spelled))
        encoded = b"".join(t + fill for t in texts)
        decoded = text.decode_joined(encoded, stride)
        if decoded is None:
            refused += 1
            assert text.first_bytes_joined(encoded, stride) is None
        else:
            step = stride // 4 * 3
            firsts = bytes(decoded[i] for i in range(0, step * len(texts), step))
            assert text.first_bytes_joined(encoded, stride) == firsts
    assert refused  # both outcomes were checked
