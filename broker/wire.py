"""Broker API values to and from popmq.broker.v1 messages, and broker errors on the wire.

Shared by the BrokerService servicer (service.py) and the proxies' RemoteBroker
(cluster/remote_broker.py), so each value has one conversion each way. Stored messages
travel as their record bytes (MessageRecord.to_bytes / from_bytes), not field by field.

Errors: the servicer ends a failed call with the status of the error's `code` and an
ErrorDetail in the binary trailer ERROR_TRAILER; `error_from_detail` rebuilds the same
PopMQError subclass with the same message and fields (`needed_bytes` included), so a proxy
over a RemoteBroker maps errors exactly as it does over the in-process Broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker_core import errors
from popmq.broker_core.api import (
    FollowerReplication,
    HistogramSnapshot,
    MetricsSnapshot,
    ReplicationSnapshot,
    ServerInfo,
)
from popmq.broker_core.catalog import GroupInfo, TopicInfo
from popmq.broker_core.config import GroupDefaults, LongPollingConfig, PopConfig
from popmq.broker_core.errors import AnswerBoundError, PopMQError
from popmq.broker_core.group_rules import GroupState
from popmq.broker_core.inspection import (
    BlockedHead,
    ConsumerInflight,
    DeliveryEvent,
    GroupInspection,
    HeldPolls,
    InflightMessage,
    ReviveLag,
)
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.types import (
    ConsumerOffset,
    ExponentialBackoff,
    GroupSettings,
    LagReport,
    NewMessage,
    OffsetChange,
    PeekedMessage,
    PoppedMessage,
    PulledMessages,
    QueueBacklog,
    QueueDetails,
    QueueLag,
    QueueStats,
    RedriveOutcome,
    RedriveResult,
    ResetResult,
    SendResult,
    Subscription,
    TopicBacklog,
    TransactionCheck,
    TransactionInfo,
)

ERROR_TRAILER = "popmq-error-bin"
"""Trailing metadata key of a failed call's ErrorDetail (binary: the -bin suffix)."""


def _error_classes() -> dict[str, type[PopMQError]]:
    found: dict[str, type[PopMQError]] = {}
    pending: list[type[PopMQError]] = [PopMQError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.__name__, cls)
        pending.extend(cls.__subclasses__())
    return found


_BY_CODE: dict[str, type[PopMQError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidArgumentError,
        errors.NotFoundError,
        errors.AlreadyExistsError,
        errors.FailedPreconditionError,
        errors.ResourceExhaustedError,
        errors.UnavailableError,
        errors.InternalError,
    )
}


def error_detail(error: PopMQError) -> pb.ErrorDetail:
    """What the client needs to raise `error` again on its side."""
    detail = pb.ErrorDetail(
        error_class=type(error).__name__,
        code=error.code,
        message=str(error),
        retriable=error.retriable,
    )
    if error.field is not None:
        detail.field = error.field
    if error.value is not None:
        detail.value = error.value
    if error.allowed is not None:
        detail.allowed = error.allowed
    if isinstance(error, AnswerBoundError):
        detail.needed_bytes = error.needed_bytes
    return detail


def error_from_detail(detail: pb.ErrorDetail) -> PopMQError:
    """The error `error_detail` described: the same class when this side knows it (any
    PopMQError subclass imported here, the proxy's included), else the family of its code."""
    # The class registry is built per call: subclasses defined after import (the proxy's)
    # count too, and errors are not a hot path.
    cls = _error_classes().get(detail.error_class) or _BY_CODE.get(
        detail.code, errors.InternalError
    )
    # Not through __init__: `value` is already the shown text, and subclasses' __init__
    # signatures differ (AnswerBoundError takes needed_bytes).
    error = cls.__new__(cls)
    Exception.__init__(error, detail.message)
    error.field = detail.field if detail.HasField("field") else None
    error.value = detail.value if detail.HasField("value") else None
    error.allowed = detail.allowed if detail.HasField("allowed") else None
    if isinstance(error, AnswerBoundError):
        error.needed_bytes = detail.needed_bytes
    return error


# -- catalog ---------------------------------------------------------------------------------


def topic_to_pb(info: TopicInfo) -> pb.Topic:
    return pb.Topic(
        name=info.name,
        topic_id=info.topic_id,
        queues=info.queues,
        message_type=info.message_type,
        kind=info.kind,
        create_time_ms=info.create_time_ms,
        owner_group=info.owner_group,
        owner_topic=info.owner_topic,
    )


