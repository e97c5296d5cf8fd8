"""What a v2 call carries besides its request: the client id and namespace headers.

Every handler of the v2 front end reads these the same way, so they live here once.
"""

from __future__ import annotations

import grpc

from popmq.proxy.rocketmq import convert
from popmq.proxy.rocketmq.codes import Code, ProtocolError

CLIENT_ID = "x-mq-client-id"
"""The header official clients name themselves in (the key of their session)."""
NAMESPACE = "x-mq-namespace"
DEADLINE_MARGIN_S = 0.05
"""A long poll answers this long before the caller's deadline instead of overrunning it."""


def header(context: grpc.aio.ServicerContext, name: str) -> str:
    """The value of metadata header `name` ("" when the call has none)."""
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return str(value)
    return ""


def client_id(context: grpc.aio.ServicerContext) -> str:
    """The calling client's id ("" when it sent none)."""
    return header(context, CLIENT_ID)


def client_id_required() -> ProtocolError:
    """The error of a call that needs a client id and came without one."""
    return ProtocolError(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID} metadata header is required")


def require_client_id(context: grpc.aio.ServicerContext) -> str:
    """The calling client's id; CLIENT_ID_REQUIRED when it sent none."""
    found = client_id(context)
    if not found:
        raise client_id_required()
    return found


def check_namespace(context: grpc.aio.ServicerContext) -> None:
    """Refuse a namespace sent in the x-mq-namespace header, on every RPC.

    popmq has no namespaces. Some clients name theirs only in this header (the Node.js
    SimpleConsumer), others also in each resource (refused by convert); ignoring the
    header would let such a consumer read the un-namespaced topic of the same name.
    """
    namespace = header(context, NAMESPACE)
    if namespace:
        raise ProtocolError(Code.BAD_REQUEST, convert.namespace_refusal(namespace, NAMESPACE))
