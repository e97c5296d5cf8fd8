"""The bounds of a proxy's lease table (proxy/leases.py) and of what it holds through an etcd
outage (proxy/lease_outage.py), one frozen dataclass: `leases` in the server's config."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LeaseConfig"]


@dataclass(frozen=True, kw_only=True)
class LeaseConfig:
    """Bounds of the lease table."""

    max_leases: int = 100_000
    """Leases this proxy popped pages of and still caches (acknowledged ones count until
    their deadline), and those it keeps only to mark pages of them popped elsewhere for a
    pinned reader (proxy/lease_pinning.py); beyond: RESOURCE_EXHAUSTED."""
    max_pages: int = 4096
    """Pops one lease may make."""
    max_bytes: int = 512 * 1024 * 1024
    """Message bytes the leases this proxy popped may hold for replay (stored records,
    bodies included, plus a per-message allowance); a new page past it is
    RESOURCE_EXHAUSTED until leases are acked or expire, so the proxy's memory, and what it
    writes to the coordinator, stay bounded however many leases clients open."""
    expiry_margin_s: float = 30.0
    """How long the coordinator keeps a lease's entries past its deadline (then they
    expire by themselves): meanwhile a read of it says it expired rather than unknown."""
    max_outage_pages: int = 4096
    """Pages this proxy may pop while etcd is down and hold until it is back
    (proxy/lease_outage.py); beyond: the retriable UNAVAILABLE naming etcd."""
    write_back_interval_s: float = 1.0
    """How often pages popped while etcd was down are tried for writing."""

    def __post_init__(self) -> None:
        for name in ("max_leases", "max_pages", "max_bytes", "max_outage_pages"):
            if getattr(self, name) < 1:
                raise ValueError(f"leases.{name} {getattr(self, name)} must be positive")
        if self.write_back_interval_s <= 0:
            raise ValueError(
                f"leases.write_back_interval_s {self.write_back_interval_s} must be positive"
            )
        if self.expiry_margin_s < 0:
            raise ValueError(f"leases.expiry_margin_s {self.expiry_margin_s} must be 0 or more")
