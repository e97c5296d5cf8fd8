"""Total-queue checker: no acknowledged send is lost across kill -9 of the server.

Modelled on Jepsen's total-queue workload (RabbitMQ suite) and RocketMQ OpenChaos's
QueueChecker. The real server runs as a subprocess (``python -m popmq.cli serve``) on a fixed data
dir. While producers send unique ids and consumers pop and ack them, a nemesis SIGKILLs the
server at random moments and restarts it on the same data dir (a new port each time; the
clients re-read the endpoint). At the end everything is drained and the history checked:

- **lost**: ids whose send returned a receipt (acknowledged) and that no consumer ever
  processed. Must be 0 with ``--flush sync``.
- **unexpected**: ids received that were never sent. Must be 0.
- **duplicates**: ids processed more than once. At-least-once delivery allows them; counted.
- **indeterminate**: sends that failed (usually because the server died under them). They
  may or may not be stored; missing is fine, and those that appeared are reported.
- **given back**: with ``--crashing-consumers`` half of the consumers now and then drop a
  popped batch without acking it (a consumer crash mid-batch); with ``--nack-probability``
  consumers nack some messages. Those deliveries do not count as processed: every such id
  must come back (after its invisible time or nack delay) and be processed.

A delivery counts as *processed* when the consumer got it and went on to ack it, whatever
the ack's outcome (an ack cut off by a kill may or may not have been applied).

Cluster mode (``--cluster``, targets.py): the same workload against etcd + 3 ``popmq
broker`` + 2 ``popmq proxy`` subprocesses (tests/support/cluster.py). Producers and
consumers are spread over the proxies (a consumer uses another proxy than the producer of
the same number). The nemesis kill -9s a random broker (``--kills``) or proxy
(``--proxy-kills``), waits for its etcd lease to lapse (``--session-ttl``), restarts it on its
address and data dir and waits until every proxy serves it. Sends go on through the other
brokers meanwhile, so ``--send-rate`` paces the producers to keep sending while the kills
happen. The nemesis also kill -9s etcd (``--etcd-kills``) or SIGSTOPs it (``--etcd-pauses``)
for the session TTL + 1 s, and SIGSTOPs a random broker for 11 s, past the proxy's 10 s call
timeout (``--broker-pauses``): standalone brokers keep taking writes through an etcd outage,
and a hung broker's sends move on. ``--disk-fulls`` puts each broker's data dir on a tmpfs
of its own (root) and fills a random broker's one until sends no longer fit, for 8 s: its
sends must move to the other brokers while its queues still pop and ack (faults.py).
``--queues`` is per broker there (RocketMQ's count). The clean stop is a SIGTERM of every
proxy and broker. Failed client calls are reported per fault kind: a failure counts for the
latest fault it overlaps, up to 5 s after that fault ended (faults.py); after each etcd
fault, broker pause and disk full every broker must be registered in etcd again within 10 s
(a broker left out takes no sends and serves no pops, which no client error shows).

Replicated mode (``--replicated``, replicated.py): etcd + ``--shards`` x ``--replicas``
``popmq broker --shard`` replicas (replication defaults: sync, min_insync 1) + proxies. Once 5 %
of the ids were sent, the nemesis fails over one random shard's leader after another: kill -9
(``--kills``; the killed replica is started again once another one leads, and comes back as a
follower) or SIGSTOP past its lease and SIGCONT (``--pauses``; right after waking, direct sends
to it must all be refused). A failover ends when the shard has all its followers in sync again
and takes sends again, directly and through every proxy; the next begins
``--failover-gap`` later. ``--session-ttl`` is the leader lease. Besides the total-queue
findings it reports per failover the seconds from the kill until the new leader is registered,
until the shard stores a send again (with min_insync 1 only once the restarted replica is back
in sync) and until a send through each proxy reaches it, and the cluster-wide send
availability meanwhile (the other shards take the sends), and lists the ERROR lines of every
process's log (a replica can stay up after an error that leaves it useless). Violations add: a
woken leader that stored a send, a shard that never took sends again.

One-way partitions (``--leader-partitions N``, replicated mode, Linux as root with ``ip`` and
``tc``): replica ``s1-r1`` runs in its own network namespace, and N failovers drop, in turn,
the packets from etcd to the leader, from the leader to etcd, from its peers (followers and
proxies) to the leader, and from the leader to its peers (replicated.py). ``s1-r1`` is made
to lead first (a SIGTERM handover) when it does not. An etcd cut lasts until another replica
leads and one lease more, while sends go straight to the cut-off leader; then it heals, and
the old leader must rejoin in sync. A peer cut leaves the lease: it lasts past the
followers' lag timeout, and after the heal the followers must rejoin in sync and the shard
take sends again under the same leader. Violations add: the cut-off leader acknowledged a
send begun after the new leader was registered (two leaders), a replica not back in sync
after the heal; the sends it acknowledged count as acknowledged sends (lost if never
received). The CI test replaces them with kills, saying why, where namespaces or tc drops
cannot be made.

Usage::

    python -m tests.chaos.checker --messages 50000 --kills 8 --producers 4 --consumers 4 \\
        --flush sync [--crashing-consumers] [--seed N] [--json result.json]
    python -m tests.chaos.checker --cluster --messages 40000 --kills 6 --proxy-kills 2 \\
        --etcd-kills 2 --etcd-pauses 2 --broker-pauses 2 --disk-fulls 2 --send-rate 200 \\
        --crashing-consumers --seed 20261129   # full-sized, ~4 min (the sends outlast the
                                               # faults, one after another); output kept in
                                               # bench/results/cluster_checker_faults.txt
    python -m tests.chaos.checker --replicated --messages 3600 --kills 3 --pauses 1 \\
        --leader-partitions 2 --session-ttl 3 --send-rate 30 --queues 2 \\
        --seed 20261127              # CI-sized, ~2.5 min (without namespaces: --kills 5)
    python -m tests.chaos.checker --replicated --messages 24000 --kills 10 --pauses 2 \\
        --session-ttl 10 --send-rate 60 --producers 4 --consumers 4 --queues 4 \\
        --seed 20261127              # full-sized, 10 s lease, ~8 min; output kept in
                                     # bench/results/replication_checker.txt
    python -m tests.chaos.checker --replicated --messages 24000 --kills 10 --pauses 2 \\
        --leader-partitions 4 --session-ttl 10 --send-rate 60 --producers 4 --consumers 4 \\
        --queues 4 --seed 20261127   # the same with 4 one-way partitions (root); output kept
                                     # in bench/results/cluster_checker_partitions.txt

The exit code is 1 when the run breaks what its flush mode promises (see
``CheckResult.violations``: with sync flush, any lost acknowledged send), else 0.
``run_check`` and ``check`` are the same run for tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from popmq import (
    AsyncAdmin,
    AsyncProducer,
    AsyncSimpleConsumer,
    Message,
    PopMQError,
    ReceivedMessage,
)
from popmq.sdk._channel import AsyncClient
from tests.chaos.faults import DISK_FULL, CallRecord, FaultWindow
from tests.chaos.history import (
    CheckResult,
    History,
    SendRecord,
    evaluate,
    seconds_span,
    span_text,
)
from tests.chaos.replicated import (
    LEADER_KILL,
    LEADER_PARTITIONS,
    LEADER_PAUSE,
    PEER_CUTS,
    ReplicatedTarget,
)
from tests.chaos.targets import (
    BROKER_PAUSE,
    ETCD_KILL,
    ETCD_PAUSE,
    ClusterTarget,
    LocalTarget,
    Target,
)
from tests.support.cluster import Cluster
from tests.support.server_process import (
    EndpointHolder,
    ServerDiedError,
)

__all__ = [
    "GROUP",
    "TOPIC",
    "CheckConfig",
    "CheckResult",
    "History",
    "SendRecord",
    "check",
    "evaluate",
    "main",
    "run_check",
]

TOPIC = "chaos-total-queue"
GROUP = "chaos-checker"
_MAX_DELIVERY_ATTEMPTS = 1000
"""High enough that no message reaches the dead-letter topic during a run."""
_RETRY_BACKOFF_S = 0.05
"""Pause before repeating a call that failed while the server was up (not killed)."""
_NACK_DELAY_S = 1.0

C = TypeVar("C", bound=AsyncClient)
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class CheckConfig:
    """One checker run.

    Attributes:
        messages: Ids the producers try to send, in total (each id is sent once).
        kills: Times the nemesis SIGKILLs the server, at random points of the production.
        producers: Concurrent producer tasks.
        consumers: Concurrent consumer tasks.
        flush: The server's ``--flush``.
        crashing_consumers: Make half of the consumers (at least one) crash mid-batch now
            and then: drop the popped batch unacked and drop their connection.
        abandon_probability: Chance that a crashing consumer drops a batch.
        nack_probability: Chance that a consumer nacks a message (redelivery after 1 s)
            instead of acking it.
        batch_size: Ids per SendMessages call (an atomic batch).
        queues: Queues of the topic.
        invisible_s: (min, max) invisible duration of a pop, drawn uniformly per pop: the
            redelivery delay of a dropped batch. The broker persists a checkpoint 3 s before
            its deadline, so below 3 s checkpoints are written at once and above it they
            stay buffered in memory for a while (what a kill loses); 3..5 s covers both.
        poll_wait_s: Long-polling wait of each pop.
        drain_timeout_s: Bound of the final drain.
        start_timeout_s: Bound of one server start.
        rpc_timeout_s: Timeout of each client call (a pop waits ``poll_wait_s`` longer).
        seed: Seed of the nemesis and of the consumers' choices; None picks one (reported).
        data_dir: Where the store and the server log go; None: a temp dir, removed after a
            run without violations unless ``keep_data``.
        keep_data: Keep the temp data dir.
        verify_clean_restart: After the drain, stop with SIGTERM, start again and count
            what a pop still returns (nothing, if the clean stop kept all acks), then stop.
        cluster: Run against a cluster (targets.ClusterTarget) instead of one server;
            ``kills`` are then broker kills and ``queues`` are per broker.
        brokers: Cluster mode: brokers (at least 2, so that one is up during a kill).
        proxies: Cluster mode: proxies.
        session_ttl_s: Cluster mode: ``cluster.session_ttl_s`` of every process (how long a
            killed one stays registered, and so how long each kill lasts at least).
        proxy_kills: Cluster mode: times the nemesis kill -9s a proxy.
        etcd_kills: Cluster mode: times the nemesis kill -9s etcd, keeps it down past the
            session TTL (``session_ttl_s`` + 1 s) and starts it again on its data.
        etcd_pauses: Cluster mode: times the nemesis SIGSTOPs etcd for as long, then
            SIGCONTs it.
        broker_pauses: Cluster mode: times the nemesis SIGSTOPs a random broker past the
            proxy's 10 s broker call timeout (11 s), then SIGCONTs it.
        disk_fulls: Cluster mode: times the nemesis fills a random broker's data volume
            (each broker's is a tmpfs of ``disk_mib``; needs root) until sends no longer
            fit, holds it 8 s and frees it.
        disk_mib: Cluster mode with ``disk_fulls``: size of each broker's tmpfs.
        send_rate: Sends per second of all producers together (each send is one batch);
            0: as fast as they go.
        replicated: Run against replicated shards (replicated.ReplicatedTarget); ``kills``
            are then kill -9s of a random shard's leader and ``queues`` are per shard.
        shards: Replicated mode: shards (at least 2: sends go to another during a failover).
        replicas: Replicated mode: replicas per shard (at least 2).
        pauses: Replicated mode: times the nemesis SIGSTOPs a random shard's leader past its
            lease (``session_ttl_s``) and SIGCONTs it.
        leader_partitions: Replicated mode: times the nemesis cuts `s1-r1`, made to lead
            first, one way from etcd or from its peers (in turn: etcd's packets to it, its
            packets to etcd, its peers' packets to it, its packets to them), then heals
            (replicated.py says when).
        peer_cuts: Replicated mode: times the nemesis cuts `s1-r1`, made to lead first, one
            way from its peers only (in turn: their packets to it, its packets to them): the
            peer cuts of ``leader_partitions`` without the etcd ones.
        failover_gap_s: Replicated mode: (min, max) seconds between the end of one failover
            and the next, drawn uniformly.
        failover_timeout_s: Replicated mode: bound of each step of a failover.
    """

    messages: int = 3000
    kills: int = 3
    producers: int = 2
    consumers: int = 2
    flush: Literal["sync", "async"] = "sync"
    crashing_consumers: bool = False
    abandon_probability: float = 0.3
    nack_probability: float = 0.0
    batch_size: int = 1
    queues: int = 4
    invisible_s: tuple[float, float] = (3.0, 5.0)
    poll_wait_s: float = 1.0
    drain_timeout_s: float = 90.0
    start_timeout_s: float = 60.0
    rpc_timeout_s: float = 10.0
    seed: int | None = None
    data_dir: Path | None = None
    keep_data: bool = False
    verify_clean_restart: bool = True
    cluster: bool = False
    brokers: int = 3
    proxies: int = 2
    session_ttl_s: int = 3
    proxy_kills: int = 0
    etcd_kills: int = 0
    etcd_pauses: int = 0
    broker_pauses: int = 0
    disk_fulls: int = 0
    disk_mib: int = 128
    send_rate: float = 0.0
    replicated: bool = False
    shards: int = 2
    replicas: int = 2
    pauses: int = 0
    leader_partitions: int = 0
    peer_cuts: int = 0
    failover_gap_s: tuple[float, float] = (0.5, 2.0)
    failover_timeout_s: float = 120.0

    @property
    def cluster_faults(self) -> int:
        """etcd kills, etcd pauses, broker pauses and disk-full faults."""
        return self.etcd_kills + self.etcd_pauses + self.broker_pauses + self.disk_fulls

    def __post_init__(self) -> None:
        if self.messages < 1 or self.producers < 1 or self.consumers < 1:
            raise ValueError("messages, producers and consumers must be at least 1")
        faults = self.kills + self.proxy_kills + self.cluster_faults
        if (
            min(self.proxy_kills, self.etcd_kills, self.etcd_pauses, self.broker_pauses) < 0
            or self.disk_fulls < 0
        ):
            raise ValueError("fault counts must be at least 0")
        if not 0 <= faults <= self.messages * 9 // 10 - 1:
            raise ValueError(
                f"kills (with proxy kills and the other cluster faults) must be within "
                f"0..{self.messages * 9 // 10 - 1}"
            )
        if not self.cluster and (self.proxy_kills or self.cluster_faults):
            raise ValueError(
                "proxy kills, etcd kills and pauses, broker pauses, disk fulls need cluster mode"
            )
        if self.disk_fulls and self.disk_mib < 32:
            raise ValueError("disk_mib must be at least 32 (the store needs room to work)")
        if self.replicated:
            if self.cluster:
                raise ValueError("choose cluster or replicated mode, not both")
            if self.shards < 2 or self.replicas < 2 or self.proxies < 1:
                raise ValueError("replicated mode needs 2+ shards, 2+ replicas and 1+ proxies")
            if self.session_ttl_s < 2 or self.failover_timeout_s < 10:
                raise ValueError(
                    "replicated mode needs session_ttl_s 2+ and failover_timeout_s 10+"
                )
            gap_low, gap_high = self.failover_gap_s
            if not 0 <= gap_low <= gap_high <= 600:
                raise ValueError("failover_gap_s must be (min, max) within 0..600 s")
            if self.leader_partitions < 0:
                raise ValueError("leader_partitions must be at least 0")
            if self.peer_cuts < 0:
                raise ValueError("peer_cuts must be at least 0")
        elif self.pauses or self.leader_partitions or self.peer_cuts:
            raise ValueError("pauses, leader partitions and peer cuts need replicated mode")
        if self.cluster and (self.brokers < 2 or self.proxies < 1 or self.session_ttl_s < 2):
            raise ValueError("cluster mode needs 2+ brokers, 1+ proxies and session_ttl_s 2+")
        if not (0 <= self.send_rate < math.inf):
            raise ValueError("send_rate must be 0 (unpaced) or a positive number of sends/s")
        if not 1 <= self.batch_size <= 1024:
            raise ValueError("batch_size must be within 1..1024")
        if not 0 <= self.abandon_probability < 1 or not 0 <= self.nack_probability < 1:
            raise ValueError("probabilities must be within [0, 1)")
        low, high = self.invisible_s
        if not 1 <= low <= high <= 60 or not 0 <= self.poll_wait_s <= 30:
            raise ValueError("invisible_s must be within 1..60 s and poll_wait_s within 0..30 s")


class Reconnecting(Generic[C]):
    """A client for the current server incarnation, replaced once the server restarted.

    Args:
        holder: Where the server currently listens.
        factory: Makes a client for an endpoint.
    """

    def __init__(self, holder: EndpointHolder, factory: Callable[[str], C]) -> None:
        self._holder = holder
        self._factory = factory
        self._client: C | None = None
        self._generation = 0

    async def get(self) -> C:
        """The client for the serving incarnation; waits while the server is down."""
        await self._holder.up.wait()
        if self._client is None or self._generation != self._holder.generation:
            await self.close()
            self._client = self._factory(self._holder.address)
            self._generation = self._holder.generation
        return self._client

    async def after_failure(self) -> None:
        """Call after a failed call. A kill clears ``up`` first, so a failure while the same
        incarnation is still up is not the nemesis: pause before repeating the call."""
        if self._holder.up.is_set() and self._generation == self._holder.generation:
            await asyncio.sleep(_RETRY_BACKOFF_S)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()


class _Progress:
    """Sends finished (acknowledged or not); the nemesis waits for thresholds of it."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = asyncio.Condition()

    async def add(self, n: int) -> None:
        async with self._changed:
            self.count += n
            self._changed.notify_all()

    async def reached(self, n: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.count >= n)


class TotalQueueChecker:
    """One run: server (or cluster), producers, consumers, nemesis, drain, ``evaluate``."""

    def __init__(self, config: CheckConfig, data_dir: Path, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.rng = random.Random(seed)
        self.data_dir = data_dir
        self.target: Target
        if config.replicated:
            self.target = ReplicatedTarget(
                data_dir,
                shards=config.shards,
                replicas=config.replicas,
                proxies=config.proxies,
                session_ttl_s=config.session_ttl_s,
                flush=config.flush,
                failover_timeout_s=config.failover_timeout_s,
                on_death=self._server_died,
                partitions=config.leader_partitions + config.peer_cuts > 0,
            )
        elif config.cluster:
            cluster = Cluster(
                data_dir / "cluster",
                brokers=config.brokers,
                proxies=config.proxies,
                session_ttl_s=config.session_ttl_s,
                flush=config.flush,
            )
            self.target = ClusterTarget(
                cluster,
                on_death=self._server_died,
                etcd_down_s=config.session_ttl_s + 1.0,
                disk_mib=config.disk_mib if config.disk_fulls else None,
            )
        else:
            self.target = LocalTarget(
                data_dir,
                flush=config.flush,
                start_timeout_s=config.start_timeout_s,
                on_death=self._server_died,
            )
        self.holders = self.target.holders
        self.holder = self.holders[0]
        """Where setup, the drain's lag reads and the clean-restart check connect."""
        self.kills_by_kind: Counter[str] = Counter()
        self.history = History()
        self.progress = _Progress()
        self.kills = 0
        # Drain: consecutive empty pops across consumers, and the event that says "enough".
        self.draining = False
        self._empty_streak = 0
        self._quiet = asyncio.Event()
        self._quiet_after = 2 * config.consumers
        # Fails with the exception of the first background task that died unexpectedly.
        self._crashed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- workers --------------------------------------------------------------------------

    def _holder_for(self, worker: int, *, consumer: bool) -> EndpointHolder:
        """Producer n uses endpoint n; consumer n the next one, so with several proxies a
        message is mostly sent through one proxy and popped through another."""
        return self.holders[(worker + consumer) % len(self.holders)]

    async def _produce(self, ids: list[str], holder: EndpointHolder) -> None:
        cfg = self.config
        history = self.history
        client = Reconnecting(holder, lambda ep: AsyncProducer(ep, timeout_s=cfg.rpc_timeout_s))
        # Paced: this producer's share of send_rate, one send per interval.
        interval = cfg.producers / cfg.send_rate if cfg.send_rate else 0.0
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        try:
            for start in range(0, len(ids), cfg.batch_size):
                if interval:
                    next_at += interval
                    await asyncio.sleep(max(0.0, next_at - loop.time()))
                chunk = ids[start : start + cfg.batch_size]
                producer = await client.get()
                history.sending(chunk)
                began = time.monotonic()
                try:
                    receipts = await producer.send_batch(
                        TOPIC, [Message(i.encode()) for i in chunk]
                    )
                except PopMQError as exc:
                    ended = time.monotonic()
                    history.send_log.append(SendRecord(began, ended, None))
                    history.failed(CallRecord("send", began, ended, exc.code))
                    history.send_failed(chunk, exc.code)  # maybe stored, maybe not
                    await self.progress.add(len(chunk))
                    await client.after_failure()
                    continue
                history.send_log.append(SendRecord(began, time.monotonic(), receipts[0].queue_id))
                history.sent(chunk, receipts)
                await self.progress.add(len(chunk))
        finally:
            await client.close()

    async def _consume(self, crashing: bool, rng: random.Random, holder: EndpointHolder) -> None:
        cfg = self.config
        history = self.history
        client = Reconnecting(
            holder,
            lambda ep: AsyncSimpleConsumer(
                ep, group=GROUP, topic=TOPIC, timeout_s=cfg.rpc_timeout_s
            ),
        )
        try:
            while True:
                consumer = await client.get()
                began = time.monotonic()
                try:
                    messages = await consumer.receive(
                        max_messages=32,
                        invisible_duration_s=rng.uniform(*cfg.invisible_s),
                        wait_s=cfg.poll_wait_s,
                    )
                except PopMQError as exc:
                    history.pop_errors[exc.code] += 1
                    history.failed(CallRecord("pop", began, time.monotonic(), exc.code))
                    await client.after_failure()
                    continue
                if not messages:
                    self._empty_streak += 1
                    if self.draining and self._empty_streak >= self._quiet_after:
                        self._quiet.set()
                    continue
                self._empty_streak = 0
                if crashing and not self.draining and rng.random() < cfg.abandon_probability:
                    # A crash mid-batch: nothing is acked and the connection goes away too.
                    for m in messages:
                        history.delivered(m, history.abandoned)
                    await client.close()
                    continue
                to_ack: list[ReceivedMessage] = []
                for m in messages:
                    if not self.draining and rng.random() < cfg.nack_probability:
                        history.delivered(m, history.nacked)
                        began = time.monotonic()
                        try:
                            await consumer.nack(m, delay_s=_NACK_DELAY_S)
                        except PopMQError as exc:
                            history.nack_errors[exc.code] += 1
                            history.failed(CallRecord("nack", began, time.monotonic(), exc.code))
                    else:
                        history.delivered(m, history.processed)
                        to_ack.append(m)
                began = time.monotonic()
                try:
                    await consumer.ack(to_ack)
                except PopMQError as exc:
                    # Killed under us, or a handle expired: the message comes back (duplicate).
                    history.ack_errors[exc.code] += 1
                    history.failed(CallRecord("ack", began, time.monotonic(), exc.code))
                    await client.after_failure()
        finally:
            await client.close()

    async def _nemesis(self) -> None:
        cfg = self.config
        if cfg.replicated:
            await self._failovers()
            return
        low, high = max(1, cfg.messages // 20), max(2, cfg.messages * 19 // 20)
        kinds = (
            ["broker" if cfg.cluster else "server"] * cfg.kills
            + ["proxy"] * cfg.proxy_kills
            + [ETCD_KILL] * cfg.etcd_kills
            + [ETCD_PAUSE] * cfg.etcd_pauses
            + [BROKER_PAUSE] * cfg.broker_pauses
            + [DISK_FULL] * cfg.disk_fulls
        )
        self.rng.shuffle(kinds)
        thresholds = sorted(self.rng.sample(range(low, high), len(kinds)))
        for threshold, kind in zip(thresholds, kinds, strict=True):
            await self.progress.reached(threshold)
            # A little jitter so that the kill does not line up with the end of a send.
            await asyncio.sleep(self.rng.uniform(0, 0.02))
            window = FaultWindow(kind, time.monotonic())
            self.history.faults.append(window)
            await self.target.kill_and_restart(kind, self.rng)
            window.ended = time.monotonic()
            self.kills += 1
            self.kills_by_kind[kind] += 1

    async def _failovers(self) -> None:
        """Replicated mode: once 5 % of the ids were sent, fail over one random shard's
        leader after another (each failover ends with its shard back to full strength),
        with a random gap between them."""
        cfg = self.config
        kinds = [LEADER_KILL] * cfg.kills + [LEADER_PAUSE] * cfg.pauses
        kinds += [
            LEADER_PARTITIONS[n % len(LEADER_PARTITIONS)] for n in range(cfg.leader_partitions)
        ]
        kinds += [PEER_CUTS[n % len(PEER_CUTS)] for n in range(cfg.peer_cuts)]
        self.rng.shuffle(kinds)
        await self.progress.reached(max(1, cfg.messages // 20))
        for kind in kinds:
            await asyncio.sleep(self.rng.uniform(*cfg.failover_gap_s))
            await self.target.kill_and_restart(kind, self.rng)
            self.kills += 1
            self.kills_by_kind[kind] += 1

    def _server_died(self, exc: ServerDiedError) -> None:
        if not self._crashed.done():
            self._crashed.set_exception(exc)

    def _watch(self, task: asyncio.Task[Any]) -> None:
        def done(t: asyncio.Task[Any]) -> None:
            if t.cancelled() or self._crashed.done():
                return
            exc = t.exception()
            if exc is not None:
                self._crashed.set_exception(exc)

        task.add_done_callback(done)

    async def _unless_crashed(self, awaitable: Awaitable[T], timeout_s: float | None = None) -> T:
        """Await, but fail at once when a worker died of an unexpected exception.

        Raises:
            TimeoutError: ``timeout_s`` passed first (the awaitable is cancelled).
        """
        task = asyncio.ensure_future(awaitable)
        done, _ = await asyncio.wait(
            {task, self._crashed}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if task not in done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if self._crashed in done:
                self._crashed.result()  # raises the worker's exception
            raise TimeoutError
        return task.result()

    # -- phases ---------------------------------------------------------------------------

    async def _setup(self) -> None:
        # In cluster mode `queues` is per broker, as RocketMQ counts them.
        async with AsyncAdmin(self.holder.address, timeout_s=self.config.rpc_timeout_s) as admin:
            await admin.create_topic(TOPIC, queues=self.config.queues)
            await admin.create_group(GROUP, max_delivery_attempts=_MAX_DELIVERY_ATTEMPTS)

    async def _lag(self, admin: Reconnecting[AsyncAdmin]) -> tuple[int, int]:
        while True:
            client = await admin.get()
            try:
                rows = await client.get_group_lag(GROUP, TOPIC)
            except PopMQError:
                await admin.after_failure()
                continue
            return sum(r.lag for r in rows), sum(r.inflight for r in rows)

    async def _drain(self, result: CheckResult) -> None:
        """Pop until several consecutive empty long polls, then lag and in-flight are 0."""
        self.draining = True
        admin = Reconnecting(
            self.holder, lambda ep: AsyncAdmin(ep, timeout_s=self.config.rpc_timeout_s)
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.drain_timeout_s
        try:
            while True:
                self._empty_streak = 0
                self._quiet.clear()
                try:
                    await self._unless_crashed(self._quiet.wait(), deadline - loop.time())
                    lag, inflight = await self._unless_crashed(
                        self._lag(admin), max(1.0, deadline - loop.time())
                    )
                except TimeoutError:
                    return
                result.final_lag, result.final_inflight = lag, inflight
                if lag == 0 and inflight == 0:
                    result.drained = True
                    return
        finally:
            await admin.close()

    async def _verify_clean_restart(self, result: CheckResult) -> None:
        """Start over the cleanly stopped store: nothing should be delivered again."""
        cfg = self.config
        await self.target.start_again()
        redelivered: list[str] = []
        async with AsyncSimpleConsumer(
            self.holder.address, group=GROUP, topic=TOPIC, timeout_s=cfg.rpc_timeout_s
        ) as consumer:
            while messages := await consumer.receive(
                max_messages=32, invisible_duration_s=cfg.invisible_s[1], wait_s=cfg.poll_wait_s
            ):
                redelivered += (
                    f"{m.body.decode()} attempt={m.delivery_attempt} queue{m.queue_id}@{m.offset}"
                    for m in messages
                )
                await consumer.ack(messages)
        result.redelivered_after_clean_restart = redelivered
        code = await self.target.stop()
        if code != 0:
            result.clean_stop_exit_code = code

    async def run(self) -> CheckResult:
        cfg = self.config
        result = CheckResult(config=cfg, seed=self.seed, data_dir=str(self.data_dir))
        began = time.perf_counter()
        consumers: list[asyncio.Task[None]] = []
        others: list[asyncio.Task[None]] = []
        try:
            await self.target.start()
            await self._setup()
            if isinstance(self.target, ReplicatedTarget | ClusterTarget):
                await self.target.prepare(TOPIC)
            result.crashing_consumers = (
                math.ceil(cfg.consumers / 2) if cfg.crashing_consumers else 0
            )
            for i in range(cfg.consumers):
                rng = random.Random(self.rng.random())
                holder = self._holder_for(i, consumer=True)
                consumers.append(
                    asyncio.create_task(self._consume(i < result.crashing_consumers, rng, holder))
                )
            nemesis = asyncio.create_task(self._nemesis())
            per, extra = divmod(cfg.messages, cfg.producers)
            producers = [
                asyncio.create_task(
                    self._produce(
                        [f"p{p}-{n:07d}" for n in range(per + (p < extra))],
                        self._holder_for(p, consumer=False),
                    )
                )
                for p in range(cfg.producers)
            ]
            others = [nemesis, *producers]
            for task in [*consumers, *others]:
                self._watch(task)
            produce_began = time.perf_counter()
            await self._unless_crashed(asyncio.gather(*producers))
            await self._unless_crashed(nemesis)
            result.produce_s = time.perf_counter() - produce_began
            drain_began = time.perf_counter()
            await self._drain(result)
            result.drain_s = time.perf_counter() - drain_began
            await _cancel(consumers)
            result.clean_stop_exit_code = await self.target.stop()
            if cfg.verify_clean_restart and result.drained:
                await self._verify_clean_restart(result)
            if self._crashed.done():
                self._crashed.result()  # the server died on its own meanwhile
        finally:
            await _cancel([*consumers, *others])
            await self.target.close()
        result.total_s = time.perf_counter() - began
        result.kills = self.kills
        result.kills_by_kind = dict(self.kills_by_kind)
        result.incarnations = list(self.target.incarnations)
        if isinstance(self.target, ReplicatedTarget):
            result.failovers = list(self.target.failovers)
            # Sent by the nemesis: counted and checked with the producers' sends (not in
            # their error counts or send log).
            for failover in result.failovers:
                for sent in failover.direct:
                    self.history.sending([sent.id])
                    if sent.queue is None:
                        self.history.indeterminate.add(sent.id)
                    else:
                        self.history.acknowledged[sent.id] = (sent.queue, sent.offset)
            result.shard_of_queue = dict(self.target.shard_of_queue)
            result.logged_errors = self.target.logged_errors()
        elif isinstance(self.target, ClusterTarget):
            result.lease_lapse_s = list(self.target.lease_lapse_s)
            result.disk_fulls = list(self.target.disk_fulls)
            result.queue_brokers = list(self.target.queue_brokers)
            result.unregistered = list(self.target.unregistered)
        evaluate(self.history, result)
        return result


async def _cancel(tasks: Sequence[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run_check(config: CheckConfig) -> CheckResult:
    """Run the checker on the running event loop."""
    seed = config.seed if config.seed is not None else random.randrange(2**32)
    own_dir = config.data_dir is None
    data_dir = (
        Path(tempfile.mkdtemp(prefix="popmq-chaos-"))
        if config.data_dir is None
        else config.data_dir
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    keep = True
    try:
        result = await TotalQueueChecker(config, data_dir, seed).run()
        keep = config.keep_data or not result.ok
        return result
    finally:
        if own_dir and not keep:
            shutil.rmtree(data_dir, ignore_errors=True)


def check(config: CheckConfig) -> CheckResult:
    """Run the checker in a new event loop (blocking)."""
    return asyncio.run(run_check(config))


def _parser() -> argparse.ArgumentParser:
    d = CheckConfig()
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos.checker",
        description="Total-queue durability check of popmq under kill -9 of the server "
        "(or of brokers and proxies of a cluster, or of leaders of replicated shards).",
    )
    parser.add_argument("--messages", type=int, default=d.messages, help="ids to send")
    parser.add_argument("--kills", type=int, default=d.kills, help="kill -9 count")
    parser.add_argument("--producers", type=int, default=d.producers)
    parser.add_argument("--consumers", type=int, default=d.consumers)
    parser.add_argument("--flush", choices=("sync", "async"), default=d.flush)
    parser.add_argument(
        "--crashing-consumers",
        action="store_true",
        help="half of the consumers drop popped batches unacked now and then",
    )
    parser.add_argument("--abandon-probability", type=float, default=d.abandon_probability)
    parser.add_argument(
        "--nack-probability",
        type=float,
        default=d.nack_probability,
        help="chance that a consumer nacks a message instead of acking it",
    )
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help="ids per send")
    parser.add_argument("--queues", type=int, default=d.queues)
    parser.add_argument(
        "--invisible",
        type=seconds_span,
        default=d.invisible_s,
        metavar="MIN[-MAX]",
        help=f"invisible duration of a pop in seconds (default {span_text(d.invisible_s)})",
    )
    parser.add_argument("--poll-wait", type=float, default=d.poll_wait_s, metavar="S")
    parser.add_argument("--drain-timeout", type=float, default=d.drain_timeout_s, metavar="S")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="store and server log (default: temp dir)"
    )
    parser.add_argument("--keep-data", action="store_true", help="keep the temp data dir")
    cluster = parser.add_argument_group("cluster mode")
    cluster.add_argument(
        "--cluster",
        action="store_true",
        help="run against etcd + brokers + proxies; --kills are broker kills",
    )
    cluster.add_argument("--brokers", type=int, default=d.brokers)
    cluster.add_argument("--proxies", type=int, default=d.proxies)
    cluster.add_argument(
        "--session-ttl", type=int, default=d.session_ttl_s, metavar="S", help="session TTL (s)"
    )
    cluster.add_argument("--proxy-kills", type=int, default=d.proxy_kills, help="kill -9 count")
    cluster.add_argument(
        "--etcd-kills", type=int, default=d.etcd_kills, help="kill -9 of etcd, past the TTL"
    )
    cluster.add_argument(
        "--etcd-pauses", type=int, default=d.etcd_pauses, help="SIGSTOP of etcd, past the TTL"
    )
    cluster.add_argument(
        "--broker-pauses",
        type=int,
        default=d.broker_pauses,
        help="SIGSTOP of a broker past the proxy's call timeout",
    )
    cluster.add_argument(
        "--disk-fulls",
        type=int,
        default=d.disk_fulls,
        help="fill a broker's data volume (a tmpfs; root) until sends no longer fit, 8 s",
    )
    cluster.add_argument(
        "--disk-mib", type=int, default=d.disk_mib, help="each broker's tmpfs with --disk-fulls"
    )
    replicated = parser.add_argument_group("replicated mode")
    replicated.add_argument(
        "--replicated",
        action="store_true",
        help="run against etcd + replicated shards + proxies; --kills are leader kills; "
        "--session-ttl is the leader lease",
    )
    replicated.add_argument("--shards", type=int, default=d.shards)
    replicated.add_argument("--replicas", type=int, default=d.replicas, help="per shard")
    replicated.add_argument(
        "--pauses",
        type=int,
        default=d.pauses,
        help="times a leader is SIGSTOPped past its lease, then SIGCONTed",
    )
    replicated.add_argument(
        "--peer-cuts",
        type=int,
        default=d.peer_cuts,
        help="times s1-r1, made to lead, is cut one way from its peers (followers and "
        "proxies), in turn, then healed (Linux, root, tc)",
    )
    replicated.add_argument(
        "--leader-partitions",
        type=int,
        default=d.leader_partitions,
        help="times s1-r1, made to lead, is cut one way from etcd or its peers, in turn, "
        "then healed (Linux, root, tc)",
    )
    replicated.add_argument(
        "--failover-gap",
        type=seconds_span,
        default=d.failover_gap_s,
        metavar="MIN[-MAX]",
        help=f"seconds between failovers (default {span_text(d.failover_gap_s)})",
    )
    replicated.add_argument(
        "--failover-timeout",
        type=float,
        default=d.failover_timeout_s,
        metavar="S",
        help="bound of each step of a failover",
    )
    parser.add_argument(
        "--send-rate",
        type=float,
        default=d.send_rate,
        metavar="N",
        help="sends per second of all producers (default: unpaced)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = CheckConfig(
            messages=args.messages,
            kills=args.kills,
            producers=args.producers,
            consumers=args.consumers,
            flush=args.flush,
            crashing_consumers=args.crashing_consumers,
            abandon_probability=args.abandon_probability,
            nack_probability=args.nack_probability,
            batch_size=args.batch_size,
            queues=args.queues,
            invisible_s=args.invisible,
            poll_wait_s=args.poll_wait,
            drain_timeout_s=args.drain_timeout,
            seed=args.seed,
            data_dir=args.data_dir,
            keep_data=args.keep_data,
            cluster=args.cluster,
            brokers=args.brokers,
            proxies=args.proxies,
            session_ttl_s=args.session_ttl,
            proxy_kills=args.proxy_kills,
            etcd_kills=args.etcd_kills,
            etcd_pauses=args.etcd_pauses,
            broker_pauses=args.broker_pauses,
            disk_fulls=args.disk_fulls,
            disk_mib=args.disk_mib,
            send_rate=args.send_rate,
            replicated=args.replicated,
            shards=args.shards,
            replicas=args.replicas,
            pauses=args.pauses,
            leader_partitions=args.leader_partitions,
            peer_cuts=args.peer_cuts,
            failover_gap_s=args.failover_gap,
            failover_timeout_s=args.failover_timeout,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = check(config)
    print(result.summary(), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