def topic_from_pb(m: pb.Topic) -> TopicInfo:
    return TopicInfo(
        m.name, m.topic_id, m.queues, m.message_type, m.kind, m.create_time_ms,
        m.owner_group, m.owner_topic,
    )  # fmt: skip


def settings_to_pb(s: GroupSettings) -> pb.GroupSettings:
    m = pb.GroupSettings(
        fifo=s.fifo,
        subscriptions=[subscription_to_pb(sub) for sub in s.subscriptions],
        consume_from=s.consume_from,
        consume_from_ms=s.consume_from_ms,
    )
    if s.exponential_backoff is not None:
        m.exponential_backoff.CopyFrom(backoff_to_pb(s.exponential_backoff))
    return m


def settings_from_pb(m: pb.GroupSettings) -> GroupSettings:
    return GroupSettings(
        fifo=m.fifo,
        subscriptions=tuple(subscription_from_pb(s) for s in m.subscriptions),
        consume_from=m.consume_from,
        consume_from_ms=m.consume_from_ms,
        exponential_backoff=backoff_from_pb(m.exponential_backoff)
        if m.HasField("exponential_backoff")
        else None,
    )


def subscription_to_pb(s: Subscription) -> pb.Subscription:
    return pb.Subscription(topic=s.topic, filter_type=s.filter_type, expression=s.expression)


def subscription_from_pb(m: pb.Subscription) -> Subscription:
    return Subscription(m.topic, m.filter_type, m.expression)


def backoff_to_pb(b: ExponentialBackoff) -> pb.ExponentialBackoff:
    return pb.ExponentialBackoff(initial_s=b.initial_s, max_s=b.max_s, multiplier=b.multiplier)


def backoff_from_pb(m: pb.ExponentialBackoff) -> ExponentialBackoff:
    return ExponentialBackoff(m.initial_s, m.max_s, m.multiplier)


def group_to_pb(info: GroupInfo, settings: GroupSettings) -> pb.Group:
    return pb.Group(
        name=info.name,
        group_id=info.group_id,
        max_delivery_attempts=info.max_delivery_attempts,
        retry_backoff_ms=info.retry_backoff_ms,
        create_time_ms=info.create_time_ms,
        auto_created=info.auto_created,
        settings=settings_to_pb(settings),
    )


def group_from_pb(m: pb.Group) -> tuple[GroupInfo, GroupSettings]:
    info = GroupInfo(
        m.name, m.group_id, m.max_delivery_attempts, tuple(m.retry_backoff_ms),
        m.create_time_ms, m.auto_created,
    )  # fmt: skip
    return info, settings_from_pb(m.settings)


def apply_group_to_pb(
    name: str, state: GroupState, create_time_ms: int, revision: int
) -> pb.ApplyGroupRequest:
    return pb.ApplyGroupRequest(
        name=name,
        max_delivery_attempts=state.max_delivery_attempts,
        retry_backoff_ms=state.retry_backoff_ms,
        settings=settings_to_pb(state.settings),
        create_time_ms=create_time_ms,
        revision=revision,
    )


def group_state_from_pb(m: pb.ApplyGroupRequest) -> GroupState:
    return GroupState(
        m.max_delivery_attempts, tuple(m.retry_backoff_ms), settings_from_pb(m.settings)
    )


# -- messages --------------------------------------------------------------------------------


def new_message_to_pb(msg: NewMessage) -> pb.NewMessage:
    m = pb.NewMessage(
        topic=msg.topic,
        body=msg.body,
        tag=msg.tag,
        keys=msg.keys,
        properties=msg.properties,
        message_id=msg.message_id,
        born_time_ms=msg.born_time_ms,
        message_group=msg.message_group,
        deliver_at_ms=msg.deliver_at_ms,
        dedup_id=msg.dedup_id,
        body_encoding=msg.body_encoding,
        born_host=msg.born_host,
    )
    if msg.queue_id is not None:
        m.queue_id = msg.queue_id
    return m


