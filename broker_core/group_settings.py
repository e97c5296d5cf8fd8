"""Group settings beyond GroupRecord (FIFO flag, subscriptions, consume_from, exponential
backoff), in their own meta record (protos/popmq/store/v1/group_settings.proto).

Read once per group and then kept: every pop without its own filter asks for the group's
subscription, so this stays off RocksDB on the hot path.
"""

from __future__ import annotations

from popmq._gen.popmq.store.v1 import group_settings_pb2
from popmq.broker_core import keys
from popmq.broker_core.catalog import Catalog
from popmq.broker_core.store import Store
from popmq.broker_core.types import ExponentialBackoff, GroupSettings, Subscription

CONSUME_FROM_CODES = {"first": 1, "last": 2, "timestamp": 3}
"""consume_from names -> popmq.v1.ConsumeFrom values (0 also means first)."""
_CONSUME_FROM_NAMES = {0: "first", **{code: name for name, code in CONSUME_FROM_CODES.items()}}


def settings_key(group_id: int) -> bytes:
    return b"gsettings:" + keys.encode_u32(group_id)


class GroupSettingsStore:
    """Reads, caches and writes the settings record of each group."""

    def __init__(self, *, store: Store, catalog: Catalog) -> None:
        self._store = store
        self._catalog = catalog
        # Group settings as last written (see load): group_id -> settings.
        self._cache: dict[int, GroupSettings] = {}

    def subscription_filter(self, group: str, topic: str) -> tuple[str, str] | None:
        """(filter_type, expression) the group declared for the topic, if any: the filter a
        pop that carries none of its own should apply."""
        info = self._catalog.groups.get(group)
        if info is None:
            return None
        sub = self.load(info.group_id).subscription(topic)
        return (sub.filter_type, sub.expression) if sub is not None else None

    def load(self, group_id: int) -> GroupSettings:
        """Settings of a group, read once and then kept: every pop without its own filter
        asks for the subscription, so this stays off RocksDB on the hot path."""
        cached = self._cache.get(group_id)
        if cached is None:
            cached = self._cache[group_id] = self._read(group_id)
        return cached

    def _read(self, group_id: int) -> GroupSettings:
        data = self._store.get("meta", settings_key(group_id))
        if data is None:
            return GroupSettings()
        r = group_settings_pb2.GroupSettingsRecord.FromString(data)
        exp = r.exponential_backoff if r.HasField("exponential_backoff") else None
        return GroupSettings(
            fifo=r.fifo,
            subscriptions=tuple(
                Subscription(s.topic, s.filter_type or "tag", s.expression) for s in r.subscriptions
            ),
            consume_from=_CONSUME_FROM_NAMES.get(r.consume_from, "first"),
            consume_from_ms=r.consume_from_time_ms,
            exponential_backoff=(
                ExponentialBackoff(exp.initial_ms / 1000, exp.max_ms / 1000, exp.multiplier)
                if exp is not None
                else None
            ),
        )

    @staticmethod
    def record(settings: GroupSettings) -> bytes:
        record = group_settings_pb2.GroupSettingsRecord(
            fifo=settings.fifo,
            subscriptions=[
                group_settings_pb2.SubscriptionRecord(
                    topic=s.topic, filter_type=s.filter_type, expression=s.expression
                )
                for s in settings.subscriptions
            ],
            consume_from=CONSUME_FROM_CODES[settings.consume_from],
            consume_from_time_ms=settings.consume_from_ms,
        )
        exp = settings.exponential_backoff
        if exp is not None:
            record.exponential_backoff.CopyFrom(
                group_settings_pb2.ExponentialBackoffRecord(
                    initial_ms=round(exp.initial_s * 1000),
                    max_ms=round(exp.max_s * 1000),
                    multiplier=exp.multiplier,
                )
            )
        return record.SerializeToString()

    def written(self, group_id: int, settings: GroupSettings) -> None:
        self._cache[group_id] = settings

    def forget(self, group_id: int) -> None:
        self._cache.pop(group_id, None)
