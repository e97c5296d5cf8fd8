"""A proxy numbers the brokers that join (coordination/broker_numbers.py).

Every proxy runs this: the first to see a live broker without a number gives it one, the
others find it numbered (the numbers are one compare-and-set entry). While etcd does not
answer it retries; meanwhile a broker without a number only goes last in the derived
dead-letter routes.
"""

from __future__ import annotations

import asyncio
import logging

from popmq.coordination.broker_numbers import number_brokers
from popmq.coordination.coordinator import Coordinator
from popmq.coordination.errors import CoordinationError
from popmq.coordination.routes import RouteCache

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""Pause before numbering again after the coordinator failed the last attempt."""


async def number_joining_brokers(routes: RouteCache, coordinator: Coordinator) -> None:
    """Number each live broker the cache shows without a number, at every change; forever."""
    failing = False
    while True:
        missing = routes.live_brokers.keys() - routes.broker_numbers.keys()
        if missing:
            try:
                await number_brokers(coordinator, missing)
            except CoordinationError as exc:
                if not failing:
                    log.warning("cannot number brokers %s yet: %s", sorted(missing), exc)
                failing = True
                await asyncio.sleep(RETRY_S)
                continue
            failing = False
        await routes.wait_changed()
