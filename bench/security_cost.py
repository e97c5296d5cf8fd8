"""What the security features cost per call: server CPU with TLS, with signed calls,
with access control, beside a plaintext server with none.

``python -m bench.security_cost [--root DIR] [--runs 5] [--calls 8000] [--quick]``

Four configurations of ``popmq serve`` (flush async, log level warning, a ``[security]``
config file), each measured the same way, side by side in one run:

1. ``plaintext``: no ``[security]`` settings (the default);
2. ``authn, root``: ``authentication = true``; every call signed as the root user, a SUPER
   user (authenticated, never checked against policies);
3. ``authn, NORMAL``: the same server; every call signed as a NORMAL user with 20 policies
   (literal, prefixed and ANY patterns, a DENY, one policy with source CIDRs that the
   Pop's topic check must match), so access control evaluates them on every call;
4. ``TLS``: ``tls_cert_file`` / ``tls_key_file`` from a CA made with ``openssl`` at run
   time (EC P-256, as tests/support/certs.py makes them); authentication off.

As bench/rpc_overhead.py does: this process keeps ``--concurrency`` callers busy over one
channel; the server's CPU is utime + stime of its process (all threads) from
``/proc/PID/stat`` across ``--calls`` calls, after a warm-up, for AdminService/ListTopics,
MessagingService/SendMessages (one 16-byte message a call) and MessagingService/Pop with a
zero wait on an empty topic. A signed call gets headers of its own
(``popmq.security.signing.headers``, as the SDK signs each call as it starts): that
cost is this process's, in the client CPU column, not in the server's.

Each run starts a fresh server per configuration on a temp data dir, in an order rotated
by one each run, so a busy spell of the machine does not always hit the same one. The
tables give the median of the runs, and each ratio is the median of the per-run ratios to
``plaintext`` measured in the same run (a paired ratio: steadier than a ratio of medians).
Server CPU per call varies by 10% or more between runs on a busy machine.

Last, the gate's own steps are timed alone in this process (`gate_costs_us`): signing,
authenticating, mapping a request to its checks and evaluating the NORMAL user's policies,
so the end-to-end difference can be told apart from the Python the gate runs.

A full run's output, with its command: bench/results/security_cost.txt (force-added: the
folder is git-ignored for make bench's raw samples).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import timeit
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
_ROOT_ACCESS_KEY = "root"
_ROOT_SECRET_KEY = "bench-root-secret-0123456789"
_APP_ACCESS_KEY = "bench-app"
_APP_SECRET_KEY = "bench-app-secret-0123456789"
_EMPTY_TOPIC = "empty"
_SEND_TOPIC = "bench"
_GROUP = "g"
_BODY = b"0123456789abcdef"
METHODS = ("ListTopics", "SendMessages", "Pop")
"""The calls measured, in the order each server is measured with them."""


@dataclass(frozen=True, kw_only=True)
class Configuration:
    """One server setup and the user its calls are signed as."""

    name: str
    authentication: bool = False
    tls: bool = False
    signer: tuple[str, str] | None = None
    """(access key, secret key) every call is signed with; None: unsigned."""


CONFIGURATIONS = (
    Configuration(name="plaintext"),
    Configuration(
        name="authn, root (SUPER)",
        authentication=True,
        signer=(_ROOT_ACCESS_KEY, _ROOT_SECRET_KEY),
    ),
    Configuration(
        name="authn, NORMAL + ACL",
        authentication=True,
        signer=(_APP_ACCESS_KEY, _APP_SECRET_KEY),
    ),
    Configuration(name="TLS", tls=True),
)


def normal_user_policies() -> list[Any]:
    """The NORMAL user's 20 policies (popmq.Policy): what a service account might hold.

    Each measured call passes through exactly one deciding policy (ListTopics: LIST on
    `topic:*`; SendMessages: PUB on the literal `topic:bench`; Pop: SUB on `topic:empty`
    from 127.0.0.0/8 or ::1, so the caller's address is parsed, and SUB on `group:g`),
    and every check makes one pass over all 20.
    """
    from popmq import Policy

    loopback = ("127.0.0.0/8", "::1/128")
    return [
        Policy.of("topic:*", ["list", "get"]),  # ANY: what ListTopics needs
        Policy.of(f"topic:{_SEND_TOPIC}", ["pub"]),
        Policy.of(f"topic:{_EMPTY_TOPIC}", ["sub"], source_cidrs=loopback),
        Policy.of(f"group:{_GROUP}", ["sub", "get"]),
        Policy.of("topic:orders-*", ["pub", "sub"]),
        Policy.of("topic:audit-*", ["sub"], deny=True),
        Policy.of("topic:audit-public", ["sub"]),
        Policy.of("group:billing-*", ["sub"]),
        Policy.of("group:*", ["get"]),
        Policy.of("any:metrics-*", ["get"]),
        *(Policy.of(f"topic:service-{i}", ["pub", "sub"]) for i in range(6)),
        *(Policy.of(f"group:worker-{i}", ["sub"]) for i in range(4)),
    ]


# -- certificates --------------------------------------------------------------------------


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise SystemExit("the openssl command is not installed: the TLS configuration needs it")
    result = subprocess.run(
        [openssl, *args], capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {result.stderr}")


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1 and localhost it issued,
    made as tests/support/certs.py makes them; returns (CA cert, server cert, server key)."""
    ca_cert, ca_key = folder / "ca.pem", folder / "ca.key"
    cert, key, request = folder / "server.pem", folder / "server.key", folder / "server.csr"
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    configs = {
        "ca": ("popmq-bench-ca", "basicConstraints = critical,CA:TRUE\n"
               "keyUsage = critical,keyCertSign,cRLSign\n"),
        "server": ("localhost", "basicConstraints = critical,CA:FALSE\n"
                   "keyUsage = critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage = serverAuth\n"
                   "subjectAltName = DNS:localhost,IP:127.0.0.1\n"),
    }  # fmt: skip
    paths = {}
    for name, (common_name, extensions) in configs.items():
        paths[name] = folder / f"{name}.cnf"
        head = f"""\
        [req]
        distinguished_name = dn
        prompt = no
        [dn]
        CN = {common_name}
        [ext]
        """
        paths[name].write_text(textwrap.dedent(head) + extensions)
    _openssl(
        "req", "-x509", "-new", "-config", str(paths["ca"]), "-extensions", "ext",
        *new_key, "-keyout", str(ca_key), "-days", "2", "-out", str(ca_cert),
    )  # fmt: skip
    _openssl(
        "req", "-new", "-config", str(paths["server"]), *new_key, "-keyout", str(key),
        "-out", str(request),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca_cert), "-CAkey", str(ca_key),
        "-set_serial", "2", "-days", "2", "-extfile", str(paths["server"]),
        "-extensions", "ext", "-out", str(cert),
    )  # fmt: skip
    return ca_cert, cert, key