def new_message_from_pb(m: pb.NewMessage) -> NewMessage:
    return NewMessage(
        topic=m.topic,
        body=m.body,
        tag=m.tag,
        keys=tuple(m.keys),
        properties=dict(m.properties),
        message_id=m.message_id,
        born_time_ms=m.born_time_ms,
        message_group=m.message_group,
        deliver_at_ms=m.deliver_at_ms,
        dedup_id=m.dedup_id,
        body_encoding=m.body_encoding,
        born_host=m.born_host,
        queue_id=m.queue_id if m.HasField("queue_id") else None,
    )


def send_result_to_pb(r: SendResult) -> pb.SendResult:
    return pb.SendResult(
        message_id=r.message_id,
        topic=r.topic,
        queue_id=r.queue_id,
        offset=r.offset,
        recall_handle=r.recall_handle,
        duplicate=r.duplicate,
        transaction_id=r.transaction_id,
    )


def send_result_from_pb(m: pb.SendResult) -> SendResult:
    return SendResult(
        m.message_id, m.topic, m.queue_id, m.offset, m.recall_handle, m.duplicate,
        m.transaction_id,
    )  # fmt: skip


def transaction_to_pb(t: TransactionInfo) -> pb.Transaction:
    return pb.Transaction(
        transaction_id=t.transaction_id,
        topic=t.topic,
        message_id=t.message_id,
        producer_group=t.producer_group,
        state=t.state,
        created_ms=t.created_ms,
        checks=t.checks,
        next_check_ms=t.next_check_ms,
        resolved_ms=t.resolved_ms,
        resolved_by=t.resolved_by,
        queue_id=t.queue_id,
        offset=t.offset,
        recall_handle=t.recall_handle,
        discard_offset=t.discard_offset,
        half_message=t.half_message.to_bytes() if t.half_message is not None else b"",
    )


def transaction_from_pb(m: pb.Transaction) -> TransactionInfo:
    return TransactionInfo(
        transaction_id=m.transaction_id,
        topic=m.topic,
        message_id=m.message_id,
        producer_group=m.producer_group,
        state=m.state,
        created_ms=m.created_ms,
        checks=m.checks,
        next_check_ms=m.next_check_ms,
        resolved_ms=m.resolved_ms,
        resolved_by=m.resolved_by,
        queue_id=m.queue_id,
        offset=m.offset,
        recall_handle=m.recall_handle,
        discard_offset=m.discard_offset,
        half_message=MessageRecord.from_bytes(m.half_message) if m.half_message else None,
    )


def check_to_pb(c: TransactionCheck) -> pb.TransactionCheck:
    return pb.TransactionCheck(
        topic=c.topic,
        transaction_id=c.transaction_id,
        message_id=c.message_id,
        producer_group=c.producer_group,
        message=c.message.to_bytes(),
        attempt=c.attempt,
        queue_id=c.queue_id,
    )


def check_from_pb(m: pb.TransactionCheck) -> TransactionCheck:
    return TransactionCheck(
        topic=m.topic,
        transaction_id=m.transaction_id,
        message_id=m.message_id,
        producer_group=m.producer_group,
        message=MessageRecord.from_bytes(m.message),
        attempt=m.attempt,
        queue_id=m.queue_id,
    )


def popped_to_pb(p: PoppedMessage) -> pb.PoppedMessage:
    return pb.PoppedMessage(
        topic=p.topic,
        queue_id=p.queue_id,
        offset=p.offset,
        record=p.record.to_bytes(),
        receipt_handle=p.receipt_handle,
        invisible_until_ms=p.invisible_until_ms,
    )


def popped_from_pb(m: pb.PoppedMessage) -> PoppedMessage:
    return PoppedMessage(
        m.topic, m.queue_id, m.offset, MessageRecord.from_wire(m.record),
        m.receipt_handle, m.invisible_until_ms,
    )  # fmt: skip


def delivery_result_to_pb(found: PoppedMessage | PopMQError) -> pb.DeliveryResult:
    """One result of BrokerAPI.get_deliveries: the delivery or the error."""
    if isinstance(found, PopMQError):
        return pb.DeliveryResult(error=error_detail(found))
    return pb.DeliveryResult(message=popped_to_pb(found))


def delivery_result_from_pb(r: pb.DeliveryResult) -> PoppedMessage | PopMQError:
    if r.HasField("message"):
        return popped_from_pb(r.message)
    return error_from_detail(r.error)


