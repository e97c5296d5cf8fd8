"""`popmq broker --shard SHARD --name REPLICA`: one replica of a shard, leader or follower.

The process serves BrokerService, ReplicationService and health on one port from the start
and then takes whichever role etcd gives it (election.py), for as long as it runs:

- **follower**: its store is a plain copy (follower.py); BrokerService refuses every call
  (proxies route to the leader only). It follows the registered leader, and watches etcd
  meanwhile: when the leader's registration goes and this replica is electable (the last
  leader, or in the in-sync set), it campaigns.
- **leader**: it won the election (one etcd transaction), so its registration
  `brokers/<shard>` is what proxies route to. It opens the broker core on the copy (as a
  restart would: recovery rebuilds in-flight state), with the replication log as the
  store's tap, starts the catalog sync, and serves. It writes while its lease is held (as
  its own clock tells: a paused process that wakes after its TTL writes nothing) or every
  in-sync follower's lease promise runs (log.py); once its lease is lost it tries to take
  its registration back under the same epoch until etcd answers. It leads until its
  registration is gone or another's, or the broker fails; then it fences
  (broker/fencing.py), closes the core, resigns and follows again.

A follower answers its leader's heartbeats, and so promises not to campaign for the lease
window (the session TTL) after the last message it received from a leader: whatever etcd
says, it campaigns only once that window is over (`_restrained`). A process that just
started waits the window too (it may have answered a heartbeat before a restart), unless
it is the last elected replica.

The leader it follows, and its own term when it is elected, are written in its data dir
(last_leader.py): a replica that starts follows that leader at once, before etcd is asked,
so one restarted while etcd is down keeps its promises and the leader keeps writing. It
stops as soon as etcd names another leader; a leader of an older epoch than any it has seen
is refused on both sides of the stream.

Nothing else changes for proxies: handles name the shard (the broker name every replica
stores under) and carry the shard's receipt key, which followers receive with their first
snapshot, so a consumer's in-flight acks keep working on a new leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from popmq.broker.catalog_sync import CatalogSync
from popmq.broker.crash_tail_sync import reconcile_crash_tail
from popmq.broker.fencing import leader_lease
from popmq.broker.peer_pings import peer_pings_allowed
from popmq.broker.replication import oplog
from popmq.broker.replication.election import ShardElection, ShardState, Term
from popmq.broker.replication.follower import Follower, FollowError
from popmq.broker.replication.last_leader import LastLeader
from popmq.broker.replication.log import ReplicationLog
from popmq.broker.replication.service import (
    Leadership,
    ReplicationServicer,
    add_replication_service,
)
from popmq.broker.service import BrokerServicer, add_broker_service
from popmq.broker_core import (
    Broker,
    BrokerAPI,
    InvalidArgumentError,
    PopMQError,
    UnavailableError,
    data_dir,
)
from popmq.broker_core.store import Store
from popmq.coordination.coordinator import Session
from popmq.coordination.errors import CoordinationError, MemberExistsError
from popmq.coordination.etcd_coordinator import EtcdCoordinator
from popmq.runtime.collector import freeze_start_up_heap
from popmq.runtime.config import ServerConfig
from popmq.runtime.process import (
    MAX_MESSAGE_BYTES,
    bind_listeners,
    grpc_server,
    print_plaintext_listener,
    run_process,
    split_listen,
    stop_signal,
    wait_for_stop_signal,
)
from popmq.security.authn import cluster_signer
from popmq.security.gate import Gate
from popmq.security.protected import check_protected_mode
from popmq.security.tls import ServerTLS, broker_channel_tls

log = logging.getLogger(__name__)

SERVICE = "popmq.broker.v1.BrokerService"
POLL_S = 0.25
"""How often a follower reads the shard's keys in etcd (leader gone? electable?)."""
VIEW_REFRESH_S = 1.0
"""A follower's read view is rebuilt at most this often: its reads may lag the leader by
this much plus the replication lag."""
LAG_CHECK_S = 0.5
FENCE_CHECK_S = 0.1
PROMISE_SHARE = 0.8
"""The leader counts on a follower's promise for this share of the lease window (from the
heartbeat's send): the rest is a margin for the two clocks' rates and for scheduling."""
RETAKE_PAUSE_S = 0.5
"""How often a leader whose lease was lost tries to take its registration back."""
REGISTERS_AGAIN_S = 2.0
"""A follower whose leader's registration vanished while the leader still speaks goes on
following for at most this long (and half a lease window): a leader whose lease a resumed
etcd revoked registers again about 0.5 s after etcd answers, while a leader cut from etcd
alone looks the same to its followers, and its failover comes that much later."""


