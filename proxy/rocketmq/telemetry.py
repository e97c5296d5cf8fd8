"""A v2 client's life in the proxy: Telemetry settings, heartbeats, termination.

A client opens one Telemetry stream for its lifetime and sends its settings there; the
server answers each settings frame with the merged settings (settings.py) and keeps the
stream open as the channel for server-to-client commands, until the client or the server
ends it. Heartbeats keep the session alive and register consumers (membership.py);
NotifyClientTermination ends the session and releases what the client held. A producer's
stream is registered for transaction check-backs of its topics while it is open
(transactions.py); the checks are written by the stream's handler, its one writer. Runs on
the server's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import BrokerAPI, PopMQError
from popmq.grpc_calls.errors import RefusedRequestError
from popmq.grpc_calls.write_errors import WRITE_FAILED, after_failed_write, read_first_request
from popmq.proxy.rocketmq import codes, convert, settings
from popmq.proxy.rocketmq.codes import Code, ProtocolError
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.inflight import Inflight
from popmq.proxy.rocketmq.membership import Membership
from popmq.proxy.rocketmq.resources import Resources, check_filter
from popmq.proxy.rocketmq.sessions import Sessions
from popmq.proxy.rocketmq.transactions import CommandOutbox, Transactions

log = logging.getLogger(__name__)

NODE_RESEND_DELAY_S = 0.2
"""How long after a Node.js client's last route query or heartbeat its settings reply is
sent again (`Telemetry.nudge`); each new call restarts the wait."""
NODE_RESEND_WINDOW_S = 20.0
"""Nudges count for this long after a settings reply: the client's start-up, not its route
refreshes every 30 s."""
REFUSAL_READ_S = 5.0
"""How long a refused Telemetry call waits for the client's first frame before it answers
anyway (a client that opens the stream and sends nothing)."""


class Telemetry:
    """Telemetry streams, heartbeats and terminations of v2 clients.

    Args:
        broker: Its pop settings bound the receive batch a consumer is told.
        config: The v2 front end's settings (what the settings reply decides).
        sessions: The connected clients.
        membership: Registers consumers in the client registry.
        inflight: Releases what a terminating client held.
        resources: Group policies and filter checks for consumer settings.
        transactions: Registers producers' streams for transaction check-backs.
    """

    def __init__(
        self,
        broker: BrokerAPI,
        config: RocketMQConfig,
        *,
        sessions: Sessions,
        membership: Membership,
        inflight: Inflight,
        resources: Resources,
        transactions: Transactions,
    ) -> None:
        self._broker = broker
        self._transactions = transactions
        self._config = config
        self._sessions = sessions
        self._membership = membership
        self._inflight = inflight
        self._resources = resources

    async def serve(self, client_id: str, context: grpc.aio.ServicerContext) -> None:
        """Answer each settings frame with the merged settings; stay open for the client's
        lifetime (the channel for server-to-client commands) until it or the server ends."""
        session = self._sessions.touch(client_id)
        session.streams += 1
        closed = asyncio.ensure_future(session.closed.wait())
        read: asyncio.Future[Any] | None = None
        resend: asyncio.Future[Any] | None = None
        outbox = CommandOutbox()
        queued: asyncio.Future[Any] | None = None
        unregister: Callable[[], None] | None = None
        try:
            while True:
                if read is None:
                    read = asyncio.ensure_future(context.read())
                if resend is None:
                    resend = asyncio.ensure_future(session.resend.wait())
                if queued is None:
                    queued = asyncio.ensure_future(outbox.ready.wait())
                await asyncio.wait(
                    {read, closed, resend, queued}, return_when=asyncio.FIRST_COMPLETED
                )
                if resend.done():  # written here, so a stream has one writer
                    resend = None
                    session.resend.clear()
                    if session.settings_reply is not None and not closed.done():
                        await context.write(session.settings_reply)
                if queued.done():
                    queued = None
                    if not closed.done():
                        await self._write_commands(context, outbox)
                if not read.done():
                    if closed.done():
                        return  # the session ended (termination, idle, server shutdown)
                    continue
                finished, read = read, None
                try:
                    command = finished.result()
                except RefusedRequestError as refused:  # the security gate's, for this frame
                    await context.write(sv.TelemetryCommand(status=codes.status_of(refused.error)))
                    continue
                if command is grpc.aio.EOF:
                    return
                reply = self.on_command(client_id, command)
                if reply is None:
                    continue
                if command.WhichOneof("command") == "settings" and reply.status.code == Code.OK:
                    # New settings replace the producer's topics; registered before the
                    # reply, so a client that has its settings answered gets checks.
                    if unregister is not None:
                        unregister()
                    unregister = self._transactions.register(session.settings, outbox, client_id)
                await context.write(reply)
        finally:
            if unregister is not None:
                unregister()
            outbox.close(f"the Telemetry stream of client {client_id} has ended")
            for pending in (closed, read, resend, queued):
                if pending is not None and not pending.done():
                    pending.cancel()
            session.streams -= 1

    @staticmethod
    async def _write_commands(context: grpc.aio.ServicerContext, outbox: CommandOutbox) -> None:
        """Write the queued server commands; a failed write fails them and the stream."""
        taken = outbox.take()
        for index, (command, written) in enumerate(taken):
            try:
                await context.write(command)
            except BaseException:
                for _, unwritten in taken[index:]:
                    if not unwritten.done():
                        unwritten.set_result("the Telemetry stream failed while writing")
                raise
            if not written.done():
                written.set_result(None)

    def nudge(self, client_id: str) -> None:
        """A Node.js client made a start-up call (a route query, a heartbeat): send its
        settings reply again `NODE_RESEND_DELAY_S` after its last such call.

        The official Node.js client (rocketmq-client-nodejs 1.0.8) sends its settings when
        its first topic's route comes back, but starts waiting for the reply only after the
        routes of all its topics have (BaseClient.startup): with two or more topics the
        reply usually arrives first, is dropped, and the client waits for its own settings
        refresh, 5 minutes later. Sending the same reply again once the route queries have
        settled reaches the waiting client; a repeated settings reply is a no-op for every
        official client. Only Node.js clients, only within `NODE_RESEND_WINDOW_S` of a
        settings reply.
        """
        session = self._sessions.get(client_id)
        if session is None or session.settings_reply is None:
            return
        if time.monotonic() - session.settings_replied_at > NODE_RESEND_WINDOW_S:
            return
        if session.resend_timer is not None:
            session.resend_timer.cancel()
        session.resend_timer = asyncio.get_running_loop().call_later(
            NODE_RESEND_DELAY_S, session.resend.set
        )

    async def refuse(self, context: grpc.aio.ServicerContext, error: ProtocolError) -> None:
        """Answer a Telemetry call refused before it began (no client id, a namespace) with
        one status, after reading the client's first frame (write_errors.read_first_request
        says why; a client that sends nothing gets it after `REFUSAL_READ_S`)."""
        if not await read_first_request(context, REFUSAL_READ_S):
            return  # the client went away: nobody to answer
        try:
            await context.write(sv.TelemetryCommand(status=codes.status_of(error)))
        except WRITE_FAILED:
            await after_failed_write("Telemetry")

    def on_command(
        self, client_id: str, command: sv.TelemetryCommand
    ) -> sv.TelemetryCommand | None:
        """The reply to one frame of the client (None: it needs none)."""
        session = self._sessions.touch(client_id)
        which = command.WhichOneof("command")
        if which != "settings":
            # Answers to server commands popmq never sends (thread stacks, verify results).
            log.debug("telemetry %s from client %s ignored", which, client_id)
            return None
        client = command.settings
        try:
            settings.check_client_settings(client, self._config)
            if client.client_type == pb.PRODUCER:
                reply = settings.producer_reply(client, self._config)
            else:
                group = convert.group_name(client.subscription.group)
                for entry in client.subscription.subscriptions:
                    convert.topic_name(entry.topic)
                    check_filter(entry.expression)
                reply = settings.consumer_reply(
                    client,
                    self._resources.policy(group),
                    self._config,
                    self._broker.server_info().pop.max_batch,
                )
                session.group = group
        except PopMQError as exc:
            return sv.TelemetryCommand(status=codes.status_of(exc, codes.GROUP))
        session.client_type = client.client_type
        session.settings = client
        session.queried_topics.clear()
        answer = sv.TelemetryCommand(status=codes.ok(), settings=reply)
        if client.user_agent.language == pb.NODE_JS:
            session.settings_reply = answer
            session.settings_replied_at = time.monotonic()
        return answer

    async def heartbeat(self, client_id: str, request: sv.HeartbeatRequest) -> sv.HeartbeatResponse:
        """Keeps the session alive and registers a consumer in the client registry."""
        if request.client_type not in pb.ClientType.values():
            raise ProtocolError(
                Code.UNRECOGNIZED_CLIENT_TYPE,
                f"client_type {request.client_type} is unknown: use PRODUCER, PUSH_CONSUMER, "
                "SIMPLE_CONSUMER or PULL_CONSUMER",
            )
        group = convert.group_name(request.group) if request.HasField("group") else None
        session = self._sessions.touch(client_id, client_type=request.client_type, group=group)
        if group is not None:
            await self._membership.register(session, group)
        self.nudge(client_id)
        return sv.HeartbeatResponse(status=codes.ok())

    async def terminate(self, client_id: str) -> sv.NotifyClientTerminationResponse:
        """The client says goodbye: its session, registrations and claims end, and the
        messages it held become visible again soon."""
        try:
            await self._membership.end(client_id)  # also when the session was gone already
        except PopMQError as error:  # the registry's coordinator is away: its claims run out
            log.warning(
                "client %s said goodbye, its claims stay until they run out: %s", client_id, error
            )
        self._sessions.remove(client_id)
        released = await self._inflight.release_client(client_id)
        return sv.NotifyClientTerminationResponse(
            status=codes.ok(f"released {released} in-flight messages")
        )
