"""The state one pop carries while it reads one queue (instead of nine positional args)."""

from __future__ import annotations

from dataclasses import dataclass

from popmq.broker_core.budget import ResponseBudget
from popmq.broker_core.catalog import TopicInfo
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.filters import RecordFilter
from popmq.broker_core.types import PoppedMessage


@dataclass(slots=True)
class QueueRead:
    """One pop's read of one queue, under that queue's lock."""

    cq: ConsumeQueue
    source: TopicInfo
    """The topic read: the user topic, or the group's retry topic for it."""
    user_topic: TopicInfo
    """The topic the pop asked for; it names the delivered messages."""
    now: int
    deadline: int
    """When the deliveries of this pop become visible again."""
    record_filter: RecordFilter
    found: list[PoppedMessage]
    """The pop's answer so far, shared by its reads of every queue."""
    response: ResponseBudget
    """The answer's byte budget (budget.py), shared too."""
    client_id: str = ""
    """The popping client ("" unknown), recorded on each checkpoint the pop delivers."""
