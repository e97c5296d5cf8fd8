"""One client interface over popmq, Redis Streams and NATS JetStream, so that every scenario
runs the same code against each system and only the client calls differ.

- popmq: its own SDK over gRPC (``AsyncProducer.send``/``send_batch``,
  ``AsyncSimpleConsumer.receive`` + one ``ack`` RPC per batch; or ``receive(ack=...)``,
  where the acks ride on the next Pop).
- Redis Streams (redis-py): XADD, pipelined per batch; XREADGROUP COUNT n (BLOCK for long
  polls) + one XACK per batch; or XACK and the next XREADGROUP pipelined.
- NATS JetStream (nats-py): ``publish`` (waits for the ack) for batch 1, ``publish_async``
  + gather of the acks for a batch; pull consumer ``fetch(n)`` + ``ack()`` per message (the
  protocol has no multi-message ack except AckAll, which would not be per-message).
  ``ack()`` publishes the ack without waiting for the server (``ack_sync`` would wait), so
  NATS's consume cycle has one round trip where popmq's and Redis's have two.

Every sender and receiver holds its own connection, as separate producer or consumer
processes would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import nats
import redis.asyncio as aioredis
from nats.js import api as js_api
from nats.js.errors import BadRequestError
from redis.exceptions import ResponseError

from popmq import AlreadyExistsError, AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, Message

__all__ = [
    "INVISIBLE_S",
    "NatsTarget",
    "PopmqTarget",
    "Received",
    "Receiver",
    "RedisTarget",
    "Sender",
    "Target",
]

INVISIBLE_S = 30.0
"""Invisible time / ack wait of a delivery: far above any scenario's processing time."""
_PREFILL_BATCH = 256
_PREFILL_CONCURRENCY = 4
# A JetStream consumer stops delivering at MaxAckPending (default 1,000); the scenarios hold
# up to 16 x 32 in flight, and this keeps the cap from being what is measured.
_NATS_MAX_ACK_PENDING = 100_000
_NATS_NO_WAIT_S = 0.002
"""Timeout of a fetch that should not wait (nats-py needs one; the server answers sooner)."""


@dataclass(frozen=True, slots=True)
class Received:
    """A delivered message and what its system needs to ack it."""

    body: bytes
    handle: Any


class Sender(Protocol):
    async def send(self, bodies: Sequence[bytes]) -> None:
        """Send the bodies as one batch and return when the system acknowledged them."""


class Receiver(Protocol):
    async def receive(self, max_messages: int, wait_s: float) -> list[Received]:
        """Up to ``max_messages``, waiting up to ``wait_s`` when none is there."""

    async def ack(self, messages: Sequence[Received]) -> None:
        """Acknowledge the messages so they are not delivered again."""

    async def ack_and_receive(
        self, ack: Sequence[Received], max_messages: int, wait_s: float
    ) -> list[Received]:
        """Ack ``ack`` and receive more in one round trip where the client can (popmq: the
        acks ride on the Pop; Redis: XACK and XREADGROUP pipelined; NATS: ``ack()`` never
        waits, so ack then receive is already one round trip)."""


class Target(Protocol):
    """A system under test, reached through its own client library."""

    name: str

    async def create_topic(self, topic: str, *, queues: int = 8) -> None:
        """Create a topic (a stream); ``queues`` matters to popmq only."""

    async def create_group(self, topic: str, group: str) -> None:
        """Create a consumer group reading ``topic`` from its start."""

    def sender(self, topic: str) -> contextlib.AbstractAsyncContextManager[Sender]:
        """A producer on its own connection."""

    def receiver(
        self, topic: str, group: str, consumer: str
    ) -> contextlib.AbstractAsyncContextManager[Receiver]:
        """A consumer of ``group`` on its own connection."""


