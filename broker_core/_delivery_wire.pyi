"""Types of _delivery_wire.c: one delivery's wire bytes (record_wire.py)."""

def received_message(
    stored: bytes,
    field_tag: bytes,
    topic_and_queue: bytes,
    offset: int,
    receipt_handle: bytes,
    invisible_until: bytes,
    /,
) -> bytes | None: ...
