"""Creation on first use (RocketMQ auto-create): groups and sent-to topics, each created once
even when many first users arrive together; retry and dead-letter topics are created through
it too (pop/retry.py).

Every creation writes its catalog record in a synced batch, then registers it in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from popmq.broker_core.catalog import MESSAGE_TYPE_NORMAL, Catalog, GroupInfo, TopicInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.errors import AlreadyExistsError, PopMQError
from popmq.broker_core.group_commit import GroupCommitWriter

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class AutoCreate:
    """Creates catalog entries, sharing one creation among concurrent first users."""

    def __init__(
        self, config: BrokerConfig, *, catalog: Catalog, writer: GroupCommitWriter, clock: Clock
    ) -> None:
        self._config = config
        self._catalog = catalog
        self._writer = writer
        self._clock = clock
        # Creations in progress (group name / retry key), so concurrent first uses share one.
        self._creating: dict[object, asyncio.Task[Any]] = {}

    async def once(self, key: object, create: Callable[[], Awaitable[_T]]) -> _T:
        """Run `create` once for concurrent first users of `key`; they all get its result.

        The creation is a task of its own, which every user awaits shielded: a user
        cancelled meanwhile (a gRPC handler whose client went away) cancels neither the
        creation the others wait for nor the registration that must follow its synced
        write, and the others get its result or its error whatever it raises."""
        pending = self._creating.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_task(self._created(key, create))
            self._creating[key] = pending
        result: _T = await asyncio.shield(pending)
        return result

    async def _created(self, key: object, create: Callable[[], Awaitable[_T]]) -> _T:
        try:
            return await create()
        finally:
            del self._creating[key]

    async def topic(
        self,
        name: str,
        queues: int,
        kind: int,
        message_type: int = MESSAGE_TYPE_NORMAL,
        *,
        route_create_time_ms: int = 0,
    ) -> TopicInfo:
        """Write and register a topic of any kind; ALREADY_EXISTS when one of the same name
        exists or was created meanwhile. `route_create_time_ms`: see TopicInfo.

        One creation per name at a time: two concurrent ones (a cluster proxy's CreateTopic
        and the catalog sync following its route) would each write a record under the same
        key with ids of their own, and the one registered in memory need not be the one the
        store keeps, so after a restart (or a failover) the topic's messages and handles
        would name an id the store no longer knows.
        """

        async def create() -> TopicInfo:
            if name in self._catalog.topics:
                raise AlreadyExistsError(f"topic {name!r} already exists")
            info = self._catalog.new_topic(
                name,
                queues,
                kind=kind,
                message_type=message_type,
                now_ms=self._clock.now_ms(),
                route_create_time_ms=route_create_time_ms,
            )
            await self._writer.submit(lambda b, _: self._catalog.write_topic(b, info), sync=True)
            self._catalog.register_topic(info)
            return info

        return await self.exclusively(("topic", name), create)

    async def exclusively(self, key: object, create: Callable[[], Awaitable[_T]]) -> _T:
        """Run `create` as the one creation of `key`: after any in progress has ended, and
        with first uses that arrive meanwhile sharing its result (`once`). For creations
        that must not share another's result (an explicit create with its own settings)."""
        while (pending := self._creating.get(key)) is not None:
            with contextlib.suppress(PopMQError):
                await asyncio.shield(pending)
        return await self.once(key, create)

    async def group(self, name: str) -> GroupInfo:
        """The group, created with default settings on first use (RocketMQ auto-create)."""
        info = self._catalog.groups.get(name)
        if info is not None:
            return info

        async def create() -> GroupInfo:
            defaults = self._config.groups
            new = self._catalog.new_group(
                name,
                max_delivery_attempts=defaults.max_delivery_attempts,
                retry_backoff_ms=tuple(round(d * 1000) for d in defaults.retry_backoff_s),
                now_ms=self._clock.now_ms(),
                auto_created=True,
            )
            await self._writer.submit(lambda b, _: self._catalog.write_group(b, new), sync=True)
            self._catalog.register_group(new)
            log.info("group %s created on first use", name)
            return new

        return await self.once(("group", name), create)
