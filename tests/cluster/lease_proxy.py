"""A proxy process for tests/cluster/test_leases_across_proxies.py: a PopMQServer over a
RemoteBroker, keeping its leases in an EtcdCoordinator; prints `listening on HOST:PORT`
and serves until it is killed (the test kills it with SIGKILL: a proxy's death).

`popmq proxy` will be this process (with routing over several brokers); until it exists
the test starts this one.

    python -m tests.cluster.lease_proxy --broker HOST:PORT --etcd HOST:PORT --cluster NAME
"""

from __future__ import annotations

import argparse
import asyncio

from popmq.cluster import RemoteBroker
from popmq.coordination import EtcdCoordinator
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig


async def _serve(broker: str, etcd: str, cluster: str) -> None:
    async with EtcdCoordinator(etcd, cluster=cluster) as coordinator:
        server = PopMQServer(
            ServerConfig(listen="127.0.0.1:0", shutdown_grace_s=1.0),
            broker=RemoteBroker(broker, call_timeout_s=5.0, catalog_refresh_s=1.0),
            coordinator=coordinator,
        )
        port = await server.start()
        print(f"listening on 127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--etcd", required=True)
    parser.add_argument("--cluster", required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.broker, args.etcd, args.cluster))


if __name__ == "__main__":
    main()
