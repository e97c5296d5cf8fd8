"""Authentication in cluster mode: clients sign their calls to the proxies, the proxies sign
their BrokerService calls with the root credential, and brokers refuse unsigned or wrongly
signed calls (real etcd, `popmq broker` and `popmq proxy` processes)."""

from __future__ import annotations

import asyncio

import pytest

from popmq import Admin, Credentials, Producer, SimpleConsumer, UnauthenticatedError
from popmq.broker_core import InternalError
from popmq.cluster import RemoteBroker
from popmq.security.signing import Signer
from tests.support.cluster import Cluster

ROOT = Credentials("root", "clust3r-r00t")
_ENV = {
    "POPMQ_SECURITY_AUTHENTICATION": "true",
    "POPMQ_SECURITY_ROOT_ACCESS_KEY": ROOT.access_key,
    "POPMQ_SECURITY_ROOT_SECRET_KEY": ROOT.secret_key,
}


async def _list_topics(address: str, signer: Signer | None) -> list[str]:
    remote = RemoteBroker(address, call_timeout_s=5.0, catalog=False, signer=signer)
    await remote.start()
    try:
        return [topic.name for topic in await remote.list_topics()]
    finally:
        await remote.close()


@pytest.mark.cluster_options(brokers=2, proxies=1, env=_ENV, credentials=ROOT)
def test_proxies_sign_broker_calls_and_brokers_refuse_anyone_else(own_cluster: Cluster) -> None:
    endpoint = own_cluster.endpoints[0]
    with Admin(endpoint, credentials=ROOT) as admin:
        admin.create_topic("orders", queues=4)  # two queues on each broker
        admin.create_group("billing")
    with Producer(endpoint, credentials=ROOT) as producer:
        for i in range(8):
            producer.send("orders", f"m{i}".encode())
    assert asyncio.run(own_cluster.stored_per_broker("orders")) == {"b1": 4, "b2": 4}
    with SimpleConsumer(endpoint, group="billing", topic="orders", credentials=ROOT) as consumer:
        got: list[bytes] = []
        for _ in range(20):
            batch = consumer.receive(max_messages=8, wait_s=1)
            got += [m.body for m in batch]
            for message in batch:
                consumer.ack(message)
            if len(got) >= 8:
                break
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(8))

    with Admin(endpoint) as admin, pytest.raises(UnauthenticatedError):
        admin.list_topics()

    broker = own_cluster.broker_address("b1")
    assert "orders" in asyncio.run(_list_topics(broker, Signer(ROOT.access_key, ROOT.secret_key)))
    for signer in (None, Signer(ROOT.access_key, "not-the-secret")):
        with pytest.raises(InternalError, match="refused this proxy's credentials"):
            asyncio.run(_list_topics(broker, signer))
