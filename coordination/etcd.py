"""A small asyncio etcd v3 client over grpc.aio, on popmq's own stubs (protos/etcd).

Why our own: popmq pins protobuf 7 and grpcio 1.85; aetcd requires protobuf<7,
python-etcd3's generated code fails to import on protobuf>=4, and etcd3gw is synchronous
HTTP. The client speaks only what cluster mode needs: get / put / delete, transactions that
compare a key's create revision, mod revision, version or value, leases with a keepalive loop,
prefix watches from a revision, and status.

Every call has a timeout (the client's `timeout_s` unless given). A call that finds its
endpoint unavailable, or has waited 2 s there while another may answer, moves on to the next
one (`host:port` endpoints, tried in turn, a silent one skipped) until the timeout; only
then does it raise `CoordinationUnavailableError` (sooner while etcd is unreachable, at once
while it is hung: etcd_reachability.py). A watch outlives outages: it resumes on any endpoint from
the revision after the last one it delivered, and raises `CompactedError` when that revision
is gone (the caller re-lists). Everything runs on the event loop; nothing here blocks.
"""

from __future__ import annotations

import asyncio
import logging
import re
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import grpc
import grpc.aio

from popmq._gen.etcd.etcdserverpb import rpc_pb2 as pb
from popmq._gen.etcd.etcdserverpb import rpc_pb2_grpc as rpc
from popmq._gen.etcd.mvccpb import kv_pb2
from popmq.coordination.errors import (
    CompactedError,
    CoordinationArgumentError,
    CoordinationError,
    CoordinationUnavailableError,
    EtcdError,
    LeaseNotFoundError,
    SessionClosedError,
)
from popmq.coordination.etcd_reachability import (
    PROBE_TIMEOUT_S,
    UNANSWERED_AFTER_S,
    Reachability,
)
from popmq.coordination.etcd_streams import (
    _FAILOVER_CODES,
    _RETRY_PAUSE_S,
    _STREAM_FAILURES,
    LeaseKeeper,
    _bounded,
    _read,
    _stream_outage,
    cancel_and_wait,
)

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
"""How long one call may take, failover included, unless the call says otherwise."""
MIN_LEASE_TTL_S = 2
"""etcd raises a shorter TTL to its own minimum (about 2 s with default raft timings)
silently; popmq refuses it instead."""
MAX_LEASE_TTL_S = 86_400
"""A day: a session that lives longer without a keepalive is not a session."""
_PROBE_WAIT_S = 10.0
"""How long each request of the reachability probe waits for its answer before it is sent
again: a hung etcd answers the waiting one as it resumes."""
_PROBE_PAUSE_S = 0.5
"""Pause of the probe after an endpoint refused it at once (a down etcd)."""
_ENDPOINT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$")
_ENDPOINTS_ALLOWED = "host:port[,host:port...], e.g. 127.0.0.1:2379"
_CHANNEL_OPTIONS = (
    # Reconnect fast after an etcd restart (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # A silently dead peer ends a watch within ~20 s; etcd refuses pings under 5 s apart.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
)

Key = str | bytes
CompareTarget = Literal["version", "create_revision", "mod_revision", "value"]
CompareOp = Literal["==", "!=", "<", ">"]


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd stores it.

    `create_revision` is the revision of the put that created the key (a fencing epoch: it
    changes when the key is deleted and created again); `mod_revision` that of its last put
    (the token of a compare-and-swap); `version` counts puts since creation.
    """

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass(frozen=True, slots=True)
class RangeResult:
    """The keys a get found, read at `revision`."""

    revision: int
    kvs: tuple[KeyValue, ...]
    more: bool
    count: int


@dataclass(frozen=True, slots=True)
class PutResult:
    """A put's revision."""

    revision: int


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """How many keys a delete removed, and its revision."""

    revision: int
    deleted: int


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Whether a transaction's comparisons held, and the results of the branch that ran."""

    succeeded: bool
    revision: int
    results: tuple[RangeResult | PutResult | DeleteResult, ...]


