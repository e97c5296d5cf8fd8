"""Queue claims kept through a coordinator outage: the registry's answers from its cache.

While the coordinator (etcd) does not answer, ClientRegistry (clients.py) answers the
Heartbeat and QueryAssignment of queue-exclusive members from this proxy's cache of their
group (consumer_groups.py) instead of failing them:

- A Heartbeat of a member the cache holds, registered as it is now and not gone by the
  cached time of its last call (nor by a call answered here since), is answered; its call
  is recorded here. Any other Heartbeat fails with the coordinator's UNAVAILABLE (a new
  member, a changed registration, a member that was gone: they need the coordinator).
- A QueryAssignment keeps the member's claims that the cache says it holds, that have not
  ended, and that it reports holding (``held``), each renewed until the earlier of a
  claim time from now and its **recorded deadline** (the cache's) plus ``outage_hold_s``.
  The queues it stops reporting are renewed no more. Nothing is granted, nothing pending is
  reported (asking sooner would only meet the outage again).
- The next write of the group, once the coordinator answers, stores what was recorded
  here first (each member's last call, each renewed claim still running), then applies the
  call's own change; a member's NotifyClientTermination or session end drops its record.

Why no queue is ever consumed by two members, whatever is cut off from what:

1. Every registry lets another member take a claimed queue only ``outage_hold_s`` plus the
   clock skew past the deadline the coordinator records for it (clients.py `_block`), and
   a renewal here never tells a member a claim end past that recorded deadline plus
   ``outage_hold_s``. So a proxy that reaches etcd while this one is cut off (a partition,
   not an outage) still waits out everything this one may have renewed, and so does every
   proxy once etcd is back, whether or not this one has stored its renewals by then.
2. The recorded deadline used is the cache's, never later than the coordinator's: a claim's
   deadline only moves forward while the same member holds it (its own calls renew it),
   and a claim leaves a member only by a write.
3. A renewal keeps only a claim the cache says the member holds and that the member
   reports holding now. A member reports a queue as no longer held before any write can
   release it to another (the registry releases only claims the member stopped reporting,
   or ones past their deadline, covered by 1), so a queue the member gave up through
   another proxy, which the cache here cannot know of, is not reported here. popmq.v1
   clients report what they consume; for v2 (official) clients the proxy derives it from
   the client's calls to it (rocketmq/assignments.py), which stands for what the client
   consumes because an official client sends all its calls to one proxy until it fails
   over.
4. A write that failed without an answer may have landed: the claims it would have
   released or moved are unsure until the group is read again (consumer_groups.py), and
   are not renewed.
5. Nothing is granted from the cache: a grant would rest on claims another proxy may have
   changed since.

What it costs: a member that stops calling (its process died, or its proxy and it both
did) keeps its queues from the others ``outage_hold_s`` longer than its claim time. What it
does not cover: an outage longer than ``outage_hold_s`` past a claim's last recorded
deadline (the member's claims then end, as they did before there was a hold-over, and its
queues wait for etcd); a member whose proxy died during the outage and that moved to
another proxy (that proxy's cache may not hold the group; the member waits until etcd is
back); a new member, or one whose registration changed.

Everything runs on the event loop, with no wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from popmq.proxy.consumer_groups import (
    Claim,
    ConsumerGroups,
    StoredGroup,
    StoredMember,
    TopicClaims,
)

__all__ = ["ClaimHoldOver", "HeldAssignment"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Record:
    """What the hold-over answered one member since its group's last write."""

    seen: float
    """Wall-clock time of its last call answered here."""
    claims: dict[tuple[str, int], float] = field(default_factory=dict)
    """(topic, queue id) -> the claim end it was told."""
    logged: bool = False
    """Whether keeping its claims was logged (once until the group is written again)."""


@dataclass(frozen=True, slots=True)
class HeldAssignment:
    """A QueryAssignment answered by the hold-over."""

    queue_ids: tuple[int, ...]
    epoch: int
    claim_s: float
    """How long the kept claims last from now (the shortest of them)."""


