"""How the security gate refuses an apache.rocketmq.v2 call, and whose client the call is.

Official clients read outcomes only from the `Status` inside each response (gRPC status
OK), so a refusal is the method's response with `status` set: Code UNAUTHORIZED (40100) or
FORBIDDEN (40300) (codes.py). The gate (popmq.security.gate) wraps every method the same
way and asks this dialect only how to tell the refusal, and which client a call names: its
`x-mq-client-id` header (metadata.py), which the gate binds to the first user that uses it.
The server gives the gate `ROCKETMQ` (PopMQServer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from popmq._gen.apache.rocketmq.v2 import service_pb2 as v2
from popmq.broker_core import PopMQError
from popmq.proxy.rocketmq import codes, metadata
from popmq.security.gate import STATUS_ANSWERS

PREFIX = "/apache.rocketmq.v2."
"""Methods whose refusals are answered inside the response (RocketMQ 5 clients)."""


class _ResponseAnswers:
    """The method's response with `status` (gRPC status OK)."""

    def __init__(self, method: str) -> None:
        name = method.rpartition("/")[2]
        found = v2.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name.get(name)
        self._response: Callable[..., Message] | None = (
            None if found is None else getattr(v2, found.output_type.name)
        )

    async def answer(self, context: grpc.aio.ServicerContext, error: PopMQError) -> Any:
        if self._response is None:  # a method of another v2 service: a status will do
            return await STATUS_ANSWERS.answer(context, error)
        return self._response(status=codes.status_of(error))


class RocketMQDialect:
    """The gate's `Dialect` of apache.rocketmq.v2."""

    prefix = PREFIX

    def answers(self, method: str) -> _ResponseAnswers:
        return _ResponseAnswers(method)

    def client_id(self, context: grpc.aio.ServicerContext, request: Message | None) -> object:
        for key, value in context.invocation_metadata() or ():
            if key == metadata.CLIENT_ID:
                return value
        return ""


ROCKETMQ = RocketMQDialect()