@dataclass(frozen=True, slots=True)
class Event:
    """One change seen by a watch. For a delete, `kv` carries the key and the revision only."""

    type: Literal["put", "delete"]
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """The events of one watch response, in revision order; `revision` is the last one's."""

    revision: int
    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease: keys put with it go when it expires or is revoked.

    `granted_at` is the event loop's time when the grant was sent: etcd's TTL runs from a
    moment after it, so `granted_at + ttl_s` is never later than etcd's expiry.
    """

    id: int
    ttl_s: int
    granted_at: float


@dataclass(frozen=True, slots=True)
class EtcdStatus:
    """What one etcd member says about itself (Maintenance.Status)."""

    endpoint: str
    version: str
    db_size: int
    leader: int
    member_id: int
    revision: int
    raft_term: int
    errors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction: `<key's target> <op> <operand>`.

    A key that does not exist has create_revision, mod_revision and version 0, so
    `Compare(key, "create_revision", "==", 0)` means "absent".
    """

    key: Key
    target: CompareTarget
    op: CompareOp
    operand: int | bytes


@dataclass(frozen=True, slots=True)
class Get:
    """A read inside a transaction (`prefix`: every key starting with `key`)."""

    key: Key
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Put:
    """A write inside a transaction (`lease` 0: none)."""

    key: Key
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    """A delete inside a transaction (`prefix`: every key starting with `key`)."""

    key: Key
    prefix: bool = False


Op = Get | Put | Delete

_COMPARE_RESULTS = {
    "==": pb.Compare.COMPARE_RESULT_EQUAL,
    "!=": pb.Compare.COMPARE_RESULT_NOT_EQUAL,
    "<": pb.Compare.COMPARE_RESULT_LESS,
    ">": pb.Compare.COMPARE_RESULT_GREATER,
}
_COMPARE_TARGETS = {
    "version": pb.Compare.COMPARE_TARGET_VERSION,
    "create_revision": pb.Compare.COMPARE_TARGET_CREATE,
    "mod_revision": pb.Compare.COMPARE_TARGET_MOD,
    "value": pb.Compare.COMPARE_TARGET_VALUE,
}


def parse_endpoints(endpoints: str | Sequence[str]) -> tuple[str, ...]:
    """`"h1:p1,h2:p2"` or a sequence of `host:port` as a checked tuple."""
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    parsed = tuple(item.strip() for item in items)
    if not parsed or not all(parsed):
        raise CoordinationArgumentError(
            f"etcd endpoints {endpoints!r} are empty or have an empty item: use "
            f"{_ENDPOINTS_ALLOWED}",
            field="etcd",
            value=endpoints,
            allowed=_ENDPOINTS_ALLOWED,
        )
    for item in parsed:
        if not _ENDPOINT.match(item) or not 0 < int(item.rsplit(":", 1)[1]) < 65536:
            raise CoordinationArgumentError(
                f"etcd endpoint {item!r} is not host:port (a scheme like http:// is not "
                f"accepted): use {_ENDPOINTS_ALLOWED}",
                field="etcd",
                value=item,
                allowed=_ENDPOINTS_ALLOWED,
            )
    return parsed


def check_ttl(ttl_s: object) -> int:
    """A lease TTL in whole seconds within MIN_LEASE_TTL_S..MAX_LEASE_TTL_S."""
    allowed = f"whole seconds {MIN_LEASE_TTL_S}..{MAX_LEASE_TTL_S}"
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or ttl_s != int(ttl_s):
        raise CoordinationArgumentError(
            f"lease ttl {ttl_s!r} is not a whole number of seconds: use {allowed}",
            field="ttl_s",
            value=ttl_s,
            allowed=allowed,
        )
    if not MIN_LEASE_TTL_S <= ttl_s <= MAX_LEASE_TTL_S:
        raise CoordinationArgumentError(
            f"lease ttl {ttl_s}s is out of range: use {allowed}",
            field="ttl_s",
            value=ttl_s,
            allowed=allowed,
        )
    return int(ttl_s)


