"""The SDK's error tree and the registry mapping gRPC statuses to it (no server)."""

from __future__ import annotations

import pickle

import grpc
import grpc.aio
import pytest

from popmq import sdk
from popmq.sdk.errors import error_from_code_name, error_from_rpc_error, error_from_status

EXPECTED: list[tuple[grpc.StatusCode, type[sdk.PopMQError], bool]] = [
    (grpc.StatusCode.INVALID_ARGUMENT, sdk.InvalidArgumentError, False),
    (grpc.StatusCode.NOT_FOUND, sdk.NotFoundError, False),
    (grpc.StatusCode.ALREADY_EXISTS, sdk.AlreadyExistsError, False),
    (grpc.StatusCode.FAILED_PRECONDITION, sdk.FailedPreconditionError, False),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, sdk.ResourceExhaustedError, True),
    (grpc.StatusCode.UNAVAILABLE, sdk.UnavailableError, True),
    (grpc.StatusCode.DEADLINE_EXCEEDED, sdk.DeadlineExceededError, True),
    (grpc.StatusCode.INTERNAL, sdk.ServerError, False),
    (grpc.StatusCode.UNKNOWN, sdk.ServerError, False),
]


@pytest.mark.parametrize(("status", "cls", "retriable"), EXPECTED)
def test_status_maps_to_its_error_class(
    status: grpc.StatusCode, cls: type[sdk.PopMQError], retriable: bool
) -> None:
    error = error_from_status(status, "what was wrong")

    assert type(error) is cls
    assert isinstance(error, sdk.PopMQError)
    assert error.code == status.name
    assert error.retriable is retriable
    assert error.message == "what was wrong"


@pytest.mark.parametrize(("status", "cls", "retriable"), EXPECTED)
def test_code_name_maps_like_the_status(
    status: grpc.StatusCode, cls: type[sdk.PopMQError], retriable: bool
) -> None:
    error = error_from_code_name(status.name, "entry failed")

    assert type(error) is cls
    assert error.retriable is retriable
    assert error.message == "entry failed"


@pytest.mark.parametrize(
    "status",
    [grpc.StatusCode.CANCELLED, grpc.StatusCode.DATA_LOSS, grpc.StatusCode.UNIMPLEMENTED],
)
def test_status_without_a_class_is_a_server_error_that_keeps_its_code(
    status: grpc.StatusCode,
) -> None:
    error = error_from_status(status, "x")

    assert type(error) is sdk.ServerError
    assert error.code == status.name
    assert sdk.ServerError.code == "INTERNAL"


def test_unknown_code_name_is_a_server_error() -> None:
    error = error_from_code_name("SOMETHING_NEW", "x")

    assert type(error) is sdk.ServerError
    assert error.code == "SOMETHING_NEW"


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (sdk.InvalidArgumentError, ValueError),
        (sdk.NotFoundError, LookupError),
        (sdk.DeadlineExceededError, TimeoutError),
    ],
)
def test_errors_can_be_caught_by_their_builtin_base(
    cls: type[sdk.PopMQError], builtin: type[Exception]
) -> None:
    with pytest.raises(builtin):
        raise cls("x")


def test_every_error_class_declares_code_and_retriable() -> None:
    classes = [getattr(sdk, name) for name in sdk.__all__ if name.endswith("Error")]

    for cls in classes:
        assert issubclass(cls, sdk.PopMQError)
        assert isinstance(cls.code, str)
        assert cls.code == cls.code.upper()
        assert isinstance(cls.retriable, bool)


def test_error_message_is_its_string_form() -> None:
    assert str(sdk.NotFoundError("topic orders does not exist")) == "topic orders does not exist"


@pytest.mark.parametrize("cls", [sdk.NotFoundError, sdk.DeadlineExceededError, sdk.ServerError])
def test_errors_survive_pickling_with_message_and_code(cls: type[sdk.PopMQError]) -> None:
    # Spark ships exceptions from workers to the driver by pickling them.
    error = cls("boom", code="DATA_LOSS" if cls is sdk.ServerError else None)

    restored = pickle.loads(pickle.dumps(error))

    assert type(restored) is cls
    assert restored.message == "boom"
    assert restored.code == error.code


def test_aio_rpc_error_is_translated_with_its_details() -> None:
    rpc_error = grpc.aio.AioRpcError(
        grpc.StatusCode.NOT_FOUND,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="topic orders does not exist",
    )

    error = error_from_rpc_error(rpc_error)

    assert isinstance(error, sdk.NotFoundError)
    assert error.message == "topic orders does not exist"


def test_aio_rpc_error_without_details_has_empty_message() -> None:
    rpc_error = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata()
    )

    error = error_from_rpc_error(rpc_error)

    assert isinstance(error, sdk.UnavailableError)
    assert error.message == ""