def follow_result_to_pb(found: tuple[str, int] | PopMQError) -> pb.FollowResult:
    """One result of BrokerAPI.follow_handles: the newest handle and its deadline, or the
    error."""
    if isinstance(found, PopMQError):
        return pb.FollowResult(error=error_detail(found))
    handle, until = found
    return pb.FollowResult(followed=pb.FollowedHandle(handle=handle, invisible_until_ms=until))


def follow_result_from_pb(r: pb.FollowResult) -> tuple[str, int] | PopMQError:
    if r.HasField("followed"):
        return r.followed.handle, r.followed.invisible_until_ms
    return error_from_detail(r.error)


def peeked_to_pb(p: PeekedMessage) -> pb.PeekedMessage:
    return pb.PeekedMessage(
        topic=p.topic, queue_id=p.queue_id, offset=p.offset, record=p.record.to_bytes()
    )


def peeked_from_pb(m: pb.PeekedMessage) -> PeekedMessage:
    return PeekedMessage(m.topic, m.queue_id, m.offset, MessageRecord.from_bytes(m.record))


def pulled_to_pb(p: PulledMessages) -> pb.PullResponse:
    return pb.PullResponse(
        topic=p.topic,
        queue_id=p.queue_id,
        messages=[pb.PulledRecord(offset=o, record=r.to_bytes()) for o, r in p.messages],
        min_offset=p.min_offset,
        max_offset=p.max_offset,
        next_offset=p.next_offset,
    )


def pulled_from_pb(m: pb.PullResponse) -> PulledMessages:
    return PulledMessages(
        m.topic,
        m.queue_id,
        [(r.offset, MessageRecord.from_bytes(r.record)) for r in m.messages],
        m.min_offset,
        m.max_offset,
        m.next_offset,
    )


def pairs_to_pb(pairs: Iterable[tuple[int, int]]) -> list[pb.QueueOffset]:
    return [pb.QueueOffset(queue_id=q, offset=o) for q, o in pairs]


def pairs_from_pb(ms: Iterable[pb.QueueOffset]) -> list[tuple[int, int]]:
    return [(m.queue_id, m.offset) for m in ms]


# -- admin -----------------------------------------------------------------------------------


def queue_stats_to_pb(s: QueueStats) -> pb.QueueStats:
    return pb.QueueStats(queue_id=s.queue_id, min_offset=s.min_offset, max_offset=s.max_offset)


def queue_stats_from_pb(m: pb.QueueStats) -> QueueStats:
    return QueueStats(m.queue_id, m.min_offset, m.max_offset)


def queue_details_to_pb(d: QueueDetails) -> pb.QueueDetails:
    return pb.QueueDetails(
        queue_id=d.queue_id,
        min_offset=d.min_offset,
        max_offset=d.max_offset,
        last_store_ms=d.last_store_ms,
    )


def queue_details_from_pb(m: pb.QueueDetails) -> QueueDetails:
    return QueueDetails(m.queue_id, m.min_offset, m.max_offset, m.last_store_ms)


def consumer_offset_to_pb(c: ConsumerOffset) -> pb.ConsumerOffset:
    return pb.ConsumerOffset(queue_id=c.queue_id, offset=c.offset, committed=c.committed)


def consumer_offset_from_pb(m: pb.ConsumerOffset) -> ConsumerOffset:
    return ConsumerOffset(m.queue_id, m.offset, m.committed)


def lag_to_pb(lag: QueueLag) -> pb.QueueLag:
    return pb.QueueLag(
        topic=lag.topic,
        queue_id=lag.queue_id,
        retry=lag.retry,
        consumer_offset=lag.consumer_offset,
        max_offset=lag.max_offset,
        inflight=lag.inflight,
        retention_skipped=lag.retention_skipped,
    )


def lag_from_pb(m: pb.QueueLag) -> QueueLag:
    return QueueLag(
        m.topic, m.queue_id, m.retry, m.consumer_offset, m.max_offset, m.inflight,
        m.retention_skipped,
    )  # fmt: skip


def lag_report_to_pb(r: LagReport) -> pb.GetLagReportResponse:
    return pb.GetLagReportResponse(
        group=r.group,
        queues=[
            pb.QueueBacklog(lag=lag_to_pb(q.lag), oldest_unacked_ms=q.oldest_unacked_ms)
            for q in r.queues
        ],
        topics=[
            pb.TopicBacklog(
                topic=t.topic,
                lag=t.lag,
                inflight=t.inflight,
                retry_backlog=t.retry_backlog,
                oldest_unacked_ms=t.oldest_unacked_ms,
            )
            for t in r.topics
        ],
        dlq_depth=r.dlq_depth,
    )


