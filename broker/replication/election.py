"""A shard's leadership in etcd: who leads, since which epoch, and who is in sync.

Two keys under the cluster root (docs/replication.md):

- `brokers/<shard>` = {"addr", "replica"}: the leader's registration, under its lease. It is
  what proxies route to, exactly as a standalone broker's registration (they need not know
  about replicas), and its create revision is the leader's **epoch** (fencing token): a new
  leader's key is a new key, so its epoch is larger than every earlier one.
- `shards/<shard>` = {"leader", "isr", "epoch"}: persistent; the replica that was last
  elected and the followers that hold every acknowledged send (and, once the leader wrote
  the set, its term's epoch). Only a replica named there may be elected (no unclean
  election): the last leader itself, or an in-sync follower.

An election is one etcd transaction: the registration must be absent and `shards/<shard>`
unchanged since the candidate read it; then both are written (the ISR starts empty: the
followers join again as they catch up with the new leader). The leader changes the ISR
with a transaction that also checks its registration is still the one of its term, so a
deposed leader cannot change it. A leader whose lease was lost (etcd away for a TTL) takes
its registration back under a new lease (`retake`), so the term goes on under the same
epoch: the key itself while it is still the term's (etcd restores leases when it restarts),
or, when the key is gone (an etcd resumed after a pause past the TTL revokes every lease at
once), a new key naming the term's epoch, only while `shards/<shard>` is still the record
this term wrote last: every election rewrites that record, so nobody was elected since. The
epoch is then the `epoch` the registration names, and its create revision otherwise.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from popmq.broker_core.errors import UnavailableError
from popmq.coordination.coordinator import encode_value
from popmq.coordination.errors import CoordinationError, LeaseNotFoundError
from popmq.coordination.etcd import Compare, Get, Put, RangeResult, TxnResult
from popmq.coordination.etcd_coordinator import EtcdCoordinator, prompt_lease
from popmq.coordination.etcd_streams import LeaseKeeper

SHARDS_FOLDER = "shards/"


class LeadershipLostError(CoordinationError, UnavailableError):
    """etcd no longer names this replica the shard's leader of this epoch."""


@dataclass(frozen=True, slots=True)
class ShardState:
    """What etcd says of a shard now.

    Attributes:
        leader: The registered leader's replica name ("" when none is registered).
        address: Its BrokerService address.
        epoch: Its epoch (the registration's create revision; 0 without a leader).
        elected: The replica `shards/<shard>` names as last elected ("" for a new shard).
        isr: The in-sync followers it names.
        revision: The mod revision of `shards/<shard>` (0: absent).
    """

    leader: str
    address: str
    epoch: int
    elected: str
    isr: tuple[str, ...]
    revision: int

    def electable(self, replica: str) -> bool:
        """Whether `replica` may become leader: a new shard, the last leader, or in sync."""
        return self.revision == 0 or replica == self.elected or replica in self.isr


def _epoch(registration: dict[str, object], create_revision: int) -> int:
    """The epoch a leader's registration stands for: the one it names (registered again
    under its term, `retake`), else its create revision."""
    named = registration.get("epoch")
    return named if isinstance(named, int) and 0 < named <= create_revision else create_revision


@dataclass(slots=True)
class Term:
    """One leadership: its epoch, lease and the revision of the ISR record it wrote last.

    `registration` is the create revision of the registration key the term holds now: its
    epoch, until the term registers again under a new key (`retake`)."""

    epoch: int
    lease: int
    keeper: LeaseKeeper
    shards_revision: int
    registration: int = 0

    def __post_init__(self) -> None:
        if self.registration == 0:
            self.registration = self.epoch


