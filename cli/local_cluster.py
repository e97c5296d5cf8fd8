"""`popmq cluster local`: a whole cluster on this machine, to try cluster mode with one command.

It starts etcd, then N `popmq broker` processes (or N shards of R replicas, `popmq broker
--shard`), then M `popmq proxy` processes, every one a child of this process on a free
loopback port, each with its data dir and log under one directory. It waits until every
proxy serves every broker (and every follower of a shard is in sync), prints the endpoints,
and runs until SIGINT, SIGTERM or SIGHUP: then it stops the proxies, then the brokers, then
etcd, each by its own process id, waits for them and exits 0. A child that exits on its own
ends the cluster: it says which, stops the rest and exits 1.

How the children are started:

- Brokers and proxies listen on `127.0.0.1:0` and report the port they got on their
  `listening on HOST:PORT` line (read from their log), so no port is guessed for them. etcd
  takes no port 0 (it advertises its URLs), so its two ports are asked of the kernel first,
  and a start that loses the race for one is tried again on others.
- Each child runs in a process group of its own, so a Ctrl-C at the terminal reaches this
  process alone, which stops the children in order (a proxy or broker stopped after etcd
  could not deregister). On Linux each child also gets SIGTERM should this process die
  without stopping it (`PR_SET_PDEATHSIG`, set between fork and exec): every child is
  spawned before this process starts any thread (readiness is read from log files and
  etcd's HTTP health until then; the SDK's threads come after), which that hook needs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from popmq import Admin, ClusterStatus, PopMQError

__all__ = [
    "ETCD_INSTALL_HINT",
    "LocalCluster",
    "LocalClusterConfig",
    "LocalClusterError",
    "add_parser",
    "find_etcd",
]

ETCD_INSTALL_HINT = (
    "etcd is not installed: run `make setup` (tools/install_etcd.sh installs Debian's "
    "etcd-server), or `apt-get install etcd-server`, or set POPMQ_ETCD to an etcd 3.4+ binary"
)
BROKERS = (1, 16)
"""Allowed --brokers (brokers, or shards with --replicas)."""
PROXIES = (1, 8)
REPLICAS = (1, 5)
MAX_BROKER_PROCESSES = 16
"""Brokers x replicas: more broker processes than this is not a cluster to try on one machine."""
STOP_TIMEOUT_S = 30.0
"""How long a child may take to stop after SIGTERM (a server drains for `shutdown_grace_s`,
5 s, then deregisters and closes its store) before it is killed."""
_POLL_S = 0.1
_ETCD_ATTEMPTS = 3
_LOG_TAIL_LINES = 20
_LISTENING = re.compile(r"^listening on (\S+:\d+)$", re.MULTILINE)
_PR_SET_PDEATHSIG = 1

Kind = Literal["etcd", "broker", "proxy"]
STOP_ORDER: tuple[Kind, ...] = ("proxy", "broker", "etcd")
"""Proxies first (clients move off them while the brokers still answer), etcd last (every
other process deregisters from it as it stops). The endpoints are listed in this order too."""


class LocalClusterError(RuntimeError):
    """The cluster could not start, or a child exited on its own."""


class StopRequested(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived while the cluster was starting."""


