"""The grpc.aio proxy: popmq.v1 services over the embedded broker core."""

from popmq.proxy.server import PopMQServer, ServerConfig, run_server

__all__ = ["PopMQServer", "ServerConfig", "run_server"]
