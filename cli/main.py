"""The ``popmq`` command: run the server, administer it, send and receive.

Exit codes: 0 success, 1 server or connection error, 2 usage error (bad arguments or
configuration), 3 not found, 4 a rejected request (invalid argument, failed precondition,
already exists, credentials refused, access denied), 130 interrupted, 141 stdout went away
(a closed pipe, as in ``| head``: quietly, as a command killed by SIGPIPE; ``receive
--ack`` acks only what got out and gives the rest back, see popmq.cli.commands).

Client commands take ``--endpoint`` (default ``$POPMQ_ENDPOINT`` or 127.0.0.1:8081; several
comma-separated HOST:PORT fail over between proxies, as the SDK does), ``--json`` (one JSON
document on stdout instead of tables and lines) and the TLS options: ``--tls`` (verify the
server with the system's roots), ``--tls-ca FILE`` (with a CA of one's own), ``--tls-cert
FILE --tls-key FILE`` (a client certificate: mutual TLS), ``--tls-server-name NAME``; each
defaults to ``$POPMQ_TLS``, ``$POPMQ_TLS_CA``, ``$POPMQ_TLS_CERT``, ``$POPMQ_TLS_KEY``,
``$POPMQ_TLS_SERVER_NAME``, and any of them turns TLS on. Against a server with
authentication on they sign each call with ``--access-key`` (or ``$POPMQ_ACCESS_KEY``) and its
secret key from ``$POPMQ_SECRET_KEY`` or ``--secret-key-file`` (never required on the command
line, where other users of the machine could see it; ``--secret-key`` exists for one-off use).
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from popmq import (
    AlreadyExistsError,
    Credentials,
    ExponentialBackoff,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    PopMQError,
    TLSConfig,
    UnauthenticatedError,
)
from popmq.cli import commands, dlq, inspection, local_cluster
from popmq.cli.render import format_group, format_message, format_receipt, format_topic
from popmq.sdk._channel import check_endpoint
from popmq.sdk.tls import TLS, channel_security

__all__ = [
    "build_parser",
    "exit_code_for",
    "format_group",
    "format_message",
    "format_receipt",
    "format_topic",
    "main",
    "resolve_credentials",
]

DEFAULT_ENDPOINT = "127.0.0.1:8081"

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_REJECTED = 4
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a command a closed pipe ended."""

# Error class -> exit code; looked up along the raised error's MRO, default EXIT_SERVER_ERROR.
_EXIT_CODES: dict[type[PopMQError], int] = {
    NotFoundError: EXIT_NOT_FOUND,
    InvalidArgumentError: EXIT_REJECTED,
    FailedPreconditionError: EXIT_REJECTED,
    AlreadyExistsError: EXIT_REJECTED,
    UnauthenticatedError: EXIT_REJECTED,
    PermissionDeniedError: EXIT_REJECTED,
}

MESSAGE_TYPES = ("normal", "fifo", "delay", "transaction", "mixed")
ACTIONS = ("pub", "sub", "create", "update", "delete", "get", "list", "all")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def exit_code_for(error: PopMQError) -> int:
    """Return the process exit code for an SDK error."""
    for cls in type(error).__mro__:
        code = _EXIT_CODES.get(cls)
        if code is not None:
            return code
    return EXIT_SERVER_ERROR


# -- argument types (a bad value is a usage error, exit 2) --------------------------------------


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _duration(text: str) -> float:
    """Seconds from "1.5", "500ms", "10s", "5m", "2h"."""
    match = _DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use a number with ms, s, m or h (e.g. 10s, 5m)"
        )
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def _durations(text: str) -> list[float]:
    """A comma-separated list of durations: "1s,5s,30s,2m"."""
    return [_duration(part) for part in text.split(",")]


def _exponential(text: str) -> ExponentialBackoff:
    """INITIAL,MAX,MULTIPLIER, e.g. "5s,2h,2"."""
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not INITIAL,MAX,MULTIPLIER (e.g. 5s,2h,2)")
    try:
        multiplier = float(parts[2])
    except ValueError:
        raise argparse.ArgumentTypeError(f"multiplier {parts[2]!r} is not a number") from None
    return ExponentialBackoff(_duration(parts[0]), _duration(parts[1]), multiplier)


