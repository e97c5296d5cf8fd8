"""The BrokerService PopRequest a proxy sends (RemoteBroker.pop, RemoteBroker.pop_received).

Optional arguments travel as proto3 `optional` fields, unset when None: the broker defaults
and checks them. The client id rides once per request, never per message.
"""

from __future__ import annotations

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb


def pop_request(
    group: str,
    topic: str,
    *,
    max_messages: int | None = None,
    invisible_s: float | None = None,
    wait_s: float | None = None,
    filter_expression: str = "",
    filter_type: str = "tag",
    queue_id: int | None = None,
    max_bytes: int | None = None,
    client_id: str = "",
) -> pb.PopRequest:
    """BrokerAPI.pop's arguments (but `reserve`, which cannot cross to a broker) as a
    PopRequest."""
    request = pb.PopRequest(
        group=group,
        topic=topic,
        filter_expression=filter_expression,
        filter_type=filter_type,
        client_id=client_id,
    )
    if max_messages is not None:
        request.max_messages = max_messages
    if invisible_s is not None:
        request.invisible_s = invisible_s
    if wait_s is not None:
        request.wait_s = wait_s
    if queue_id is not None:
        request.queue_id = queue_id
    if max_bytes is not None:
        request.max_bytes = max_bytes
    return request
