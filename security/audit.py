"""The audit log of admin mutations, and the count of denied requests.

`audit(event, request=..., result=...)` writes one JSON object on one line for each admin
mutation (topics, groups, offsets, purge, redrive, users, ACLs), successful or not:

    {"time": "2026-11-21T16:00:00.123Z", "event": "topic.delete", "user": "alice",
     "source": "ipv4:10.0.0.7:51234", "request": {"name": "orders", "force": true},
     "result": "ok", "error": ""}

- `user`: `current_principal().access_key`, or "anonymous" (authentication off).
- `source`: the caller's address as grpc reports it. It comes as the `peer=` argument (the
  `audited` decorator passes the call's `context.peer()`), else from the principal (the
  authentication gate records the peer there), else "". No contextvar is set per call for
  it: every call would pay for what only admin mutations read.
- `request`: the request's fields; keys named like secret, password, token or credential
  are dropped at any depth, long strings and lists are cut (`_salient`), so a line stays
  small and never carries a secret.
- `result`: "ok", or the error's code (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED...),
  with the error message in `error`.

Each line goes to the logger `popmq.audit` at INFO (the server's log, text or JSON) and to
every open `AuditFile` (`[security] audit_log_file`). The file is written on the caller's
thread (the event loop), synchronously, without fsync: a line is a few hundred bytes that
land in the page cache in microseconds, admin mutations come at human rates, and a write
that went to a thread could be lost or reordered at shutdown. A line survives the process
crashing, not the machine (the log has the same line too). A failed write is logged as an
error and does not fail the mutation that already happened.

`denied(method, code)` counts a refused request (UNAUTHENTICATED, PERMISSION_DENIED) in
`popmq_requests_denied_total{method,code}` and logs it at warning at most once a minute per
(method, code). The authentication gate calls it; the metrics endpoint does too, for a
scrape refused 401 (method "/metrics"). An admin mutation refused PERMISSION_DENIED also
gets its audit line (a known user tried it); UNAUTHENTICATED ones are only counted and
logged, since anyone could otherwise fill the audit file.

The counts are the process's (a server normally has its process to itself): every
`Metrics` registry exports them (`SecurityCollector`), and servers embedded side by side in
one process share them, as they share the open audit files.

Everything here may run on any thread; `_LOCK` guards the module's tables.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from popmq.broker_core import InvalidArgumentError, PopMQError
from popmq.security.model import current_principal

log = logging.getLogger(__name__)
audit_log = logging.getLogger("popmq.audit")

ANONYMOUS_USER = "anonymous"
"""The `user` of a line written while authentication is off."""

DENIED_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
"""Codes `denied` counts."""

AUDITED_METHODS: Mapping[str, str] = {
    "/popmq.v1.AdminService/CreateTopic": "topic.create",
    "/popmq.v1.AdminService/UpdateTopic": "topic.update",
    "/popmq.v1.AdminService/DeleteTopic": "topic.delete",
    "/popmq.v1.AdminService/PurgeTopic": "topic.purge",
    "/popmq.v1.AdminService/CreateGroup": "group.create",
    "/popmq.v1.AdminService/UpdateGroup": "group.update",
    "/popmq.v1.AdminService/DeleteGroup": "group.delete",
    "/popmq.v1.AdminService/ResetOffsets": "offsets.reset",
    "/popmq.v1.AdminService/RedriveDeadLetters": "dlq.redrive",
    "/popmq.v1.AdminService/ResolveTransaction": "transaction.resolve",
    "/popmq.v1.AdminService/ResumeTransaction": "transaction.resume",
    "/popmq.v1.AdminService/CreateUser": "user.create",
    "/popmq.v1.AdminService/UpdateUser": "user.update",
    "/popmq.v1.AdminService/DeleteUser": "user.delete",
    "/popmq.v1.AdminService/GrantPolicy": "acl.grant",
    "/popmq.v1.AdminService/RevokePolicy": "acl.revoke",
}
"""Admin mutations (full gRPC method name -> audit event). Their servicer methods are
`audited(event)`; `denied` writes the audit line of one refused before it ran."""

_SECRET_WORDS = ("secret", "password", "passwd", "token", "credential", "authorization")
"""A request key containing one of these (any case) is never written."""
_MAX_TEXT = 256
"""Characters of a string value kept in a line; the rest is cut, saying how long it was."""
_MAX_ITEMS = 32
"""Entries of a list or map value kept in a line."""
_MAX_DEPTH = 6
_MAX_EXACT_BYTES = 64 * 1024
"""Requests up to this size go into a line through json_format whole; larger ones are
pruned as they are read (request_fields)."""

_MAX_DENIED_SERIES = 512
"""Distinct (method, code) series of the denied counter; more are counted as method
"other" (the gate may see method names no service has, which must not grow the series)."""
_DENIED_LOG_INTERVAL_S = 60.0
"""A (method, code) is logged at most once per this many seconds."""

_LOCK = threading.Lock()
# Guarded by _LOCK: (method, code) -> requests denied.
_denied: dict[tuple[str, str], int] = {}
# Guarded by _LOCK: (method, code) -> (time.monotonic() of its last warning, refusals since).
_denied_logged: dict[tuple[str, str], tuple[float, int]] = {}
# Guarded by _LOCK: (event, result) -> audit lines written.
_audited: dict[tuple[str, str], int] = {}
# Guarded by _LOCK: the open audit files; each line is written to all of them.
_files: list[AuditFile] = []


# -- the audit line --------------------------------------------------------------------------


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _salient(value: object, depth: int = 0) -> object:
    """`value` as JSON data without secrets, cut to a size fit for one log line."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= _MAX_DEPTH:
        return "..."
    if isinstance(value, Mapping):
        kept: dict[str, object] = {}
        for i, (key, item) in enumerate(value.items()):
            if i == _MAX_ITEMS:
                kept["..."] = f"{len(value)} entries in all"
                break
            if not _is_secret(str(key)):
                kept[str(key)] = _salient(item, depth + 1)
        return kept
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        cut = [_salient(item, depth + 1) for item in items[:_MAX_ITEMS]]
        if len(items) > _MAX_ITEMS:
            cut.append(f"... {len(items)} items in all")
        return cut
    text = str(value)
    if len(text) > _MAX_TEXT:
        return f"{text[:_MAX_TEXT]}... ({len(text)} characters)"
    return text


