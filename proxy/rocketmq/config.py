"""Settings of the RocketMQ 5 (apache.rocketmq.v2) front end.

Defaults are RocketMQ 5's proxy defaults (reference: ProxyConfig), so official clients see
the timings they were written for.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class RocketMQConfig:
    """Timings and limits of the v2 service.

    The Broker name of routes and assignments is not set here: it is the broker's own
    (``[broker] broker_name``, read from BrokerAPI.server_info()), the name its receipt
    handles carry, so clients and handles never disagree.
    """

    min_long_polling_s: float = 5.0
    """Shortest receive wait (grpcClientConsumerMinLongPollingTimeoutMillis)."""
    max_long_polling_s: float = 20.0
    """Longest receive wait (grpcClientConsumerMaxLongPollingTimeoutMillis)."""
    receive_batch_size: int = 32
    """Batch size consumers are told to ask for (Subscription.receive_batch_size)."""
    auto_renew_invisible_s: float = 60.0
    """Invisible time of a receive with auto_renew (defaultInvisibleTimeMills)."""
    renew_ahead_s: float = 10.0
    """An auto-renewed message is renewed this long before it would expire."""
    renew_steps_s: tuple[float, ...] = (60, 180, 300, 600, 1800, 3600)
    """New invisible time of the n-th renewal; the last repeats (RenewStrategyPolicy)."""
    renew_max_s: float = 3 * 3600.0
    """Messages are renewed for at most this long after their receive (renewMaxTimeMillis);
    then they expire and are redelivered."""
    release_invisible_s: float = 1.0
    """Invisible time given to a departed client's messages (invisibleTimeMillisWhenClear)."""
    client_idle_s: float = 120.0
    """A client silent this long (no heartbeat, no call) is gone (grpcClientIdleTimeMills)."""
    max_message_group_bytes: int = 64
    """Longest message group, in UTF-8 bytes."""
    producer_max_attempts: int = 3
    """Send attempts producers are told to make (backoff_policy.max_attempts)."""
    producer_backoff_s: tuple[float, float, float] = (0.01, 1.0, 2.0)
    """Producers' exponential send backoff: initial, max, multiplier."""
    max_gzip_body_bytes: int = 64 * 1024 * 1024
    """Most bytes the GZIP-encoded bodies of one SendMessage may inflate to, in all."""
    max_request_entries: int = 1024
    """Most messages one SendMessage, or entries one AckMessage, may carry (official clients
    send one; a receive returns at most the pop batch ceiling, 1024)."""
    max_settings_topics: int = 1024
    """Most topics a client's Telemetry settings may list (publishing topics, or
    subscriptions)."""

    def __post_init__(self) -> None:
        if not 0 < self.min_long_polling_s <= self.max_long_polling_s:
            raise ValueError("long polling bounds must satisfy 0 < min <= max")
        if not self.renew_steps_s or min(self.renew_steps_s) <= self.renew_ahead_s:
            raise ValueError("every renew step must be longer than renew_ahead_s")
        if self.auto_renew_invisible_s <= self.renew_ahead_s:
            raise ValueError("auto_renew_invisible_s must be longer than renew_ahead_s")
        if self.release_invisible_s <= 0 or self.client_idle_s <= 0:
            raise ValueError("release_invisible_s and client_idle_s must be positive")
        if not 1 <= self.receive_batch_size <= 1024:
            raise ValueError("receive_batch_size must be within 1..1024")
        if self.max_request_entries < 1 or self.max_settings_topics < 1:
            raise ValueError("max_request_entries and max_settings_topics must be positive")
