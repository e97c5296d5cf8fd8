"""Network partitions for tests: a process in its own network namespace behind a veth link.

`VethNamespace().create()` makes a network namespace `popmq-<pid>-<k>` and a veth pair
`pmq<k>h` (host side, `host_address` = 10.231.a.b+1/30) and `pmq<k>n` (inside,
`ns_address` = +2; loopback is up too). A process started with `command(argv)` (`ip netns
exec NAME argv ...`) has only that link: it reaches the host's processes that listen on
`host_address` (or 0.0.0.0), and they reach it on `ns_address`; loopback services of the
host are out of its reach. So a cluster where one process lives inside puts etcd and every
listener the inside process calls on `host_address` (a local address: the host's own
processes reach it whether or not the link is up).

`cut()` sets the host side down: nothing passes either way. Inside, the link still looks up
(no carrier, routes kept), so its packets vanish and its connections stall as after a real
partition; on the host the /30 has no route, so calls to `ns_address` fail at once.
`heal()` sets it up again; established TCP connections that did not time out go on.

`drop("in" | "out", src_port=..., dst_port=...)` is a one-way partition: the TCP packets
crossing the link into the namespace (or out of it) with those ports vanish, the other
direction still passes; `undrop()` ends every such rule. It needs `tc` with the htb and
blackhole qdiscs and the u32 classifier (iptables and nft need not exist): on the sending
side's veth end, an htb root whose one class, fed by a u32 port match, ends in a
blackhole; unmatched packets bypass htb unshaped. Over TCP a one-way loss stalls the
connection after what was in flight (no acknowledgement comes back), so what it shows is
what passes in those first packets and how each side notices: the side whose packets
still arrive sees its peer go silent, the other sees its own calls time out.
`one_way_unavailable()` says why not, for the skip.

`remove()` deletes the veth pair and the namespace (idempotent, and `create()` also removes
what a killed test run left: namespaces named after a process that no longer exists). A
namespace lives on while a process is inside it, so stop those processes first.

Only root (CAP_NET_ADMIN, and CAP_SYS_ADMIN for `ip netns`) can do any of this:
`unavailable()` says why not, for the skip.

`NamespacedReplicaCluster` is a `ReplicaCluster` (tests/support/replicas.py) with one
replica inside a namespace, started first so that it is the shard's first leader.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from tests.support.cluster import REPO_ROOT, ClusterProcess
from tests.support.etcd import EtcdServer
from tests.support.replicas import ReplicaCluster

__all__ = [
    "Direction",
    "NamespaceError",
    "NamespacedReplicaCluster",
    "VethNamespace",
    "one_way_unavailable",
    "unavailable",
]

SUBNETS = ipaddress.ip_network("10.231.0.0/16")
"""Where the /30 of each namespace's link is taken from (a private range)."""
_LINKS = SUBNETS.num_addresses // 4
_OURS = re.compile(r"^popmq-(\d+)-(\d+)\b")
_IP_TIMEOUT_S = 10.0

Direction = Literal["in", "out"]
"""Packets going into the namespace, or out of it."""


class NamespaceError(RuntimeError):
    """An `ip` command failed (its arguments and stderr are in the message)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
    )
    if check and done.returncode != 0:
        raise NamespaceError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done


def unavailable() -> str | None:
    """Why network namespaces and veth pairs cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "network namespaces are unavailable: the `ip` command (iproute2) is not installed"
    probe = f"popmq-probe-{os.getpid()}"
    link = f"pmqp{os.getpid()}"[:14]
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return (
            "network namespaces are unavailable: `ip netns add` failed "
            f"({made.stderr.strip()}); it needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
        )
    try:
        veth = _ip(
            "link", "add", link + "h", "type", "veth", "peer", "name", link + "n", check=False
        )
        if veth.returncode != 0:
            return (
                "network namespaces are unavailable: creating a veth pair failed "
                f"({veth.stderr.strip()}); it needs root (CAP_NET_ADMIN) and veth support"
            )
        _ip("link", "del", link + "h", check=False)
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _tc(*args: str, namespace: str | None = None, check: bool = True) -> None:
    """`tc args...`, inside `namespace` when given."""
    argv = ["ip", "netns", "exec", namespace, "tc", *args] if namespace else ["tc", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False)
    if check and done.returncode != 0:
        raise NamespaceError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")