def prefix_end(prefix: bytes) -> bytes:
    """The exclusive end of the range of keys that start with `prefix`."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\0"  # etcd: every key >= the start
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _key(key: Key) -> bytes:
    raw = key.encode() if isinstance(key, str) else key
    if not isinstance(raw, bytes) or not raw:
        raise CoordinationArgumentError(
            f"etcd key {key!r} is empty or not str/bytes: use a non-empty key",
            field="key",
            value=key,
            allowed="non-empty str or bytes",
        )
    return raw


def _check_timeout(timeout_s: float) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise CoordinationArgumentError(
            f"timeout {timeout_s!r} is not a positive number of seconds",
            field="timeout_s",
            value=timeout_s,
            allowed="> 0 s",
        )
    return float(timeout_s)


def _kv(kv: kv_pb2.KeyValue) -> KeyValue:
    return KeyValue(
        key=kv.key,
        value=kv.value,
        create_revision=kv.create_revision,
        mod_revision=kv.mod_revision,
        version=kv.version,
        lease=kv.lease,
    )


def _range_result(response: pb.RangeResponse) -> RangeResult:
    return RangeResult(
        revision=response.header.revision,
        kvs=tuple(_kv(kv) for kv in response.kvs),
        more=response.more,
        count=response.count,
    )


def _compare(compare: Compare) -> pb.Compare:
    target = _COMPARE_TARGETS.get(compare.target)
    result = _COMPARE_RESULTS.get(compare.op)
    if target is None or result is None:
        raise CoordinationArgumentError(
            f"compare {compare.target!r} {compare.op!r} is not supported: targets "
            f"{sorted(_COMPARE_TARGETS)}, ops {sorted(_COMPARE_RESULTS)}",
            field="compare",
            value=f"{compare.target} {compare.op}",
        )
    message = pb.Compare(key=_key(compare.key), target=target, result=result)
    wants_bytes = compare.target == "value"
    if wants_bytes != isinstance(compare.operand, bytes) or isinstance(compare.operand, bool):
        raise CoordinationArgumentError(
            f"compare on {compare.target} takes {'bytes' if wants_bytes else 'an int'}, "
            f"not {type(compare.operand).__name__}",
            field="compare.operand",
            value=compare.operand,
        )
    setattr(message, compare.target, compare.operand)
    return message


def _op(op: Op) -> pb.RequestOp:
    if isinstance(op, Get):
        key = _key(op.key)
        end = prefix_end(key) if op.prefix else b""
        return pb.RequestOp(request_range=pb.RangeRequest(key=key, range_end=end))
    if isinstance(op, Put):
        return pb.RequestOp(
            request_put=pb.PutRequest(key=_key(op.key), value=op.value, lease=op.lease)
        )
    key = _key(op.key)
    end = prefix_end(key) if op.prefix else b""
    return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key, range_end=end))


def _op_result(response: pb.ResponseOp) -> RangeResult | PutResult | DeleteResult:
    kind = response.WhichOneof("response")
    if kind == "response_range":
        return _range_result(response.response_range)
    if kind == "response_put":
        return PutResult(revision=response.response_put.header.revision)
    return DeleteResult(
        revision=response.response_delete_range.header.revision,
        deleted=response.response_delete_range.deleted,
    )


def _compacted(detail: str) -> CoordinationError:
    return CompactedError(
        f"etcd compacted the revision asked for ({detail}): re-list, then watch",
        compact_revision=0,
    )


def _future_revision(detail: str) -> CoordinationError:
    return CoordinationArgumentError(f"etcd has no such revision yet ({detail})")


def _lease_not_found(detail: str) -> CoordinationError:
    return LeaseNotFoundError(f"the lease expired or was revoked ({detail})")


def _etcd_unavailable(detail: str) -> CoordinationError:
    return CoordinationUnavailableError(f"etcd cannot answer now ({detail})")


# etcd says what went wrong in the status message; the first matching fragment decides.
# Some of a stopping or leaderless etcd's answers come as UNKNOWN: they are an outage (the
# caller serves from what it has, or retries), not a refusal. A member without a leader
# holds a write until the call's deadline and then says "context deadline exceeded".
_ERRORS_BY_MESSAGE: tuple[tuple[str, Callable[[str], CoordinationError]], ...] = (
    ("required revision has been compacted", _compacted),
    ("required revision is a future revision", _future_revision),
    ("requested lease not found", _lease_not_found),
    ("raft: stopped", _etcd_unavailable),
    ("etcdserver: server stopped", _etcd_unavailable),
    ("etcdserver: no leader", _etcd_unavailable),
    ("etcdserver: leader changed", _etcd_unavailable),
    ("etcdserver: request timed out", _etcd_unavailable),
    ("etcdserver: too many requests", _etcd_unavailable),
    ("context deadline exceeded", _etcd_unavailable),
)
_ERRORS_BY_CODE: dict[grpc.StatusCode, type[CoordinationError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: CoordinationArgumentError,
    grpc.StatusCode.NOT_FOUND: LeaseNotFoundError,
    grpc.StatusCode.UNAVAILABLE: CoordinationUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: CoordinationUnavailableError,
}


def _unanswered(error: grpc.aio.AioRpcError) -> bool:
    """Whether a call's error means its endpoint gave no answer (unavailable, or nothing
    before the deadline, ours or the one etcd passes on): try the next endpoint."""
    if error.code() in _FAILOVER_CODES:
        return True
    return "context deadline exceeded" in (error.details() or "")


def _is_answer(response: object) -> bool:
    """Whether a response shows its endpoint serving: a member without a leader answers
    Status (leader 0) but no read or write, so that answer does not end an outage."""
    return not isinstance(response, pb.StatusResponse) or bool(response.leader)


def error_from_rpc(error: grpc.aio.AioRpcError, what: str) -> CoordinationError:
    """The coordination error for an etcd status (a table, not a ladder)."""
    detail = error.details() or error.code().name
    for fragment, make in _ERRORS_BY_MESSAGE:
        if fragment in detail:
            return make(f"{what}: {detail}")
    cls = _ERRORS_BY_CODE.get(error.code(), EtcdError)
    return cls(f"etcd refused {what}: {error.code().name}: {detail}")


class _Stubs:
    """The four service stubs over one endpoint's channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        # protoc's grpc plugin writes no type information for the stubs.
        self.kv = rpc.KVStub(channel)  # type: ignore[no-untyped-call]
        self.watch = rpc.WatchStub(channel)  # type: ignore[no-untyped-call]
        self.lease = rpc.LeaseStub(channel)  # type: ignore[no-untyped-call]
        self.maintenance = rpc.MaintenanceStub(channel)  # type: ignore[no-untyped-call]


