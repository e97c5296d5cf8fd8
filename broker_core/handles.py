"""Which broker issued a handle, read without any broker's secret: what a proxy in front of
several brokers routes an ack, a ChangeInvisibleTime, a Nack or a recall by.

A receipt or recall handle, or a transaction id, reads `<broker name>.<payload>`
(handle_text.py). This reads the name and checks that the rest has the exact shape of a
handle the broker issues (length, one base64url spelling, version byte); only the issuing
broker can check the MAC. It is
what RocketMQ's proxy does with the brokerName field of its receipt handles, without the
route lookup.
"""

from __future__ import annotations

from popmq.broker_core import timer, transaction_id
from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.handle_text import SEPARATOR, HandleText, broker_name_problem
from popmq.broker_core.pop import receipt

# Payload text length -> (its codec, the version bytes of named and of unnamed handles).
# The receipt and recall payloads differ in length, so the length tells which kind it is.
_KINDS: dict[int, tuple[HandleText, tuple[int, ...], int]] = {
    # A named receipt handle is MACed alone (3) or as one of a run of adjacent offsets (4).
    receipt.TEXT.chars: (
        receipt.TEXT,
        (receipt.VERSION, receipt.VERSION_RUN),
        receipt.VERSION_UNNAMED,
    ),
    timer.TEXT.chars: (timer.TEXT, (timer.VERSION,), timer.VERSION_UNNAMED),
    # Transaction ids were named from the start: no unnamed version (-1 matches no byte).
    transaction_id.TEXT.chars: (transaction_id.TEXT, (transaction_id.VERSION,), -1),
}
_MALFORMED = (
    "handle is malformed: not a receipt or recall handle a popmq broker issued; pass it "
    "exactly as received"
)


def issuer_of(text: str) -> str | None:
    """The name of the broker that issued the receipt or recall handle (or transaction id)
    `text`.

    None for a handle issued before handles named their broker: only the broker whose secret
    signed it accepts it (in the embedded mode, the only broker). Raises InvalidArgumentError
    when `text` has not the exact shape of a handle (junk, an altered spelling, another
    version), so a router refuses it instead of guessing a broker.
    """
    issuer, separator, payload = text.rpartition(SEPARATOR)
    kind = _KINDS.get(len(payload))
    if kind is None:
        raise InvalidArgumentError(_MALFORMED)
    codec, named, unnamed = kind
    try:
        raw = codec.decode(payload.encode())
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(_MALFORMED) from exc
    if raw is None:
        raise InvalidArgumentError(_MALFORMED)
    if not separator:
        if raw[0] != unnamed:
            raise InvalidArgumentError(_MALFORMED)
        return None
    if raw[0] not in named or broker_name_problem(issuer) is not None:
        raise InvalidArgumentError(_MALFORMED)
    return issuer
