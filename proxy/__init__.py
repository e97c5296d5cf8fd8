"""The grpc.aio proxy: popmq.v1 services over the embedded broker core."""

from popmq.proxy.server import PopMQServer, run_server
from popmq.runtime.config import ServerConfig

__all__ = ["PopMQServer", "ServerConfig", "run_server"]
