"""Each package's public surface is pinned: a change to it is a deliberate one."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "popmq.broker_core": [
        "AlreadyExistsError", "Broker", "BrokerConfig", "FailedPreconditionError",
        "GroupDefaults", "InternalError", "InvalidArgumentError", "InvalidReceiptHandleError",
        "LongPollingConfig", "NewMessage", "NotFoundError", "PopConfig", "PopMQError",
        "PoppedMessage", "QueueLag", "QueueStats", "ReceiptHandleExpiredError",
        "ReceiptHandleLostError", "ReceiptHandleSupersededError", "ResourceExhaustedError",
        "SendResult", "StoreConfig", "StoreFullError", "UnavailableError", "issuer_of",
    ],
    "popmq.proxy": ["PopMQServer", "ServerConfig", "run_server"],
    "popmq.proxy.rocketmq": ["RocketMQConfig", "RocketMQService"],
    "popmq.sdk": [
        "Admin", "AlreadyExistsError", "AsyncAdmin", "AsyncProducer", "AsyncPullConsumer",
        "AsyncPushConsumer", "AsyncSimpleConsumer", "ConsumeResult", "ConsumerOffset",
        "DeadlineExceededError", "ExponentialBackoff", "FailedPreconditionError", "Group",
        "InvalidArgumentError", "LagReport", "LeasePage", "LeaseResult", "Message",
        "NotFoundError", "OffsetChange", "OffsetReset", "PopMQError", "Producer",
        "PullConsumer", "PullResult", "PulledMessage", "PushConsumer", "PushConsumerOptions",
        "PushConsumerStats", "QueueLag", "QueueStats", "ReceivedMessage", "RedriveResult",
        "ResourceExhaustedError", "RetryPolicy", "SendReceipt", "ServerError", "ServerInfo",
        "SimpleConsumer", "Sql", "StoredMessage", "Subscription", "Topic", "TopicDescription",
        "TopicLag", "UnavailableError",
    ],
    "popmq.spark": [
        "DataLossError", "OffsetFormatError", "OptionError", "PopMQConnectorError",
        "PopMQDataSource", "register",
    ],
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_public_names_are_pinned_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == EXPECTED[package]
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name
