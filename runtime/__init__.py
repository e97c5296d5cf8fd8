"""What every popmq server process runs on: `popmq serve`, `popmq proxy`, `popmq broker`
and a shard's replicas.

- config.py: `ServerConfig`, the one configuration of every process, with the sections no
  lower package owns (`[connections]`, `[clients]`); settings.py reads it from a TOML
  file, POPMQ_* variables and flags (`--set`, the dedicated flags);
- process.py: the gRPC server with its limits and pending-call bound, the `listen` and
  `plaintext_listen` listeners, the metrics endpoint, the stop and reload signals, the
  event loop and the exit code of a start error;
- metrics.py: a process's Prometheus registry (its broker's families, denied requests,
  process and Python families) and the endpoint that serves it;
- logs.py: log lines as text or JSON, with their context;
- collector.py: Python's garbage collector in a server (`[gc]`): the start-up heap frozen
  once the process serves, the young generation's threshold.

It builds on broker_core, coordination (cluster mode's sections) and security (TLS of the
listeners, the metrics endpoint's credentials, the denied-request counts), and imports
neither the proxy nor the broker process: both run on it.
"""

from popmq.runtime.config import ServerConfig

__all__ = ["ServerConfig"]