def request_fields(request: Message) -> dict[str, object]:
    """The fields a protobuf request sets (proto field names; enums by name), for `audit`.

    A request of up to `_MAX_EXACT_BYTES` is converted whole (json_format's form: int64 as
    strings). A larger one, such as a rejected CreateGroup with 10,000 subscriptions, is read
    only as far as the line keeps (`_pruned`): converting all of it would hold the event loop
    for seconds, for a line `_salient` cuts to 32 items anyway.
    """
    if request.ByteSize() <= _MAX_EXACT_BYTES:
        fields: dict[str, object] = json_format.MessageToDict(
            request, preserving_proto_field_name=True
        )
        return fields
    return _pruned(request, 0)


def _pruned(message: Message, depth: int) -> dict[str, object]:
    """`message`'s set fields, reading at most `_MAX_ITEMS` of each repeated field or map."""
    fields: dict[str, object] = {}
    for field, value in message.ListFields():
        if _is_secret(field.name):
            continue
        if depth >= _MAX_DEPTH:
            fields[field.name] = "..."
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            entries = list(itertools.islice(value.items(), _MAX_ITEMS))
            kept = {str(k): _field_value(field.message_type.fields_by_name["value"], v, depth)
                    for k, v in entries}  # fmt: skip
            if len(value) > _MAX_ITEMS:
                kept["..."] = f"{len(value)} entries in all"
            fields[field.name] = kept
        elif field.is_repeated:
            items = [_field_value(field, item, depth) for item in value[:_MAX_ITEMS]]
            if len(value) > _MAX_ITEMS:
                items.append(f"... {len(value)} items in all")
            fields[field.name] = items
        else:
            fields[field.name] = _field_value(field, value, depth)
    return fields


def _field_value(field: FieldDescriptor, value: Any, depth: int) -> object:
    if field.message_type is not None:
        return _pruned(value, depth + 1)
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return f"{value[:_MAX_TEXT]}... ({len(value)} characters)"
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def audit(
    event: str,
    *,
    request: Mapping[str, object],
    result: str,
    error: str = "",
    peer: str | None = None,
) -> None:
    """Record one admin mutation (successful or not) as one JSON line.

    Args:
        event: What was asked, as "<resource>.<verb>" ("topic.delete", "user.create").
        request: The request's fields; secret-named keys are dropped, long values cut.
        result: "ok", or the error code it failed with.
        error: The error message ("" when it succeeded).
        peer: The caller's address; None: the current principal's source.
    """
    principal = current_principal()
    entry = {
        "time": _now(),
        "event": event,
        "user": principal.access_key or ANONYMOUS_USER,
        "source": principal.source if peer is None else peer,
        "request": _salient(request),
        "result": result,
        "error": error,
    }
    line = json.dumps(entry, default=str)
    audit_log.info("%s", line)
    data = (line + "\n").encode("utf-8")
    with _LOCK:
        key = (event, result)
        _audited[key] = _audited.get(key, 0) + 1
        for file in list(_files):
            file.write(data)


_Handler = TypeVar("_Handler", bound=Callable[..., Awaitable[Any]])


def _failure(exc: BaseException, context: grpc.aio.ServicerContext) -> tuple[str, str]:
    """(result, error) of a call that raised `exc`."""
    if isinstance(exc, PopMQError):
        return exc.code, str(exc)
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELLED", "the call was cancelled before it finished"
    if isinstance(exc, grpc.aio.AbortError):
        code = context.code()
        name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
        return name, str(context.details() or "")
    return "INTERNAL", f"{type(exc).__name__}: {exc}"