async def prefill(target: Target, topic: str, count: int, body: bytes) -> None:
    """Store ``count`` copies of ``body`` in ``topic`` through the target's own client.

    Not timed by any scenario: large batches from a few concurrent senders.
    """
    batches = [_PREFILL_BATCH] * (count // _PREFILL_BATCH)
    if count % _PREFILL_BATCH:
        batches.append(count % _PREFILL_BATCH)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for size in batches:
        queue.put_nowait(size)

    async def worker() -> None:
        async with target.sender(topic) as sender:
            while not queue.empty():
                size = queue.get_nowait()
                await sender.send([body] * size)

    await asyncio.gather(*(worker() for _ in range(_PREFILL_CONCURRENCY)))


# --- popmq -------------------------------------------------------------------------------


class _PopmqSender:
    def __init__(self, producer: AsyncProducer, topic: str) -> None:
        self._producer = producer
        self._topic = topic

    async def send(self, bodies: Sequence[bytes]) -> None:
        if len(bodies) == 1:
            await self._producer.send(self._topic, bodies[0])
        else:
            await self._producer.send_batch(self._topic, [Message(b) for b in bodies])


class _PopmqReceiver:
    def __init__(self, consumer: AsyncSimpleConsumer) -> None:
        self._consumer = consumer

    async def receive(self, max_messages: int, wait_s: float) -> list[Received]:
        messages = await self._consumer.receive(
            max_messages=max_messages, invisible_duration_s=INVISIBLE_S, wait_s=wait_s
        )
        return [Received(m.body, m) for m in messages]

    async def ack(self, messages: Sequence[Received]) -> None:
        if messages:
            await self._consumer.ack([m.handle for m in messages])

    async def ack_and_receive(
        self, ack: Sequence[Received], max_messages: int, wait_s: float
    ) -> list[Received]:
        messages = await self._consumer.receive(
            max_messages=max_messages,
            invisible_duration_s=INVISIBLE_S,
            wait_s=wait_s,
            ack=[m.handle for m in ack],
        )
        return [Received(m.body, m) for m in messages]


class PopmqTarget:
    """popmq through its SDK over gRPC."""

    def __init__(self, endpoint: str, name: str = "popmq") -> None:
        self.endpoint = endpoint
        self.name = name

    async def create_topic(self, topic: str, *, queues: int = 8) -> None:
        async with AsyncAdmin(self.endpoint) as admin:
            await admin.create_topic(topic, queues=queues)

    async def create_group(self, topic: str, group: str) -> None:
        async with AsyncAdmin(self.endpoint) as admin:
            with contextlib.suppress(AlreadyExistsError):
                await admin.create_group(group)

    @contextlib.asynccontextmanager
    async def sender(self, topic: str) -> AsyncIterator[Sender]:
        async with AsyncProducer(self.endpoint) as producer:
            yield _PopmqSender(producer, topic)

    @contextlib.asynccontextmanager
    async def receiver(self, topic: str, group: str, consumer: str) -> AsyncIterator[Receiver]:
        async with AsyncSimpleConsumer(self.endpoint, group=group, topic=topic) as client:
            yield _PopmqReceiver(client)


# --- Redis Streams -----------------------------------------------------------------------

_FIELD = b"b"


class _RedisSender:
    def __init__(self, client: aioredis.Redis, topic: str) -> None:
        self._client = client
        self._topic = topic

    async def send(self, bodies: Sequence[bytes]) -> None:
        if len(bodies) == 1:
            await self._client.xadd(self._topic, {_FIELD: bodies[0]})
            return
        pipe = self._client.pipeline(transaction=False)
        for body in bodies:
            pipe.xadd(self._topic, {_FIELD: body})
        await pipe.execute()


class _RedisReceiver:
    def __init__(self, client: aioredis.Redis, topic: str, group: str, consumer: str) -> None:
        self._client = client
        self._topic = topic
        self._group = group
        self._consumer = consumer

    async def receive(self, max_messages: int, wait_s: float) -> list[Received]:
        # redis-py's annotations cover every reply shape of every protocol version.
        reply: Any = await self._client.xreadgroup(*self._read_args(max_messages, wait_s))
        return self._received(reply)

    async def ack(self, messages: Sequence[Received]) -> None:
        if messages:
            await self._client.xack(self._topic, self._group, *(m.handle for m in messages))

    async def ack_and_receive(
        self, ack: Sequence[Received], max_messages: int, wait_s: float
    ) -> list[Received]:
        if not ack:
            return await self.receive(max_messages, wait_s)
        pipe = self._client.pipeline(transaction=False)
        pipe.xack(self._topic, self._group, *(m.handle for m in ack))
        pipe.xreadgroup(*self._read_args(max_messages, wait_s))
        _acked, reply = await pipe.execute()
        return self._received(reply)

    def _read_args(self, max_messages: int, wait_s: float) -> tuple[Any, ...]:
        # BLOCK 0 would mean forever; no BLOCK is the non-waiting read.
        block = max(1, round(wait_s * 1000)) if wait_s > 0 else None
        return self._group, self._consumer, {self._topic: ">"}, max_messages, block

    @staticmethod
    def _received(reply: Any) -> list[Received]:
        if not reply:
            return []
        _stream, entries = reply[0]
        return [Received(fields[_FIELD], entry_id) for entry_id, fields in entries]


class RedisTarget:
    """Redis Streams through redis-py's asyncio client."""

    def __init__(self, port: int, name: str) -> None:
        self.port = port
        self.name = name

    def _client(self) -> aioredis.Redis:
        return aioredis.Redis(host="127.0.0.1", port=self.port, single_connection_client=True)

    async def create_topic(self, topic: str, *, queues: int = 8) -> None:
        """Streams are created by their first XADD or XGROUP CREATE MKSTREAM."""

    async def create_group(self, topic: str, group: str) -> None:
        client = self._client()
        try:
            await client.xgroup_create(topic, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        finally:
            await client.aclose()

    @contextlib.asynccontextmanager
    async def sender(self, topic: str) -> AsyncIterator[Sender]:
        client = self._client()
        try:
            yield _RedisSender(client, topic)
        finally:
            await client.aclose()

    @contextlib.asynccontextmanager
    async def receiver(self, topic: str, group: str, consumer: str) -> AsyncIterator[Receiver]:
        client = self._client()
        try:
            yield _RedisReceiver(client, topic, group, consumer)
        finally:
            await client.aclose()


# --- NATS JetStream ----------------------------------------------------------------------


class _NatsSender:
    def __init__(self, js: Any, topic: str) -> None:
        self._js = js
        self._topic = topic

    async def send(self, bodies: Sequence[bytes]) -> None:
        if len(bodies) == 1:
            await self._js.publish(self._topic, bodies[0])
            return
        acks = [await self._js.publish_async(self._topic, body) for body in bodies]
        await asyncio.gather(*acks)


class _NatsReceiver:
    def __init__(self, subscription: Any) -> None:
        self._sub = subscription

    async def receive(self, max_messages: int, wait_s: float) -> list[Received]:
        # nats-py's fetch(n) first asks without waiting (what is there now comes back at
        # once); when nothing is there, it holds the pull until n arrived or the timeout
        # passed, which at a low rate is always the timeout. So a batch is fetched without
        # waiting, and only an empty stream is long-polled, for one message: like a popmq Pop
        # or XREADGROUP BLOCK, a receive returns as soon as anything is there.
        try:
            messages = await self._sub.fetch(max_messages, timeout=_NATS_NO_WAIT_S)
        except TimeoutError:
            if wait_s <= _NATS_NO_WAIT_S:
                return []
            try:
                messages = await self._sub.fetch(1, timeout=wait_s)
            except TimeoutError:
                return []
        return [Received(m.data, m) for m in messages]

    async def ack(self, messages: Sequence[Received]) -> None:
        for message in messages:
            await message.handle.ack()

    async def ack_and_receive(
        self, ack: Sequence[Received], max_messages: int, wait_s: float
    ) -> list[Received]:
        await self.ack(ack)
        return await self.receive(max_messages, wait_s)


class NatsTarget:
    """NATS JetStream (file storage) through nats-py."""

    def __init__(self, port: int, name: str = "nats") -> None:
        self.port = port
        self.name = name

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[Any]:
        connection = await nats.connect(f"nats://127.0.0.1:{self.port}", max_reconnect_attempts=0)
        try:
            yield connection
        finally:
            await connection.close()

    async def create_topic(self, topic: str, *, queues: int = 8) -> None:
        async with self._connect() as connection:
            await connection.jetstream().add_stream(
                name=topic, subjects=[topic], storage=js_api.StorageType.FILE
            )

    async def create_group(self, topic: str, group: str) -> None:
        config = js_api.ConsumerConfig(
            durable_name=group,
            ack_policy=js_api.AckPolicy.EXPLICIT,
            ack_wait=INVISIBLE_S,
            max_ack_pending=_NATS_MAX_ACK_PENDING,
            deliver_policy=js_api.DeliverPolicy.ALL,
        )
        async with self._connect() as connection:
            with contextlib.suppress(BadRequestError):
                await connection.jetstream().add_consumer(topic, config)

    @contextlib.asynccontextmanager
    async def sender(self, topic: str) -> AsyncIterator[Sender]:
        async with self._connect() as connection:
            yield _NatsSender(connection.jetstream(), topic)

    @contextlib.asynccontextmanager
    async def receiver(self, topic: str, group: str, consumer: str) -> AsyncIterator[Receiver]:
        async with self._connect() as connection:
            subscription = await connection.jetstream().pull_subscribe_bind(group, stream=topic)
            try:
                yield _NatsReceiver(subscription)
            finally:
                await subscription.unsubscribe()
