"""The broker process: `popmq broker`, one broker core served to the proxies over gRPC.

- server.py: the process (`BrokerServer`, `run_broker`): BrokerService and health on its
  listener, its etcd registration, the catalog sync, and, with `--shard`, one replica of a
  shard instead (replication/replica.py);
- service.py: the BrokerService servicer over a `Broker`; wire.py: the conversions of API
  values and errors it shares with the proxies' `RemoteBroker` (popmq.cluster);
- fencing.py: how a broker that may have been replaced stops writing (the write fence
  BrokerService asks, the task that follows its etcd registration, a shard leader's lease);
- catalog_sync.py: the broker's topics and groups kept in step with the cluster's routes
  and group records;
- replication/: replica sets of a shard (docs/replication.md).

It builds on broker_core, coordination, security and runtime, and imports nothing of the
proxy or of the proxies' cluster routing (popmq.cluster, which imports wire.py from here).
"""

from popmq.broker.catalog_sync import CatalogSync
from popmq.broker.server import BrokerServer, run_broker
from popmq.broker.service import BrokerServicer, add_broker_service

__all__ = ["BrokerServer", "BrokerServicer", "CatalogSync", "add_broker_service", "run_broker"]
