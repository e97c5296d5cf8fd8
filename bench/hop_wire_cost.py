"""Per-message CPU of a pop answer across the hop: generated classes vs hop_wire's bytes.

``python -m bench.hop_wire_cost``

A 32-message PopResponse of 1 KiB records, encoded on the broker's side (a PoppedMessage
object per delivery, serialized; against `hop_wire.pop_response_wire`) and read on the
proxy's (parsed, each record parsed by `MessageRecord.from_bytes`; against
`hop_wire.popped_from_wire`, records left as bytes). CPU time (process_time) per message,
median of 5 interleaved repetitions of 3,000 answers; run it compiled and as Python.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from popmq import _compiled
from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker import wire as w
from popmq.broker.hop_wire import pop_response_wire, popped_from_wire
from popmq.broker_core import MessageRecord, PoppedMessage

_STORED = records_pb2.StoredMessage(
    message_id="01HXYZABCDEF0123456789",
    body=b"x" * 1024,
    tag="t",
    keys=["k1"],
    properties={"a": "b", "c": "d"},
    born_time_ms=1_700_000_000_000,
    store_time_ms=1_700_000_000_001,
    delivery_attempt=1,
    born_host="host-1",
).SerializeToString()
_POPPED = [
    PoppedMessage(
        "popack",
        i % 8,
        1000 + i,
        MessageRecord.from_bytes(_STORED),
        "b1~" + "h" * 60 + str(i),
        1_700_000_030_000,
    )
    for i in range(32)
]
_ANSWER = pop_response_wire(_POPPED)


def broker_generated() -> bytes:
    return pb.PopResponse(messages=[w.popped_to_pb(p) for p in _POPPED]).SerializeToString()


def broker_bytes() -> bytes:
    return pop_response_wire(_POPPED)


def proxy_generated() -> list[PoppedMessage]:
    response = pb.PopResponse.FromString(_ANSWER)
    return [
        PoppedMessage(
            m.topic,
            m.queue_id,
            m.offset,
            MessageRecord.from_bytes(m.record),
            m.receipt_handle,
            m.invisible_until_ms,
        )
        for m in response.messages
    ]


def proxy_bytes() -> list[PoppedMessage]:
    return popped_from_wire(_ANSWER)


def _us(run: Callable[[], object], answers: int = 3000) -> float:
    start = time.process_time()
    for _ in range(answers):
        run()
    return (time.process_time() - start) / answers / len(_POPPED) * 1e6


def main() -> None:
    cases = (broker_generated, broker_bytes, proxy_generated, proxy_bytes)
    samples: dict[str, list[float]] = {case.__name__: [] for case in cases}
    for _ in range(5):
        for case in cases:
            samples[case.__name__].append(_us(case))
    print(f"python -m bench.hop_wire_cost ({_compiled.state()[1]})")
    for name, values in samples.items():
        print(f"{name}: {statistics.median(values):.2f} us/msg")


if __name__ == "__main__":
    main()
