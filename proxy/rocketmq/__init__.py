"""RocketMQ 5 wire compatibility: apache.rocketmq.v2.MessagingService over the broker core.

Official RocketMQ 5 clients (Java, Go, Python, ...) connect to the same port as popmq.v1
and see the same topics, groups and messages. docs/compatibility.md lists what works.
"""

from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.service import RocketMQService

__all__ = ["RocketMQConfig", "RocketMQService"]
