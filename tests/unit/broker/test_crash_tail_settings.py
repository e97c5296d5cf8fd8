"""The settings of crash-tail reconciliation (broker/crash_tail_sync.py): what a broker
restarting after an unclean end looks at (`messages.crash_tail_s`) and how long it waits for
silent peers (`cluster.crash_tail_wait_s`), set like any setting and checked."""

from __future__ import annotations

import pytest

from popmq.broker_core.config import MessagesConfig
from popmq.coordination.config import ClusterConfig
from popmq.runtime import settings


def test_the_defaults_cover_a_send_left_in_doubt_and_are_set_like_any_setting() -> None:
    config = settings.load()
    assert config.broker.messages.crash_tail_s == 30.0
    assert config.cluster.crash_tail_wait_s == 10.0
    changed = settings.load(
        flags={"messages.crash_tail_s": "0", "cluster.crash_tail_wait_s": "2.5"}
    )
    assert changed.broker.messages.crash_tail_s == 0.0
    assert changed.cluster.crash_tail_wait_s == 2.5


@pytest.mark.parametrize("value", [-1.0, 600.5, float("nan")])
def test_a_crash_tail_wait_out_of_range_is_refused(value: float) -> None:
    with pytest.raises(
        ValueError, match=r"cluster\.crash_tail_wait_s .* must be within 0\.\.600 s"
    ):
        ClusterConfig(crash_tail_wait_s=value)


@pytest.mark.parametrize("value", [-1.0, 3601.0, float("nan")])
def test_a_crash_tail_out_of_range_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match=r"messages\.crash_tail_s .* within 0\.\.3600 s"):
        MessagesConfig(crash_tail_s=value)