def audited(event: str) -> Callable[[_Handler], _Handler]:
    """Decorate a servicer method `(self, request, context)` so each call writes its audit
    line: "ok" when it returns, the error's code when it raises (and the error goes on)."""

    def decorate(handler: _Handler) -> _Handler:
        @functools.wraps(handler)
        async def wrapper(
            self: object, request: Message, context: grpc.aio.ServicerContext
        ) -> object:
            try:
                response = await handler(self, request, context)
            except BaseException as exc:
                result, error = _failure(exc, context)
                audit(
                    event,
                    request=request_fields(request),
                    result=result,
                    error=error,
                    peer=context.peer(),
                )
                raise
            audit(event, request=request_fields(request), result="ok", peer=context.peer())
            return response

        return wrapper  # type: ignore[return-value]

    return decorate


# -- the audit file --------------------------------------------------------------------------


class AuditFile:
    """`[security] audit_log_file`, open for appending (created 0600) while the server runs.

    Every `audit` line is appended to every open AuditFile (the module docstring says why
    synchronously). An existing file keeps its permissions (a log shipper may need group
    read); a new one is its owner's alone.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._fd: int | None = os.open(
                self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot open security.audit_log_file {self.path}: {exc.strerror or exc}"
            ) from exc
        self._failed = False
        with _LOCK:
            _files.append(self)

    def write(self, data: bytes) -> None:
        """Append one line (called with _LOCK held, so lines never interleave)."""
        fd = self._fd
        if fd is None:
            return
        failure: OSError | None = None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            failure = exc
        if failure is not None and not self._failed:  # once per failure spell, not per line
            log.error("cannot write the audit log %s: %s", self.path, failure)
        self._failed = failure is not None

    def close(self) -> None:
        """Stop writing to the file; idempotent."""
        with _LOCK:
            if self in _files:
                _files.remove(self)
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> AuditFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- denied requests -------------------------------------------------------------------------


def denied(
    method: str,
    code: str,
    *,
    peer: str | None = None,
    detail: str = "",
    request: Mapping[str, object] | None = None,
) -> None:
    """Count a refused request and log it (at most once a minute per method and code).

    Args:
        method: The full gRPC method name ("/popmq.v1.AdminService/DeleteTopic").
        code: "UNAUTHENTICATED" or "PERMISSION_DENIED".
        peer: The caller's address; None: the current principal's source.
        detail: Why (the message the caller gets), for the log and the audit line.
        request: The request's fields, for the audit line of an admin mutation refused
            PERMISSION_DENIED.
    """
    if code not in DENIED_CODES:
        raise ValueError(f"denied code {code!r} is not one of {', '.join(sorted(DENIED_CODES))}")
    source = current_principal().source if peer is None else peer
    now = time.monotonic()
    with _LOCK:
        key = (method, code)
        if key not in _denied and len(_denied) >= _MAX_DENIED_SERIES:
            key = ("other", code)
        _denied[key] = _denied.get(key, 0) + 1
        last, suppressed = _denied_logged.get(key, (-_DENIED_LOG_INTERVAL_S, 0))
        due = now - last >= _DENIED_LOG_INTERVAL_S
        _denied_logged[key] = (now, 0) if due else (last, suppressed + 1)
    if due:
        log.warning(
            "%s denied %s from %s: %s (%d more such refusals since the last line; at most "
            "one line a minute per method and code)",
            method,
            code,
            source or "?",
            detail or "no detail",
            suppressed,
        )
    # Refused mutations of a known user are audited; unauthenticated ones only counted and
    # logged above: anyone could fill the audit file with them.
    event = AUDITED_METHODS.get(method) if code == "PERMISSION_DENIED" else None
    if event is not None:
        audit(event, request=request or {}, result=code, error=detail, peer=source)


def denied_count(method: str, code: str) -> int:
    """Requests of `method` refused with `code` so far in this process."""
    with _LOCK:
        return _denied.get((method, code), 0)


def audit_count(event: str, result: str) -> int:
    """Audit lines of `event` with `result` written so far in this process."""
    with _LOCK:
        return _audited.get((event, result), 0)


class SecurityCollector(Collector):
    """Exports the process's denied requests and audit lines (every `Metrics` registers one)."""

    def collect(self) -> Iterable[Metric]:
        with _LOCK:
            denied_now = sorted(_denied.items())
            audited_now = sorted(_audited.items())
        requests = CounterMetricFamily(
            "popmq_requests_denied",
            "Requests refused UNAUTHENTICATED or PERMISSION_DENIED, by method and code",
            labels=["method", "code"],
        )
        for (method, code), count in denied_now:
            requests.add_metric([method, code], count)
        yield requests
        events = CounterMetricFamily(
            "popmq_audit_events",
            "Admin mutations audited, by event and result (ok or the error code)",
            labels=["event", "result"],
        )
        for (event, result), count in audited_now:
            events.add_metric([event, result], count)
        yield events