@dataclass(frozen=True, kw_only=True)
class LocalClusterConfig:
    """What `popmq cluster local` starts."""

    brokers: int
    """Brokers, b1..bN; with `replicas` > 1, shards s1..sN."""
    proxies: int
    """Proxies, p1..pM."""
    replicas: int = 1
    """Replicas per shard (docs/replication.md); 1 starts standalone brokers."""
    data_dir: Path | None = None
    """Where data dirs and logs go (kept); None: a fresh temporary directory, removed at exit."""
    settings: tuple[str, ...] = ()
    """`SECTION.KEY=VALUE` given to every broker and proxy as `--set`."""
    start_timeout_s: float = 120.0
    """How long the cluster may take to be ready (generous: a small machine starts every
    process at once)."""

    def __post_init__(self) -> None:
        for what, value, (low, high) in (
            ("--brokers", self.brokers, BROKERS),
            ("--proxies", self.proxies, PROXIES),
            ("--replicas", self.replicas, REPLICAS),
        ):
            if not low <= value <= high:
                raise ValueError(f"{what} {value} is out of range: allowed {low} to {high}")
        processes = self.brokers * self.replicas
        if processes > MAX_BROKER_PROCESSES:
            raise ValueError(
                f"--brokers {self.brokers} --replicas {self.replicas} would start {processes} "
                f"broker processes; at most {MAX_BROKER_PROCESSES} run on one machine"
            )
        if self.start_timeout_s <= 0:
            raise ValueError(f"--start-timeout {self.start_timeout_s:g} must be above 0")

    @property
    def broker_names(self) -> list[str]:
        """The names proxies route to: b1..bN, or the shards s1..sN."""
        prefix = "b" if self.replicas == 1 else "s"
        return [f"{prefix}{n}" for n in range(1, self.brokers + 1)]


def find_etcd() -> str | None:
    """The etcd binary: $POPMQ_ETCD, else `etcd` on PATH, else Debian's; None if none."""
    configured = os.environ.get("POPMQ_ETCD")
    found = (
        configured
        or shutil.which("etcd")
        or next((p for p in ("/usr/bin/etcd", "/usr/sbin/etcd") if os.access(p, os.X_OK)), None)
    )
    return found if found and os.access(found, os.X_OK) else None


@dataclass
class Child:
    """One process this command started.

    Attributes:
        kind: etcd, broker or proxy.
        name: etcd, b1.. (s1-r1.. for replicas), p1...
        log_path: Its stdout and stderr.
        process: The running process.
        log_offset: Where this start's output begins in the log (a kept data dir's logs
            are appended to).
        address: HOST:PORT it serves on, once known.
    """

    kind: Kind
    name: str
    log_path: Path
    process: subprocess.Popen[bytes]
    log_offset: int
    address: str = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")

    def log_tail(self) -> str:
        lines = self.output().splitlines()[-_LOG_TAIL_LINES:]
        return "\n".join(f"    {line}" for line in lines) or "    (nothing)"

    def exited(self) -> LocalClusterError | None:
        """An error saying it exited, if it did."""
        code = self.process.poll()
        if code is None:
            return None
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with {code}"
        return LocalClusterError(
            f"{self.kind} {self.name} (pid {self.pid}) {how}; the end of its log "
            f"({self.log_path}):\n{self.log_tail()}"
        )


@dataclass
class _Signals:
    """The stop signal received, if any (set by the handler, read by the waits)."""

    received: int | None = None

    def check(self) -> None:
        if self.received is not None:
            raise StopRequested(signal.Signals(self.received).name)


