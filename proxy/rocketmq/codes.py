"""Errors of the v2 front end and their apache.rocketmq.v2.Code.

RocketMQ's proxy answers business errors inside the response (`Status{code, message}`) with
the gRPC status OK, and official clients read only that Status. So the v2 servicer never
aborts a call for a broker error: it maps the error here, once, to the Code clients expect.
"""

from __future__ import annotations

from collections.abc import Mapping

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.broker_core import (
    AlreadyExistsError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    NotFoundError,
    PermissionDeniedError,
    PopMQError,
    ReceiptHandleExpiredError,
    ReceiptHandleLostError,
    ReceiptHandleSupersededError,
    ResourceExhaustedError,
    StoreFullError,
    UnauthenticatedError,
    UnavailableError,
)

Code = pb.Code


class ProtocolError(InvalidArgumentError):
    """A request the RocketMQ protocol has a specific code for (ILLEGAL_TOPIC, ...)."""

    def __init__(self, code: pb.Code, message: str) -> None:
        super().__init__(message)
        self.rocketmq_code = code


class UnsupportedError(FailedPreconditionError):
    """A well-formed request for a feature popmq does not have (transactions, lite topics)."""

    code = "UNIMPLEMENTED"


# The first class in an error's MRO that is listed here gives its Code. Contexts override
# entries (a NotFoundError is TOPIC_NOT_FOUND when a topic was named).
_CODES: dict[type[PopMQError], pb.Code] = {
    InvalidReceiptHandleError: Code.INVALID_RECEIPT_HANDLE,
    ReceiptHandleExpiredError: Code.INVALID_RECEIPT_HANDLE,
    ReceiptHandleLostError: Code.INVALID_RECEIPT_HANDLE,
    ReceiptHandleSupersededError: Code.INVALID_RECEIPT_HANDLE,
    UnsupportedError: Code.UNSUPPORTED,
    UnauthenticatedError: Code.UNAUTHORIZED,
    PermissionDeniedError: Code.FORBIDDEN,
    InvalidArgumentError: Code.BAD_REQUEST,
    NotFoundError: Code.NOT_FOUND,
    AlreadyExistsError: Code.BAD_REQUEST,
    FailedPreconditionError: Code.PRECONDITION_FAILED,
    StoreFullError: Code.INTERNAL_SERVER_ERROR,
    ResourceExhaustedError: Code.TOO_MANY_REQUESTS,
    UnavailableError: Code.INTERNAL_SERVER_ERROR,
    InternalError: Code.INTERNAL_SERVER_ERROR,
    PopMQError: Code.INTERNAL_SERVER_ERROR,
}


FIELD_CODES: Mapping[str, pb.Code] = {
    "topic": Code.ILLEGAL_TOPIC,
    "group": Code.ILLEGAL_CONSUMER_GROUP,
    "filter_expression": Code.ILLEGAL_FILTER_EXPRESSION,
    "filter_type": Code.ILLEGAL_FILTER_EXPRESSION,
    "invisible_duration": Code.ILLEGAL_INVISIBLE_TIME,
    "offset": Code.ILLEGAL_OFFSET,
    "queue_id": Code.BAD_REQUEST,
    "batch_size": Code.BAD_REQUEST,
    "messages": Code.BAD_REQUEST,
    "message.body": Code.MESSAGE_BODY_TOO_LARGE,
    "message.tag": Code.ILLEGAL_MESSAGE_TAG,
    "message.keys": Code.ILLEGAL_MESSAGE_KEY,
    "message.properties": Code.MESSAGE_PROPERTIES_TOO_LARGE,
    "message.properties.name": Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    "message.message_id": Code.ILLEGAL_MESSAGE_ID,
    "message.message_group": Code.ILLEGAL_MESSAGE_GROUP,
    "message.delivery_timestamp": Code.ILLEGAL_DELIVERY_TIME,
}
"""The v2 Code of an argument error by the request field core names (errors.PopMQError.
field): the front end calls core's checks and maps here, instead of repeating the rules."""

FIELD_VALUE_CODES: Mapping[tuple[str, str], pb.Code] = {
    ("message.body", "0 B"): Code.MESSAGE_BODY_EMPTY,
}
"""Where v2 has a Code for one value of a field: an empty body is not a too-large one."""


def code_of(
    error: PopMQError, overrides: Mapping[type[PopMQError], pb.Code] | None = None
) -> pb.Code:
    """The Code for `error`: its own (ProtocolError), its field's (FIELD_CODES), an
    override, or the registry's."""
    if isinstance(error, ProtocolError):
        return error.rocketmq_code
    if isinstance(error, InvalidArgumentError) and error.field is not None:
        by_value = FIELD_VALUE_CODES.get((error.field, error.value or ""))
        if by_value is not None:
            return by_value
        by_field = FIELD_CODES.get(error.field)
        if by_field is not None:
            return by_field
    for cls in type(error).__mro__:
        if overrides is not None and cls in overrides:
            return overrides[cls]
        if cls in _CODES:
            return _CODES[cls]
    return Code.INTERNAL_SERVER_ERROR


def status_of(
    error: PopMQError, overrides: Mapping[type[PopMQError], pb.Code] | None = None
) -> pb.Status:
    return pb.Status(code=code_of(error, overrides), message=str(error))


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=Code.OK, message=message)


def overall(statuses: list[pb.Status]) -> pb.Status:
    """The response status of per-entry results: theirs when all agree, else MULTIPLE_RESULTS."""
    codes = {s.code for s in statuses}
    if len(codes) == 1:
        return pb.Status(code=statuses[0].code, message=statuses[0].message)
    return pb.Status(code=Code.MULTIPLE_RESULTS, message="entries have different results")


TOPIC: Mapping[type[PopMQError], pb.Code] = {NotFoundError: Code.TOPIC_NOT_FOUND}
"""Overrides for requests that name a topic."""
GROUP: Mapping[type[PopMQError], pb.Code] = {NotFoundError: Code.CONSUMER_GROUP_NOT_FOUND}
"""Overrides for requests that name a consumer group (and only it)."""