def lag_report_from_pb(m: pb.GetLagReportResponse) -> LagReport:
    return LagReport(
        m.group,
        [QueueBacklog(lag_from_pb(q.lag), q.oldest_unacked_ms) for q in m.queues],
        [
            TopicBacklog(t.topic, t.lag, t.inflight, t.retry_backlog, t.oldest_unacked_ms)
            for t in m.topics
        ],
        m.dlq_depth,
    )


def inspection_to_pb(r: GroupInspection) -> pb.InspectGroupResponse:
    (revive,) = r.revive
    return pb.InspectGroupResponse(
        group=r.group,
        now_ms=r.now_ms,
        held_polls=[
            pb.HeldPolls(topic=h.topic, queue_id=h.queue_id, count=h.count) for h in r.held_polls
        ],
        inflight=[
            pb.InflightMessage(
                topic=m.topic,
                queue_id=m.queue_id,
                retry=m.retry,
                offset=m.offset,
                message_id=m.message_id,
                attempt=m.attempt,
                popped_ms=m.popped_ms,
                invisible_until_ms=m.invisible_until_ms,
                waiting=m.waiting,
                client_id=m.client_id,
            )
            for m in r.inflight
        ],
        next_page_token=r.next_page_token,
        revive=pb.ReviveLag(
            lag_ms=revive.lag_ms,
            oldest_due_ms=revive.oldest_due_ms,
            next_deadline_ms=revive.next_deadline_ms,
            live_checkpoints=revive.live_checkpoints,
        ),
        blocked_heads=[
            pb.BlockedHead(
                topic=b.topic,
                queue_id=b.queue_id,
                message_group=b.message_group,
                offset=b.offset,
                message_id=b.message_id,
                attempt=b.attempt,
                invisible_until_ms=b.invisible_until_ms,
                delivered=b.delivered,
                waiting=b.waiting,
            )
            for b in r.blocked_heads
        ],
        blocked_groups=r.blocked_groups,
        consumers=[
            pb.ConsumerInflight(
                client_id=c.client_id, count=c.count, earliest_until_ms=c.earliest_until_ms
            )
            for c in r.consumers
        ],
        consumer_count=r.consumer_count,
    )


def inspection_from_pb(m: pb.InspectGroupResponse) -> GroupInspection:
    v = m.revive
    return GroupInspection(
        group=m.group,
        now_ms=m.now_ms,
        held_polls=[HeldPolls(h.topic, h.queue_id, h.count) for h in m.held_polls],
        inflight=[
            InflightMessage(
                i.topic,
                i.queue_id,
                i.retry,
                i.offset,
                i.message_id,
                i.attempt,
                i.popped_ms,
                i.invisible_until_ms,
                i.waiting,
                client_id=i.client_id,
            )
            for i in m.inflight
        ],
        next_page_token=m.next_page_token,
        revive=[ReviveLag(v.lag_ms, v.oldest_due_ms, v.next_deadline_ms, v.live_checkpoints)],
        blocked_heads=[
            BlockedHead(
                b.topic,
                b.queue_id,
                b.message_group,
                b.offset,
                b.message_id,
                b.attempt,
                b.invisible_until_ms,
                b.delivered,
                b.waiting,
            )
            for b in m.blocked_heads
        ],
        blocked_groups=m.blocked_groups,
        consumers=[
            ConsumerInflight(c.client_id, c.count, c.earliest_until_ms) for c in m.consumers
        ],
        consumer_count=m.consumer_count,
    )


def event_to_pb(e: DeliveryEvent) -> pb.DeliveryEvent:
    return pb.DeliveryEvent(
        time_ms=e.time_ms,
        event=e.event,
        group=e.group,
        topic=e.topic,
        queue_id=e.queue_id,
        retry=e.retry,
        offset=e.offset,
        attempt=e.attempt,
        invisible_until_ms=e.invisible_until_ms,
        to_topic=e.to_topic,
        to_offset=e.to_offset,
        client_id=e.client_id,
    )


def event_from_pb(m: pb.DeliveryEvent) -> DeliveryEvent:
    return DeliveryEvent(
        m.time_ms, m.event, m.group, m.topic, m.queue_id, m.retry, m.offset, m.attempt,
        m.invisible_until_ms, m.to_topic, m.to_offset, client_id=m.client_id,
    )  # fmt: skip