@dataclass
class LocalCluster:
    """etcd, brokers and proxies as children of this process (module docstring)."""

    config: LocalClusterConfig
    etcd_binary: str
    root: Path = field(init=False)
    children: list[Child] = field(default_factory=list)
    _temporary: bool = field(init=False, default=False)
    _signals: _Signals = field(default_factory=_Signals)

    def __post_init__(self) -> None:
        if self.config.data_dir is None:
            import tempfile  # here: every CLI command imports this module

            self.root = Path(tempfile.mkdtemp(prefix="popmq-cluster-"))
            self._temporary = True
        else:
            self.root = self.config.data_dir
            self.root.mkdir(parents=True, exist_ok=True)

    # -- starting --------------------------------------------------------------------------

    def start(self) -> None:
        """etcd, then the brokers, then the proxies; returns once every proxy serves every
        broker. Raises LocalClusterError (what failed) or StopRequested; either way the
        caller stops what started."""
        deadline = time.monotonic() + self.config.start_timeout_s
        etcd = self._start_etcd(deadline)
        brokers = [self._spawn_broker(name, etcd.address) for name in self._broker_processes()]
        for broker in brokers:
            self._wait_listening(broker, deadline)
        proxies = [
            self._spawn("proxy", f"p{n}", self._proxy_args(f"p{n}", etcd.address))
            for n in range(1, self.config.proxies + 1)
        ]
        for proxy in proxies:
            self._wait_listening(proxy, deadline)
        # From here on threads run (the SDK's): no child is spawned after this.
        self._wait_served(deadline)

    def _broker_processes(self) -> list[str]:
        if self.config.replicas == 1:
            return self.config.broker_names
        return [
            f"{shard}-r{m}"
            for shard in self.config.broker_names
            for m in range(1, self.config.replicas + 1)
        ]

    def _start_etcd(self, deadline: float) -> Child:
        """etcd on two ports the kernel chose; tried again on others if it cannot bind."""
        for attempt in range(1, _ETCD_ATTEMPTS + 1):
            client, peer = f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"
            etcd = self._spawn(
                "etcd",
                "etcd",
                [
                    self.etcd_binary,
                    "--name=popmq-local",
                    f"--data-dir={self.root / 'etcd'}",
                    f"--listen-client-urls=http://{client}",
                    f"--advertise-client-urls=http://{client}",
                    f"--listen-peer-urls=http://{peer}",
                    f"--initial-advertise-peer-urls=http://{peer}",
                    f"--initial-cluster=popmq-local=http://{peer}",
                    "--initial-cluster-state=new",
                    "--logger=zap",
                    "--log-outputs=stderr",
                ],
            )
            etcd.address = client
            try:
                self._wait_etcd_healthy(etcd, deadline)
            except LocalClusterError:
                if attempt == _ETCD_ATTEMPTS or "address already in use" not in etcd.output():
                    raise
                self.children.remove(etcd)
                continue
            return etcd
        raise AssertionError("unreachable")

    def _wait_etcd_healthy(self, etcd: Child, deadline: float) -> None:
        """Until etcd's HTTP /health says true (plain urllib: no thread, see the module
        docstring; and no HTTP proxy from the environment for a loopback address)."""
        import urllib.request  # here: every CLI command imports this module

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        url = f"http://{etcd.address}/health"
        last = "no answer yet"
        while True:
            self._signals.check()
            died = etcd.exited()
            if died is not None:
                raise died
            try:
                with opener.open(url, timeout=1.0) as response:
                    body = response.read().decode(errors="replace")
                if '"health":"true"' in body.replace(" ", ""):
                    return
                last = body.strip()
            except OSError as exc:  # URLError and HTTPError included
                last = str(exc)
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"etcd (pid {etcd.pid}) is not healthy at {etcd.address} after "
                    f"{self.config.start_timeout_s:g}s ({last}); the end of its log "
                    f"({etcd.log_path}):\n{etcd.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _spawn_broker(self, name: str, etcd: str) -> Child:
        shard, _, replica = name.partition("-")
        identity = ["--shard", shard, "--name", replica] if replica else ["--name", name]
        args = [
            *self._popmq("broker"),
            *identity,
            "--listen", "127.0.0.1:0",
            "--data-dir", str(self.root / name),
            "--etcd", etcd,
            *self._settings(),
        ]  # fmt: skip
        return self._spawn("broker", name, args)

    def _proxy_args(self, name: str, etcd: str) -> list[str]:
        return [
            *self._popmq("proxy"),
            "--name", name,
            "--listen", "127.0.0.1:0",
            "--etcd", etcd,
            *self._settings(),
        ]  # fmt: skip

    @staticmethod
    def _popmq(command: str) -> list[str]:
        """This interpreter running the CLI: the children run the same popmq."""
        return [sys.executable, "-m", "popmq.cli", command]

    def _settings(self) -> list[str]:
        return [word for setting in self.config.settings for word in ("--set", setting)]

    def _spawn(self, kind: Kind, name: str, args: Sequence[str]) -> Child:
        log_path = self.root / f"{name}.log"
        with log_path.open("ab") as log:
            log.write(f"=== popmq cluster local: {kind} {name} starts ===\n".encode())
            log.flush()
            offset = log.tell()
            process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                process_group=0,
                preexec_fn=_die_with_parent(),  # safe: no thread runs yet (module docstring)
            )
        child = Child(kind, name, log_path, process, offset)
        self.children.append(child)
        return child

    def _wait_listening(self, child: Child, deadline: float) -> None:
        while True:
            self._signals.check()
            match = _LISTENING.search(child.output())
            if match is not None:
                child.address = match.group(1)
                return
            died = child.exited()
            if died is not None:
                raise died
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"{child.kind} {child.name} (pid {child.pid}) printed no `listening on` "
                    f"line within {self.config.start_timeout_s:g}s; the end of its log "
                    f"({child.log_path}):\n{child.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _wait_served(self, deadline: float) -> None:
        """Until each proxy's cluster status shows every broker registered and answering,
        every shard's followers in sync, and every proxy registered."""
        for proxy in self._of_kind("proxy"):
            last = "no answer yet"
            with Admin(proxy.address, timeout_s=5.0) as admin:
                while True:
                    self._signals.check()
                    self.raise_if_one_exited()
                    try:
                        missing = self._not_ready(admin.cluster_status())
                    except PopMQError as exc:
                        missing = str(exc)
                    if missing is None:
                        break
                    last = missing
                    if time.monotonic() > deadline:
                        raise LocalClusterError(
                            f"proxy {proxy.name} ({proxy.address}) does not serve the "
                            f"cluster after {self.config.start_timeout_s:g}s: {last}; logs "
                            f"are in {self.root}"
                        )
                    time.sleep(0.25)

    def _not_ready(self, status: ClusterStatus) -> str | None:
        """What the status lacks, or None when the cluster is ready."""
        brokers = {b.name: b for b in status.brokers}
        for name in self.config.broker_names:
            broker = brokers.get(name)
            if broker is None or not broker.live:
                return f"broker {name} is not registered yet"
            if not broker.reachable:
                return f"broker {name} does not answer yet ({broker.error})"
            if self.config.replicas > 1:
                shard = broker.replication
                followers = [] if shard is None else [f.name for f in shard.followers if f.in_sync]
                if len(followers) < self.config.replicas - 1:
                    return f"shard {name} has {len(followers)} followers in sync, not yet all"
        proxies = {p.name for p in status.proxies}
        for proxy in self._of_kind("proxy"):
            if proxy.name not in proxies:
                return f"proxy {proxy.name} is not registered yet"
        return None

    # -- running ---------------------------------------------------------------------------

    def _of_kind(self, kind: Kind) -> list[Child]:
        return [c for c in self.children if c.kind == kind]

    def raise_if_one_exited(self) -> None:
        for child in self.children:
            died = child.exited()
            if died is not None:
                raise died

    def watch(self) -> None:
        """Until a stop signal (StopRequested) or a child's exit (LocalClusterError)."""
        while True:
            self._signals.check()
            self.raise_if_one_exited()
            time.sleep(_POLL_S)

    def endpoints(self) -> list[str]:
        """The proxies' addresses, p1 first: what clients connect to."""
        return [c.address for c in self._of_kind("proxy")]

    def describe(self) -> list[str]:
        """One line per child, proxies first, then brokers, then etcd."""
        lines = []
        for kind in STOP_ORDER:
            for child in self._of_kind(kind):
                lines.append(f"{child.kind:<7} {child.name:<6} {child.address:<21} pid {child.pid}")
        return lines

    # -- stopping --------------------------------------------------------------------------

    def stop(self, say: Callable[[str], None], *, keep_logs: bool = False) -> None:
        """Stop the proxies, then the brokers, then etcd (SIGTERM to each pid, then wait;
        SIGKILL after STOP_TIMEOUT_S for the group, or at once on another stop signal),
        then remove a temporary data dir unless `keep_logs`. Idempotent."""
        asked = self._signals.received
        for kind in STOP_ORDER:
            # Those that exited already were reported when they did.
            group = [c for c in self._of_kind(kind) if c.process.poll() is None]
            for child in group:
                child.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S  # one for the group, not each
            for child in group:
                code = self._wait_stopped(child, deadline, asked)
                if code is None:
                    child.process.kill()
                    child.process.wait()
                    say(f"{child.kind} {child.name} (pid {child.pid}) did not stop within "
                        f"{STOP_TIMEOUT_S:g}s of SIGTERM, or a second stop signal came: "
                        "killed")  # fmt: skip
                    continue
                if code not in (0, -signal.SIGTERM):  # etcd ends by re-raising it, cleanly
                    say(f"{child.kind} {child.name} (pid {child.pid}) exited with {code} on "
                        f"SIGTERM; the end of its log:\n{child.log_tail()}")  # fmt: skip
        self.children.clear()
        if self._temporary and not keep_logs:
            shutil.rmtree(self.root, ignore_errors=True)

    def _wait_stopped(self, child: Any, deadline: float, asked: int | None) -> int | None:
        """`child`'s exit code once it exits; None once `deadline` passed or a stop signal
        came after `asked` (a second Ctrl-C: kill what is left)."""
        while True:
            try:
                return int(child.process.wait(0.1))
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline or self._signals.received != asked:
                    return None

    @property
    def temporary(self) -> bool:
        return self._temporary

    @contextlib.contextmanager
    def stop_signals(self) -> Iterator[None]:
        """SIGINT, SIGTERM and SIGHUP (the terminal closed) ask the cluster to stop; the
        previous handlers are back afterwards."""

        def handler(signum: int, frame: FrameType | None) -> None:
            self._signals.received = signum

        wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {sig: signal.signal(sig, handler) for sig in wanted}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _free_port() -> int:
    """A loopback port the kernel has just handed out (etcd binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _die_with_parent() -> Callable[[], None] | None:
    """A child-side hook that has the child get SIGTERM when this process dies (Linux's
    PR_SET_PDEATHSIG); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: every CLI command imports this module

    try:
        prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # this process died before the hook ran
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


