from __future__ import annotations

import pytest

from popmq.broker_core.config import LongPollingConfig, PopConfig


def test_pop_batch_ceiling_is_configurable_up_to_1024_and_no_further() -> None:
    assert PopConfig(max_batch=1024).max_batch == 1024
    with pytest.raises(ValueError, match=r"1\.\.1024"):
        PopConfig(max_batch=1025)
    with pytest.raises(ValueError, match=r"1\.\.1024"):
        PopConfig(max_batch=0)


def test_inconsistent_timings_are_rejected() -> None:
    with pytest.raises(ValueError, match="min <= default <= max"):
        PopConfig(default_invisible_s=0.5)
    with pytest.raises(ValueError, match="default <= max"):
        LongPollingConfig(default_timeout_s=40)