class ReplicaServer:
    """One replica of `config.broker.broker_name` named `config.replication.replica`."""

    def __init__(self, config: ServerConfig) -> None:
        if not config.replication.replica:
            raise InvalidArgumentError("a replica needs replication.replica (--name with --shard)")
        if not config.cluster.etcd_endpoints:
            raise InvalidArgumentError(
                "a replica needs etcd (--etcd): leadership and the in-sync set live there"
            )
        self.config = config
        self.shard = config.broker.broker_name
        self.replica = config.replication.replica
        broker = dataclasses.replace(config.broker, auto_create_topics=False)
        if config.replication.persist_checkpoints:
            broker = dataclasses.replace(
                broker, pop=dataclasses.replace(broker.pop, ck_buffer_time_s=0.0)
            )
        self.broker_config = broker
        self.directory: Path = config.broker.store.data_dir
        self.gate = Gate.from_config(config.security)
        self.health = health_aio.HealthServicer()
        self.servicer = BrokerServicer(Broker(self.broker_config))
        self.servicer.writes.following = "starting"
        self.replication = ReplicationServicer(self.shard)
        # How it calls other brokers: its leader as a follower, every broker on a takeover.
        self._peer_tls = broker_channel_tls(config.security)
        self._peer_signer = cluster_signer(config.security)
        self.follower = Follower(
            self.directory,
            shard=self.shard,
            replica=self.replica,
            tls=self._peer_tls,
            signer=self._peer_signer,
        )
        self.role = "starting"
        self.epoch = 0
        """The epoch of the leader this replica leads or follows."""
        self.failovers = 0
        """Times this replica became leader."""
        self.port = 0
        self.plaintext_port = 0
        self.tls: ServerTLS | None = None
        self.broker: Broker | None = None
        self.log: ReplicationLog | None = None
        self._server: grpc.aio.Server | None = None
        self._coordinator: EtcdCoordinator | None = None
        self._election: ShardElection | None = None
        self._roles: asyncio.Task[None] | None = None
        self._followed: ShardState | None = None
        """The leader this replica followed last, while etcd names it (followed again
        while etcd cannot be read)."""
        self._stopping = False
        self._grace_ran_out = False
        self.died: asyncio.Future[str] | None = None
        """Resolved with why, when the replica cannot go on (serve_replica then exits);
        made by start()."""
        self._member: Session | None = None
        self._listing: asyncio.Task[None] | None = None
        # The read-only view of the follower's copy that serves reads (_follower_view),
        # the lsn it was built at, and when (loop time).
        self._view: Broker | None = None
        self._view_lsn = 0
        self._view_at = 0.0

    @property
    def listening(self) -> str:
        """Where it listens (the real port)."""
        host, _ = split_listen(self.config.listen)
        return f"{host}:{self.port}"

    @property
    def address(self) -> str:
        """The address it registers and remembers, which proxies and the other replicas
        dial: `[cluster] advertise` (a replica behind NAT or a relay), else `listening`."""
        return self.config.cluster.advertise or self.listening

    async def start(self) -> int:
        self.died = asyncio.get_running_loop().create_future()
        split_listen(self.config.listen)  # a bad address fails before anything starts
        security = self.config.security
        check_protected_mode(
            security, (self.config.listen, security.plaintext_listen), server="popmq broker"
        )
        if security.tls:
            self.tls = ServerTLS(security, what="broker")
        if self.config.metrics.listen:
            log.warning(
                "metrics.listen is not served by a replica (its broker core changes with its "
                "role): scrape the proxies, which export each shard's popmq_broker_* and "
                "popmq_replication_* series"
            )
        gate = self.gate.interceptor()
        server = grpc_server(
            peer_pings_allowed(self.config),
            () if gate is None else (gate,),
            # a snapshot's chunks and a follower's batches are larger than any answer
            max_send_bytes=max(MAX_MESSAGE_BYTES, 64 * 1024 * 1024),
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        await self._health_to(health_pb2.HealthCheckResponse.NOT_SERVING)
        add_broker_service(server, self.servicer)
        add_replication_service(server, self.replication)
        listeners = bind_listeners(server, self.config, self.tls)
        self.port, self.plaintext_port = listeners.port, listeners.plaintext_port
        await server.start()
        self._server = server
        if self.tls is not None:
            self.tls.start()
        cluster = self.config.cluster
        self._coordinator = EtcdCoordinator(cluster.etcd_endpoints, cluster=cluster.name)
        self._election = ShardElection(
            self._coordinator,
            shard=self.shard,
            replica=self.replica,
            address=self.address,
            ttl_s=cluster.session_ttl_s,
        )
        self.follower.open()
        self.servicer.reads_from = self._follower_view
        self._roles = asyncio.get_running_loop().create_task(
            self._run_roles(), name="popmq-replica-roles"
        )
        self._listing = asyncio.get_running_loop().create_task(
            self._list_replica(), name="popmq-replica-listing"
        )
        self._roles.add_done_callback(self._roles_done)
        return self.port

    def _roles_done(self, task: asyncio.Task[None]) -> None:
        """The role loop ended without stop(): the replica can neither lead nor follow any
        more, so it fences and the process exits (a supervisor restarts it as a follower)
        rather than staying up as a zombie."""
        if task.cancelled() or self._stopping:
            return
        error = task.exception()
        log.error("the replica's role loop died: %r; exiting", error, exc_info=error)
        self.servicer.writes.fence("its role loop died")
        if self.died is not None and not self.died.done():
            self.died.set_result(f"its role loop died ({error!r})")

    async def _health_to(self, status: health_pb2.HealthCheckResponse.ServingStatus) -> None:
        for service in (SERVICE, ""):
            await self.health.set(service, status)

    async def _list_replica(self) -> None:
        """Be listed under replicas/<shard>.<replica> while running, so proxies can read
        from this replica when the shard has no reachable leader. A restart right after a
        kill -9 finds the old listing alive until its lease lapses: it retries meanwhile."""
        assert self._coordinator is not None
        name = f"{self.shard}.{self.replica}"
        while True:
            try:
                self._member = await self._coordinator.register(
                    "replica",
                    name,
                    {"addr": self.address, "shard": self.shard, "replica": self.replica},
                    ttl_s=self.config.cluster.session_ttl_s,
                )
            except MemberExistsError:
                await asyncio.sleep(0.5)
            except CoordinationError as exc:
                log.warning("shard %s: cannot list replica %s yet: %s", self.shard, name, exc)
                await asyncio.sleep(1.0)
            else:
                return

    # -- reads on a follower ---------------------------------------------------------------

    async def _follower_view(self) -> BrokerAPI:
        """A read-only broker over the follower's copy, rebuilt when the copy has moved on
        (at most every VIEW_REFRESH_S): what a follower answers reads with."""
        store = self.follower.store
        if store is None or self.role not in ("follower", "waiting"):
            raise UnavailableError(
                f"this replica of shard {self.shard!r} is {self.role}; ask the shard's leader"
            )
        _, lsn = self.follower.position
        if lsn == 0 or not (self.directory / data_dir.KEY_FILE).exists():
            raise UnavailableError(
                f"this replica of shard {self.shard!r} holds no copy of it yet; ask its leader"
            )
        now = asyncio.get_running_loop().time()
        view = self._view
        if view is not None and (
            view.store is not store
            or (lsn != self._view_lsn and now - self._view_at >= VIEW_REFRESH_S)
        ):
            await self._drop_view()
            view = None
        if view is None:
            view = Broker(self.broker_config, view_of=store)
            await view.start()
            self._view, self._view_lsn, self._view_at = view, lsn, now
        return view

    async def _drop_view(self) -> None:
        if self._view is not None:
            view, self._view = self._view, None
            await view.close()

    # -- roles ----------------------------------------------------------------------------

    async def _run_roles(self) -> None:
        assert self._election is not None
        election = self._election
        remembered = self._remembered_leader()
        if remembered is not None:
            # Before etcd is asked (which takes seconds to fail while it is down): the
            # leader may be counting on this replica's promise. Following stops as soon as
            # etcd names another leader, and the epoch checks refuse a stale one.
            log.info(
                "shard %s: replica %s follows its last known leader %s (epoch %d) at %s "
                "until etcd names another",
                self.shard,
                self.replica,
                remembered.leader or "?",
                remembered.epoch,
                remembered.address,
            )
            self._followed = remembered
            await self._follow(remembered)
        while True:
            try:
                state = await election.read()
            except CoordinationError as exc:
                log.warning("shard %s: cannot read etcd: %s", self.shard, exc)
                followed = self._followed
                if followed is not None:
                    # Without etcd, follow the last leader again (a stream that broke for a
                    # moment): it keeps its lease promises, and the epoch checks refuse it
                    # if it was replaced meanwhile.
                    await self._follow(followed)
                else:
                    await asyncio.sleep(1.0)
                continue
            self._followed = None
            if state.leader and state.leader != self.replica:
                self._followed = state
                await self._follow(state)
            elif state.leader == self.replica:
                # An earlier run's registration whose lease has not lapsed: wait for it.
                await asyncio.sleep(POLL_S)
            elif state.electable(self.replica):
                restrained = self._restrained(state)
                if restrained > 0:
                    self._set_role("waiting", state.epoch)
                    await asyncio.sleep(min(restrained, POLL_S))
                    continue
                term = await self._campaign(state)
                if term is not None:
                    await self._lead(term)
                else:
                    await asyncio.sleep(POLL_S)
            else:
                self._set_role("waiting", state.epoch)
                await asyncio.sleep(POLL_S)

    def _remembered_leader(self) -> ShardState | None:
        """The last leader written in the data dir, unless it is this replica."""
        known = self.follower.last_leader
        if known is None or known.replica == self.replica or known.address == self.address:
            return None
        return ShardState(
            leader=known.replica,
            address=known.address,
            epoch=known.epoch,
            elected="",
            isr=(),
            revision=0,
        )

    def _restrained(self, state: ShardState) -> float:
        """Seconds this replica is still bound by its promise not to campaign: the lease
        window after it last heard from a leader (0: free). The last elected replica made
        no promise to a leader since (none was elected after it), nor did any replica of a
        new shard."""
        if state.revision == 0 or state.elected == self.replica:
            return 0.0
        window = float(self.config.cluster.session_ttl_s)
        return max(0.0, self.follower.heard_at + window - time.monotonic())

    def _set_role(self, role: str, epoch: int) -> None:
        if (role, epoch) != (self.role, self.epoch):
            log.info("shard %s: replica %s is %s (epoch %d)", self.shard, self.replica, role, epoch)
        self.role = role
        self.epoch = epoch
        if role != "leader":
            self.servicer.writes.following = f"{role} at epoch {epoch}"

    async def _campaign(self, state: ShardState) -> Term | None:
        assert self._election is not None
        try:
            return await self._election.campaign(state)
        except CoordinationError as exc:
            log.warning("shard %s: campaign failed: %s", self.shard, exc)
            return None

    async def _follow(self, state: ShardState) -> None:
        """Follow the leader of `state` until its registration changes or the stream ends."""
        assert self._election is not None
        self._set_role("follower", state.epoch)
        stream = asyncio.ensure_future(
            self.follower.follow(state.address, state.epoch, leader=state.leader)
        )
        gone_since: float | None = None  # when etcd first showed no registration
        try:
            while not stream.done():
                done, _ = await asyncio.wait((stream,), timeout=POLL_S)
                if done:
                    break
                with contextlib.suppress(CoordinationError):
                    now = await self._election.read()
                    if now.epoch == state.epoch:
                        gone_since = None
                    elif self._leader_registers_again(now, gone_since):
                        gone_since = gone_since or time.monotonic()
                    else:
                        log.info(
                            "shard %s: leader %s (epoch %d) is gone",
                            self.shard,
                            state.leader,
                            state.epoch,
                        )
                        break
        finally:
            if not stream.done():
                stream.cancel()
            ended: BaseException | None = None
            try:
                await stream
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # stop() cancels the role loop: never swallow that
            except (FollowError, grpc.aio.AioRpcError, OSError) as exc:
                ended = exc
        if ended is not None:
            log.info("shard %s: following %s ended: %s", self.shard, state.leader, _short(ended))
            await asyncio.sleep(POLL_S)

    def _leader_registers_again(self, now: ShardState, gone_since: float | None) -> bool:
        """Whether to go on following a leader whose registration is gone (etcd says
        `now`; first seen gone at `gone_since`): see `follows_vanished_leader`."""
        return not now.leader and follows_vanished_leader(
            now_s=time.monotonic(),
            heard_at=self.follower.heard_at,
            gone_since=gone_since,
            ttl_s=float(self.config.cluster.session_ttl_s),
        )

    async def _lead(self, term: Term) -> None:
        """Serve as the shard's leader for this term; return once it ended."""
        assert self._election is not None and self._coordinator is not None
        election = self._election
        # The last leader this replica heard from released it, or stopped cleanly with
        # this copy as it is now (this replica itself, or one that released it before a
        # restart: last_leader.py): it stopped once the sends in flight had finished, so
        # no send was moved off it while it might be stored (but for docs/cluster.md's
        # exceptions for a clean stop).
        released = self.follower.released or self._copy_stopped_cleanly()
        self.follower.released = False
        self._set_role("taking over", term.epoch)
        await self._drop_view()
        self.follower.close()
        loop = asyncio.get_running_loop()
        opened: list[ReplicationLog] = []

        def promised(now: float) -> str | None:
            return opened[0].promised(now) if opened else "its log is not open yet"

        fenced = leader_lease(lambda: term.keeper, promised)

        def make_log(store: Store) -> ReplicationLog:
            self.log = ReplicationLog(
                store,
                shard=self.shard,
                replica=self.replica,
                terms=self.failovers + 1,
                epoch=term.epoch,
                isr=(),
                min_insync=self.config.replication.min_insync,
                wait_for_followers=self.config.replication.mode == "sync",
                buffer_bytes=self.config.replication.log_buffer_bytes,
                lag_timeout_s=self.config.replication.lag_timeout_s,
                fenced=fenced,
                persist=lambda isr: election.write_isr(term, isr),
                promise_s=self.config.cluster.session_ttl_s * PROMISE_SHARE,
            )
            # Until its reconciliation is done, a stop ends its followers' streams without
            # releasing them: the one taking over next must reconcile in its place.
            self.log.releases = released
            opened.append(self.log)
            return self.log

        broker = self.broker = Broker(self.broker_config, tap=make_log)
        sync: CatalogSync | None = None
        lag_task: asyncio.Task[None] | None = None
        reason = "it stopped"
        ended_cleanly = False
        try:
            # Written before it serves: restarted while etcd is down, it will follow no
            # leader older than this term.
            await self.follower.remember(
                LastLeader(replica=self.replica, address=self.address, epoch=term.epoch)
            )
            await broker.start()
            assert self.log is not None
            self.replication.leading = Leadership(self.log, broker.store, self.directory)
            sync = CatalogSync(self._coordinator, broker, self.shard)
            await sync.start()
            await sync.wait_ready(timeout_s=self.config.cluster.catalog_ready_timeout_s)
            self.servicer.serve(broker)
            if not released:
                # Fenced before `following` is cleared, so no call queued on the loop slips
                # in before the reconciliation (_reconcile_takeover) has run.
                self.servicer.writes.fence(
                    "it is taking over the shard and is checking whether other brokers hold "
                    "the messages the shard stored last",
                    reconciling=True,
                )
            self.servicer.writes.following = None
            # What ends the term, watched from here on: the reconciliation below waits on
            # other brokers, and a follower that joins meanwhile and stalls must still
            # leave the in-sync set (lag), a lost registration still end the term.
            lag_task = loop.create_task(self._check_lag(self.log))
            watches = (
                loop.create_task(self._hold_registration(term)),
                loop.create_task(broker.wait_failure()),
                loop.create_task(sync.wait_failure()),
            )
            reconciling = None
            try:
                if not released:
                    reconciling = loop.create_task(self._reconcile_takeover(broker))
                    done, _ = await asyncio.wait(
                        (reconciling, *watches), return_when=asyncio.FIRST_COMPLETED
                    )
                if reconciling is None or (
                    reconciling in done and not any(w in done for w in watches)
                ):
                    if reconciling is not None:
                        reconciling.result()  # raises what it could not handle itself
                        assert self.log is not None
                        self.log.releases = True
                    self.servicer.writes.unfence()
                    self.role = "leader"
                    self.epoch = term.epoch
                    self.failovers += 1
                    log.info(
                        "shard %s: replica %s leads (epoch %d, from lsn %d)",
                        self.shard,
                        self.replica,
                        term.epoch,
                        self.log.lsn,
                    )
                    await self._health_to(health_pb2.HealthCheckResponse.SERVING)
                    done, _ = await asyncio.wait(watches, return_when=asyncio.FIRST_COMPLETED)
            finally:
                # Also when stop() cancels this: the registration's holder must not take
                # the registration back once resign() below closed its keeper.
                tasks = (*watches, *([reconciling] if reconciling else []))
                self.servicer.writes.reconciles(None)  # no lookup answered from here on
                for task in tasks:
                    task.cancel()
                # Ended before the broker closes (a lookup's channel, a removal's write).
                await asyncio.gather(*tasks, return_exceptions=True)
            reason = str(next(t for t in done if t is not reconciling).result())
        except asyncio.CancelledError:
            if self._stopping:  # stop() ends the term: is it a clean stop?
                unclean = self._unclean_stop(broker)
                ended_cleanly = unclean is None
                if unclean is not None:
                    log.info(
                        "shard %s: replica %s stops leading uncleanly (%s): the next leader "
                        "checks the shard's last messages against the other brokers",
                        self.shard,
                        self.replica,
                        unclean,
                    )
            raise
        except (CoordinationError, TimeoutError, FollowError, OSError) as exc:
            reason = f"it could not start leading: {exc}"
        finally:
            log.warning("shard %s: replica %s stops leading: %s", self.shard, self.replica, reason)
            self.servicer.writes.fence(f"it no longer leads ({reason})")
            self._set_role("resigning", term.epoch)
            await self._health_to(health_pb2.HealthCheckResponse.NOT_SERVING)
            if lag_task is not None:
                lag_task.cancel()
            if self.log is not None:
                self.log.fail_all(f"shard {self.shard!r}: leadership ended ({reason})")
            self.replication.leading = None
            if sync is not None:
                await sync.close()
            broker.release_waiters()
            # Where the copy stands: final, as the failed log stamps no write from here on.
            stopped_at = oplog.read_position(broker.store) if ended_cleanly else None
            await broker.close()
            self.broker = None
            self.log = None
            try:
                await election.resign(term)  # re-raises stop()'s cancellation
            finally:
                if stopped_at is not None:  # after the resign: the next leader need not wait
                    await self._remember_clean_stop(term, stopped_at)
            self.servicer.serve(Broker(self.broker_config))
            if not self._stopping:
                self.follower.open()

    def _unclean_stop(self, broker: Broker) -> str | None:
        """Why a term that stop() ends is no clean stop, or None: the calls in flight
        finished within the grace, its takeover's reconciliation (if any) was done, and
        nothing it wrote is in doubt."""
        if self._grace_ran_out:
            return f"calls were still running after the {self.config.shutdown_grace_s:g}s grace"
        if self.log is None:
            return "its log was not open yet"
        if not self.log.releases:
            return "its takeover's reconciliation was not done"
        if not self.log.settled():
            return "a write waits for its followers, or one whose wait failed is in doubt"
        if broker.writer.in_doubt():
            return "a write's fsync or its wait for the followers failed"
        return None

    def _copy_stopped_cleanly(self) -> bool:
        """Whether the shard's last leader stopped cleanly with this replica's copy as it
        is now (nothing written since, by any leader)."""
        last, follower = self.follower.last_leader, self.follower
        if last is None or last.stopped_at is None or follower.store is None:
            return False
        if last.stopped_at != follower.position:
            return False
        log.info(
            "shard %s: replica %s takes over from a leader that stopped cleanly at epoch %d, "
            "lsn %d: its last messages need no check against the other brokers",
            self.shard,
            self.replica,
            *last.stopped_at,
        )
        return True

    async def _remember_clean_stop(self, term: Term, stopped_at: tuple[int, int]) -> None:
        """This term ended by a clean stop with its sends in flight finished: write down
        where its log stands, so that elected again after a restart it takes over without
        reconciling (last_leader.py)."""
        try:
            await self.follower.remember(
                LastLeader(
                    replica=self.replica,
                    address=self.address,
                    epoch=term.epoch,
                    stopped_at=stopped_at,
                )
            )
        except (OSError, FollowError) as exc:  # never in the stop's way: it reconciles instead
            log.warning(
                "shard %s: replica %s could not write down its clean stop (%s): elected "
                "again, it checks its last messages against the other brokers",
                self.shard,
                self.replica,
                exc,
            )

    async def _reconcile_takeover(self, broker: Broker) -> None:
        """Before taking writes: remove what another broker holds of the messages the shard
        stored last (crash_tail_sync.py). A proxy moves a send off a leader whose address
        refuses connections; if that leader had replicated the send before it died, this
        replica holds a copy too. Run on a takeover unless the last leader released this
        replica (a clean stop); the removal is replicated like any write.
        """
        assert self._coordinator is not None
        try:
            await reconcile_crash_tail(
                broker,
                self._coordinator,
                name=self.shard,
                wait_s=self.config.cluster.crash_tail_wait_s,
                tls=self._peer_tls,
                signer=self._peer_signer,
                takeover=True,
                fence=self.servicer.writes,
            )
        except PopMQError as exc:  # its tail could not be read: serve, as after a failed removal
            log.warning(
                "shard %s: replica %s could not check the shard's last messages against the "
                "other brokers (%s): a send moved off the last leader may be stored twice",
                self.shard,
                self.replica,
                exc,
            )

    async def _hold_registration(self, term: Term) -> str:
        """Keep the term's registration; return why the term ends. When the lease is lost
        the term goes on (writes follow `fenced`: the followers' promises) and the
        registration is taken back under the same epoch once etcd answers; the term ends
        when etcd says the registration is gone or another's."""
        assert self._election is not None
        while True:
            why = await term.keeper.wait_lost()
            log.warning(
                "shard %s: replica %s lost its leader lease (%s): it writes while its in-sync "
                "followers' lease promises run and takes its registration back once etcd "
                "answers",
                self.shard,
                self.replica,
                why,
            )
            while True:
                try:
                    retaken = await self._election.retake(term)
                except CoordinationError as exc:
                    log.debug(
                        "shard %s: cannot take the registration back yet: %s", self.shard, exc
                    )
                    await asyncio.sleep(RETAKE_PAUSE_S)
                    continue
                if not retaken:
                    return f"its leader lease was lost ({why}) and its registration is gone"
                log.info(
                    "shard %s: replica %s holds its registration again (epoch %d)",
                    self.shard,
                    self.replica,
                    term.epoch,
                )
                break

    async def _check_lag(self, log_: ReplicationLog) -> None:
        fence_check = asyncio.get_running_loop().create_task(self._settle_fenced(log_))
        try:
            await self._check_lag_forever(log_)
        finally:
            fence_check.cancel()

    @staticmethod
    async def _settle_fenced(log_: ReplicationLog) -> None:
        """A batch waiting for a follower that is cut off fails once the leader is fenced
        (lease lost and a promise over), not when the follower's ack would have come."""
        while True:
            await asyncio.sleep(FENCE_CHECK_S)
            log_.settle()

    async def _check_lag_forever(self, log_: ReplicationLog) -> None:
        while True:
            await asyncio.sleep(LAG_CHECK_S)
            try:
                await log_.check_lag()
            except CoordinationError as exc:
                log.warning("shard %s: cannot change the in-sync set: %s", self.shard, exc)

    # -- stop -----------------------------------------------------------------------------

    async def stop(self) -> None:
        self._stopping = True
        loop = asyncio.get_running_loop()
        await self.health.enter_graceful_shutdown()
        if self.broker is not None:
            self.broker.release_waiters()
        if self._server is not None:
            server, self._server = self._server, None
            stopping = asyncio.ensure_future(server.stop(self.config.shutdown_grace_s))
            await asyncio.sleep(0)  # the server takes no new call from here
            # The followers' streams and the proxies' hop streams never end by themselves:
            # without this, a leader's stop would always wait the whole grace for them.
            self.servicer.end_streams()
            if self.log is not None:
                self.log.close_streams()
            began = loop.time()
            await stopping
            # Calls still running when the grace ran out were cancelled: a send among them
            # may be stored and yet moved elsewhere by its proxy, so this is no clean stop.
            self._grace_ran_out = loop.time() - began >= self.config.shutdown_grace_s * 0.99
        if self._roles is not None:
            self._roles.cancel()
            with contextlib.suppress(BaseException):
                await self._roles
        if self.tls is not None:
            await self.tls.close()
        await self._drop_view()
        self.follower.close()
        if self._listing is not None:
            self._listing.cancel()
            with contextlib.suppress(BaseException):
                await self._listing
        if self._member is not None:
            member, self._member = self._member, None
            with contextlib.suppress(CoordinationError):
                await member.close()
        if self._coordinator is not None:
            coordinator, self._coordinator = self._coordinator, None
            await coordinator.close()


def follows_vanished_leader(
    *, now_s: float, heard_at: float, gone_since: float | None, ttl_s: float
) -> bool:
    """Whether a follower goes on following a leader whose registration etcd shows gone
    (no other registered; first seen gone at `gone_since`, None: just now), at `now_s`:
    while the leader's stream still speaks (heard within a third of the lease window: a
    few heartbeats), for min(half a window, REGISTERS_AGAIN_S) at most.

    An etcd that resumes after a pause past the TTL revokes the leader's lease while it
    serves, and the leader registers again under its term about 0.5 s later (election.py,
    `retake`): leaving it would only drop this follower from its in-sync set. A follower
    cannot tell that from a leader cut from etcd alone (it still speaks too), whose
    failover therefore comes up to this long later: hence the cap. A leader that went
    silent (dead, paused) is left at once, as before."""
    return now_s - heard_at < ttl_s / 3 and (
        gone_since is None or now_s - gone_since < min(ttl_s / 2, REGISTERS_AGAIN_S)
    )


def _short(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or repr(exc)


async def serve_replica(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    server = ReplicaServer(config)
    await server.start()
    freeze_start_up_heap(config.gc)
    # Handlers first: a SIGTERM sent as soon as the listening line is read stops cleanly.
    stopping = stop_signal()
    print(f"listening on {server.listening}", flush=True)
    print_plaintext_listener(config, server.plaintext_port)
    stop = asyncio.ensure_future(
        wait_for_stop_signal(hangup=server.tls.reload_soon if server.tls else None, stop=stopping)
    )
    died = server.died
    assert died is not None
    await asyncio.wait((stop, died), return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    log.info("shutting down")
    await server.stop()
    log.info("stopped")
    if died.done():
        raise SystemExit(f"popmq broker --shard: {died.result()}")


def run_replica(config: ServerConfig) -> int:
    """Blocking entry point of `popmq broker --shard`; returns the process exit code."""
    return run_process(serve_replica, config)
