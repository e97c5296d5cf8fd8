"""The console tests' fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.console.support import AuditLines


@pytest.fixture
def audit_lines() -> Iterator[AuditLines]:
    """The audit lines (logger popmq.audit) the test writes."""
    handler = AuditLines()
    logger = logging.getLogger("popmq.audit")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)