def reset_to_pb(r: ResetResult) -> pb.ResetOffsetsResponse:
    return pb.ResetOffsetsResponse(
        queues=[
            pb.OffsetChange(queue_id=c.queue_id, old_offset=c.old_offset, new_offset=c.new_offset)
            for c in r.queues
        ],
        dropped_inflight=r.dropped_inflight,
    )


def reset_from_pb(m: pb.ResetOffsetsResponse) -> ResetResult:
    return ResetResult(
        [OffsetChange(c.queue_id, c.old_offset, c.new_offset) for c in m.queues],
        m.dropped_inflight,
    )


def redrive_to_pb(r: RedriveResult) -> pb.RedriveResponse:
    return pb.RedriveResponse(
        moved=r.moved,
        dropped=r.dropped,
        remaining=r.remaining,
        outcomes=[
            pb.DeadLetterRef(queue_id=o.queue_id, offset=o.offset, outcome=o.outcome)
            for o in r.outcomes
        ],
    )


def redrive_from_pb(m: pb.RedriveResponse) -> RedriveResult:
    return RedriveResult(
        m.moved,
        m.dropped,
        m.remaining,
        tuple(RedriveOutcome(o.queue_id, o.offset, o.outcome) for o in m.outcomes),
    )


# -- server info and metrics -----------------------------------------------------------------


def server_info_to_pb(info: ServerInfo) -> pb.GetServerInfoResponse:
    p, lp, g = info.pop, info.long_polling, info.groups
    return pb.GetServerInfoResponse(
        broker_name=info.broker_name,
        data_dir=info.data_dir,
        pop=pb.PopConfig(
            max_batch=p.max_batch,
            default_invisible_s=p.default_invisible_s,
            min_invisible_s=p.min_invisible_s,
            max_invisible_s=p.max_invisible_s,
            retry_first_every=p.retry_first_every,
            max_scan_per_pop=p.max_scan_per_pop,
            ck_buffer_time_s=p.ck_buffer_time_s,
            ck_persist_ahead_s=p.ck_persist_ahead_s,
            ck_buffer_max=p.ck_buffer_max,
        ),
        long_polling=pb.LongPollingConfig(
            default_timeout_s=lp.default_timeout_s,
            max_timeout_s=lp.max_timeout_s,
            max_per_key=lp.max_per_key,
            max_total=lp.max_total,
            max_watched_queues=lp.max_watched_queues,
        ),
        groups=pb.GroupDefaults(
            max_delivery_attempts=g.max_delivery_attempts, retry_backoff_s=g.retry_backoff_s
        ),
        max_delay_s=info.max_delay_s,
        auto_create_topics=info.auto_create_topics,
    )


def server_info_from_pb(m: pb.GetServerInfoResponse) -> ServerInfo:
    p, lp = m.pop, m.long_polling
    return ServerInfo(
        broker_name=m.broker_name,
        data_dir=m.data_dir,
        pop=PopConfig(
            max_batch=p.max_batch,
            default_invisible_s=p.default_invisible_s,
            min_invisible_s=p.min_invisible_s,
            max_invisible_s=p.max_invisible_s,
            retry_first_every=p.retry_first_every,
            max_scan_per_pop=p.max_scan_per_pop,
            ck_buffer_time_s=p.ck_buffer_time_s,
            ck_persist_ahead_s=p.ck_persist_ahead_s,
            ck_buffer_max=p.ck_buffer_max,
        ),
        long_polling=LongPollingConfig(
            default_timeout_s=lp.default_timeout_s,
            max_timeout_s=lp.max_timeout_s,
            max_per_key=lp.max_per_key,
            max_total=lp.max_total,
            max_watched_queues=lp.max_watched_queues,
        ),
        groups=GroupDefaults(
            max_delivery_attempts=m.groups.max_delivery_attempts,
            retry_backoff_s=tuple(m.groups.retry_backoff_s),
        ),
        max_delay_s=m.max_delay_s,
        auto_create_topics=m.auto_create_topics,
    )


def _histogram_to_pb(h: HistogramSnapshot) -> pb.Histogram:
    return pb.Histogram(bounds=h.bounds, counts=h.counts, total=h.total)


