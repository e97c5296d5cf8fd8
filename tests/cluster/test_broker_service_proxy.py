"""The proxy (popmq.v1 and apache.rocketmq.v2) over a RemoteBroker: a chosen subset of the
integration and compatibility tests, run unchanged with `server` / `endpoint` fixtures
whose proxy reaches its broker core through BrokerService (tests/support/brokers.py).

Chosen: the SDK's send / receive / ack / nack / change-invisible / DLQ / long-poll / restart
semantics (test_pop_semantics), delay, recall, FIFO, filters and dedup
(test_message_features_sdk), topic admin, describe and purge (test_admin_topics), lag and
offset resets (test_admin_offsets), and the RocketMQ 5 protocol's receive, ack, recall, pull
and dead-letter paths (compat/test_protocol). Left out: tests that read the embedded broker's
internals (server.broker.stats, polling, writer), which a RemoteBroker does not have.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.test_protocol import (
    test_a_delayed_message_can_be_recalled_once,
    test_a_held_pull_wakes_on_an_arrival_in_its_queue_and_filters_it,
    test_ack_and_change_invisible_duration_handles,
    test_forward_to_dead_letter_queue_moves_the_message,
    test_pull_reads_a_queue_by_offset_and_offsets_round_trip,
    test_query_route_lists_the_topics_queues_at_the_address_the_client_used,
    test_receive_streams_status_messages_then_delivery_timestamp_with_properties_kept,
    test_send_errors_carry_rocketmq_codes,
    topics,
)
from tests.integration.test_admin_offsets import *  # noqa: F403
from tests.integration.test_admin_topics import *  # noqa: F403
from tests.integration.test_message_features_sdk import *  # noqa: F403
from tests.integration.test_pop_semantics import *  # noqa: F403
from tests.support.brokers import RemoteServerThread

# Reads the embedded broker's held-poll count; a long poll's wake-up over the wire is
# tested in test_broker_service.py.
del test_held_long_poll_wakes_within_50ms_of_a_send  # noqa: F821 (star-imported above)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RemoteServerThread]:
    """A proxy over a RemoteBroker over a BrokerServer, on a fresh data dir."""
    thread = RemoteServerThread(tmp_path / "data")
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture
def endpoint(server: RemoteServerThread) -> str:
    return server.endpoint


__all__ = [
    "test_a_delayed_message_can_be_recalled_once",
    "test_a_held_pull_wakes_on_an_arrival_in_its_queue_and_filters_it",
    "test_ack_and_change_invisible_duration_handles",
    "test_forward_to_dead_letter_queue_moves_the_message",
    "test_pull_reads_a_queue_by_offset_and_offsets_round_trip",
    "test_query_route_lists_the_topics_queues_at_the_address_the_client_used",
    "test_receive_streams_status_messages_then_delivery_timestamp_with_properties_kept",
    "test_send_errors_carry_rocketmq_codes",
    "topics",
]
