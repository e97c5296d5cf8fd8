"""How a popmq gRPC server handles a call, whichever process serves it.

- errors.py: the one place broker errors become gRPC statuses (`status_code`, the `rpc`
  decorator of unary servicer methods), what a read of a stream raises for a request the
  security gate refused (`RefusedRequestError`), and the errors of request bodies that do not
  decode (`UndecodableRequestError`, `Undecodable`);
- deserializers.py: request bodies checked as they are decoded (too large, or not the
  method's message: INVALID_ARGUMENT, not grpc's UNKNOWN), compiled;
- write_errors.py: a streamed write that fails because the call is over (the client went
  away), which a handler waits out quietly instead of logging an error;
- reserialized.py: a generated servicer registered with some handlers swapped (the hot
  methods of the proxy's MessagingService and the broker's BrokerService answer bytes).

It imports only broker_core, so the proxy's front ends, the broker's BrokerService and the
security gate that brokers and proxies both install share it.
"""
