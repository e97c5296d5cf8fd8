"""Pinned lease tokens through an etcd outage: a reader that sends every LeasePop, RenewLease
and the AckLease of a token to one proxy (LeasePop and AckLease `pinned`; the Spark
connector's leaseEndpoints hash each token to one proxy) is served from that proxy's memory
while etcd is down, and its ack by token acknowledges every page the proxy popped of it.

Why an ack by token is then safe (docs/cluster-consumers.md has the whole argument): the
hazard of lease_outage.py is two proxies each popping a page N of one token, one of them
stored and acked though the committed attempt read the other. With the promise only this
proxy serves the token, and its per-lease lock orders the attempts, so every attempt that
reads page N while this proxy holds the lease reads the same page N: the one this proxy
created in etcd (before the outage) or popped into its memory (during it). The ack of the
token then acknowledges exactly those pages, which are what the committed attempt read.

What this proxy must not do is pop a page of its own in place of one it does not know:
- a page of the lease it did not pop (read back from etcd: another proxy popped it before the
  promise held, or its own write whose answer was lost): `elsewhere` marks its number, and a
  pinned reader gets the retriable UNAVAILABLE instead of a new page while etcd is down;
- a lease it holds nothing of whose page 0 may be in etcd (its own page-0 write without an
  answer): a marker lease with `elsewhere` = {0} does the same.
A marker lease takes a place in the lease table like any lease (LeaseConfig.max_leases: a
read back that needs one in a full table is refused), and the marks go when the lease is
acked or past its deadline (nothing can be popped in their place then).
And an ack by token from memory acks only a lease this proxy holds whole (pages 0..n-1 all
popped here, none elsewhere); otherwise it is UNAVAILABLE until etcd is back. The ack is
written to etcd when it is back (the lease entry marked acked), so a repeated ack by token,
through any proxy, acknowledges nothing more.

When etcd is back, what this proxy popped from memory for a pinned reader is what that
reader read, whatever etcd stores: a lease entry of another incarnation (this proxy
restarted during the outage and forgot the lease; another proxy stored the token before it
was pinned here; the lease expired during the outage) or another pop's page at one of its
numbers (stored by another proxy before the pin held). So the write-back takes them over
(lease_outage.py: the lease entry, unless acked, and each page at its number, instead of
shadows), and the messages of what it replaced come back after their invisible time. And
an ack by token, before acking what etcd stores, compares: if the lease holds pages this
proxy popped from memory and etcd's lease differs from what it served (another
incarnation, another nonce at a number, a page it neither popped nor read back), it acks
exactly its own pages, by identity, when it holds the lease whole, and marks the entry
acked; otherwise it is FAILED_PRECONDITION with nothing acked.

A proxy restarted during an outage forgets the pages it held, as a lease expiry forgets
them: a later attempt reads a page of its own (its messages differ), which the write-back
and the ack above put in place of the stored ones. Attempts running at once across such a
restart (speculative copies) are the case this cannot cover, as for an expiry; so is a
repeated ack after this proxy restarted twice in one outage, having acked in memory in
between (docs/cluster-consumers.md, "What this does not cover").

Everything runs on the proxy's event loop, under the lease table's per-lease locks.
"""

from __future__ import annotations

from collections.abc import Sequence

from popmq.coordination.errors import CoordinationUnavailableError
from popmq.proxy.lease_outage import HeldLease, outage_error
from popmq.proxy.lease_store import LeaseMeta, PageId, PageRecord

__all__ = [
    "check_new_page",
    "held_outage_pages",
    "not_whole",
    "served_unlike_stored",
    "whole_lease",
]


def check_new_page(
    cached: HeldLease | None, page: int, token: str, error: CoordinationUnavailableError
) -> None:
    """Refuse a pinned reader a new page from memory where another may exist (module
    docstring); the unpinned rules of lease_outage.py apply besides."""
    if cached is not None and cached.elsewhere and page not in cached.pages:
        raise outage_error(
            f"lease {token!r} has pages {sorted(cached.elsewhere)} this proxy did not pop (they "
            f"may be stored in etcd), so it pops no page {page} from memory (only replays of "
            "the pages it holds)",
            error,
        ) from error


def whole_lease(cached: HeldLease | None, now_ms: int) -> list[PageId] | None:
    """The ids of every page of the lease when this proxy holds it whole and live, else
    None (an ack by token from memory would miss pages)."""
    if cached is None or cached.deadline_ms <= now_ms or cached.elsewhere or not cached.pages:
        return None
    if set(cached.pages) != set(range(len(cached.pages))):
        return None
    return [PageId(cached.incarnation, n, cached.pages[n].nonce) for n in sorted(cached.pages)]


def not_whole(cached: HeldLease | None) -> str:
    """Why a live lease is not held whole by this proxy, for the error an ack by token from
    memory answers."""
    if cached is None or not (cached.pages or cached.elsewhere):
        return "it popped none of it (another proxy may have)"
    if cached.elsewhere:
        return (
            f"pages {sorted(cached.elsewhere)} of it were popped elsewhere or written without "
            "an answer, and may be stored in etcd"
        )
    missing = sorted(set(range(max(cached.pages))) - set(cached.pages))
    return f"pages {missing} of it are not held here"


def served_unlike_stored(
    held: HeldLease, meta: LeaseMeta | None, pages: Sequence[PageRecord], now_ms: int
) -> bool:
    """Whether what this proxy served of a lease it popped pages of from memory differs
    from what etcd stores as the lease (`pages`, those of `meta`): another incarnation, a
    page at one of its numbers with another nonce, or a page it neither popped nor read.
    Then an ack by token of etcd's pages would ack messages its reader did not read."""
    if meta is None or meta.deadline_ms <= now_ms or meta.incarnation != held.incarnation:
        return True
    stored = {page.number: page for page in pages}
    if any(n not in stored or stored[n].page_id != page.nonce for n, page in held.pages.items()):
        return True
    return any(n not in held.pages and n not in held.elsewhere for n in stored)


def held_outage_pages(cached: HeldLease | None, pages: Sequence[PageRecord]) -> bool:
    """Whether every page of `pages` popped while etcd was down is one this proxy popped
    (same nonce): then a pinned ack by token acks what every attempt read."""
    return cached is not None and all(
        page.number in cached.pages and cached.pages[page.number].nonce == page.page_id
        for page in pages
        if page.outage
    )
