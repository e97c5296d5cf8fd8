"""Cost and length of receipt and recall handles: encode, decode, and issuer_of.

``python -m bench.handle_codec [--number 20000] [--repeat 15] [--broker-name broker-a]``

Every popped message encodes one receipt handle and every ack decodes one, so their cost
is per message. Reported: the best of ``--repeat`` runs of ``--number`` calls each (the
least disturbed by other load), in microseconds per call, and each handle's length.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import struct
import timeit
from collections.abc import Callable

from popmq.broker_core import issuer_of
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

    rows = [
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