class ShardElection:
    """Reads and changes a shard's keys for one replica.

    Args:
        coordinator: The cluster's etcd coordinator.
        shard: The shard (its broker name).
        replica: This replica's name.
        address: This replica's BrokerService address.
        ttl_s: The leader lease's TTL.
    """

    def __init__(
        self, coordinator: EtcdCoordinator, *, shard: str, replica: str, address: str, ttl_s: int
    ) -> None:
        self._client = coordinator.client
        self.shard = shard
        self.replica = replica
        self.address = address
        self.ttl_s = ttl_s
        self._leader_key = coordinator.root + "brokers/" + shard
        self._shard_key = coordinator.root + SHARDS_FOLDER + shard

    async def read(self) -> ShardState:
        result = await self._client.txn([], [Get(self._leader_key), Get(self._shard_key)])
        reads = [r for r in result.results if isinstance(r, RangeResult)]
        leader_kv = reads[0].kvs[0] if reads[0].kvs else None
        shard_kv = reads[1].kvs[0] if reads[1].kvs else None
        leader: dict[str, object] = json.loads(leader_kv.value) if leader_kv else {}
        record: dict[str, object] = json.loads(shard_kv.value) if shard_kv else {}
        isr = record.get("isr", [])
        return ShardState(
            leader=str(leader.get("replica", "")) if leader_kv else "",
            address=str(leader.get("addr", "")),
            epoch=_epoch(leader, leader_kv.create_revision) if leader_kv else 0,
            elected=str(record.get("leader", "")),
            isr=tuple(str(name) for name in isr) if isinstance(isr, list) else (),
            revision=shard_kv.mod_revision if shard_kv else 0,
        )

    async def campaign(self, state: ShardState) -> Term | None:
        """Try to become leader after `state` (read just before); None when another won."""
        lease = await prompt_lease(self._client, self.ttl_s)
        shard_compare = (
            Compare(self._shard_key, "create_revision", "==", 0)
            if state.revision == 0
            else Compare(self._shard_key, "mod_revision", "==", state.revision)
        )
        result = await self._client.txn(
            [Compare(self._leader_key, "create_revision", "==", 0), shard_compare],
            [
                Put(self._leader_key, self._registration(), lease.id),
                Put(self._shard_key, self._record((), None)),
            ],
        )
        if not result.succeeded:
            with contextlib.suppress(LeaseNotFoundError, CoordinationError):
                await self._client.lease_revoke(lease.id)
            return None
        return Term(
            epoch=result.revision,
            lease=lease.id,
            keeper=self._client.keep_alive(lease),
            shards_revision=result.revision,
        )

    def _record(self, isr: Iterable[str], epoch: int | None) -> bytes:
        """The in-sync set record's value; naming the writing term's `epoch` when known (an
        election's own record is written before its epoch exists: its mod revision is it)."""
        value: dict[str, object] = {"leader": self.replica, "isr": sorted(isr)}
        if epoch is not None:
            value["epoch"] = epoch
        return encode_value(value)

    def _registration(self, epoch: int | None = None) -> bytes:
        """The registration's value; naming `epoch` when it is not the key's own."""
        value: dict[str, object] = {"addr": self.address, "replica": self.replica}
        if epoch is not None:
            value["epoch"] = epoch
        return encode_value(value)

    async def write_isr(self, term: Term, isr: Iterable[str]) -> None:
        """Record the ISR, only while this term's registration stands.

        Raises:
            LeadershipLostError: the registration is not this term's any more.
        """
        isr = tuple(isr)
        result = await self._write_isr(term, isr)
        if not result.succeeded and await self._adopt(term):
            result = await self._write_isr(term, isr)
        if not result.succeeded:
            raise LeadershipLostError(
                f"shard {self.shard!r}: etcd no longer names this replica leader of epoch "
                f"{term.epoch}"
            )
        term.shards_revision = result.revision

    async def _write_isr(self, term: Term, isr: Iterable[str]) -> TxnResult:
        return await self._client.txn(
            [
                Compare(self._leader_key, "create_revision", "==", term.registration),
                Compare(self._shard_key, "mod_revision", "==", term.shards_revision),
            ],
            [Put(self._shard_key, self._record(isr, term.epoch))],
        )

    async def retake(self, term: Term) -> bool:
        """After the term's lease was lost: hold its registration again under a new lease;
        False when another replica holds it or was elected since.

        The key itself is moved to the new lease while it is still the term's: etcd
        restores leases with their whole TTL when it restarts, so after an outage it is
        usually there, and nobody can have been elected meanwhile (that needs the key
        absent). When it is gone (an etcd that resumes after a pause past the TTL revokes
        every lease at once), a new key naming the term's epoch is created, only while the
        key is absent and `shards/<shard>` is still the record this term wrote last: an
        election rewrites it, so none happened, and the term goes on under its epoch.

        Raises:
            CoordinationError: etcd did not answer (try again later).
        """
        lease = await prompt_lease(self._client, self.ttl_s)
        try:
            retaken = await self._move(term, lease.id) or await self._renew(term, lease.id)
            if not retaken and await self._adopt(term):
                retaken = await self._move(term, lease.id) or await self._renew(term, lease.id)
        except BaseException:
            with contextlib.suppress(LeaseNotFoundError, CoordinationError):
                await self._client.lease_revoke(lease.id)
            raise
        if not retaken:
            with contextlib.suppress(LeaseNotFoundError, CoordinationError):
                await self._client.lease_revoke(lease.id)
            return False
        old_keeper, old_lease = term.keeper, term.lease
        term.keeper = self._client.keep_alive(lease)
        term.lease = lease.id
        await old_keeper.close()
        with contextlib.suppress(LeaseNotFoundError, CoordinationError):
            await self._client.lease_revoke(old_lease)  # it holds nothing any more
        return True

    async def _move(self, term: Term, lease: int) -> bool:
        """Move the term's registration key to `lease`; False when it is not the term's."""
        named = term.epoch if term.registration != term.epoch else None
        result = await self._client.txn(
            [Compare(self._leader_key, "create_revision", "==", term.registration)],
            [Put(self._leader_key, self._registration(named), lease)],
        )
        return result.succeeded

    async def _renew(self, term: Term, lease: int) -> bool:
        """Register the term again under a new key naming its epoch, while the key is
        absent and nobody was elected since the term's last record; False otherwise."""
        result = await self._client.txn(
            [
                Compare(self._leader_key, "create_revision", "==", 0),
                Compare(self._shard_key, "mod_revision", "==", term.shards_revision),
            ],
            [Put(self._leader_key, self._registration(term.epoch), lease)],
        )
        if result.succeeded:
            term.registration = result.revision
        return result.succeeded

    async def _adopt(self, term: Term) -> bool:
        """After a failed compare: take up the term's own keys at the revisions etcd has
        (a write of the term applied though its answer was lost); True when one changed.

        A registration naming this replica and the term's epoch is one `_renew` created,
        and an in-sync set record naming them is one `write_isr` wrote: no other term
        writes that epoch (an election's record names none, and its key is a new one), so
        taking them up lets nobody's write through that the compares were there to stop.
        """
        result = await self._client.txn([], [Get(self._leader_key), Get(self._shard_key)])
        reads = [r for r in result.results if isinstance(r, RangeResult)]
        leader_kv = reads[0].kvs[0] if reads[0].kvs else None
        shard_kv = reads[1].kvs[0] if reads[1].kvs else None
        adopted = False
        if (
            leader_kv is not None
            and leader_kv.create_revision != term.registration
            and leader_kv.value == self._registration(term.epoch)
        ):
            term.registration = leader_kv.create_revision
            adopted = True
        if shard_kv is not None and shard_kv.mod_revision != term.shards_revision:
            record = json.loads(shard_kv.value)
            if record.get("leader") == self.replica and record.get("epoch") == term.epoch:
                term.shards_revision = shard_kv.mod_revision
                adopted = True
        return adopted

    async def resign(self, term: Term) -> None:
        """End the term: revoke the lease (its registration goes) and stop renewing.

        Revoked first: a replica that stops runs this while its role loop is being
        cancelled, and closing the keeper then re-raises the cancellation, which used to
        skip the revoke (the followers waited a whole TTL for the registration to lapse)."""
        try:
            with contextlib.suppress(LeaseNotFoundError, CoordinationError):
                await self._client.lease_revoke(term.lease)
        finally:
            await term.keeper.close()
