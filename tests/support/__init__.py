"""The test harness every test folder shares: the real servers and clusters tests start, and
waiting for what they do.

- `server_thread`: `popmq serve`'s server in a background thread of the test process.
- `server_process`: `popmq serve` as a subprocess (kill -9, restart on its data dir).
- `brokers`: a BrokerService in the test's loop, a `popmq broker` subprocess, and a server
  whose proxy reaches its broker through BrokerService.
- `inprocess_cluster`: etcd, brokers and proxies in one background event loop.
- `cluster`: etcd, `popmq broker` and `popmq proxy` subprocesses; `replicas`: the same with
  replicated shards; `netns`: one replica behind a link a test can cut, or drop one way.
- `etcd`: a real etcd; `ports`: loopback ports chosen up front; `certs`: test certificates.
- `waiting`: `wait_until` and `until`, for state no call can wait on.
- `logs`: the errors the in-process server logged, without grpc's multi-loop noise.
- `run_async`: an `async def` test body in its own event loop.
"""
