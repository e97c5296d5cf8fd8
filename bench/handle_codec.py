"""Cost and length of receipt and recall handles: encode, decode, and issuer_of.

``python -m bench.handle_codec [--number 20000] [--repeat 15] [--broker-name broker-a]``

Every popped message encodes one receipt handle and every ack decodes one, so their cost
is per message. Reported: the best of ``--repeat`` runs of ``--number`` calls each (the
least disturbed by other load), in microseconds per call, and each handle's length. The
handles of a pop's run of 32 (``encode_checkpoint``, and ``decode_all`` of them, the acks of
that pop, its stream kept as a broker keeps it) are reported per handle, with the codec's C
loops (where the build has them) and with its Python loops (``ReceiptCodec(native=False)``),
the two in turn.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import struct
import timeit
from collections.abc import Callable

from popmq.broker_core import issuer_of
from popmq.broker_core.pop import receipt as receipt_module
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle
from popmq.broker_core.timer import RecallCodec, RecallHandle

_SECRET = b"s" * 32
_HANDLE = ReceiptHandle(7, 3, 5, 123_456_789, (2 << 40) | 99, 4, 1_700_000_030_000)
_RECALL = RecallHandle(3, 1_700_000_030_000, 42)


def _unnamed(handle: ReceiptHandle) -> str:
    """A receipt handle in the layout before names (version 2, no broker name)."""
    body = struct.pack(">BIIIQQHQ", 2, *handle)
    mac = hashlib.blake2b(body, key=_SECRET, digest_size=16).digest()
    return base64.urlsafe_b64encode(body + mac).rstrip(b"=").decode()


def main(number: int = 20_000, repeat: int = 15, broker_name: str = "broker-a") -> str:
    receipts = ReceiptCodec(_SECRET, broker_name=broker_name)
    recalls = RecallCodec(_SECRET, broker_name=broker_name)
    receipt, recall, old = receipts.encode(_HANDLE), recalls.encode(_RECALL), _unnamed(_HANDLE)

    def us(call: Callable[[], object]) -> float:
        return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6

    python = ReceiptCodec(_SECRET, broker_name=broker_name, native=False)
    run = list(range(_HANDLE.offset, _HANDLE.offset + 32))
    fields = (_HANDLE.group_id, _HANDLE.topic_id, _HANDLE.queue_id)
    shared = (_HANDLE.ck_id, _HANDLE.deadline_ms)

    def per_handle(codec: ReceiptCodec, decode: bool) -> float:
        texts = codec.encode_checkpoint(*fields, run, *shared)
        if decode:
            return us(lambda: codec.decode_all(texts)) / len(run)
        return us(lambda: codec.encode_checkpoint(*fields, run, *shared)) / len(run)

    loops = "C" if receipt_module._RUN_LOOPS is not None else "Python (no C here)"
    rows = [
        (f"run of 32: encode_checkpoint, {loops} loops, a handle", len(receipt), 0.0),
        ("run of 32: encode_checkpoint, Python loops, a handle", len(receipt), 0.0),
        (f"run of 32: decode_all, {loops} loops, a handle", len(receipt), 0.0),
        ("run of 32: decode_all, Python loops, a handle", len(receipt), 0.0),
    ]
    for _ in range(3):  # in turn, so that a burst of other load falls on both
        for at, (codec, decode) in enumerate(
            ((receipts, False), (python, False), (receipts, True), (python, True))
        ):
            cost = per_handle(codec, decode)
            name, chars, best = rows[at]
            rows[at] = (name, chars, cost if best == 0.0 else min(best, cost))
    rows += [
        ("receipt encode", len(receipt), us(lambda: receipts.encode(_HANDLE))),
        ("receipt decode", len(receipt), us(lambda: receipts.decode(receipt))),
        ("receipt decode, handle from before names", len(old), us(lambda: receipts.decode(old))),
        ("issuer_of(receipt handle)", len(receipt), us(lambda: issuer_of(receipt))),
        ("recall encode", len(recall), us(lambda: recalls.encode(_RECALL))),
        ("recall decode", len(recall), us(lambda: recalls.decode(recall))),
    ]
    lines = ["| operation | handle chars | us per call |", "|---|---:|---:|"]
    lines += [f"| {name} | {chars} | {cost:.2f} |" for name, chars, cost in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--broker-name", default="broker-a")
    args = parser.parse_args()
    print(main(args.number, args.repeat, args.broker_name))
