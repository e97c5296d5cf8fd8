"""etcd paused (SIGSTOP) for longer than the session TTL, then resumed, on real processes
(etcd, two standalone `popmq broker`s, two `popmq proxy`s; tests/support/cluster.py), under
a steady stream of sends and receives through both proxies.

A pause differs from a restart: a restarted etcd restores its leases with their whole TTL
(so each member takes its key over, test_cluster_etcd_outage.py), but a resumed one finds
every lease past its expiry and revokes them all at once, before any keepalive can land.
Every member key vanishes together; the members register again under new keys (new
epochs). Meanwhile:

- no send fails, receives keep delivering and every acknowledged message is received: the
  proxies keep routing to a broker whose registration vanished while its connection is up,
  until it registers again;
- the proxies' health never turns NOT_SERVING: the brokers never left;
- an admin write made once the proxy has noticed the hang (its session keepalive went
  unanswered, then its probe) fails at once, without a try, retriably, naming etcd; one
  made as the pause began waits at most the etcd call timeout; reads served from the
  proxy's caches go on;
- within 10 s of the resume every member holds a registration again, and an admin write
  works and is served through the other proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from popmq import (
    AsyncAdmin,
    AsyncProducer,
    AsyncSimpleConsumer,
    PopMQError,
    ReceivedMessage,
    UnavailableError,
)
from popmq.coordination.etcd import DEFAULT_TIMEOUT_S
from popmq.coordination.etcd_reachability import PROBE_TIMEOUT_S, UNANSWERED_AFTER_S
from tests.cluster.test_cluster_etcd_outage import (
    _creates,
    _registered_again,
    _serves,
    _topic_and_leases,
)
from tests.cluster.traffic import SendLog, compare, drain, ids_of, receive_loop, send_loop
from tests.support.cluster import Cluster
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)

SESSION_TTL_S = 3
PAUSED_S = SESSION_TTL_S + 4
"""How long etcd stays paused: past the TTL, so every lease has expired when it resumes."""
BACK_WITHIN_S = 10.0
AFTER_S = 3.0
"""How long traffic goes on after the members registered again."""
NOTICED_WITHIN_S = SESSION_TTL_S / 3 + UNANSWERED_AFTER_S + PROBE_TIMEOUT_S + 1
"""By then the proxy knows etcd is hung: a session keepalive (every TTL/3) has waited
UNANSWERED_AFTER_S unanswered, and the probe's Status sent then PROBE_TIMEOUT_S (plus a
second for a busy machine)."""
ADMIN_FAILS_WITHIN_S = 2.5
"""An admin write the proxy refuses at once, with a generous margin."""


async def _admin_write_during_pause(admin: AsyncAdmin, topic: str) -> tuple[float, str]:
    """Try to create `topic` during the pause: how long the refusal took, and its text."""
    began = time.monotonic()
    with pytest.raises(UnavailableError) as refused:
        await admin.create_topic(topic, queues=1)
    assert refused.value.code == "UNAVAILABLE" and refused.value.retriable
    return time.monotonic() - began, str(refused.value)


async def _watch_health(address: str, seen: list[str]) -> None:
    """Append every health status the proxy reports (grpc.health.v1 Watch) to `seen`."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
        async for reply in call:
            seen.append(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


async def _pause(cluster: Cluster) -> None:
    topic, group = "through-pause", "pause-readers"
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    leases = await _topic_and_leases(cluster, topic, group)

    stop = asyncio.Event()
    logs = {"p1": SendLog(), "p2": SendLog()}
    received: list[tuple[float, ReceivedMessage]] = []
    receive_errors: list[str] = []
    health: dict[str, list[str]] = {"p1": [], "p2": []}
    watchers = [
        asyncio.create_task(_watch_health(cluster.endpoint(p), seen)) for p, seen in health.items()
    ]

    async with (
        AsyncProducer(p1) as producer1,
        AsyncProducer(p2) as producer2,
        AsyncSimpleConsumer(p1, group=group, topic=topic) as consumer1,
        AsyncSimpleConsumer(p2, group=group, topic=topic) as consumer2,
        AsyncAdmin(p1) as admin,
    ):
        tasks = [
            asyncio.create_task(send_loop(producer1, topic, "a", stop, logs["p1"], pause_s=0.03)),
            asyncio.create_task(send_loop(producer2, topic, "b", stop, logs["p2"], pause_s=0.03)),
            asyncio.create_task(receive_loop(consumer1, stop, received, receive_errors)),
            asyncio.create_task(receive_loop(consumer2, stop, received, receive_errors)),
        ]
        await until(lambda: len(received) >= 20, "traffic before the pause", 30, interval_s=0.1)
        assert health == {"p1": ["SERVING"], "p2": ["SERVING"]}, health

        cluster.etcd.pause()
        paused_at = time.monotonic()
        try:
            # Before the hang is noticed: waits for etcd's answer, up to the call timeout.
            early = asyncio.create_task(_admin_write_during_pause(admin, "as-pause-began"))
            await asyncio.sleep(NOTICED_WITHIN_S)
            took, refused = await _admin_write_during_pause(admin, "during-pause")
            print(f"admin write during the pause: refused in {took:.2f}s: {refused}")
            assert took < ADMIN_FAILS_WITHIN_S, (took, refused)
            assert "etcd is unreachable" in refused and "Retry once it is back" in refused
            assert "a Status request to every endpoint has waited" in refused  # no try
            with pytest.raises(UnavailableError, match="etcd is unreachable"):
                await admin.create_group("during-pause-readers")
            assert (await admin.get_topic(topic)).topic.name == topic  # from the cache
            took_early, refused_early = await early
            print(f"admin write as the pause began: refused in {took_early:.2f}s")
            assert took_early < DEFAULT_TIMEOUT_S + ADMIN_FAILS_WITHIN_S, refused_early
            await asyncio.sleep(max(0.0, PAUSED_S - (time.monotonic() - paused_at)))
        finally:
            cluster.etcd.resume()
        back_at = time.monotonic()
        # The brokers kept serving through the pause: they need no etcd to take sends.
        expired_at = paused_at + SESSION_TTL_S + 1
        sent_late = [t for log in logs.values() for t in log.done_at.values() if t > expired_at]
        assert sent_late, "no send was acknowledged once every lease had expired"

        await until(
            lambda: _registered_again(cluster, leases),
            "new registrations",
            BACK_WITHIN_S,
            interval_s=0.2,
        )
        registered_s = time.monotonic() - back_at

        await until(
            lambda: _creates(admin, "after-pause", refused=PopMQError),
            "an admin write",
            BACK_WITHIN_S,
            interval_s=0.2,
        )
        admin_s = time.monotonic() - back_at
        print(f"after etcd's resume: registered in {registered_s:.1f}s, admin in {admin_s:.1f}s")
        async with AsyncAdmin(p2) as other:
            await until(lambda: _serves(other, "after-pause"), "p2 serves it", 10, interval_s=0.1)

        registered_at = time.monotonic()
        await asyncio.sleep(AFTER_S)
        assert sorted(await cluster.live_brokers()) == ["b1", "b2"]
        stop.set()
        await asyncio.gather(*tasks)
        got = ids_of(m for _, m in received)
        got += ids_of(await drain(consumer1))
        got += ids_of(await drain(consumer2))

    for watcher in watchers:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await watcher

    errors = [e for log in logs.values() for e in log.errors]
    sent = {i for log in logs.values() for i in log.receipts}
    attempted = {i for log in logs.values() for i in log.attempted}
    print(
        f"sends {len(attempted)}, errors {errors[:10]}; receive errors {receive_errors[:10]}; "
        f"health {health}; {compare(sent, got)}"
    )
    assert errors == [], f"sends failed: {errors[:10]}"
    assert receive_errors == [], receive_errors[:10]
    assert sent <= set(got), compare(sent, got)
    assert set(got) <= attempted, compare(sent, got)
    # Receives went on delivering through the pause and after it.
    assert any(expired_at < t < back_at for t, _ in received), "nothing received while paused"
    assert any(t > registered_at for t, _ in received), "nothing received after the resume"
    # Neither proxy ever lost its brokers.
    assert health == {"p1": ["SERVING"], "p2": ["SERVING"]}, health


@pytest.mark.cluster_options(brokers=2, proxies=2, session_ttl_s=SESSION_TTL_S)
def test_sends_and_receives_go_on_through_an_etcd_pause_past_the_session_ttl(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_pause(own_cluster))
