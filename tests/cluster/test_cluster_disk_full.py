"""A broker whose disk fills up, in a cluster of real processes (etcd, two `popmq broker`s,
one `popmq proxy`; tests/support/cluster.py), b1's store on a small tmpfs:

- sends go on with no client error: the full broker refuses them before writing
  (RESOURCE_EXHAUSTED) and the proxy moves them to the other broker;
- the full broker still serves pops and acks of what it holds;
- once space returns it takes sends again, without a restart;
- nothing acknowledged is lost.

Needs root to mount a tmpfs (as on our CI machines); skipped elsewhere with the reason.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, ReceivedMessage
from tests.chaos.disk_full import MountError, NotASmallVolumeError, fill_volume, mounted_tmpfs
from tests.cluster.traffic import compare, ids_of
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

DISK_MIB = 64
LEFT_FREE_MIB = 4
"""Free space left on b1's disk: below the 8 MiB sends need, above what acks and pops use."""
RESUME_WITHIN_S = 30.0
_MIB = 1 << 20


def test_a_filler_aimed_at_the_machines_own_disk_writes_nothing(tmp_path: Path) -> None:
    """A missing mount must fail the one test, not fill the disk under the whole suite."""
    fillers: list[Path] = []
    with pytest.raises(NotASmallVolumeError, match="not a mounted volume of at most 64 MiB"):
        fill_volume(tmp_path, LEFT_FREE_MIB, fillers, volume_mib=DISK_MIB)
    assert fillers == [] and list(tmp_path.iterdir()) == []


def test_a_filler_stops_when_its_volume_is_full(tmp_path: Path) -> None:
    try:
        with mounted_tmpfs(tmp_path / "disk", 4) as disk:
            fillers: list[Path] = []
            fill_volume(disk, None, fillers, volume_mib=4)
            assert 4 <= len(fillers) <= 5, fillers
            assert os.statvfs(disk).f_bavail == 0
    except MountError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def cluster_on_small_disk(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path / "cluster", brokers=2, proxies=1)
    try:
        with mounted_tmpfs(cluster.processes["b1"].data_dir, DISK_MIB):
            cluster.start()
            try:
                yield cluster
            finally:
                cluster.stop()
    except MountError as exc:
        pytest.skip(str(exc))


async def _scenario(cluster: Cluster) -> None:
    topic, group = "filling", "fill-readers"
    proxy = cluster.endpoint("p1")
    async with AsyncAdmin(proxy) as admin:
        await admin.create_topic(topic, queues=2)
        await admin.create_group(group)
    queues = await cluster.route_queues(topic)

    def broker_of(queue_id: int) -> str:
        return queues[queue_id][0]

    sent: dict[str, str] = {}  # id -> the broker that stored it
    async with AsyncProducer(proxy) as producer:

        async def send(prefix: str, count: int) -> list[str]:
            stored = []
            for n in range(count):
                message_id = f"{prefix}{n:04d}"
                receipt = await producer.send(topic, message_id.encode())  # no error allowed
                sent[message_id] = broker_of(receipt.queue_id)
                stored.append(sent[message_id])
            return stored

        before = await send("before-", 40)
        assert {"b1", "b2"} <= set(before), before

        b1_disk = cluster.processes["b1"].data_dir
        fillers: list[Path] = []
        await asyncio.to_thread(fill_volume, b1_disk, LEFT_FREE_MIB, fillers, volume_mib=DISK_MIB)
        stats = os.statvfs(b1_disk)
        free_mib = stats.f_bavail * stats.f_frsize / _MIB
        print(f"b1's disk: {len(fillers)} MiB of filler, {free_mib:.1f} MiB free")

        # Full: every send is stored, on b2.
        during = await send("full-", 60)
        assert set(during) == {"b2"}, during

        # The full broker still serves pops and acks of what it holds.
        received: list[ReceivedMessage] = []
        async with AsyncSimpleConsumer(proxy, group=group, topic=topic) as consumer:
            deadline = time.monotonic() + 60
            while len(ids_of(received)) < len(sent) and time.monotonic() < deadline:
                batch = await consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=1)
                await consumer.ack(batch)  # acks on the full broker work too
                received.extend(batch)
            assert set(ids_of(received)) == set(sent), compare(set(sent), ids_of(received))
            assert any(sent[i] == "b1" for i in ids_of(received))

            # Space returns: b1 takes sends again, without a restart.
            for path in fillers:
                path.unlink()
            freed_at = time.monotonic()
            after: list[str] = []
            while "b1" not in after:
                assert time.monotonic() - freed_at < RESUME_WITHIN_S, after[-20:]
                after += await send(f"after-{len(after):04d}-", 1)
            print(f"b1 took a send again {time.monotonic() - freed_at:.1f}s after space returned")
            deadline = time.monotonic() + 60
            while len(ids_of(received)) < len(sent) and time.monotonic() < deadline:
                batch = await consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=1)
                await consumer.ack(batch)
                received.extend(batch)
    assert set(ids_of(received)) == set(sent), compare(set(sent), ids_of(received))


def test_a_full_brokers_sends_move_elsewhere_and_it_still_serves_pops_and_acks(
    cluster_on_small_disk: Cluster,
) -> None:
    asyncio.run(_scenario(cluster_on_small_disk))