class EtcdClient:
    """An etcd v3 client for one event loop, over one or more endpoints (failover in turn).

    Use as `async with EtcdClient("127.0.0.1:2379") as etcd:` or call `close()`. Keys are
    `str` (UTF-8) or `bytes`; values are `bytes`.

    Args:
        endpoints: `"host:port[,host:port...]"` or a sequence of `host:port`.
        timeout_s: Default time limit of one call, failover included.
    """

    def __init__(
        self, endpoints: str | Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        # Channels by endpoint, opened on first use; _current is the endpoint tried first.
        self._channels: dict[str, tuple[grpc.aio.Channel, _Stubs]] = {}
        self._current = 0
        self._closed = False
        # From a request left unanswered UNANSWERED_AFTER_S (or a call that finds etcd
        # unreachable) until an endpoint answers: the task that keeps a probe waiting at
        # each endpoint (_probe); None otherwise.
        self._prober: asyncio.Task[None] | None = None
        self.endpoints = parse_endpoints(endpoints)
        self.reachability = Reachability(self.endpoints, on_silence=self._start_probe)
        """Whether etcd answers (every call, watch and keepalive of this client tells)."""
        self.timeout_s = _check_timeout(timeout_s)

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel (idempotent); open watches and keepers fail."""
        self._closed = True
        if self._prober is not None:
            prober, self._prober = self._prober, None
            await cancel_and_wait(prober)
        channels, self._channels = list(self._channels.values()), {}
        for channel, _ in channels:
            await channel.close()

    def __del__(self) -> None:
        if not self._closed and self._channels:
            warnings.warn(
                f"EtcdClient({','.join(self.endpoints)}) was never closed",
                ResourceWarning,
                stacklevel=1,
            )

    # -- plumbing ------------------------------------------------------------------------

    def _stubs(self, endpoint: str) -> _Stubs:
        if self._closed:
            raise SessionClosedError("the etcd client is closed")
        entry = self._channels.get(endpoint)
        if entry is None:
            channel = grpc.aio.insecure_channel(endpoint, options=list(_CHANNEL_OPTIONS))
            entry = self._channels[endpoint] = (channel, _Stubs(channel))
        return entry[1]

    def _endpoint(self) -> str:
        """The endpoint to ask next: the current one, unless it is silent or failed while
        another is untried or answering (that one becomes the current one then)."""
        count = len(self.endpoints)
        for step in range(count):
            index = (self._current + step) % count
            if self.reachability.answering(self.endpoints[index]):
                self._current = index
                break
        return self.endpoints[self._current % count]

    def _fail_over(self, endpoint: str) -> None:
        """Record that `endpoint` failed (a call or a stream found it gone) and move on from
        it (unless another caller did already)."""
        self.reachability.failed(endpoint)
        if self.endpoints[self._current % len(self.endpoints)] == endpoint:
            self._current = (self._current + 1) % len(self.endpoints)

    def _try_limit(self, endpoint: str, remaining: float, *, probing: bool = False) -> float:
        """How long one try at `endpoint` may wait: PROBE_TIMEOUT_S while etcd is
        unreachable; UNANSWERED_AFTER_S while another endpoint is untried or answering (a
        hung member then costs that, not the whole timeout); else all that is left."""
        if probing:
            return min(remaining, PROBE_TIMEOUT_S)
        others = (e for e in self.endpoints if e != endpoint)
        if any(self.reachability.answering(other) for other in others):
            return min(remaining, UNANSWERED_AFTER_S)
        return remaining

    async def _call(
        self, what: str, call: Callable[[_Stubs, float], Any], timeout_s: float | None
    ) -> Any:
        """Run `call(stubs, remaining_s)` on the endpoints in turn until one answers.

        While etcd is unreachable (`reachability`), or once it turns so during the call,
        each endpoint is tried once more for at most PROBE_TIMEOUT_S, and then the call
        fails; while it is hung (the probe's Status has waited PROBE_TIMEOUT_S unanswered at
        every endpoint), at once."""
        timeout = self.timeout_s if timeout_s is None else _check_timeout(timeout_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: grpc.aio.AioRpcError | None = None
        probing = self.reachability.unreachable_for is not None
        if probing:
            self._start_probe()
            hung = self.reachability.hung_for
            if hung is not None:
                raise self.reachability.refusal(
                    what,
                    hung,
                    f"a Status request to every endpoint has waited over {PROBE_TIMEOUT_S:g}s "
                    "unanswered",
                )
        while True:
            for _ in range(len(self.endpoints)):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                endpoint = self._endpoint()
                try:
                    with self.reachability.asking(endpoint):
                        answer = await call(
                            self._stubs(endpoint),
                            self._try_limit(endpoint, remaining, probing=probing),
                        )
                except grpc.aio.AioRpcError as error:
                    if not _unanswered(error):
                        failure = error_from_rpc(error, what)
                        if isinstance(failure, CoordinationUnavailableError):
                            self._fail_over(endpoint)  # "no leader": it serves nothing now
                        elif not _stream_outage(error):
                            self.reachability.answered(endpoint)  # a refusal is an answer
                        raise failure from error
                    last = error
                    self._fail_over(endpoint)
                else:
                    if _is_answer(answer):
                        self.reachability.answered(endpoint)
                    return answer
            reason = f"{last.code().name}: {last.details()}" if last else "no time left"
            silent = self.reachability.unreachable_for
            if probing and silent is not None:
                raise self.reachability.refusal(what, silent, reason, tried=True)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise CoordinationUnavailableError(
                    f"etcd did not answer {what} within {timeout:g}s at "
                    f"{','.join(self.endpoints)} ({reason}); is etcd running?"
                )
            # Turned unreachable while this call retried: one short try of each, then fail.
            probing = silent is not None
            if probing:
                self._start_probe()
            await asyncio.sleep(min(_RETRY_PAUSE_S, remaining))

    def _start_probe(self) -> None:
        """Run `_probe` unless it runs already (or the client is closed)."""
        if self._prober is None and not self._closed:
            self._prober = asyncio.get_running_loop().create_task(
                self._probe(), name="etcd-reachability-probe"
            )
            self._prober.add_done_callback(self._probe_ended)

    def _probe_ended(self, task: asyncio.Task[None]) -> None:
        if self._prober is task:
            self._prober = None
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error("the etcd reachability probe failed: %r", error)

    async def _probe(self) -> None:
        """Keep one Status request waiting at each endpoint, sending the next when it
        fails, until an endpoint answers with a leader: a hung etcd answers the waiting one
        as soon as it resumes, and that first answer ends the outage for every caller; one
        left unanswered PROBE_TIMEOUT_S marks its endpoint hung (etcd_reachability.py)."""

        async def one(endpoint: str) -> None:
            while True:
                try:
                    with self.reachability.asking(endpoint, probe=True):
                        response = await self._stubs(endpoint).maintenance.Status(
                            pb.StatusRequest(), timeout=_PROBE_WAIT_S
                        )
                except grpc.aio.AioRpcError as error:
                    if not _unanswered(error):
                        self.reachability.answered(endpoint)  # a refusal: etcd answers
                        return
                    self.reachability.failed(endpoint)
                    if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                        await asyncio.sleep(_PROBE_PAUSE_S)  # refused at once: do not spin
                    continue
                if _is_answer(response):
                    self.reachability.answered(endpoint)
                    return
                self.reachability.failed(endpoint)  # up, but without a leader
                await asyncio.sleep(_PROBE_PAUSE_S)

        probes = [asyncio.create_task(one(endpoint)) for endpoint in self.endpoints]
        try:
            done, _ = await asyncio.wait(probes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for probe in probes:
                probe.cancel()
            await asyncio.wait(probes)
        for probe in done:
            probe.result()  # an unexpected error is the probe's own

    # -- KV ------------------------------------------------------------------------------

    async def get(
        self,
        key: Key,
        *,
        prefix: bool = False,
        revision: int = 0,
        limit: int = 0,
        timeout_s: float | None = None,
    ) -> RangeResult:
        """Read `key` (or every key starting with it), at `revision` (0: the newest)."""
        raw = _key(key)
        request = pb.RangeRequest(
            key=raw, range_end=prefix_end(raw) if prefix else b"", revision=revision, limit=limit
        )
        response = await self._call(
            f"get {raw!r}", lambda s, t: s.kv.Range(request, timeout=t), timeout_s
        )
        return _range_result(response)

    async def put(
        self, key: Key, value: bytes, *, lease: int = 0, timeout_s: float | None = None
    ) -> int:
        """Write `key`; attach it to `lease` when given. Returns the put's revision."""
        request = pb.PutRequest(key=_key(key), value=value, lease=lease)
        response = await self._call(
            f"put {request.key!r}", lambda s, t: s.kv.Put(request, timeout=t), timeout_s
        )
        return int(response.header.revision)

    async def delete(
        self, key: Key, *, prefix: bool = False, timeout_s: float | None = None
    ) -> DeleteResult:
        """Delete `key` (or every key starting with it)."""
        raw = _key(key)
        request = pb.DeleteRangeRequest(key=raw, range_end=prefix_end(raw) if prefix else b"")
        response = await self._call(
            f"delete {raw!r}", lambda s, t: s.kv.DeleteRange(request, timeout=t), timeout_s
        )
        return DeleteResult(revision=response.header.revision, deleted=response.deleted)

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
        *,
        timeout_s: float | None = None,
    ) -> TxnResult:
        """Run `success` if every comparison holds, else `failure`, atomically."""
        request = pb.TxnRequest(
            compare=[_compare(c) for c in compare],
            success=[_op(o) for o in success],
            failure=[_op(o) for o in failure],
        )
        response = await self._call("txn", lambda s, t: s.kv.Txn(request, timeout=t), timeout_s)
        return TxnResult(
            succeeded=response.succeeded,
            revision=response.header.revision,
            results=tuple(_op_result(r) for r in response.responses),
        )

    async def put_if_absent(
        self, key: Key, value: bytes, *, lease: int = 0, timeout_s: float | None = None
    ) -> tuple[bool, KeyValue | None]:
        """Create `key` unless it exists (create_revision == 0).

        Returns (created, the key now): on failure the existing key, read in the same
        transaction.
        """
        return await self._swap(key, value, "create_revision", 0, lease, timeout_s)

    async def compare_and_swap(
        self,
        key: Key,
        value: bytes,
        *,
        mod_revision: int,
        lease: int = 0,
        timeout_s: float | None = None,
    ) -> tuple[bool, KeyValue | None]:
        """Write `key` only if its mod revision is still `mod_revision` (0: absent).

        Returns (written, the key now): on failure the current key or None when absent.
        """
        target: CompareTarget = "create_revision" if mod_revision == 0 else "mod_revision"
        return await self._swap(key, value, target, mod_revision, lease, timeout_s)

    async def delete_if(
        self, key: Key, *, mod_revision: int, timeout_s: float | None = None
    ) -> tuple[bool, KeyValue | None]:
        """Delete `key` only if its mod revision is still `mod_revision`.

        Returns (deleted, the key now when not deleted).
        """
        result = await self.txn(
            [Compare(key, "mod_revision", "==", mod_revision)],
            [Delete(key)],
            [Get(key)],
            timeout_s=timeout_s,
        )
        return result.succeeded, None if result.succeeded else _first(result)

    async def _swap(
        self,
        key: Key,
        value: bytes,
        target: CompareTarget,
        operand: int,
        lease: int,
        timeout_s: float | None,
    ) -> tuple[bool, KeyValue | None]:
        result = await self.txn(
            [Compare(key, target, "==", operand)],
            [Put(key, value, lease), Get(key)],
            [Get(key)],
            timeout_s=timeout_s,
        )
        return result.succeeded, _first(result)

    async def compact(self, revision: int, *, timeout_s: float | None = None) -> None:
        """Discard the history before `revision` (physically, before answering)."""
        request = pb.CompactRequest(revision=revision, physical=True)
        await self._call(
            f"compact {revision}", lambda s, t: s.kv.Compact(request, timeout=t), timeout_s
        )

    # -- leases --------------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int, *, timeout_s: float | None = None) -> Lease:
        """A new lease of `ttl_s` seconds (MIN_LEASE_TTL_S..MAX_LEASE_TTL_S)."""
        request = pb.LeaseGrantRequest(ttl=check_ttl(ttl_s))
        sent_at = asyncio.get_running_loop().time()
        response = await self._call(
            "lease grant", lambda s, t: s.lease.LeaseGrant(request, timeout=t), timeout_s
        )
        if response.error:
            raise EtcdError(f"etcd granted no lease: {response.error}")
        return Lease(id=response.id, ttl_s=int(response.ttl), granted_at=sent_at)

    async def lease_revoke(self, lease_id: int, *, timeout_s: float | None = None) -> None:
        """End the lease now; its keys are deleted. LeaseNotFoundError if it is gone."""
        request = pb.LeaseRevokeRequest(id=lease_id)
        await self._call(
            f"lease revoke {lease_id:x}",
            lambda s, t: s.lease.LeaseRevoke(request, timeout=t),
            timeout_s,
        )

    async def lease_time_to_live(self, lease_id: int, *, timeout_s: float | None = None) -> int:
        """Seconds the lease has left; -1 when it does not exist."""
        request = pb.LeaseTimeToLiveRequest(id=lease_id)
        response = await self._call(
            f"lease ttl {lease_id:x}",
            lambda s, t: s.lease.LeaseTimeToLive(request, timeout=t),
            timeout_s,
        )
        return int(response.ttl)

    def keep_alive(self, lease: Lease) -> LeaseKeeper:
        """Start renewing `lease` every TTL/3; see LeaseKeeper."""
        return LeaseKeeper(self, lease)

    # -- watch ---------------------------------------------------------------------------

    async def watch(
        self, key: Key, *, prefix: bool = False, start_revision: int = 0
    ) -> AsyncIterator[WatchBatch]:
        """Yield the changes of `key` (or of every key starting with it) as they happen.

        From `start_revision` (inclusive) when given, else from now. Survives etcd outages
        and endpoint changes by resuming after the last delivered revision; raises
        CompactedError (with its `compact_revision`) when that revision was compacted.
        """
        raw = _key(key)
        end = prefix_end(raw) if prefix else b""
        next_revision = start_revision
        outage_pause = _RETRY_PAUSE_S
        while True:
            endpoint = self._endpoint()
            call = self._stubs(endpoint).watch.Watch()
            try:
                create = pb.WatchCreateRequest(
                    key=raw, range_end=end, start_revision=next_revision, progress_notify=True
                )
                await _bounded(
                    call, call.write(pb.WatchRequest(create_request=create)), self.timeout_s
                )
                while True:
                    response = await _read(call, f"etcd at {endpoint} ended the watch")
                    if response.compact_revision:
                        raise CompactedError(
                            f"etcd compacted the history of {raw!r} up to revision "
                            f"{response.compact_revision} (asked from {next_revision}): "
                            "re-list, then watch",
                            compact_revision=response.compact_revision,
                        )
                    if response.canceled:
                        raise EtcdError(
                            f"etcd cancelled the watch of {raw!r}: {response.cancel_reason}"
                        )
                    self.reachability.answered(endpoint)
                    if response.created:
                        if next_revision == 0:
                            next_revision = response.header.revision + 1
                        if outage_pause > _RETRY_PAUSE_S:
                            logger.info("watch of %r resumed on %s", raw, endpoint)
                        outage_pause = _RETRY_PAUSE_S
                    if response.events:
                        batch = _batch(response)
                        next_revision = batch.revision + 1
                        yield batch
                    elif not response.created:  # a progress notification
                        next_revision = max(next_revision, response.header.revision + 1)
            except _STREAM_FAILURES as error:
                if isinstance(error, grpc.aio.AioRpcError) and not _stream_outage(error):
                    raise error_from_rpc(error, f"watch {raw!r}") from error
                if self._closed:
                    raise SessionClosedError("the etcd client is closed") from error
                # Once per outage at warning level; its retries (every second at most) at debug.
                logger.log(
                    logging.WARNING if outage_pause == _RETRY_PAUSE_S else logging.DEBUG,
                    "watch of %r lost etcd at %s (%s); resuming from revision %d",
                    raw,
                    endpoint,
                    error,
                    next_revision,
                )
                self._fail_over(endpoint)
                await asyncio.sleep(outage_pause)
                outage_pause = min(outage_pause * 2, 1.0)
            finally:
                call.cancel()

    # -- maintenance ---------------------------------------------------------------------

    async def status(
        self, endpoint: str | None = None, *, timeout_s: float | None = None
    ) -> EtcdStatus:
        """The status of `endpoint`, or of the first endpoint that answers."""
        if endpoint is not None:
            (endpoint,) = parse_endpoints([endpoint])
            timeout = self.timeout_s if timeout_s is None else _check_timeout(timeout_s)
            try:
                with self.reachability.asking(endpoint):
                    response = await self._stubs(endpoint).maintenance.Status(
                        pb.StatusRequest(), timeout=timeout
                    )
            except grpc.aio.AioRpcError as error:
                if _unanswered(error):
                    self.reachability.failed(endpoint)
                raise error_from_rpc(error, f"status of {endpoint}") from error
            if _is_answer(response):
                self.reachability.answered(endpoint)
            return _status(endpoint, response)
        answered: list[str] = []

        async def call(stubs: _Stubs, remaining: float) -> Any:
            answered.append(self._endpoint())
            return await stubs.maintenance.Status(pb.StatusRequest(), timeout=remaining)

        response = await self._call("status", call, timeout_s)
        return _status(answered[-1], response)


def _status(endpoint: str, response: pb.StatusResponse) -> EtcdStatus:
    return EtcdStatus(
        endpoint=endpoint,
        version=response.version,
        db_size=response.db_size,
        leader=response.leader,
        member_id=response.header.member_id,
        revision=response.header.revision,
        raft_term=response.header.raft_term,
        errors=tuple(response.errors),
    )


def _batch(response: pb.WatchResponse) -> WatchBatch:
    events = tuple(
        Event(
            type="delete" if event.type == kv_pb2.Event.EVENT_TYPE_DELETE else "put",
            kv=_kv(event.kv),
        )
        for event in response.events
    )
    return WatchBatch(revision=events[-1].kv.mod_revision, events=events)


def _first(result: TxnResult) -> KeyValue | None:
    """The key read by the last Get of a transaction's branch."""
    reads = [r for r in result.results if isinstance(r, RangeResult)]
    return reads[-1].kvs[0] if reads and reads[-1].kvs else None