# -- the command ------------------------------------------------------------------------------


def _ranged(what: str, low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number (allowed {low} to {high})"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: allowed {low} to {high}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


def add_parser(cluster_commands: Any) -> None:
    """Add `cluster local` to the `cluster` group's subparsers."""
    local = cluster_commands.add_parser(
        "local",
        help="run etcd, brokers and proxies on this machine until Ctrl-C (to try cluster mode)",
        description="Start etcd, N brokers (or N shards of R replicas) and M proxies as "
        "children of this command, on free loopback ports, wait until every proxy serves "
        "every broker, and print the endpoints (proxies first). Ctrl-C (SIGINT) or SIGTERM "
        "stops the proxies, then the brokers, then etcd, and exits 0; a child that exits on "
        "its own stops the rest and exits 1. Needs the etcd binary (`make setup`, Debian's "
        "etcd-server, or $POPMQ_ETCD). For a real deployment run each process yourself: "
        "see docs/cluster.md.",
    )
    local.add_argument(
        "--brokers",
        type=_ranged("brokers", *BROKERS),
        metavar="N",
        default=3,
        help=f"brokers b1..bN, or shards s1..sN with --replicas ({BROKERS[0]} to "
        f"{BROKERS[1]}; default 3)",
    )
    local.add_argument(
        "--proxies",
        type=_ranged("proxies", *PROXIES),
        metavar="M",
        default=2,
        help=f"proxies p1..pM ({PROXIES[0]} to {PROXIES[1]}; default 2)",
    )
    local.add_argument(
        "--replicas",
        type=_ranged("replicas", *REPLICAS),
        metavar="R",
        default=1,
        help=f"replicas per shard ({REPLICAS[0]} to {REPLICAS[1]}; default 1: standalone "
        f"brokers; at most {MAX_BROKER_PROCESSES} broker processes in all)",
    )
    local.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="keep data dirs and logs here (a second run reuses them); default a fresh "
        "temporary directory, removed at exit",
    )
    local.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a setting of every broker and proxy, e.g. cluster.session_ttl_s=3; repeatable",
    )
    local.add_argument(
        "--start-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long the cluster may take to be ready (default 120)",
    )
    local.set_defaults(handler=cluster_local)


