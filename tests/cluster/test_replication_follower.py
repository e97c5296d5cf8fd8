"""The follower's stream when its leader goes away mid-batch (broker/replication/follower.py).

A real Follower on a real store follows an in-process ReplicationService (grpc.aio on
127.0.0.1:0) that plays a leader: it sends one batch and ends the stream at once, as a
leader killed right after sending does. The follower applies the batch and then writes its
ack into a call that is already over: that must end `follow` with an error the replica's
role loop handles (it then looks up the leader again), never with one that kills the loop
(the replicated checker's full run found a follower whose role loop died of
`InvalidStateError('RPC already finished.')`, after which its shard had no leader at all).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from popmq._gen.popmq.broker.v1 import replication_pb2 as pb
from popmq._gen.popmq.broker.v1 import replication_pb2_grpc
from popmq.broker.replication import oplog
from popmq.broker.replication.follower import Follower, FollowError
from popmq.broker_core.store import PUT

EPOCH = 7


class _LeaderThatDies(replication_pb2_grpc.ReplicationServiceServicer):
    """Answers a hello with one batch, then ends the stream without reading the ack."""

    async def Follow(
        self, request_iterator: AsyncIterator[pb.FollowRequest], context: Any
    ) -> AsyncIterator[pb.FollowResponse]:
        hello = await anext(aiter(request_iterator))
        assert hello.WhichOneof("kind") == "hello"
        lsn = hello.hello.last_lsn + 1
        ops = oplog.encode(
            [
                (PUT, "meta", b"test:key", b"value"),
                (PUT, "meta", oplog.POSITION_KEY, oplog.encode_position(EPOCH, lsn)),
            ]
        )
        yield pb.FollowResponse(
            epoch=EPOCH,
            batches=pb.ReplicatedBatches(
                batches=[pb.ReplicatedBatch(lsn=lsn, epoch=EPOCH, ops=ops)]
            ),
        )


async def _follow_once(directory: Path) -> tuple[BaseException | None, tuple[int, int]]:
    server = grpc.aio.server()
    replication_pb2_grpc.add_ReplicationServiceServicer_to_server(_LeaderThatDies(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    follower = Follower(directory, shard="s1", replica="r2")
    follower.open()
    try:
        try:
            await follower.follow(f"127.0.0.1:{port}", EPOCH)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what ended it
            return exc, follower.position
        return None, follower.position
    finally:
        follower.close()
        await server.stop(None)


def test_a_leader_gone_before_the_ack_ends_the_stream_with_an_error_the_replica_handles(
    tmp_path: Path,
) -> None:
    error, position = asyncio.run(_follow_once(tmp_path / "r2"))
    assert position == (EPOCH, 1)  # the batch was applied before the ack
    # What replica._follow catches: the stream's end (EOF), or these.
    assert error is None or isinstance(error, FollowError | grpc.aio.AioRpcError | OSError), repr(
        error
    )
