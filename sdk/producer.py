"""Producers: send messages to a topic, one message or an atomic batch per RPC."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from popmq.v1 import messaging_pb2
from sdk._channel import DEFAULT_TIMEOUT_S, AsyncClient, unary
from sdk._sync import SyncClient
from sdk.errors import ServerError
from sdk.types import Message, SendReceipt

__all__ = ["AsyncProducer", "Producer"]


def build_send_request(
    topic: str, messages: Sequence[Message]
) -> messaging_pb2.SendMessagesRequest:
    """Build the SendMessages request for a batch of messages to one topic."""
    return messaging_pb2.SendMessagesRequest(messages=[m.to_proto(topic) for m in messages])


class AsyncProducer(AsyncClient):
    """Sends messages to topics (asyncio).

    Args:
        endpoint: ``host:port`` of the popmq proxy.
        timeout_s: Timeout of each call, in seconds.
        channel: Optional ``grpc.aio`` channel to use instead of opening one.
    """

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str = "",
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
    ) -> SendReceipt:
        """Send one message and return where it was stored.

        Raises:
            NotFoundError: The topic does not exist.
            InvalidArgumentError: The message breaks a limit (body size, tag, properties).
        """
        message = Message(
            body, tag=tag, keys=keys, properties=properties or {}, message_id=message_id
        )
        (receipt,) = await self.send_batch(topic, [message])
        return receipt

    async def send_batch(self, topic: str, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send messages in one atomic write (all or none); receipts in input order.

        An empty batch sends nothing and returns an empty list.
        """
        self._check_open()
        if not messages:
            return []
        request = build_send_request(topic, messages)
        response: messaging_pb2.SendMessagesResponse = await unary(
            self._conn.messaging().SendMessages, request, self._timeout_s
        )
        if len(response.results) != len(messages):
            raise ServerError(
                f"server returned {len(response.results)} results for {len(messages)} messages"
            )
        return [SendReceipt.from_proto(result) for result in response.results]


class Producer(SyncClient[AsyncProducer]):
    """Sends messages to topics (blocking).

    Args:
        endpoint: ``host:port`` of the popmq proxy.
        timeout_s: Timeout of each call, in seconds.
    """

    def __init__(self, endpoint: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(AsyncProducer(endpoint, timeout_s=timeout_s))

    def send(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str = "",
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
    ) -> SendReceipt:
        """Send one message and return where it was stored (see ``AsyncProducer.send``)."""
        return self._run(
            self._core.send(
                topic, body, tag=tag, keys=keys, properties=properties, message_id=message_id
            )
        )

    def send_batch(self, topic: str, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send messages in one atomic write (see ``AsyncProducer.send_batch``)."""
        return self._run(self._core.send_batch(topic, messages))
