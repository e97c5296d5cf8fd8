"""Registering a generated servicer with some of its handlers' (de)serializers swapped.

The hot methods of a popmq service answer with bytes already encoded (and some read their
requests from bytes) instead of the generated classes; the generated
`add_*Servicer_to_server(servicer, server)` functions build the handlers with the classes'
serializers. `register` passes them a stand-in for the server that lets `swap` replace each
handler, then registers the results on the real server both ways, as generated code does
(the generic handler generated code built is of the originals, so it is built again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import grpc


class MethodServer(Protocol):
    """What generated registration code calls on a server (grpc.aio.Server has both)."""

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None: ...

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None: ...


Swap = Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]
"""(method name, generated handler) -> the handler to serve it with."""


def register(
    add_to_server: Callable[[object, MethodServer], None],
    servicer: object,
    server: MethodServer,
    swap: Swap,
) -> None:
    """Register `servicer` on `server` with the generated `add_to_server`, every handler
    replaced by `swap(method, handler)`."""
    add_to_server(servicer, _Swapping(server, swap))


class _Swapping:
    """Stands in for the server while generated code registers a service."""

    def __init__(self, server: MethodServer, swap: Swap) -> None:
        self._server = server
        self._swap = swap

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        """Ignored: built again from the registered handlers, with the swapped serializers."""

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        handlers = {method: self._swap(method, h) for method, h in method_handlers.items()}
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service_name, handlers),)
        )
        self._server.add_registered_method_handlers(service_name, handlers)