def _say(text: str) -> None:
    # A closed terminal or a dead `| tee` must not keep the ordered stop from running.
    with contextlib.suppress(OSError):
        print(f"popmq cluster local: {text}", file=sys.stderr, flush=True)


def cluster_local(args: argparse.Namespace) -> int:
    """Run the cluster until a stop signal (exit 0) or a child's exit (exit 1); bad
    arguments exit 2, a missing etcd 1."""
    from popmq.runtime import settings  # type: ignore[import-not-found, unused-ignore]

    try:
        settings.parse_assignments(args.set)  # a bad --set fails here, not in every child
        config = LocalClusterConfig(
            brokers=args.brokers,
            proxies=args.proxies,
            replicas=args.replicas,
            data_dir=args.data_dir,
            settings=tuple(args.set),
            start_timeout_s=args.start_timeout,
        )
    except (settings.SettingsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if config.data_dir is not None and config.data_dir.exists() and not config.data_dir.is_dir():
        print(f"error: --data-dir {config.data_dir} is not a directory", file=sys.stderr)
        return 2
    binary = find_etcd()
    if binary is None:
        print(f"error: {ETCD_INSTALL_HINT}", file=sys.stderr)
        return 1
    try:
        cluster = LocalCluster(config, binary)
    except OSError as exc:
        print(f"error: --data-dir {config.data_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    keep_logs = False
    with cluster.stop_signals():
        try:
            _say(f"starting etcd, {_counts(config)} (data and logs in {cluster.root})")
            cluster.start()
            _print_ready(cluster)
            cluster.watch()
        except StopRequested as stopped:
            _say(f"{stopped}: stopping proxies, brokers, etcd")
            cluster.stop(_say)
            _say("stopped")
            return 0
        except LocalClusterError as exc:
            # The logs say why: a temporary data dir is kept after a failure.
            keep_logs = True
            _say(f"{exc}\nstopping the rest; the logs stay in {cluster.root}")
            cluster.stop(_say, keep_logs=True)
            return 1
        finally:
            cluster.stop(_say, keep_logs=keep_logs)  # whatever happened above (idempotent)
    raise AssertionError("watch() returns only by raising")


def _counts(config: LocalClusterConfig) -> str:
    proxies = f"{config.proxies} prox{'ies' if config.proxies > 1 else 'y'}"
    if config.replicas == 1:
        return f"{config.brokers} broker{'s' if config.brokers > 1 else ''}, {proxies}"
    shards = f"{config.brokers} shard{'s' if config.brokers > 1 else ''}"
    return f"{shards} of {config.replicas} replicas, {proxies}"


def _print_ready(cluster: LocalCluster) -> None:
    kept = "removed at exit" if cluster.temporary else "kept"
    endpoints = ",".join(cluster.endpoints())
    lines = [
        f"popmq cluster local is ready: {_counts(cluster.config)}, etcd",
        *cluster.describe(),
        f"data and logs: {cluster.root} ({kept})",
        f"export POPMQ_ENDPOINT={endpoints}",
        "then e.g.: popmq topic create orders --queues 4; popmq cluster status",
        f"Ctrl-C (or kill -TERM {os.getpid()}) stops the cluster",
    ]
    print("\n".join(lines), flush=True)