def _time(text: str) -> datetime:
    """An ISO-8601 time ("2026-11-21T10:00:00Z"; without a zone: UTC) or epoch seconds."""
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: use ISO-8601 (2026-11-21T10:00:00Z) or epoch seconds"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _consume_from(text: str) -> str | datetime:
    return text if text in ("first", "last") else _time(text)


def _reset_target(text: str) -> str | datetime:
    return text if text in ("earliest", "latest") else _time(text)


def _queue_offset(text: str) -> tuple[int, int]:
    queue, sep, offset = text.partition("=")
    if not sep or not queue.isdigit() or not offset.isdigit():
        raise argparse.ArgumentTypeError(f"expected QUEUE=OFFSET (e.g. 0=42), got {text!r}")
    return int(queue), int(offset)


def _subscription(text: str) -> tuple[str, str]:
    topic, _, expression = text.partition("=")
    if not topic:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC=TAGS, got {text!r}")
    return topic, expression


def _sql_subscription(text: str) -> tuple[str, str]:
    topic, sep, expression = text.partition("=")
    if not sep or not topic or not expression.strip():
        raise argparse.ArgumentTypeError(f"expected TOPIC=SQL, got {text!r}")
    return topic, expression


def _endpoint(text: str) -> str:
    """HOST:PORT with a port in 1..65535, several comma-separated, or a gRPC target; checked
    before any connection."""
    try:
        return check_endpoint(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _minutes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of minutes") from None
    if not 0 <= value <= 7 * 24 * 60:
        raise argparse.ArgumentTypeError(f"{value} minutes is outside 0..10080 (a week)")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


# -- parser -------------------------------------------------------------------------------------

Handler = Callable[[argparse.Namespace], int]


def _client(parser: argparse.ArgumentParser, handler: Handler) -> argparse.ArgumentParser:
    """Options every client command has."""
    parser.add_argument(
        "--endpoint",
        type=_endpoint,  # also applied to the default, so a bad $POPMQ_ENDPOINT is caught
        default=os.environ.get("POPMQ_ENDPOINT", DEFAULT_ENDPOINT),
        metavar="HOST:PORT[,HOST:PORT...]",
        help=(
            "popmq server (proxy) address; several comma-separated are tried in turn when one "
            f"is unreachable (default $POPMQ_ENDPOINT or {DEFAULT_ENDPOINT})"
        ),
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    tls = parser.add_argument_group("TLS (any of these turns it on)")
    tls.add_argument(
        "--tls",
        action="store_true",
        help="connect with TLS, verifying the server with the system's roots ($POPMQ_TLS=1)",
    )
    tls.add_argument(
        "--tls-ca",
        metavar="FILE",
        default=os.environ.get("POPMQ_TLS_CA") or None,
        help="PEM CA certificates that verify the server ($POPMQ_TLS_CA)",
    )
    tls.add_argument(
        "--tls-cert",
        metavar="FILE",
        default=os.environ.get("POPMQ_TLS_CERT") or None,
        help="PEM client certificate, for a server that requires one ($POPMQ_TLS_CERT)",
    )
    tls.add_argument(
        "--tls-key",
        metavar="FILE",
        default=os.environ.get("POPMQ_TLS_KEY") or None,
        help="PEM private key of --tls-cert ($POPMQ_TLS_KEY)",
    )
    tls.add_argument(
        "--tls-server-name",
        metavar="NAME",
        default=os.environ.get("POPMQ_TLS_SERVER_NAME") or None,
        help="name the server's certificate must carry, if not the endpoint's host "
        "($POPMQ_TLS_SERVER_NAME)",
    )
    _credential_options(parser)
    parser.set_defaults(handler=handler)
    return parser


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _env_flag(name: str) -> bool:
    """A boolean environment variable; anything but the usual spellings is a usage error."""
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgumentError(f"${name}={value!r} is not a boolean: use 1 or 0")


def tls_option(args: argparse.Namespace) -> TLS:
    """The SDK's ``tls`` from the TLS flags: False (none given), True (--tls alone: the
    system's roots) or a TLSConfig; the files are read and checked here.

    Raises:
        InvalidArgumentError: --tls-cert without --tls-key (or the reverse), a file that
            cannot be read or used, or a $POPMQ_TLS that is not a boolean.
    """
    files = (args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name)
    if all(value is None for value in files):
        return bool(args.tls) or _env_flag("POPMQ_TLS")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise InvalidArgumentError("--tls-cert and --tls-key go together: give both, or neither")
    config = TLSConfig(
        ca_file=args.tls_ca,
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        server_name=args.tls_server_name,
    )
    channel_security(config)  # a bad file is a usage error now, not a failed request later
    return config


def _credential_options(parser: argparse.ArgumentParser) -> None:
    """--access-key and the ways to give its secret (resolved by `resolve_credentials`)."""
    parser.add_argument(
        "--access-key",
        metavar="KEY",
        help="sign calls as this access key (default $POPMQ_ACCESS_KEY); its secret key "
        "comes from $POPMQ_SECRET_KEY or --secret-key-file",
    )
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument(
        "--secret-key-file",
        metavar="FILE",
        help="read the secret key from FILE (only its owner may read it: chmod 600)",
    )
    secret.add_argument(
        "--secret-key",
        metavar="SECRET",
        help="the secret key itself (visible to other users of this machine: prefer "
        "$POPMQ_SECRET_KEY or --secret-key-file)",
    )


class CredentialsError(ValueError):
    """Credentials given in a way that cannot work (a usage error, exit 2)."""


def resolve_credentials(args: argparse.Namespace, environ: Mapping[str, str]) -> Credentials | None:
    """The credentials of a client command: flags first, then POPMQ_ACCESS_KEY and
    POPMQ_SECRET_KEY; None when neither an access key nor a secret is given.

    Raises:
        CredentialsError: An access key without a secret or the reverse, an unusable access
            key, or a secret file that is missing, empty or readable by group or others.
    """
    access_key = args.access_key or environ.get("POPMQ_ACCESS_KEY", "")
    if args.secret_key is not None:
        secret, source = args.secret_key, "--secret-key"
    elif args.secret_key_file is not None:
        secret, source = _read_secret_file(args.secret_key_file), "--secret-key-file"
    else:
        secret, source = environ.get("POPMQ_SECRET_KEY", ""), "POPMQ_SECRET_KEY"
    if not access_key and not secret:
        return None
    if not access_key:
        raise CredentialsError(
            f"a secret key is given ({source}) but no access key: add --access-key KEY or "
            "set POPMQ_ACCESS_KEY"
        )
    if not secret:
        raise CredentialsError(
            f"access key {access_key!r} needs its secret key: set POPMQ_SECRET_KEY or give "
            "--secret-key-file FILE"
        )
    try:
        return Credentials(access_key, secret)
    except InvalidArgumentError as exc:
        raise CredentialsError(exc.message) from None


def _read_secret_file(path: str) -> str:
    """A secret key file's text without its trailing line break, if only its owner may read
    it (as the server requires of security.root_secret_key_file)."""
    try:
        with open(path, "rb") as file:
            mode = stat.S_IMODE(os.fstat(file.fileno()).st_mode)
            raw = file.read()
    except OSError as exc:
        raise CredentialsError(f"--secret-key-file {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise CredentialsError(
            f"--secret-key-file {path} may be read or written by group or others (mode "
            f"{mode:04o}); make it its owner's alone: chmod 600 {path}"
        )
    secret = raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
    if not secret:
        raise CredentialsError(f"--secret-key-file {path} is empty")
    return secret


def _group_settings(parser: argparse.ArgumentParser, *, update: bool) -> None:
    parser.add_argument(
        "--max-delivery-attempts",
        type=_positive,
        help="deliveries before dead-lettering" + ("" if update else " (default 17)"),
    )
    backoff = parser.add_mutually_exclusive_group()
    backoff.add_argument(
        "--backoff",
        type=_durations,
        metavar="DELAYS",
        help="nack delays by attempt, e.g. 1s,5s,30s,2m (the last repeats)",
    )
    backoff.add_argument(
        "--exponential-backoff",
        type=_exponential,
        metavar="INITIAL,MAX,MULT",
        help="exponential nack delays, e.g. 5s,2h,2",
    )
    if update:
        fifo = parser.add_mutually_exclusive_group()
        fifo.add_argument("--fifo", dest="fifo", action="store_const", const=True, default=None)
        fifo.add_argument("--no-fifo", dest="fifo", action="store_const", const=False)
    else:
        parser.add_argument("--fifo", action="store_true", help="a FIFO group")
    parser.add_argument(
        "--subscribe",
        type=_subscription,
        action="append",
        default=[],
        metavar="TOPIC[=TAGS]",
        help='subscribe to a topic, optionally with a tag filter ("TagA || TagB"); repeatable',
    )
    parser.add_argument(
        "--subscribe-sql",
        type=_sql_subscription,
        action="append",
        default=[],
        metavar="TOPIC=SQL",
        help="subscribe to a topic with a SQL92 filter; repeatable",
    )
    if update:
        parser.add_argument(
            "--unsubscribe", action="append", default=[], metavar="TOPIC", help="repeatable"
        )
    parser.add_argument(
        "--consume-from",
        type=_consume_from,
        metavar="first|last|TIME",
        help="where the group starts in subscribed queues it never read (default first)",
    )


def _actions(text: str) -> list[str]:
    """A comma-separated list of actions: "pub,sub" (any case)."""
    actions = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [a for a in actions if a not in ACTIONS]
    if not actions or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of actions: use some of {', '.join(ACTIONS)} (e.g. pub,sub)"
        )
    return actions


def _user_secret(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """Where a user's new secret comes from: never the command line (shell history, ps)."""
    secret = parser.add_mutually_exclusive_group(required=required)
    secret.add_argument(
        "--user-secret-file", metavar="FILE", help="read the secret key from FILE (one line)"
    )
    secret.add_argument(
        "--user-secret-stdin", action="store_true", help="read the secret key from stdin"
    )
    secret.add_argument(
        "--generate-secret",
        action="store_true",
        help="generate a random secret key and print it (once)",
    )


def _policy_arguments(parser: argparse.ArgumentParser, *, revoke: bool) -> None:
    parser.add_argument("user", metavar="ACCESS_KEY", help="the user's access key")
    parser.add_argument(
        "resource",
        help="topic:NAME, topic:PREFIX*, topic:* (the same with group: or any:), cluster, or *",
    )
    parser.add_argument(
        "--actions",
        type=_actions,
        required=not revoke,
        default=[],
        metavar="ACTIONS",
        help=f"comma-separated, of {','.join(ACTIONS)}"
        + (" (default: the whole policy)" if revoke else ""),
    )
    parser.add_argument(
        "--deny",
        action="store_true",
        help="a DENY policy" + ("" if revoke else " (default ALLOW)"),
    )
    parser.add_argument(
        "--source",
        dest="source_cidrs",
        action="append",
        default=[],
        metavar="CIDR",
        help="only requests from this network (IPv4 or IPv6 CIDR or address); repeatable",
    )


def _security_commands(commands_: Any) -> None:
    """`popmq user ...` and `popmq acl ...` (SUPER users only; docs/security.md)."""
    user = commands_.add_parser("user", help="manage users (SUPER users only)")
    users = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    create = _client(users.add_parser("create", help="create a user"), commands.user_create)
    create.add_argument("user", metavar="ACCESS_KEY")
    create.add_argument("--super", action="store_true", help="a SUPER user (default NORMAL)")
    create.add_argument("--disabled", action="store_true", help="create it disabled")
    _user_secret(create, required=True)
    update = _client(
        users.add_parser("update", help="change a user's secret, type or state"),
        commands.user_update,
    )
    update.add_argument("user", metavar="ACCESS_KEY")
    kind = update.add_mutually_exclusive_group()
    kind.add_argument("--super", dest="user_type", action="store_const", const="super")
    kind.add_argument("--normal", dest="user_type", action="store_const", const="normal")
    state = update.add_mutually_exclusive_group()
    state.add_argument("--enable", dest="enabled", action="store_const", const=True)
    state.add_argument("--disable", dest="enabled", action="store_const", const=False)
    _user_secret(update, required=False)
    delete = _client(
        users.add_parser("delete", help="delete a user and its policies"), commands.user_delete
    )
    delete.add_argument("user", metavar="ACCESS_KEY")
    describe = _client(
        users.add_parser("describe", help="a user and its policies"), commands.user_describe
    )
    describe.add_argument("user", metavar="ACCESS_KEY")
    _client(users.add_parser("list", help="list users"), commands.user_list)

    acl = commands_.add_parser("acl", help="manage users' access policies (SUPER users only)")
    acls = acl.add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    grant = _client(acls.add_parser("grant", help="add a policy to a user"), commands.acl_grant)
    _policy_arguments(grant, revoke=False)
    revoke = _client(
        acls.add_parser("revoke", help="remove actions or a whole policy of a user"),
        commands.acl_revoke,
    )
    _policy_arguments(revoke, revoke=True)
    listing = _client(acls.add_parser("list", help="list policies"), commands.acl_list)
    listing.add_argument(
        "user", metavar="ACCESS_KEY", nargs="?", default="", help="only this user's"
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser; each leaf command sets ``handler``."""
    parser = argparse.ArgumentParser(
        prog="popmq",
        description="popmq messaging system",
        epilog=(
            "Client commands (all but serve, broker, proxy and cluster local) take --endpoint "
            "HOST:PORT[,HOST:PORT...], default $POPMQ_ENDPOINT or "
            f"{DEFAULT_ENDPOINT}. With several proxies listed, a command moves on to the next "
            "when one cannot be reached. Against a server with authentication on, they sign "
            "calls with --access-key (or $POPMQ_ACCESS_KEY) and its secret key from "
            "$POPMQ_SECRET_KEY or --secret-key-file. These options, --json and the TLS "
            "options may come before the command as well: popmq --endpoint HOST:PORT topic "
            "list."
        ),
    )
    parser.add_argument("--version", action="version", version=f"popmq {_version()}")
    commands_ = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands_.add_parser(
        "serve",
        help="run the server until SIGTERM or SIGINT",
        description="Settings come from flags, then POPMQ_<SECTION>_<KEY> variables, then "
        "the --config file, then defaults. See docs/operations.md.",
    )
    serve.add_argument("--config", metavar="FILE", help="TOML config file ($POPMQ_CONFIG)")
    serve.add_argument(
        "--print-config", action="store_true", help="print the effective config and exit"
    )
    serve.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:8081)")
    serve.add_argument("--data-dir", help="directory of the store (default ./data)")
    serve.add_argument("--flush", choices=("sync", "async"), help="fsync before acking a send")
    serve.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics (default off)"
    )
    serve.add_argument("--log-format", choices=("text", "json"), help="log line format")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="set any setting, e.g. pop.max_batch=64; repeatable",
    )
    serve.set_defaults(handler=commands.serve)

    broker = commands_.add_parser(
        "broker",
        help="run one broker core for cluster mode (BrokerService only) until SIGTERM",
        description="One broker core (its own store) serving the internal BrokerService "
        "and grpc health, nothing public; with --etcd it registers in the cluster and "
        "refuses writes while its registration is lost. Settings as for `popmq serve` "
        "(flags, POPMQ_<SECTION>_<KEY>, --config, defaults), plus a [cluster] section. "
        "See docs/cluster.md.",
    )
    broker.add_argument(
        "--name",
        required=True,
        help="the broker's name ([broker] broker_name); with --shard, this replica's name "
        "([replication] replica)",
    )
    broker.add_argument(
        "--shard",
        help="run as one replica of this shard ([broker] broker_name): replicas with the "
        "same --shard hold the same queues, one leads (docs/replication.md)",
    )
    broker.add_argument("--listen", required=True, help="HOST:PORT of BrokerService")
    broker.add_argument("--data-dir", required=True, help="directory of the broker's store")
    broker.add_argument(
        "--etcd", metavar="HOST:PORT[,HOST:PORT...]", help="etcd endpoints ([cluster] etcd)"
    )
    broker.add_argument("--config", metavar="FILE", help="TOML config file ($POPMQ_CONFIG)")
    broker.add_argument(
        "--print-config", action="store_true", help="print the effective config and exit"
    )
    broker.add_argument("--flush", choices=("sync", "async"), help="fsync before acking a send")
    broker.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics (default off)"
    )
    broker.add_argument("--log-format", choices=("text", "json"), help="log line format")
    broker.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    broker.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="set any setting, e.g. cluster.session_ttl_s=10; repeatable",
    )
    broker.set_defaults(handler=commands.broker)

    proxy = commands_.add_parser(
        "proxy",
        help="run a stateless cluster proxy until SIGTERM or SIGINT",
        description="A stateless proxy of a cluster: serves popmq.v1, apache.rocketmq.v2, "
        "health and reflection as `popmq serve` does, routing to the brokers etcd lists. "
        "Settings as for `popmq serve` (flags, POPMQ_<SECTION>_<KEY>, --config, defaults); "
        "[cluster] and [fault_tolerance] sections. See docs/cluster.md.",
    )
    proxy.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:8081)")
    proxy.add_argument(
        "--etcd", metavar="HOST:PORT[,HOST:PORT...]", help="etcd endpoints ([cluster] etcd)"
    )
    proxy.add_argument("--name", help="member name in etcd (default: the advertised address)")
    proxy.add_argument(
        "--advertise", metavar="HOST:PORT", help="address clients reach it at (default: listen)"
    )
    proxy.add_argument("--config", metavar="FILE", help="TOML config file ($POPMQ_CONFIG)")
    proxy.add_argument(
        "--print-config", action="store_true", help="print the effective config and exit"
    )
    proxy.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics (default off)"
    )
    proxy.add_argument("--log-format", choices=("text", "json"), help="log line format")
    proxy.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    proxy.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="set any setting, e.g. fault_tolerance.max_attempts=2; repeatable",
    )
    proxy.set_defaults(handler=commands.proxy)

    topic = commands_.add_parser("topic", help="manage topics")
    topics = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    create = _client(topics.add_parser("create", help="create a topic"), commands.topic_create)
    create.add_argument("name")
    create.add_argument("--queues", type=_positive, help="number of queues (server default 8)")
    create.add_argument("--type", choices=MESSAGE_TYPES, help="message type (default normal)")
    update = _client(topics.add_parser("update", help="add queues"), commands.topic_update)
    update.add_argument("name")
    update.add_argument("--queues", type=_positive, required=True, help="new queue count")
    update.add_argument(
        "--broker", help="cluster mode: give this broker --queues queues of the topic"
    )
    delete = _client(topics.add_parser("delete", help="delete a topic"), commands.topic_delete)
    delete.add_argument("name")
    delete.add_argument("--force", action="store_true", help="even with messages in flight")
    describe = _client(
        topics.add_parser("describe", help="queues, offsets, counts"), commands.topic_describe
    )
    describe.add_argument("name")
    _client(topics.add_parser("list", help="list topics"), commands.topic_list)
    purge = _client(topics.add_parser("purge", help="delete stored messages"), commands.topic_purge)
    purge.add_argument("name")
    purge.add_argument("--queue", type=int, help="only this queue (default all)")

    group = commands_.add_parser("group", help="manage consumer groups")
    groups = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    create = _client(
        groups.add_parser("create", help="create a consumer group"), commands.group_create
    )
    create.add_argument("name")
    _group_settings(create, update=False)
    update = _client(groups.add_parser("update", help="change settings"), commands.group_update)
    update.add_argument("name")
    _group_settings(update, update=True)
    delete = _client(groups.add_parser("delete", help="delete a group"), commands.group_delete)
    delete.add_argument("name")
    delete.add_argument("--force", action="store_true", help="even with messages in flight")
    describe = _client(groups.add_parser("describe", help="settings"), commands.group_describe)
    describe.add_argument("name")
    _client(groups.add_parser("list", help="list groups"), commands.group_list)

    lag = _client(commands_.add_parser("lag", help="how far a group is behind"), commands.lag)
    lag.add_argument("group")
    lag.add_argument("--topic", default="", help="only this topic")

    offsets = commands_.add_parser("offsets", help="consumer offsets")
    offset_commands = offsets.add_subparsers(dest="offsets_command", required=True)
    reset = _client(
        offset_commands.add_parser("reset", help="move a group's offsets in a topic"),
        commands.offsets_reset,
    )
    reset.add_argument("group")
    reset.add_argument("topic")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to",
        type=_reset_target,
        metavar="earliest|latest|TIME",
        help="earliest, latest, or an ISO-8601 time / epoch seconds",
    )
    target.add_argument(
        "--offset",
        type=_queue_offset,
        action="append",
        metavar="QUEUE=OFFSET",
        help="explicit offset of one queue; repeatable",
    )
    reset.add_argument("--force", action="store_true", help="even with messages in flight")

    message = commands_.add_parser("message", help="read stored messages")
    message_commands = message.add_subparsers(dest="message_command", required=True)
    get = _client(message_commands.add_parser("get", help="by message id"), commands.message_get)
    get.add_argument("topic")
    get.add_argument("message_id")
    find = _client(
        message_commands.add_parser("find", help="by business key"), commands.message_find
    )
    find.add_argument("topic")
    find.add_argument("key")
    peek = _client(
        message_commands.add_parser("peek", help="read without consuming"), commands.message_peek
    )
    peek.add_argument("topic")
    peek.add_argument("--queue", type=int, help="only this queue")
    peek.add_argument("--offset", type=int, help="first offset (needs --queue)")
    peek.add_argument("--group", default="", help="start where this group is")
    peek.add_argument("--max", type=_positive, default=16, help="at most N (default 16)")
    inspection.add_parsers(groups, message_commands, _client)

    dlq.add_parsers(commands_, _client, _positive)

    transaction = commands_.add_parser("transaction", help="transactional messages")
    transactions = transaction.add_subparsers(dest="transaction_command", required=True)
    listing = _client(
        transactions.add_parser("list", help="open (or discarded) transactions"),
        commands.transaction_list,
    )
    listing.add_argument(
        "--discarded", action="store_true", help="those discarded after the last check"
    )
    listing.add_argument("--topic", help="only this topic's")
    listing.add_argument(
        "--limit", type=_positive, default=100, help="at most N, oldest first (default 100)"
    )
    for name, handler, text in (
        ("commit", commands.transaction_commit, "commit an open transaction: deliver it"),
        ("rollback", commands.transaction_rollback, "roll back an open transaction"),
        ("resume", commands.transaction_resume, "reopen a discarded transaction"),
        ("show", commands.transaction_show, "an open or discarded one's half message"),
    ):
        resolve = _client(transactions.add_parser(name, help=text), handler)
        resolve.add_argument("transaction_id", metavar="TXID")
        resolve.add_argument(
            "--topic", help="its topic (default: looked up in the listing, which needs LIST)"
        )

    auth = commands_.add_parser("auth", help="credentials for other tools")
    auth_commands = auth.add_subparsers(dest="auth_command", required=True, metavar="ACTION")
    headers = auth_commands.add_parser(
        "headers",
        help="print grpcurl -H arguments that sign calls as --access-key",
        description="Print the two headers that sign a call (x-mq-date-time and "
        "authorization: MQv2-HMAC-SHA1 ...) as grpcurl -H arguments, shell-quoted: "
        'eval "grpcurl $(popmq auth headers) -plaintext HOST:PORT popmq.v1.AdminService/'
        'ListTopics". The signature covers only the date-time: a server without '
        "security.max_clock_skew_s accepts the printed headers for ever, so they are as "
        "sensitive as the secret key. They are signed for the middle of the next --minutes, "
        "so a server whose max_clock_skew_s is at least MINUTES x 30 s accepts them for "
        "those minutes.",
    )
    headers.add_argument(
        "--minutes",
        type=_minutes,
        default=10,
        help="how long the headers are meant for (default 10)",
    )
    headers.add_argument("--json", action="store_true", help="print the headers as JSON")
    _credential_options(headers)
    headers.set_defaults(handler=commands.auth_headers)

    server = commands_.add_parser("server", help="the server")
    server_commands = server.add_subparsers(dest="server_command", required=True)
    _client(
        server_commands.add_parser("info", help="version, uptime, store, config"),
        commands.server_info,
    )

    cluster = commands_.add_parser("cluster", help="the cluster")
    cluster_commands = cluster.add_subparsers(dest="cluster_command", required=True)
    _client(
        cluster_commands.add_parser(
            "status",
            help="brokers (lease, address, disk, queues), proxies and etcd health",
            description="The brokers, proxies and etcd of the cluster as the proxy at "
            "--endpoint sees them now (`popmq serve`: its one broker). It answers while etcd "
            "or brokers are down, from the proxy's cached view, marking what did not answer.",
        ),
        commands.cluster_status,
    )
    local_cluster.add_parser(cluster_commands)

    _security_commands(commands_)

    send = _client(
        commands_.add_parser(
            "send",
            help="send messages",
            description="Send one message, or --count N of them. BODY is the text itself, - "
            "to read the body from stdin (bytes, as they are) or @FILE to read it from a file "
            "(a body that starts with @ can only come from stdin or a file). With --count, "
            "{n} in the body, --key, --property values, --message-group and --dedup-id becomes "
            "the message's index 0, 1, 2, ... (e.g. --dedup-id 'order-{n}'). Ctrl-C during "
            "--count says how many messages were stored and exits 130.",
        ),
        commands.send,
    )
    send.add_argument("topic")
    send.add_argument("text", metavar="BODY", help="message body, - (stdin) or @FILE")
    send.add_argument("--tag", default="")
    send.add_argument("--key", dest="keys", action="append", default=[], help="repeatable")
    send.add_argument(
        "--property",
        dest="properties",
        action="append",
        type=_property,
        default=[],
        metavar="KEY=VALUE",
        help="user property; repeatable",
    )
    send.add_argument(
        "--message-group",
        default="",
        metavar="GROUP",
        help="FIFO message group (fifo and mixed topics need one)",
    )
    when = send.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        type=_duration,
        metavar="DURATION",
        help="deliver this long after the server stores it, e.g. 30s, 5m (delay topics)",
    )
    when.add_argument(
        "--deliver-at",
        type=_time,
        metavar="TIME",
        help="deliver at this ISO-8601 time or epoch seconds (delay topics)",
    )
    send.add_argument(
        "--dedup-id",
        default="",
        metavar="ID",
        help="a repeat of this id within the server's dedup window is not stored again",
    )
    send.add_argument("--count", type=_positive, default=1, help="send N messages")
    send.add_argument("--batch", type=_positive, default=64, help="messages per request")

    receive = _client(
        commands_.add_parser("receive", help="receive messages for a consumer group"),
        commands.receive,
    )
    receive.add_argument("group")
    receive.add_argument("topic")
    receive.add_argument("--max", type=_positive, default=32, help="per receive (default 32)")
    receive.add_argument(
        "--wait", type=float, default=20.0, help="seconds to wait for a message (default 20)"
    )
    receive.add_argument(
        "--invisible",
        type=float,
        default=30.0,
        help="seconds the messages stay invisible to other consumers (default 30)",
    )
    receive.add_argument("--filter", default="*", help='tag expression (default "*")')
    receive.add_argument("--ack", action="store_true", help="acknowledge what was received")
    receive.add_argument(
        "--count", type=_positive, help="keep receiving until N messages (or a --wait passes)"
    )
    return parser


def _version() -> str:
    try:
        return metadata.version("popmq")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


def _client_options() -> dict[str, bool]:
    """Each option every client command has -> whether it takes a value."""
    probe = _client(argparse.ArgumentParser(add_help=False), commands.topic_list)
    return {
        option: action.nargs != 0 for action in probe._actions for option in action.option_strings
    }


def hoist_client_options(argv: Sequence[str]) -> list[str]:
    """Move the client options given before the command (``popmq --endpoint X topic list``)
    to the end, where the command's parser reads them; one given after the command as well
    wins. Stops at the first word that is not such an option."""
    takes_value = _client_options()
    leading: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(argv):
        name = argv[i].partition("=")[0]
        if name not in takes_value:
            break
        step = 2 if takes_value[name] and "=" not in argv[i] else 1
        leading.append((name, list(argv[i : i + step])))
        i += step
    rest = list(argv[i:])
    end = rest.index("--") if "--" in rest else len(rest)  # after "--" all is positional
    given_after = {word.partition("=")[0] for word in rest[:end]}
    moved = [word for name, words in leading if name not in given_after for word in words]
    return rest[:end] + moved + rest[end:]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``popmq`` command and return its exit code."""
    parser = build_parser()
    args = parser.parse_args(hoist_client_options(sys.argv[1:] if argv is None else argv))
    if hasattr(args, "access_key"):
        try:
            args.credentials = resolve_credentials(args, os.environ)
        except CredentialsError as exc:
            parser.error(str(exc))
    handler: Handler = args.handler
    if hasattr(args, "tls_ca"):  # a client command
        try:
            args.tls = tls_option(args)
        except InvalidArgumentError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return EXIT_USAGE
    try:
        code = handler(args)
        sys.stdout.flush()  # a closed pipe surfaces here, not as a traceback at exit
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    except PopMQError as exc:
        if isinstance(exc.__context__, BrokenPipeError):
            _drop_stdout()  # failed while giving messages back after stdout went away
        print(f"error: {exc.message or exc.code}", file=sys.stderr)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return code


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail again.

    The pattern of the Python docs (signal module, "Note on SIGPIPE"): what is still
    buffered can never be written, and a second BrokenPipeError at exit would print a
    traceback after all.
    """
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):
        return  # not a real file (replaced by a test or an embedding program)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
