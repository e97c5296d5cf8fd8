"""Receipt and recall handles in the layouts brokers issued before handles named their
broker, rebuilt here from the layout itself (not from today's codecs), so tests can check
that such handles stay valid on the broker that issued them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from pathlib import Path

from popmq.broker_core import issuer_of
from popmq.broker_core.data_dir import KEY_FILE
from popmq.broker_core.pop.receipt import ReceiptCodec
from popmq.broker_core.timer import RecallCodec


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def old_receipt_handle(data_dir: Path, handle: str) -> str:
    """The handle the broker of `data_dir` issued for this delivery before handles named
    their broker: version 2, the bare base64url payload, the MAC over the body alone."""
    secret = (data_dir / KEY_FILE).read_bytes()
    fields = ReceiptCodec(secret, broker_name=issuer_of(handle) or "-").decode(handle)
    body = struct.pack(">BIIIQQHQ", 2, *fields)
    return _text(body + hashlib.blake2b(body, key=secret, digest_size=16).digest())


def old_recall_handle(data_dir: Path, handle: str) -> str:
    """A recall handle in the layout before names: version 1, MAC over domain + body."""
    secret = (data_dir / KEY_FILE).read_bytes()
    fields = RecallCodec(secret, broker_name=issuer_of(handle) or "-").decode(handle)
    body = struct.pack(">BIQQ", 1, fields.topic_id, fields.due_ms, fields.seq)
    return _text(body + hmac.digest(secret, b"popmq-recall" + body, "sha256")[:12])


def renamed(handle: str, broker_name: str) -> str:
    """`handle` relabelled as issued by `broker_name` (its MAC then no longer matches)."""
    return f"{broker_name}.{handle.partition('.')[2]}"
