"""The checker's replicated target: shards of replicas, and a nemesis that fails leaders over.

etcd + `shards` x `replicas` `popmq broker --shard` processes + proxies
(tests/support/replicas.py). Each `kill_and_restart` is one failover of a random shard's
leader, timed from the moment the leader is killed (or stopped):

- `LEADER_KILL`: kill -9 the leader; once another replica registered as leader, start the
  killed one again on its data dir (it comes back as a follower and catches up).
- `LEADER_PAUSE`: SIGSTOP the leader, so that its lease lapses while it is frozen; once
  another replica registered as leader, SIGCONT it and at once send straight to its
  BrokerService: a leader that wakes after its lease must store (acknowledge) nothing. It
  then steps down and follows.
- `LEADER_CUT_FROM_ETCD` / `LEADER_CUT_TO_ETCD`: a one-way network partition between the
  leader and etcd (tests/support/netns.py: the replica `s1-r1` runs in its own network
  namespace, and the packets from etcd's port into it, or out of it to etcd's port, are
  dropped; its followers and the proxies still reach it). If `s1-r1` does not lead `s1` when
  a partition is due, the current leader is first stopped with SIGTERM (a clean handover to
  it) and started again. The cut stays until another replica registered as leader and one
  lease more, while a sender on the host sends straight to the cut-off leader's
  BrokerService (the checker's topic, ids `x<failover>-<n>`): a send it acknowledges must
  have begun before the new leader was registered (else two leaders took writes at once),
  and every one it acknowledged must be received like any producer's. Then the link heals
  and the old leader must step down and rejoin in sync.
- `LEADER_CUT_FROM_PEERS` / `LEADER_CUT_TO_PEERS`: the same, between `s1-r1` leading and
  whatever calls its port (its followers' replication streams and the proxies: both use
  it, so one port rule cuts both), etcd untouched. Its lease stands, so nobody else may
  lead: the cut lasts past the followers' lag timeout (they leave the in-sync set, and with
  `min_insync` 1 the shard refuses sends), then heals, and the shard must take sends again
  under the same leader once its followers are back in sync. No failover, so the record's
  new leader is the old one.

Either way the failover ends once the shard has `replicas - 1` in-sync followers again (with
`replication.min_insync` 1 the new leader refuses sends until a follower is back in sync) and
probes saw the shard take sends again:

- directly: a send to the new leader's own BrokerService (the shard itself takes sends);
- through each proxy: a FIFO message whose group hashes to the shard's queue of a probe topic.
  A proxy never moves a FIFO group to another shard, so the probe succeeds only once that
  shard takes sends *and* the proxy routes to it again (its fault isolation of a broker whose
  sends failed included): what a client whose messages must go to that shard sees.

The next failover starts only then, so a shard is back to full strength before its leader is
failed again, and the other shards took the sends meanwhile (the checker measures that from
its producers' history: `Failover.sends`, `acknowledged`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from popmq import AsyncAdmin, AsyncProducer, PopMQError, RetryPolicy
from popmq.broker_core.errors import PopMQError as BrokerError
from popmq.broker_core.types import NewMessage
from popmq.cluster import RemoteBroker
from popmq.cluster.fault_tolerance import fifo_queue_index
from tests.chaos.targets import ClusterTarget
from tests.support.etcd import EtcdServer
from tests.support.netns import NamespacedReplicaCluster, VethNamespace
from tests.support.replicas import ReplicaCluster
from tests.support.server_process import KILLED, Incarnation, ServerDiedError

__all__ = [
    "ETCD_CUTS",
    "LEADER_CUT_FROM_ETCD",
    "LEADER_CUT_FROM_PEERS",
    "LEADER_CUT_TO_ETCD",
    "LEADER_CUT_TO_PEERS",
    "LEADER_KILL",
    "LEADER_PARTITIONS",
    "LEADER_PAUSE",
    "PARTITIONED",
    "PEER_CUTS",
    "PROBE_TOPIC",
    "DirectSend",
    "Failover",
    "ReplicatedTarget",
]

LEADER_KILL = "leader kill -9"
LEADER_PAUSE = "leader SIGSTOP"
LEADER_CUT_FROM_ETCD = "etcd->leader dropped"
"""One-way partition: the leader's packets reach etcd, etcd's never reach the leader."""
LEADER_CUT_TO_ETCD = "leader->etcd dropped"
"""One-way partition: etcd's packets reach the leader, the leader's never reach etcd."""
LEADER_CUT_FROM_PEERS = "peers->leader dropped"
"""One-way partition: the leader's packets from its port reach its followers and the
proxies, theirs to its port never reach it."""
LEADER_CUT_TO_PEERS = "leader->peers dropped"
"""One-way partition: the followers' and proxies' packets reach the leader's port, its
answers never reach them."""
ETCD_CUTS = (LEADER_CUT_FROM_ETCD, LEADER_CUT_TO_ETCD)
PEER_CUTS = (LEADER_CUT_FROM_PEERS, LEADER_CUT_TO_PEERS)
LEADER_PARTITIONS = ETCD_CUTS + PEER_CUTS
"""In the order the nemesis takes them, round and round."""
PARTITIONED = "s1-r1"
"""The replica that runs in a network namespace when partitions are on."""
PROBE_TOPIC = "chaos-replication-probe"
"""One queue per shard, mixed (FIFO probes through proxies, plain ones straight to a leader);
nobody consumes it."""
_PROBE_INTERVAL_S = 0.1
_PROBE_CALL_TIMEOUT_S = 2.0
_WOKEN_SENDS = 5
"""Sends straight to a woken (SIGCONT) old leader; it must store none of them."""
_CUT_SEND_INTERVAL_S = 0.1
"""Pause between the sends straight to a cut-off leader."""
_CUT_CALL_TIMEOUT_S = 5.0
_LAG_TIMEOUT_S = 10.0
"""`replication.lag_timeout_s` (its default): a peer cut lasts longer, so that the
followers leave the in-sync set meanwhile."""


@dataclass(frozen=True, slots=True)
class DirectSend:
    """One send straight to a cut-off leader's BrokerService (monotonic times).

    Attributes:
        id: The message body, `x<failover>-<n>`.
        began: When the call began.
        ended: When it returned.
        queue: The global queue id it was stored in (None: refused or failed).
        offset: Its offset there (-1 when not stored).
        error: How it was refused (empty when stored).
    """

    id: str
    began: float
    ended: float
    queue: int | None
    offset: int = -1
    error: str = ""


@dataclass(slots=True)
class Failover:
    """One failover of a shard's leader; every `*_s` is seconds from the kill or SIGSTOP.

    Attributes:
        number: 1 for the first failover of the run.
        kind: `LEADER_KILL` or `LEADER_PAUSE`.
        shard: The shard failed over.
        old_leader: The replica (process name) killed or paused.
        old_epoch: Its epoch.
        began: Monotonic time of the kill or SIGSTOP.
        new_leader: The replica that took over.
        new_epoch: Its epoch (larger than `old_epoch`).
        leader_s: Until the new leader's registration was in etcd (what proxies route to).
        back_s: Until the old leader was back: listening again after its restart (kill), or
            sent SIGCONT (pause; right after `leader_s`).
        in_sync_s: Until the shard had `replicas - 1` in-sync followers again.
        takes_sends_s: Until the new leader's own BrokerService stored a probe send.
        proxy_send_s: Per proxy: until a probe through it was stored on the shard (None:
            not within the failover timeout); after a partition, a probe sent once the new
            leader was registered (the cut-off one takes sends until it fences).
        ended_s: Until this failover's measurement ended (the window the checker counts
            cluster-wide sends in).
        woken_stored: Pause only: sends the woken old leader stored (must be 0).
        woken_errors: Pause only: how it refused them.
        traffic_send_s: Filled by the checker: until the first producer send stored on the
            shard (one begun after the kill).
        sends: Filled by the checker: producer sends begun within the window.
        acknowledged: Filled by the checker: those acknowledged (by any shard).
        max_send_latency_s: Filled by the checker: the slowest of those sends.
        handover: Partition only: the leader stopped first to hand the shard to the
            partitioned replica ("" when it led already).
        direct: Partition only: the sends straight to the cut-off old leader.
    """

    number: int
    kind: str
    shard: str
    old_leader: str
    old_epoch: int
    began: float
    new_leader: str = ""
    new_epoch: int = 0
    leader_s: float | None = None
    back_s: float | None = None
    in_sync_s: float | None = None
    takes_sends_s: float | None = None
    proxy_send_s: dict[str, float | None] = field(default_factory=dict)
    ended_s: float = 0.0
    woken_stored: int | None = None
    woken_errors: list[str] = field(default_factory=list)
    traffic_send_s: float | None = None
    sends: int = 0
    acknowledged: int = 0
    max_send_latency_s: float = 0.0
    handover: str = ""
    direct: list[DirectSend] = field(default_factory=list)

    @property
    def two_leaders(self) -> list[DirectSend]:
        """Sends the cut-off old leader acknowledged that began after the new leader's
        registration was seen: two leaders took writes at once."""
        if self.leader_s is None:
            return []
        seen = self.began + self.leader_s
        return [d for d in self.direct if d.queue is not None and d.began >= seen]

    @property
    def resumed_s(self) -> float | None:
        """Until every proxy took a send to the shard again (None: one never did)."""
        values = list(self.proxy_send_s.values())
        if not values or any(v is None for v in values):
            return None
        return max(v for v in values if v is not None)

    @property
    def problems(self) -> list[str]:
        """What this failover broke: a woken leader storing sends, or a shard that never
        took sends again."""
        found: list[str] = []
        if self.woken_stored:
            found.append(
                f"failover #{self.number}: the woken old leader {self.old_leader} stored "
                f"{self.woken_stored} sends"
            )
        if self.takes_sends_s is None:
            found.append(f"failover #{self.number}: shard {self.shard} took no send again")
        for proxy, took in sorted(self.proxy_send_s.items()):
            if took is None:
                found.append(
                    f"failover #{self.number}: no send reached shard {self.shard} "
                    f"through {proxy} again"
                )
        if self.kind not in PEER_CUTS and self.new_epoch <= self.old_epoch:
            found.append(f"failover #{self.number}: epoch {self.new_epoch} after {self.old_epoch}")
        late = self.two_leaders
        if late:
            found.append(
                f"failover #{self.number}: the cut-off old leader {self.old_leader} acknowledged "
                f"{len(late)} sends begun after {self.new_leader} was registered as leader "
                f"(two leaders), e.g. {late[0].id}"
            )
        if self.kind in LEADER_PARTITIONS and self.in_sync_s is None:
            who = f"{self.shard}'s followers" if self.kind in PEER_CUTS else self.old_leader
            found.append(f"failover #{self.number}: {who} did not rejoin in sync after the heal")
        return found

    def line(self) -> str:
        """One summary line."""
        proxies = " ".join(f"{p} {_secs(s)}" for p, s in sorted(self.proxy_send_s.items()))
        woken = (
            ""
            if self.woken_stored is None
            else f"; woken old leader stored {self.woken_stored} of {_WOKEN_SENDS} sends"
        )
        back = {LEADER_KILL: "restarted", LEADER_PAUSE: "SIGCONT"}.get(self.kind, "healed")
        if self.direct:
            stored = sum(1 for d in self.direct if d.queue is not None)
            woken += (
                f"; straight to the cut-off leader: {stored}/{len(self.direct)} acknowledged, "
                f"{len(self.two_leaders)} after the new leader's registration"
            )
        if self.handover:
            woken += f"; handed over from {self.handover} first"
        return (
            f"#{self.number} {self.kind} {self.shard}: {self.old_leader} -> {self.new_leader} "
            f"(epoch {self.old_epoch} -> {self.new_epoch}): new leader registered "
            f"{_secs(self.leader_s)}, old one {back} {_secs(self.back_s)}, in sync "
            f"{_secs(self.in_sync_s)}, shard takes sends {_secs(self.takes_sends_s)}, "
            f"through proxies {proxies or '-'}, first producer send {_secs(self.traffic_send_s)}"
            f"; cluster-wide sends in {self.ended_s:.1f}s: {self.acknowledged}/{self.sends} "
            f"acknowledged, slowest {self.max_send_latency_s:.2f}s{woken}"
        )


def _secs(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"


class ReplicatedTarget(ClusterTarget):
    """etcd + replicated shards + proxies; a kill is a failover (module docstring).

    Args:
        data_dir: Where the cluster's data dirs and logs go.
        shards: Shards (at least 2, so that sends go elsewhere during a failover).
        replicas: Replicas per shard (at least 2).
        proxies: Proxies.
        session_ttl_s: The leader lease's TTL (every process's session TTL).
        flush: The replicas' `--flush`.
        failover_timeout_s: Bound of each step of a failover (a new leader, the restart, the
            in-sync set, the probes).
        on_death: Called when a process exits on its own.
        partitions: Run `PARTITIONED` in a network namespace, for the `LEADER_PARTITIONS`
            kinds (needs root and tc: tests/support/netns.py).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        shards: int,
        replicas: int,
        proxies: int,
        session_ttl_s: int,
        flush: Literal["sync", "async"],
        failover_timeout_s: float,
        on_death: Callable[[ServerDiedError], None],
        partitions: bool = False,
    ) -> None:
        self.failover_kinds: tuple[str, ...] = (LEADER_KILL, LEADER_PAUSE)
        self.namespace: VethNamespace | None = None
        self.replica_cluster: ReplicaCluster
        if partitions:
            self.namespace = VethNamespace().create()
            self.replica_cluster = NamespacedReplicaCluster(
                data_dir / "cluster",
                self.namespace,
                inside=PARTITIONED,
                shards=shards,
                replicas=replicas,
                proxies=proxies,
                session_ttl_s=session_ttl_s,
                flush=flush,
            )
            self.failover_kinds += LEADER_PARTITIONS
        else:
            self.replica_cluster = ReplicaCluster(
                data_dir / "cluster",
                shards=shards,
                replicas=replicas,
                proxies=proxies,
                session_ttl_s=session_ttl_s,
                flush=flush,
            )
        super().__init__(self.replica_cluster, on_death=on_death)
        self.replicas = replicas
        self.failover_timeout_s = failover_timeout_s
        self.failovers: list[Failover] = []
        self.shard_of_queue: dict[int, str] = {}
        """Global queue id of the checker's topic -> the shard holding it (see `prepare`)."""
        self._probe_group: dict[str, str] = {}
        """Shard -> a FIFO group of PROBE_TOPIC whose queue is on it."""
        self._topic = ""
        self._global_queue: dict[tuple[str, int], int] = {}
        """(shard, its queue id) -> the global queue id of the checker's topic."""

    async def start(self) -> None:
        await super().start()
        for shard in self.replica_cluster.shards:
            await asyncio.to_thread(self._wait_full_strength, shard)

    def _wait_full_strength(self, shard: str) -> None:
        cluster = self.replica_cluster
        cluster.wait_leader(shard, timeout_s=self.failover_timeout_s)
        cluster.wait_in_sync(shard, self.replicas - 1, timeout_s=self.failover_timeout_s)

    async def prepare(self, topic: str) -> None:
        """After the checker made `topic`: learn which shard holds each of its queues, make
        the probe topic and pick a FIFO group per shard."""
        route = await self.cluster.route_queues(topic)
        self.shard_of_queue = {n: shard for n, (shard, _) in enumerate(route)}
        self._topic = topic
        self._global_queue = {(shard, queue): n for n, (shard, queue) in enumerate(route)}
        async with AsyncAdmin(self.holders[0].address, timeout_s=20) as admin:
            await admin.create_topic(PROBE_TOPIC, queues=1, message_type="mixed")
        probe = await self.cluster.route_queues(PROBE_TOPIC)
        for shard in self.replica_cluster.shards:
            self._probe_group[shard] = next(
                group
                for n in range(10_000)
                if probe[fifo_queue_index(group := f"probe-{n}", len(probe))][0] == shard
            )

    # -- one failover ---------------------------------------------------------------------

    async def kill_and_restart(self, kind: str, rng: random.Random) -> None:
        if kind not in self.failover_kinds:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(self.failover_kinds)}")
        cluster = self.replica_cluster
        handover = ""
        if kind in LEADER_PARTITIONS:
            shard = cluster.shard_of[PARTITIONED][0]
            handover = await asyncio.to_thread(self._hand_to_partitioned, shard)
        else:
            shard = rng.choice(cluster.shards)
            await asyncio.to_thread(self._wait_full_strength, shard)
        old = await asyncio.to_thread(cluster.leader, shard)
        assert old is not None
        assert kind not in LEADER_PARTITIONS or old == PARTITIONED, f"{old} leads {shard}"
        old_epoch = await asyncio.to_thread(cluster.epoch, shard)
        process = cluster.processes[old]
        popen = process.process
        assert popen is not None
        failover = Failover(
            number=len(self.failovers) + 1,
            kind=kind,
            shard=shard,
            old_leader=old,
            old_epoch=old_epoch,
            began=time.monotonic(),
            handover=handover,
        )
        self.failovers.append(failover)
        if kind in PEER_CUTS:
            await self._cut_from_peers(failover, process.port)
            return
        if kind == LEADER_KILL:
            await asyncio.to_thread(cluster.kill, old)
        elif kind == LEADER_PAUSE:
            popen.send_signal(signal.SIGSTOP)
        else:
            await asyncio.to_thread(self._cut, kind, process.port)
            failover.began = time.monotonic()  # the rules are in place (tc takes a while)
        # Started after the signal, so that no probe is answered by the old leader before. A
        # cut-off leader still takes sends through the proxies until it fences: their probes
        # start once the new leader is registered.
        probes = [asyncio.create_task(self._probe_leader(failover))]
        if kind not in LEADER_PARTITIONS:
            probes += self._probe_proxies(failover)
        stop_direct = asyncio.Event()
        direct = (
            asyncio.create_task(self._send_to_cut_off(failover, process.address, stop_direct))
            if kind in LEADER_PARTITIONS
            else None
        )
        try:
            try:
                new = await asyncio.to_thread(
                    cluster.wait_leader,
                    shard,
                    other_than=old,
                    timeout_s=cluster.session_ttl_s + self.failover_timeout_s,
                )
            finally:
                if kind == LEADER_PAUSE:
                    popen.send_signal(signal.SIGCONT)
            failover.leader_s = self._since(failover)
            failover.new_leader = new
            if kind in LEADER_PARTITIONS:
                probes += self._probe_proxies(failover)
            failover.new_epoch = await asyncio.to_thread(cluster.epoch, shard)
            if kind == LEADER_KILL:
                await asyncio.to_thread(cluster.restart, old)
                failover.back_s = self._since(failover)
                self.incarnations.append(
                    Incarnation(
                        number=len(self.incarnations) + 1,
                        endpoint=f"{old}@{process.address}",
                        spawn_to_listening_s=process.starts[-1],
                        recovery_s=None,
                        recovered_checkpoints=None,
                        after=KILLED,
                    )
                )
            elif kind == LEADER_PAUSE:
                failover.back_s = self._since(failover)
                failover.woken_stored, failover.woken_errors = await _direct_sends(
                    process.address, _WOKEN_SENDS
                )
            else:
                # One lease more with two replicas that may think they lead, then the heal.
                await asyncio.sleep(cluster.session_ttl_s)
                await self._heal(direct, stop_direct)
                failover.back_s = self._since(failover)
            await asyncio.to_thread(
                cluster.wait_in_sync, shard, self.replicas - 1, self.failover_timeout_s
            )
            if kind in LEADER_PARTITIONS:
                # The healed replica must be among them: it stepped down and caught up.
                while old not in await asyncio.to_thread(cluster.in_sync, shard):
                    assert self._since(failover) < self.failover_timeout_s * 2, (
                        f"{old} never rejoined {shard} in sync after the heal"
                    )
                    await asyncio.sleep(_PROBE_INTERVAL_S)
            failover.in_sync_s = self._since(failover)
            await asyncio.wait(probes, timeout=self.failover_timeout_s)
        finally:
            await self._heal(direct, stop_direct)
            for probe in probes:
                probe.cancel()
            await asyncio.gather(*probes, return_exceptions=True)
            failover.ended_s = self._since(failover)

    def _hand_to_partitioned(self, shard: str) -> str:
        """Make `PARTITIONED` lead `shard` (at full strength): stop the leader with SIGTERM
        (it hands over to an in-sync follower at once) and start it again, until it does.
        Returns the first leader stopped ("" if `PARTITIONED` led already)."""
        cluster = self.replica_cluster
        self._wait_full_strength(shard)
        leader = cluster.leader(shard)
        first = "" if leader == PARTITIONED else str(leader)
        for _ in range(self.replicas):
            if leader == PARTITIONED:
                return first
            assert leader is not None
            cluster.terminate(leader)
            new = cluster.wait_leader(shard, other_than=leader, timeout_s=self.failover_timeout_s)
            cluster.restart(leader)
            self._wait_full_strength(shard)
            leader = new
        raise AssertionError(f"{PARTITIONED} did not take {shard} over in {self.replicas} tries")

    def _cut(self, kind: str, leader_port: int) -> None:
        """Start a one-way partition between `PARTITIONED` (listening on `leader_port`) and
        etcd, or its peers."""
        assert self.namespace is not None, "partitions need the target made with partitions"
        etcd = self.replica_cluster.etcd
        assert isinstance(etcd, EtcdServer)
        if kind == LEADER_CUT_FROM_ETCD:
            self.namespace.drop("in", src_port=etcd.client_port)
        elif kind == LEADER_CUT_TO_ETCD:
            self.namespace.drop("out", dst_port=etcd.client_port)
        elif kind == LEADER_CUT_FROM_PEERS:
            self.namespace.drop("in", dst_port=leader_port)
        else:
            self.namespace.drop("out", src_port=leader_port)

    async def _cut_from_peers(self, failover: Failover, leader_port: int) -> None:
        """A peer cut (module docstring): no failover; once healed, the followers must be
        back in sync and the shard must take sends again, directly and through every proxy."""
        cluster = self.replica_cluster
        probes: list[asyncio.Task[None]] = []
        await asyncio.to_thread(self._cut, failover.kind, leader_port)
        failover.began = time.monotonic()  # the rules are in place (tc takes a while)
        try:
            await asyncio.sleep(_LAG_TIMEOUT_S + cluster.session_ttl_s)
            await self._heal(None, asyncio.Event())
            failover.back_s = self._since(failover)
            probes = [
                asyncio.create_task(self._probe_leader(failover, same_epoch=True)),
                *self._probe_proxies(failover),
            ]
            await asyncio.to_thread(
                cluster.wait_in_sync, failover.shard, self.replicas - 1, self.failover_timeout_s
            )
            failover.in_sync_s = self._since(failover)
            await asyncio.wait(probes, timeout=self.failover_timeout_s)
            failover.new_leader = str(await asyncio.to_thread(cluster.leader, failover.shard))
            failover.new_epoch = await asyncio.to_thread(cluster.epoch, failover.shard)
        finally:
            await self._heal(None, asyncio.Event())
            for probe in probes:
                probe.cancel()
            await asyncio.gather(*probes, return_exceptions=True)
            failover.ended_s = self._since(failover)

    async def _heal(self, direct: asyncio.Task[None] | None, stop: asyncio.Event) -> None:
        """End the partition (if any) and the sends to the cut-off leader (the one in flight
        finishes: a send stored but unrecorded would be an id nobody sent)."""
        if self.namespace is not None and self.namespace.dropping:
            await asyncio.to_thread(self.namespace.undrop)
        stop.set()
        if direct is not None:
            await direct

    async def _send_to_cut_off(self, failover: Failover, address: str, stop: asyncio.Event) -> None:
        """Send to the checker's topic straight to the cut-off leader, one by one, until
        `stop` (recorded in `failover.direct`)."""
        remote = RemoteBroker(address, call_timeout_s=_CUT_CALL_TIMEOUT_S, catalog=False)
        await remote.start()
        try:
            n = 0
            while not stop.is_set():
                body = f"x{failover.number}-{n:05d}"
                n += 1
                began = time.monotonic()
                try:
                    [result] = await remote.send([NewMessage(self._topic, body.encode())])
                except BrokerError as exc:
                    failover.direct.append(
                        DirectSend(body, began, time.monotonic(), None, error=exc.code)
                    )
                else:
                    queue = self._global_queue[(failover.shard, result.queue_id)]
                    failover.direct.append(
                        DirectSend(body, began, time.monotonic(), queue, result.offset)
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), _CUT_SEND_INTERVAL_S)
        finally:
            await remote.close()

    @staticmethod
    def _since(failover: Failover) -> float:
        return time.monotonic() - failover.began

    async def _probe_leader(self, failover: Failover, *, same_epoch: bool = False) -> None:
        """Send straight to the shard's registered leader of a newer epoch (or, with
        `same_epoch`, of the old one too) until it stores one (it refuses while it has too
        few in-sync followers)."""
        remotes: dict[str, RemoteBroker] = {}
        try:
            while True:
                registration, epoch, _ = await asyncio.to_thread(
                    self.replica_cluster.shard_keys, failover.shard
                )
                if registration is not None and epoch >= failover.old_epoch + (not same_epoch):
                    address = str(registration["addr"])
                    remote = remotes.get(address)
                    if remote is None:
                        remote = remotes[address] = RemoteBroker(
                            address, call_timeout_s=_PROBE_CALL_TIMEOUT_S, catalog=False
                        )
                        await remote.start()
                    try:
                        await remote.send([NewMessage(PROBE_TOPIC, b"leader-probe")])
                    except BrokerError:
                        pass
                    else:
                        failover.takes_sends_s = self._since(failover)
                        return
                await asyncio.sleep(_PROBE_INTERVAL_S)
        finally:
            for remote in remotes.values():
                await remote.close()

    def _probe_proxies(self, failover: Failover) -> list[asyncio.Task[None]]:
        return [
            asyncio.create_task(self._probe_proxy(failover, n)) for n in range(len(self.holders))
        ]

    async def _probe_proxy(self, failover: Failover, index: int) -> None:
        """Send a FIFO message of the shard's probe group through proxy `index` until one is
        stored (each try is one call: the SDK's retries would blur the time)."""
        name = self.cluster.proxies[index]
        failover.proxy_send_s[name] = None
        async with AsyncProducer(
            self.holders[index].address,
            timeout_s=_PROBE_CALL_TIMEOUT_S,
            retry=RetryPolicy(max_attempts=1),
        ) as producer:
            while True:
                try:
                    await producer.send(
                        PROBE_TOPIC,
                        b"proxy-probe",
                        message_group=self._probe_group[failover.shard],
                    )
                except PopMQError:
                    await asyncio.sleep(_PROBE_INTERVAL_S)
                else:
                    failover.proxy_send_s[name] = self._since(failover)
                    return

    def logged_errors(self) -> dict[str, list[str]]:
        """Process -> the ERROR lines of its log (messages only, timestamps cut): a process
        can stay up after an error that leaves it useless, so the summary shows them."""
        found: dict[str, list[str]] = {}
        for process in self.cluster.processes.values():
            try:
                text = process.log_path.read_text(errors="replace")
            except OSError:
                continue
            lines = [line.split(" ERROR ", 1)[1] for line in text.splitlines() if " ERROR " in line]
            if lines:
                found[process.name] = lines
        return found

    # -- clean stop and start -------------------------------------------------------------

    async def stop(self) -> int | None:
        """SIGTERM the proxies, then the followers, then the leaders (a leader stopped
        first would hand its shard to a follower that is about to stop too)."""
        await self._stop_watching()
        for holder in self.holders:
            holder.up.clear()
        cluster = self.replica_cluster
        leaders = {await asyncio.to_thread(cluster.leader, shard) for shard in cluster.shards}
        followers = [name for name in cluster.brokers if name not in leaders]
        codes: list[int | None] = []
        for name in [*cluster.proxies, *followers, *sorted(n for n in leaders if n)]:
            codes.append(await asyncio.to_thread(cluster.terminate, name))
        return next((code for code in codes if code != 0), 0)

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self.namespace is not None:
                await asyncio.to_thread(self.namespace.remove)

    async def start_again(self) -> None:
        cluster = self.replica_cluster
        for name in cluster.brokers:
            await asyncio.to_thread(cluster.restart, name)
        for shard in cluster.shards:
            await asyncio.to_thread(self._wait_full_strength, shard)
        for name in cluster.proxies:
            await asyncio.to_thread(cluster.restart, name)
        for shard in cluster.shards:
            await asyncio.to_thread(cluster.wait_served, shard)
        self._publish()
        self._watcher = asyncio.create_task(self._watch())


async def _direct_sends(address: str, count: int) -> tuple[int, list[str]]:
    """Send `count` messages straight to a replica's BrokerService: (stored, errors)."""
    remote = RemoteBroker(address, call_timeout_s=10.0, catalog=False)
    await remote.start()
    stored, errors = 0, []
    try:
        for n in range(count):
            try:
                await remote.send([NewMessage(PROBE_TOPIC, f"woken-{n}".encode())])
                stored += 1
            except BrokerError as exc:
                errors.append(f"{exc.code}: {exc}")
    finally:
        await remote.close()
    return stored, errors