def _histogram_from_pb(m: pb.Histogram) -> HistogramSnapshot:
    return HistogramSnapshot(tuple(m.bounds), tuple(m.counts), m.total)


def _pair_counts(counts: Mapping[tuple[str, str], int]) -> list[pb.GroupTopicCount]:
    return [pb.GroupTopicCount(group=g, topic=t, count=n) for (g, t), n in counts.items()]


def _pair_counts_from(ms: Iterable[pb.GroupTopicCount]) -> dict[tuple[str, str], int]:
    return {(m.group, m.topic): m.count for m in ms}


def metrics_to_pb(s: MetricsSnapshot) -> pb.GetMetricsSnapshotResponse:
    return pb.GetMetricsSnapshotResponse(
        sent=[pb.TopicCount(topic=t, count=n) for t, n in s.sent.items()],
        popped=_pair_counts(s.popped),
        acked=_pair_counts(s.acked),
        nacked=_pair_counts(s.nacked),
        revived=_pair_counts(s.revived),
        dead_lettered=_pair_counts(s.dead_lettered),
        long_polls_held=s.long_polls_held,
        buffered_checkpoints=s.buffered_checkpoints,
        live_checkpoints=s.live_checkpoints,
        write_batches=s.write_batches,
        write_batches_failed=s.write_batches_failed,
        write_jobs=s.write_jobs,
        batch_jobs=_histogram_to_pb(s.batch_jobs),
        write_seconds_synced=_histogram_to_pb(s.write_seconds_synced),
        write_seconds_unsynced=_histogram_to_pb(s.write_seconds_unsynced),
        store_bytes=s.store_bytes,
        topics=s.topics,
        groups=s.groups,
        disk_free_bytes=s.disk_free_bytes,
        replication=_replication_to_pb(s.replication) if s.replication is not None else None,
    )


def _replication_to_pb(r: ReplicationSnapshot) -> pb.Replication:
    return pb.Replication(
        replica=r.replica,
        epoch=r.epoch,
        lsn=r.lsn,
        mode=r.mode,
        min_insync=r.min_insync,
        followers=[
            pb.FollowerReplication(
                replica=f.replica,
                in_sync=f.in_sync,
                acked_lsn=f.acked_lsn,
                lag_batches=f.lag_batches,
                lag_bytes=f.lag_bytes,
                lag_s=f.lag_s,
            )
            for f in r.followers
        ],
        written_bytes=r.written_bytes,
        terms=r.terms,
    )


def _replication_from_pb(r: pb.Replication) -> ReplicationSnapshot:
    return ReplicationSnapshot(
        replica=r.replica,
        epoch=r.epoch,
        lsn=r.lsn,
        mode=r.mode,
        min_insync=r.min_insync,
        followers=tuple(
            FollowerReplication(
                replica=f.replica,
                in_sync=f.in_sync,
                acked_lsn=f.acked_lsn,
                lag_batches=f.lag_batches,
                lag_bytes=f.lag_bytes,
                lag_s=f.lag_s,
            )
            for f in r.followers
        ),
        written_bytes=r.written_bytes,
        terms=r.terms,
    )


def metrics_from_pb(m: pb.GetMetricsSnapshotResponse) -> MetricsSnapshot:
    return MetricsSnapshot(
        sent={c.topic: c.count for c in m.sent},
        popped=_pair_counts_from(m.popped),
        acked=_pair_counts_from(m.acked),
        nacked=_pair_counts_from(m.nacked),
        revived=_pair_counts_from(m.revived),
        dead_lettered=_pair_counts_from(m.dead_lettered),
        long_polls_held=m.long_polls_held,
        buffered_checkpoints=m.buffered_checkpoints,
        live_checkpoints=m.live_checkpoints,
        write_batches=m.write_batches,
        write_batches_failed=m.write_batches_failed,
        write_jobs=m.write_jobs,
        batch_jobs=_histogram_from_pb(m.batch_jobs),
        write_seconds_synced=_histogram_from_pb(m.write_seconds_synced),
        write_seconds_unsynced=_histogram_from_pb(m.write_seconds_unsynced),
        store_bytes=m.store_bytes,
        topics=m.topics,
        groups=m.groups,
        disk_free_bytes=m.disk_free_bytes if m.HasField("disk_free_bytes") else None,
        replication=_replication_from_pb(m.replication) if m.HasField("replication") else None,
    )
