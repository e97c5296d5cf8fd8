"""The producer retry policy: which failures are retried, how often, and how long it waits.

A fake sleep records the waits instead of taking them, so the test checks the schedule
exactly without depending on the machine's speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from popmq import (
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
    ResourceExhaustedError,
    UnavailableError,
)
from popmq.sdk import _retry
from popmq.sdk._retry import RetryBackoff, RetryPolicy


class FakeSleep:
    """Records each requested wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class Script:
    """An attempt that fails with the given errors, in order, then returns "ok"."""

    def __init__(self, failures: Sequence[PopMQError]) -> None:
        self._failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self._failures:
            raise self._failures.pop(0)
        return "ok"


def _run(policy: RetryPolicy, attempt: Script, sleep: FakeSleep) -> str:
    return asyncio.run(policy.run(attempt, sleep=sleep))


def test_default_backoff_is_rocketmqs_10ms_doubling_to_1s() -> None:
    backoff = RetryBackoff()

    assert [backoff.delay_s(n) for n in range(1, 10)] == pytest.approx(
        [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0]
    )
    assert backoff.delay_s(10_000) == 1.0  # no overflow far past the cap


@pytest.mark.parametrize(
    "error",
    [UnavailableError("down"), ResourceExhaustedError("busy"), DeadlineExceededError("slow")],
)
def test_retriable_failures_are_retried_until_success(error: PopMQError) -> None:
    attempt, sleep = Script([error, error]), FakeSleep()

    assert _run(RetryPolicy(), attempt, sleep) == "ok"

    assert attempt.calls == 3
    assert sleep.waits == pytest.approx([0.01, 0.02])


def test_at_most_three_attempts_then_the_last_error_with_a_note() -> None:
    errors = [UnavailableError(f"down {n}") for n in range(5)]
    attempt, sleep = Script(errors), FakeSleep()

    with pytest.raises(UnavailableError, match="down 2") as caught:
        _run(RetryPolicy(), attempt, sleep)

    assert attempt.calls == 3
    assert sleep.waits == pytest.approx([0.01, 0.02])
    assert caught.value.__notes__ == ["gave up after 3 attempts"]


@pytest.mark.parametrize("error", [InvalidArgumentError("bad"), NotFoundError("no topic")])
def test_non_retriable_failures_are_raised_at_once(error: PopMQError) -> None:
    attempt, sleep = Script([error]), FakeSleep()

    with pytest.raises(type(error)) as caught:
        _run(RetryPolicy(), attempt, sleep)

    assert attempt.calls == 1
    assert sleep.waits == []
    assert not getattr(caught.value, "__notes__", [])


def test_a_non_retriable_failure_after_a_retriable_one_stops_the_retries() -> None:
    attempt, sleep = Script([UnavailableError("down"), NotFoundError("gone")]), FakeSleep()

    with pytest.raises(NotFoundError):
        _run(RetryPolicy(), attempt, sleep)

    assert attempt.calls == 2
    assert sleep.waits == pytest.approx([0.01])


def test_custom_attempts_and_backoff_are_followed() -> None:
    policy = RetryPolicy(
        max_attempts=5, backoff=RetryBackoff(initial_s=0.1, max_s=0.25, multiplier=3)
    )
    attempt, sleep = Script([UnavailableError("down")] * 4), FakeSleep()

    assert _run(policy, attempt, sleep) == "ok"

    assert attempt.calls == 5
    assert sleep.waits == pytest.approx([0.1, 0.25, 0.25, 0.25])


def test_one_attempt_means_no_retry() -> None:
    attempt, sleep = Script([UnavailableError("down")]), FakeSleep()

    with pytest.raises(UnavailableError):
        _run(RetryPolicy(max_attempts=1), attempt, sleep)

    assert (attempt.calls, sleep.waits) == (1, [])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_s": -1}, "initial_s must be 0 or more"),
        ({"initial_s": float("nan")}, "initial_s must be 0 or more"),
        ({"initial_s": 2, "max_s": 1}, "max_s must be at least initial_s"),
        ({"multiplier": 0.5}, "multiplier must be 1 or more"),
    ],
)
def test_bad_backoff_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryBackoff(**kwargs)


def test_bad_attempt_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="max_attempts must be 1 or more, got 0"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(TypeError, match="max_attempts must be an int"):
        RetryPolicy(max_attempts=2.5)  # type: ignore[arg-type]


def test_the_retry_backoff_is_public_and_its_former_name_still_imports_with_a_warning() -> None:
    import popmq

    assert popmq.RetryBackoff is RetryBackoff
    assert popmq.ExponentialBackoff is not RetryBackoff  # a group's redelivery policy
    with pytest.warns(DeprecationWarning, match="now popmq.RetryBackoff"):
        from popmq.sdk._retry import ExponentialBackoff  # type: ignore[attr-defined]
    assert ExponentialBackoff is RetryBackoff
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _retry.Nope  # type: ignore[attr-defined]  # noqa: B018