class ClaimHoldOver:
    """The registry's records of members answered from its cache while the coordinator
    was away (module docstring).

    Args:
        groups: The registry's cached groups.
        hold_s: ``outage_hold_s`` in effect.
        missed_heartbeats: A member silent for this many intervals is gone (its claim time).
        clock: The registry's wall clock.
    """

    def __init__(
        self,
        groups: ConsumerGroups,
        *,
        hold_s: float,
        missed_heartbeats: int,
        clock: Callable[[], float],
    ) -> None:
        self._groups = groups
        self._hold = hold_s
        self._missed = missed_heartbeats
        self._clock = clock
        # group -> client id -> its record, until the group's next write stores it.
        # Guarded by running on one event loop.
        self._records: dict[str, dict[str, _Record]] = {}

    def holds(self, group: str) -> bool:
        """Whether something of the group waits to be stored."""
        return group in self._records

    def heartbeat(
        self,
        group: str,
        client_id: str,
        interval_s: float,
        same: Callable[[StoredMember], bool],
        arrived: float,
    ) -> bool:
        """Answer a Heartbeat from the cache; False when it cannot be (see module docstring).

        `same` says whether the cached member is registered as the call says; `arrived` is
        when the call came (the failed coordinator calls may have taken seconds since).
        """
        if self._hold <= 0:
            return False
        member = self._member(group, client_id)
        if member is None or not same(member) or member.interval_s != interval_s:
            return False
        record = self._records.get(group, {}).get(client_id)
        if arrived - self._last_call(member, record) > member.interval_s * self._missed:
            return False  # gone by the rules: it must join again, through the coordinator
        self._record(group, client_id, arrived)
        return True

    def query(
        self,
        group: str,
        client_id: str,
        topic: str,
        queue_count: int,
        held: Sequence[int],
        arrived: float,
    ) -> HeldAssignment | None:
        """Answer a QueryAssignment from the cache; None when it cannot be (`arrived`: as
        for `heartbeat`)."""
        if self._hold <= 0:
            return None
        member = self._member(group, client_id)
        if member is None or topic not in member.topics:
            return None
        now = self._clock()
        records = self._records.get(group, {})
        record = records.get(client_id)
        claim_s = member.interval_s * self._missed
        if arrived - self._last_call(member, record) > claim_s:
            return None
        state = self._groups.cached(group)
        topic_state = state.topics.get(topic) if state is not None else None
        unsure = self._groups.unsure(group)
        kept: dict[int, float] = {}
        for queue_id in sorted(set(held)):
            claim = topic_state.claims.get(queue_id) if topic_state is not None else None
            if (
                claim is None
                or claim.owner != client_id
                or queue_id >= queue_count
                or (topic, queue_id) in unsure
            ):
                continue
            told = record.claims.get((topic, queue_id), 0.0) if record is not None else 0.0
            if max(claim.expires, told) <= now:
                continue  # it ended: the member stopped consuming it
            until = min(now + claim_s, claim.expires + self._hold)
            if until > now:
                kept[queue_id] = until
        record = self._record(group, client_id, arrived)
        for key in [k for k in record.claims if k[0] == topic]:
            del record.claims[key]
        for queue_id, until in kept.items():
            record.claims[(topic, queue_id)] = until
        epoch = topic_state.epoch if topic_state is not None else 0
        shortest = min(kept.values(), default=now + claim_s) - now
        if kept and not record.logged:
            record.logged = True
            logger.info(
                "coordinator away: client %s of group %r keeps queues %s of topic %r from "
                "this proxy's cache (for %.1fs now, renewed while it calls)",
                client_id,
                group,
                sorted(kept),
                topic,
                shortest,
            )
        return HeldAssignment(tuple(kept), epoch, shortest)

    def owners(self, group: str, topic: str, owners: dict[int, str]) -> None:
        """Add to `owners` (queue id -> client) the claims kept here that run now."""
        records = self._records.get(group)
        if not records:
            return
        now = self._clock()
        for client_id, record in records.items():
            for (claimed, queue_id), until in record.claims.items():
                if claimed == topic and until > now:
                    owners[queue_id] = client_id

    def forget(self, group: str, client_id: str) -> None:
        """The member left: renew nothing more of it (its recorded claims run out)."""
        records = self._records.get(group)
        if records is not None:
            records.pop(client_id, None)
            if not records:
                del self._records[group]

    def restore(self, group: str, state: StoredGroup, block_s: float) -> dict[str, _Record]:
        """Put what was recorded for the group into `state` (before a write of it); returns
        a copy of what was put, for `stored`.

        `block_s` is how long past its deadline another member's claim blocks a grant: a
        recorded claim never overrides one still blocking (which the rules say cannot
        happen; it is logged).
        """
        records = self._records.get(group)
        if not records:
            return {}
        now = self._clock()
        applied: dict[str, _Record] = {}
        for client_id, record in records.items():
            applied[client_id] = _Record(record.seen, dict(record.claims))
            member = state.members.get(client_id)
            if member is not None and record.seen > member.seen:
                member.seen = record.seen
            for (topic, queue_id), until in record.claims.items():
                if until <= now:
                    continue
                topic_state = state.topics.get(topic)
                if topic_state is None:
                    topic_state = state.topics[topic] = TopicClaims()
                claim = topic_state.claims.get(queue_id)
                if claim is not None and claim.owner != client_id:
                    if claim.expires + block_s > now:
                        logger.warning(
                            "queue %d of topic %r in group %r: client %s holds it; the "
                            "renewal client %s got while the coordinator was away is dropped",
                            queue_id,
                            topic,
                            group,
                            claim.owner,
                            client_id,
                        )
                        continue
                    claim = None
                if claim is None or claim.expires < until:
                    topic_state.claims[queue_id] = Claim(client_id, until)
        return applied

    def stored(self, group: str, applied: dict[str, _Record]) -> None:
        """The group was written with `applied` in it: drop the records not changed since."""
        records = self._records.get(group)
        if records is None:
            return
        for client_id, was in applied.items():
            record = records.get(client_id)
            if record is not None and record.seen == was.seen and record.claims == was.claims:
                del records[client_id]
        if not records:
            del self._records[group]

    def sweep(self, max_claim_s: float) -> None:
        """Drop the records of members silent for longer than any claim time."""
        now = self._clock()
        for group in list(self._records):
            records = self._records[group]
            for client_id in [
                c
                for c, r in records.items()
                if now - r.seen > max_claim_s and all(u <= now for u in r.claims.values())
            ]:
                del records[client_id]
            if not records:
                del self._records[group]

    def _member(self, group: str, client_id: str) -> StoredMember | None:
        state = self._groups.cached(group)
        return state.members.get(client_id) if state is not None else None

    def _record(self, group: str, client_id: str, now: float) -> _Record:
        records = self._records.setdefault(group, {})
        record = records.get(client_id)
        if record is None:
            record = records[client_id] = _Record(now)
        record.seen = max(record.seen, now)
        return record

    @staticmethod
    def _last_call(member: StoredMember, record: _Record | None) -> float:
        return member.seen if record is None else max(member.seen, record.seen)