# -- the server ----------------------------------------------------------------------------


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "src"), str(root / "gen")])
    return env


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_config(config: Configuration, folder: Path, certs: tuple[Path, Path, Path]) -> Path:
    """The server's config file: its `[security]` section (empty for plaintext)."""
    lines = ["[security]"]
    if config.authentication:
        secret = folder / "root.secret"
        secret.write_text(_ROOT_SECRET_KEY + "\n")
        secret.chmod(0o600)
        lines += [
            "authentication = true",
            f'root_access_key = "{_ROOT_ACCESS_KEY}"',
            f'root_secret_key_file = "{secret}"',
        ]
    if config.tls:
        _, cert, key = certs
        lines += [f'tls_cert_file = "{cert}"', f'tls_key_file = "{key}"']
    path = folder / "popmq.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _serve(root: Path, config_file: Path, data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    """`popmq serve` of `root` on a free port; returns the process and its endpoint."""
    server = subprocess.Popen(
        [sys.executable, "-m", "popmq.cli.main", "serve", "--config", str(config_file),
         "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), "--flush", "async",
         "--log-level", "warning"],
        cwd=root, env=_env(root), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    line = server.stdout.readline()
    if "listening on" not in line:
        server.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return server, line.split()[-1]


def _prepare(config: Configuration, endpoint: str, ca_cert: Path) -> None:
    """Topics, and for authentication the NORMAL user and its policies, made with the SDK
    as root (the same topics on every server, so ListTopics answers the same list)."""
    from popmq import Admin, Credentials, TLSConfig

    credentials = Credentials(_ROOT_ACCESS_KEY, _ROOT_SECRET_KEY) if config.authentication else None
    tls = TLSConfig(ca_file=str(ca_cert)) if config.tls else False
    with Admin(endpoint, tls=tls, credentials=credentials) as admin:
        admin.create_topic(_EMPTY_TOPIC, queues=8)
        admin.create_topic(_SEND_TOPIC, queues=8)
        if config.authentication:
            admin.create_user(_APP_ACCESS_KEY, _APP_SECRET_KEY, user_type="normal")
            for policy in normal_user_policies():
                admin.grant_policy(_APP_ACCESS_KEY, policy)


# -- the load ------------------------------------------------------------------------------


async def _load(
    config: Configuration,
    endpoint: str,
    ca_pem: bytes,
    calls: int,
    warmup: int,
    concurrency: int,
    server_pid: int,
) -> dict[str, dict[str, float]]:
    import grpc
    from google.protobuf.duration_pb2 import Duration

    from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc
    from popmq.security import signing

    if config.tls:
        credentials = grpc.ssl_channel_credentials(root_certificates=ca_pem)
        channel = grpc.aio.secure_channel(endpoint, credentials)
    else:
        channel = grpc.aio.insecure_channel(endpoint)

    signer = config.signer

    def metadata() -> tuple[tuple[str, str], ...] | None:
        if signer is None:
            return None
        return tuple(signing.headers(*signer).items())

    async with channel:
        # The generated stubs are untyped.
        admin: Any = admin_pb2_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]
        messaging: Any = messaging_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        list_topics = admin_pb2.ListTopicsRequest()
        send = messaging_pb2.SendMessagesRequest(
            messages=[messaging_pb2.OutgoingMessage(topic=_SEND_TOPIC, body=_BODY)]
        )
        pop = messaging_pb2.PopRequest(
            group=_GROUP, topic=_EMPTY_TOPIC, long_polling_timeout=Duration(seconds=0)
        )
        shapes: dict[str, Callable[[], Awaitable[Any]]] = {
            "ListTopics": lambda: admin.ListTopics(list_topics, metadata=metadata()),
            "SendMessages": lambda: messaging.SendMessages(send, metadata=metadata()),
            "Pop": lambda: messaging.Pop(pop, metadata=metadata()),
        }
        result: dict[str, dict[str, float]] = {}
        for name in METHODS:
            call = shapes[name]

            async def load(n: int, call: Callable[[], Awaitable[Any]] = call) -> None:
                remaining = [n]

                async def caller() -> None:
                    while remaining[0] > 0:
                        remaining[0] -= 1
                        await call()

                await asyncio.gather(*(caller() for _ in range(concurrency)))

            await load(warmup)
            began_cpu, began_client = _cpu_seconds(server_pid), time.process_time()
            began = time.perf_counter()
            await load(calls)
            wall = time.perf_counter() - began
            client = time.process_time() - began_client
            cpu = _cpu_seconds(server_pid) - began_cpu
            result[name] = {
                "server": cpu / calls * 1e6,
                "client": client / calls * 1e6,
                "rate": calls / wall,
            }
        return result


def measure(
    root: Path,
    config: Configuration,
    folder: Path,
    certs: tuple[Path, Path, Path],
    *,
    calls: int,
    warmup: int,
    concurrency: int,
) -> dict[str, dict[str, float]]:
    """One configuration on a fresh server: method -> {server, client (CPU µs/call), rate}."""
    work = Path(tempfile.mkdtemp(dir=folder))
    config_file = write_config(config, work, certs)
    server, endpoint = _serve(root, config_file, work / "data")
    try:
        _prepare(config, endpoint, certs[0])
        return asyncio.run(
            _load(config, endpoint, certs[0].read_bytes(), calls, warmup, concurrency, server.pid)
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


# -- the report ----------------------------------------------------------------------------

Runs = list[dict[str, dict[str, dict[str, float]]]]
"""Per run: configuration name -> method -> measure -> value."""


def _median(runs: Runs, config: str, method: str, measure: str) -> float:
    return statistics.median(run[config][method][measure] for run in runs)


def _ratio(runs: Runs, config: str, method: str) -> float:
    base = CONFIGURATIONS[0].name
    return statistics.median(
        run[config][method]["server"] / run[base][method]["server"] for run in runs
    )


def render(runs: Runs) -> str:
    """The markdown tables: server CPU per call with its paired ratio, then client side."""
    names = [c.name for c in CONFIGURATIONS]
    lines = [
        f"Server CPU µs/call, median of {len(runs)} runs (in parentheses: the ratio to "
        "plaintext, the median of the per-run ratios)",
        "",
        "| configuration | " + " | ".join(METHODS) + " |",
        "|---|" + "---:|" * len(METHODS),
    ]
    for name in names:
        cells = [
            f"{_median(runs, name, m, 'server'):.0f} (x{_ratio(runs, name, m):.2f})"
            for m in METHODS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Client-observed calls/s and client CPU µs/call (this process: gRPC, signing), medians",
        "",
        "| configuration | " + " | ".join(f"{m} calls/s | client µs" for m in METHODS) + " |",
        "|---|" + "---:|---:|" * len(METHODS),
    ]
    for name in names:
        cells = [
            f"{_median(runs, name, m, 'rate'):.0f} | {_median(runs, name, m, 'client'):.0f}"
            for m in METHODS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _best_us(function: Callable[[], object], number: int = 5000) -> float:
    return min(timeit.repeat(function, number=number, repeat=5)) / number * 1e6


def gate_costs_us() -> list[tuple[str, float]]:
    """Where a signed call's server time goes in popmq's own Python (this process's popmq,
    not `--root`'s): each step of the gate timed alone, best of 5, in µs per call.

    The client's `signing.headers`, then the server's `Authenticator.authenticate` (parse
    the header, one HMAC-SHA1, look the user up), then for the NORMAL user per method:
    `rpc_table.checks` (what the request needs) and `acl.authorize` (one pass over the 20
    policies per check; Pop's topic check parses the caller's IP for the CIDR policy).
    """
    from google.protobuf.duration_pb2 import Duration
    from google.protobuf.message import Message

    from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
    from popmq.proxy.security_admin import policy_from_proto
    from popmq.security import acl, rpc_table, signing
    from popmq.security.authn import Authenticator
    from popmq.security.config import SecurityConfig
    from popmq.security.gate import StaticDirectory
    from popmq.security.model import Check, Principal, User, UserType

    user = User(_APP_ACCESS_KEY, _APP_SECRET_KEY, UserType.NORMAL)
    policies = [policy_from_proto(p.to_proto()) for p in normal_user_policies()]
    security = SecurityConfig(
        authentication=True, root_access_key=_ROOT_ACCESS_KEY, root_secret_key=_ROOT_SECRET_KEY
    )
    authenticator = Authenticator(StaticDirectory([user]), security)
    metadata = tuple(signing.headers(_APP_ACCESS_KEY, _APP_SECRET_KEY).items())
    peer = "ipv4:127.0.0.1:45678"
    principal = Principal(_APP_ACCESS_KEY, UserType.NORMAL, peer)
    requests = {
        "ListTopics": ("/popmq.v1.AdminService/ListTopics", admin_pb2.ListTopicsRequest()),
        "SendMessages": (
            "/popmq.v1.MessagingService/SendMessages",
            messaging_pb2.SendMessagesRequest(
                messages=[messaging_pb2.OutgoingMessage(topic=_SEND_TOPIC, body=_BODY)]
            ),
        ),
        "Pop": (
            "/popmq.v1.MessagingService/Pop",
            messaging_pb2.PopRequest(
                group=_GROUP, topic=_EMPTY_TOPIC, long_polling_timeout=Duration(seconds=0)
            ),
        ),
    }

    def sign() -> object:
        return signing.headers(_APP_ACCESS_KEY, _APP_SECRET_KEY)

    def authenticate() -> object:
        return authenticator.authenticate(metadata, peer)

    costs = [
        ("client: signing.headers", _best_us(sign)),
        ("server: Authenticator.authenticate", _best_us(authenticate)),
    ]
    for name, (method, request) in requests.items():
        checks = rpc_table.checks(method, request)

        def need(method: str = method, request: Message = request) -> object:
            return rpc_table.checks(method, request)

        def authorize(checks: Sequence[Check] = checks) -> None:
            acl.authorize(principal, user, policies, checks)

        costs.append((f"server: rpc_table.checks, {name}", _best_us(need)))
        costs.append((f"server: acl.authorize, NORMAL, {name}", _best_us(authorize)))
    costs.append(
        ("  of which acl.source_ip (the caller's IP)", _best_us(lambda: acl.source_ip(peer)))
    )
    return costs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", type=Path, default=_REPO, help="popmq checkout to measure")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=8000, help="measured calls per method")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--quick", action="store_true", help="one run of 300 calls a method (seconds, for CI)"
    )
    args = parser.parse_args(argv)
    runs_wanted, calls = (1, 300) if args.quick else (args.runs, args.calls)
    if runs_wanted < 1 or calls < 1 or args.concurrency < 1:
        parser.error("--runs, --calls and --concurrency must be at least 1")
    warmup = max(100, calls // 10)
    root = args.root.resolve()
    print(
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load {' / '.join(f'{v:.1f}' for v in os.getloadavg())};"
        f" {runs_wanted} runs x {calls} calls a method, {args.concurrency} callers, "
        f"one channel; server {root}",
        flush=True,
    )
    runs: Runs = []
    with tempfile.TemporaryDirectory(prefix="popmq-security-cost-") as tmp:
        folder = Path(tmp)
        certs = make_certificates(folder)
        for run in range(runs_wanted):
            shift = run % len(CONFIGURATIONS)
            order = CONFIGURATIONS[shift:] + CONFIGURATIONS[:shift]
            results: dict[str, dict[str, dict[str, float]]] = {}
            for config in order:
                results[config.name] = measure(
                    root, config, folder, certs,
                    calls=calls, warmup=warmup, concurrency=args.concurrency,
                )  # fmt: skip
                cells = ", ".join(
                    f"{m} {v['server']:.0f} µs {v['rate']:.0f}/s"
                    for m, v in results[config.name].items()
                )
                print(f"run {run + 1}: {config.name}: {cells}", flush=True)
            runs.append(results)
    print()
    print(render(runs))
    print()
    print("The gate's steps timed alone in this process (µs per call, best of 5):")
    print()
    for step, cost in gate_costs_us():
        print(f"  {step:45} {cost:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