def _add_drop(dev: str, rules: int, match: Sequence[str], namespace: str | None = None) -> None:
    """Send the TCP packets leaving `dev` that `match` (u32 selectors) to a blackhole; the
    first rule (`rules` == 0) installs the htb root and its blackholed class."""
    if rules == 0:
        # No `default`: what no filter classifies bypasses htb, unshaped.
        _tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", namespace=namespace)
        _tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:2", "htb",
            "rate", "1gbit", "quantum", "1514", namespace=namespace)  # fmt: skip
        _tc("qdisc", "add", "dev", dev, "parent", "1:2", "handle", "2:", "blackhole",
            namespace=namespace)  # fmt: skip
    _tc("filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
        "match", "ip", "protocol", "6", "0xff", *match, "flowid", "1:2",
        namespace=namespace)  # fmt: skip


def one_way_unavailable() -> str | None:
    """Why one-way drops (`VethNamespace.drop`) cannot be made here, or None when they can."""
    why = unavailable()
    if why is not None:
        return why
    if shutil.which("tc") is None:
        return "one-way partitions are unavailable: the `tc` command (iproute2) is not installed"
    link = f"pmqq{os.getpid()}"[:14]
    made = _ip("link", "add", link + "h", "type", "veth", "peer", "name", link + "n", check=False)
    if made.returncode != 0:
        return f"one-way partitions are unavailable: no veth pair ({made.stderr.strip()})"
    try:
        _add_drop(link + "h", 0, ("match", "ip", "dport", "9", "0xffff"))
    except NamespaceError as exc:
        return (
            "one-way partitions are unavailable: tc cannot drop by port here (it needs the "
            f"htb and blackhole qdiscs and the u32 classifier): {exc}"
        )
    finally:
        _ip("link", "del", link + "h", check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove the namespaces (and links) of test runs whose process is gone; returns them."""
    removed: list[str] = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        match = _OURS.match(line)
        if match is None or _alive(int(match.group(1))):
            continue
        name = line.split()[0]
        _ip("link", "del", f"pmq{match.group(2)}h", check=False)
        _ip("netns", "del", name, check=False)
        removed.append(name)
    return removed


class VethNamespace:
    """A network namespace linked to the host by one veth pair (module docstring)."""

    def __init__(self) -> None:
        self.name = ""
        self.host_if = ""
        self.ns_if = ""
        self.host_address = ""
        self.ns_address = ""
        self.is_cut = False
        self._created = False
        # Drop rules installed per direction (the htb root exists from the first on).
        self._drops: dict[Direction, int] = {"in": 0, "out": 0}

    def create(self) -> VethNamespace:
        """Make the namespace and its link (a free /30 of SUBNETS); returns self."""
        assert not self._created, "create() was called already"
        remove_stale()
        used = {
            ipaddress.ip_address(address.split("/")[0])
            for address in re.findall(r"inet (\S+)", _ip("-4", "addr", "show").stdout)
        }
        start = (os.getpid() * 7919) % _LINKS
        for step in range(_LINKS):
            k = (start + step) % _LINKS
            subnet = ipaddress.ip_network(f"{SUBNETS[k * 4]}/30")
            if any(address in subnet for address in used):
                continue
            host_if, ns_if = f"pmq{k}h", f"pmq{k}n"
            # The link name is the lock: a concurrent run that picked the same k fails here.
            if _ip(
                "link", "add", host_if, "type", "veth", "peer", "name", ns_if, check=False
            ).returncode:
                continue
            self.name = f"popmq-{os.getpid()}-{k}"
            self.host_if, self.ns_if = host_if, ns_if
            self.host_address, self.ns_address = str(subnet[1]), str(subnet[2])
            self._created = True
            try:
                self._configure()
            except BaseException:
                self.remove()
                raise
            return self
        raise NamespaceError(f"no free /30 left in {SUBNETS}")

    def _configure(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "set", self.ns_if, "netns", self.name)
        _ip("addr", "add", f"{self.host_address}/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        inside = ("netns", "exec", self.name, "ip")
        _ip(*inside, "addr", "add", f"{self.ns_address}/30", "dev", self.ns_if)
        _ip(*inside, "link", "set", self.ns_if, "up")
        _ip(*inside, "link", "set", "lo", "up")

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the namespace (`ip` execs it: the pid is argv's own)."""
        assert self._created, "create() the namespace first"
        return ["ip", "netns", "exec", self.name, *argv]

    def popen_python(self, args: Sequence[str]) -> subprocess.Popen[str]:
        """`python args...` started inside the namespace, from the repository root with
        this tree on PYTHONPATH (as the cluster's processes run), with text pipes for
        stdin, stdout and stderr."""
        return subprocess.Popen(
            self.command([sys.executable, *args]),
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def cut(self) -> None:
        """Partition: the host side of the link goes down."""
        _ip("link", "set", self.host_if, "down")
        self.is_cut = True

    def heal(self) -> None:
        """End the partition: the host side of the link comes up again."""
        _ip("link", "set", self.host_if, "up")
        self.is_cut = False

    def drop(
        self, direction: Direction, *, src_port: int | None = None, dst_port: int | None = None
    ) -> None:
        """One-way partition: TCP packets crossing the link in `direction` with these ports
        (at least one) are dropped from now on; the other direction still passes."""
        assert self._created, "create() the namespace first"
        if src_port is None and dst_port is None:
            raise ValueError("drop needs src_port, dst_port or both")
        match: list[str] = []
        for field_name, port in (("sport", src_port), ("dport", dst_port)):
            if port is not None:
                if not 0 < port < 65536:
                    raise ValueError(f"port {port} is not within 1..65535")
                match += ["match", "ip", field_name, str(port), "0xffff"]
        # A packet is dropped where it leaves: into the namespace from the host's end,
        # out of it from the inside end.
        if direction == "in":
            _add_drop(self.host_if, self._drops["in"], match)
        else:
            _add_drop(self.ns_if, self._drops["out"], match, namespace=self.name)
        self._drops[direction] += 1

    @property
    def dropping(self) -> bool:
        """Whether any one-way drop rule is in place."""
        return any(self._drops.values())

    def undrop(self) -> None:
        """End every one-way drop (idempotent)."""
        if self._drops["in"]:
            _tc("qdisc", "del", "dev", self.host_if, "root", check=False)
        if self._drops["out"]:
            _tc("qdisc", "del", "dev", self.ns_if, "root", namespace=self.name, check=False)
        self._drops = {"in": 0, "out": 0}

    def remove(self) -> None:
        """Delete the link and the namespace; idempotent, never raises for what is gone."""
        if not self._created:
            return
        self._created = False
        _ip("link", "del", self.host_if, check=False)
        _ip("netns", "del", self.name, check=False)

    def __enter__(self) -> VethNamespace:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.remove()


class NamespacedReplicaCluster(ReplicaCluster):
    """A ReplicaCluster whose replica `inside` (a process name, e.g. "s1-r1") runs in
    `namespace` and leads its shard first.

    etcd and the other replicas listen on the namespace's host address (what the inside
    replica can reach), the inside replica on its own address; proxies stay on loopback
    (nothing inside calls them). Replicas off loopback need `security.allow_anonymous`
    (protected mode), which they are given. Other arguments are ReplicaCluster's.
    """

    def __init__(
        self,
        root: Path,
        namespace: VethNamespace,
        *,
        inside: str,
        broker_args: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(
            root,
            broker_args=(*broker_args, "--set", "security.allow_anonymous=true"),
            **kwargs,
        )
        if inside not in self.shard_of:
            raise KeyError(f"no replica {inside!r}; have {sorted(self.shard_of)}")
        self.namespace = namespace
        self.inside = inside
        self.etcd = EtcdServer(root / "etcd", host=namespace.host_address)
        for name in self.brokers:
            self.processes[name].host = (
                namespace.ns_address if name == inside else namespace.host_address
            )

    def _command(self, process: ClusterProcess) -> list[str]:
        command = super()._command(process)
        return self.namespace.command(command) if process.name == self.inside else command

    def start(self) -> NamespacedReplicaCluster:
        """etcd, the inside replica (until it leads), the other replicas, the proxies."""
        try:
            self.etcd.start()
            self._start_all([self.inside])
            shard = self.shard_of[self.inside][0]
            leader = self.wait_leader(shard)
            assert leader == self.inside, f"{leader} leads {shard}, not {self.inside}"
            self._start_all([name for name in self.brokers if name != self.inside])
            for other in self.shards:
                self.wait_leader(other)
            self._start_all(self.proxies)
            asyncio.run(self._make_probe())
        except BaseException:
            self.stop()
            raise
        return self
