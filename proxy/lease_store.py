"""Where lease tokens live: entries in the coordinator (etcd in a cluster, LocalCoordinator in
`popmq serve`), so that any proxy can answer for a lease another one started.

Key layout, under the cluster's root (docs/cluster-consumers.md):

    leases/<group>/<token>                    the lease: topic, incarnation, deadline, acked
    leases/<group>/<token>/<incarnation>/<n>  page n: its receipt handles and deadlines
    leases/<group>/<token>/<page nonce>/<n>    a page popped while etcd was down whose
                                               number was taken meanwhile (a "shadow")

Group and token are percent-encoded into one path segment each (every UTF-8 byte outside
letters, digits, '_', '.', ':', '-' becomes %XX, '%' and '/' included); a segment that would
be longer than MAX_SEGMENT_CHARS is `%%` and the SHA-256 of the text instead (percent
encoding never writes "%%", so the two cannot meet), and the lease entry keeps the real
group and token, which a read checks. A lease that expired and starts again from page 0 gets
a new random incarnation, so the pages of the old one (left to expire) are never mistaken
for the new one's.

A page holds handles, not bodies: a proxy that did not pop it reads the messages back from
their brokers (BrokerAPI.get_deliveries). Pages are created with compare-and-set on an
absent entry: of two proxies popping page n at once, the first to create it wins. Every
entry expires `margin_s` after the deadline it records, so what a proxy that died leaves
behind goes by itself.

Every page has an identity (PageId: `<incarnation>.<n>.<nonce>`, the nonce random per pop
and stored in the entry as "page_id"), which AckLease may name to ack exactly the pages a
reader read. A page popped while etcd was down (proxy/lease_outage.py) is written when etcd
is back: at its number if that is still free, else as a shadow under its nonce, where only an
ack naming it finds it. Those entries have schema 2, which a proxy of an earlier release
refuses to read, so it never acks them by token. Entries of earlier releases have no nonce:
their identity is empty and only an ack by token acts on them.

Costs (round trips to the coordinator): reading a lease or a page, one each (the lease
table asks for both at once when it can); creating a page, one; a lease, one more.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import secrets
import string
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from popmq.coordination.coordinator import Coordinator, Entry
from popmq.coordination.errors import CorruptValueError
from popmq.coordination.etcd import MAX_LEASE_TTL_S, MIN_LEASE_TTL_S

FOLDER = "leases/"
MAX_SEGMENT_CHARS = 160
"""Longest encoded group or token segment; a longer one is hashed (coordination paths have
at most 512 characters)."""
SCHEMA = 1
OUTAGE_SCHEMA = 2
"""The schema of a page popped while etcd was down (module docstring)."""
_SAFE = frozenset(string.ascii_letters + string.digits + "_.:-")
_HASHED = "%%"
_PAGE_READS = (2, 64)
"""Pages read at once when a whole lease is read (ack, renew): the first batch, doubling
up to the second (a lease of n pages costs about log2(n) round trips, n + 2 reads at most
n + a batch)."""


def encode_segment(text: str) -> str:
    """`text` as one coordination path segment (module docstring)."""
    encoded = "".join(
        char if char in _SAFE else "".join(f"%{byte:02X}" for byte in char.encode())
        for char in text
    )
    if len(encoded) > MAX_SEGMENT_CHARS or not encoded:
        return _HASHED + hashlib.sha256(text.encode()).hexdigest()
    return encoded


def lease_path(group: str, token: str) -> str:
    return f"{FOLDER}{encode_segment(group)}/{encode_segment(token)}"


def new_incarnation() -> str:
    """A new lease incarnation's id: 16 random hex digits."""
    return secrets.token_hex(8)


def page_path(group: str, token: str, incarnation: str, number: int) -> str:
    return f"{lease_path(group, token)}/{incarnation}/{number}"


@dataclass(frozen=True, slots=True)
class PageId:
    """A page's identity: the lease incarnation and number it was popped as, and the nonce
    of that pop (module docstring)."""

    incarnation: str
    number: int
    nonce: str

    def __str__(self) -> str:
        return f"{self.incarnation}.{self.number}.{self.nonce}"

    @classmethod
    def parse(cls, text: str) -> PageId:
        """The identity `text` names; ValueError saying what is allowed if it names none."""
        parts = text.split(".")
        if (
            len(parts) != 3
            or not all(p and all(c in string.hexdigits for c in p) for p in (parts[0], parts[2]))
            or not parts[1].isdigit()
            or len(text) > 80
        ):
            raise ValueError(
                f"page id {text[:80]!r} is not one LeasePop answered (INCARNATION.PAGE.NONCE, "
                "hex, decimal, hex)"
            )
        return cls(parts[0], int(parts[1]), parts[2])


@dataclass(frozen=True, slots=True)
class LeaseMeta:
    """A lease as the coordinator holds it.

    Attributes:
        deadline_ms: When the lease ends: the earliest deadline of its pages (renewals move
            it); a page popped with an earlier one lowers it.
        acked_messages: The messages AckLease acknowledged (acked leases only).
        revision: The entry's revision (the compare-and-set token).
    """

    group: str
    token: str
    topic: str
    incarnation: str
    deadline_ms: int
    acked: bool
    acked_messages: int
    revision: int


@dataclass(frozen=True, slots=True)
class PageRecord:
    """One page as the coordinator holds it: per message its receipt handle and the end of
    its invisible time, and the page's deadline (an empty page's: when it was asked for plus
    its invisible time)."""

    number: int
    handles: tuple[str, ...]
    until_ms: tuple[int, ...]
    deadline_ms: int
    revision: int
    page_id: str = ""
    """The nonce of the pop that made it ("" for a page written by an earlier release)."""
    outage: bool = False
    """Popped while etcd was down (schema 2): only an ack naming it acknowledges it."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LeaseStore:
    """Reads and writes lease entries in a coordinator (module docstring).

    Args:
        coordinator: Where the entries live.
        margin_s: How long an entry outlives the deadline it records.
    """

    def __init__(self, coordinator: Coordinator, *, margin_s: float) -> None:
        self.coordinator = coordinator
        self.margin_s = margin_s

    def _ttl(self, deadline_ms: int) -> int:
        """Whole seconds from now until `deadline_ms` plus the margin."""
        left_s = (deadline_ms - _now_ms()) / 1000 + self.margin_s
        return min(MAX_LEASE_TTL_S, max(MIN_LEASE_TTL_S, math.ceil(left_s)))

    # -- the lease entry -----------------------------------------------------------------

    async def meta(self, group: str, token: str) -> LeaseMeta | None:
        entry = await self.coordinator.get(lease_path(group, token))
        return None if entry is None else _meta(entry, group, token)

    async def create(
        self,
        group: str,
        token: str,
        topic: str,
        deadline_ms: int,
        *,
        previous: LeaseMeta | None,
        incarnation: str,
    ) -> LeaseMeta:
        """Start a lease as `incarnation` (new_incarnation()), unless someone else wrote its
        entry since `previous` (None: it did not exist) was read: ConflictError then."""
        return await self._write_meta(
            group,
            token,
            topic=topic,
            incarnation=incarnation,
            deadline_ms=deadline_ms,
            acked=False,
            acked_messages=0,
            revision=0 if previous is None else previous.revision,
        )

    async def update(
        self,
        meta: LeaseMeta,
        *,
        deadline_ms: int | None = None,
        acked_messages: int | None = None,
    ) -> LeaseMeta:
        """Move the lease's deadline or mark it acked (with its message count); ConflictError
        if the entry changed since `meta` was read."""
        return await self._write_meta(
            meta.group,
            meta.token,
            topic=meta.topic,
            incarnation=meta.incarnation,
            deadline_ms=meta.deadline_ms if deadline_ms is None else deadline_ms,
            acked=meta.acked or acked_messages is not None,
            acked_messages=meta.acked_messages if acked_messages is None else acked_messages,
            revision=meta.revision,
        )

    async def _write_meta(
        self,
        group: str,
        token: str,
        *,
        topic: str,
        incarnation: str,
        deadline_ms: int,
        acked: bool,
        acked_messages: int,
        revision: int,
    ) -> LeaseMeta:
        value = {
            "schema": SCHEMA,
            "group": group,
            "token": token,
            "topic": topic,
            "incarnation": incarnation,
            "deadline_ms": deadline_ms,
            "acked": acked,
            "acked_messages": acked_messages,
        }
        entry = await self.coordinator.compare_and_set(
            lease_path(group, token), value, revision=revision, ttl_s=self._ttl(deadline_ms)
        )
        return _meta(entry, group, token)

    # -- pages ---------------------------------------------------------------------------

    def _page_path(self, meta: LeaseMeta, number: int) -> str:
        return page_path(meta.group, meta.token, meta.incarnation, number)

    async def page(self, meta: LeaseMeta, number: int) -> PageRecord | None:
        return await self.page_of(meta.group, meta.token, meta.incarnation, number)

    async def page_of(
        self, group: str, token: str, incarnation: str, number: int
    ) -> PageRecord | None:
        """Page `number` of an incarnation known beforehand (read along with the lease)."""
        entry = await self.coordinator.get(page_path(group, token, incarnation, number))
        return None if entry is None else _page(entry, number)

    async def pages(self, meta: LeaseMeta, *, limit: int) -> list[PageRecord]:
        """Pages 0, 1, ... up to the first one that does not exist (at most `limit`)."""
        found: list[PageRecord] = []
        size, most = _PAGE_READS
        while len(found) < limit:
            numbers = range(len(found), min(limit, len(found) + size))
            size = min(most, size * 2)
            batch = await asyncio.gather(*(self.page(meta, n) for n in numbers))
            for record in batch:
                if record is None:
                    return found
                found.append(record)
        return found

    async def create_page(
        self,
        meta: LeaseMeta,
        number: int,
        handles: Sequence[str],
        until_ms: Sequence[int],
        deadline_ms: int,
        *,
        nonce: str,
    ) -> PageRecord:
        """Create page `number`; ConflictError when it exists (another proxy's won)."""
        return await self.create_page_of(
            meta.group,
            meta.token,
            meta.incarnation,
            number,
            handles,
            until_ms,
            deadline_ms,
            nonce=nonce,
        )

    async def create_page_of(
        self,
        group: str,
        token: str,
        incarnation: str,
        number: int,
        handles: Sequence[str],
        until_ms: Sequence[int],
        deadline_ms: int,
        *,
        nonce: str,
        outage: bool = False,
    ) -> PageRecord:
        """`create_page` for an incarnation whose lease entry is being written meanwhile
        (`outage`: a page popped while etcd was down, written now)."""
        return await self._write_page(
            page_path(group, token, incarnation, number),
            number,
            handles,
            until_ms,
            deadline_ms,
            revision=0,
            nonce=nonce,
            outage=outage,
        )

    async def create_shadow(
        self,
        group: str,
        token: str,
        number: int,
        handles: Sequence[str],
        until_ms: Sequence[int],
        deadline_ms: int,
        *,
        nonce: str,
    ) -> PageRecord:
        """Write a page popped while etcd was down whose number was taken meanwhile, under
        its nonce (module docstring); ConflictError when it is there already."""
        return await self.create_page_of(
            group, token, nonce, number, handles, until_ms, deadline_ms, nonce=nonce, outage=True
        )

    async def replace_page_of(
        self,
        group: str,
        token: str,
        incarnation: str,
        record: PageRecord,
        handles: Sequence[str],
        until_ms: Sequence[int],
        deadline_ms: int,
        *,
        nonce: str,
    ) -> PageRecord:
        """Write a page popped while etcd was down at its number over `record`, another
        pop's page there (proxy/lease_pinning.py: a pinned reader read this one);
        ConflictError if that entry changed since read."""
        return await self._write_page(
            page_path(group, token, incarnation, record.number),
            record.number,
            handles,
            until_ms,
            deadline_ms,
            revision=record.revision,
            nonce=nonce,
            outage=True,
        )

    async def page_by_id(self, group: str, token: str, page: PageId) -> PageRecord | None:
        """The page `page` names: at its number if the nonce there is its, else its shadow;
        None when neither is stored."""
        record = await self.page_of(group, token, page.incarnation, page.number)
        if record is not None and record.page_id == page.nonce:
            return record
        shadow = await self.page_of(group, token, page.nonce, page.number)
        if shadow is not None and shadow.page_id == page.nonce:
            return shadow
        return None

    async def update_page(
        self,
        meta: LeaseMeta,
        page: PageRecord,
        handles: Sequence[str],
        until_ms: Sequence[int],
        deadline_ms: int,
    ) -> PageRecord:
        """Rewrite a page (renewed handles); ConflictError if it changed since read."""
        return await self._write_page(
            self._page_path(meta, page.number),
            page.number,
            handles,
            until_ms,
            deadline_ms,
            revision=page.revision,
            nonce=page.page_id,
            outage=page.outage,
        )

    async def _write_page(
        self,
        path: str,
        number: int,
        handles: Sequence[str],
        until_ms: Sequence[int],
        deadline_ms: int,
        *,
        revision: int,
        nonce: str,
        outage: bool,
    ) -> PageRecord:
        value: dict[str, Any] = {
            "schema": OUTAGE_SCHEMA if outage else SCHEMA,
            "handles": list(handles),
            "until_ms": list(until_ms),
            "deadline_ms": deadline_ms,
        }
        if nonce:
            value["page_id"] = nonce
        entry = await self.coordinator.compare_and_set(
            path, value, revision=revision, ttl_s=self._ttl(deadline_ms)
        )
        return _page(entry, number)


def _fields(
    entry: Entry, names: Mapping[str, type | tuple[type, ...]], schemas: tuple[int, ...] = (SCHEMA,)
) -> dict[str, Any]:
    value = entry.value
    if value.get("schema") not in schemas:
        raise CorruptValueError(
            f"lease entry {entry.path!r} has schema {value.get('schema')!r}; this proxy reads "
            f"schema {' or '.join(map(str, schemas))}"
        )
    out = {}
    for name, kind in names.items():
        field = value.get(name)
        if not isinstance(field, kind) or (kind is int and isinstance(field, bool)):
            raise CorruptValueError(f"lease entry {entry.path!r} has no valid {name!r}")
        out[name] = field
    return out


def _meta(entry: Entry, group: str, token: str) -> LeaseMeta:
    f = _fields(
        entry,
        {"group": str, "token": str, "topic": str, "incarnation": str, "deadline_ms": int,
         "acked": bool, "acked_messages": int},
    )  # fmt: skip
    if (f["group"], f["token"]) != (group, token):
        raise CorruptValueError(
            f"lease entry {entry.path!r} is lease {f['token']!r} of group {f['group']!r}, not "
            f"{token!r} of {group!r} (a hash collision?)"
        )
    if not f["incarnation"] or not all(c in string.hexdigits for c in f["incarnation"]):
        raise CorruptValueError(f"lease entry {entry.path!r} has an invalid incarnation")
    return LeaseMeta(
        group=group,
        token=token,
        topic=f["topic"],
        incarnation=f["incarnation"],
        deadline_ms=f["deadline_ms"],
        acked=f["acked"],
        acked_messages=f["acked_messages"],
        revision=entry.revision,
    )


def _page(entry: Entry, number: int) -> PageRecord:
    f = _fields(
        entry, {"handles": list, "until_ms": list, "deadline_ms": int}, (SCHEMA, OUTAGE_SCHEMA)
    )
    handles, until = f["handles"], f["until_ms"]
    nonce = entry.value.get("page_id", "")
    if not isinstance(nonce, str):
        raise CorruptValueError(f"lease page {entry.path!r} has an invalid 'page_id'")
    if (
        len(handles) != len(until)
        or not all(isinstance(h, str) for h in handles)
        or not all(isinstance(u, int) and not isinstance(u, bool) for u in until)
    ):
        raise CorruptValueError(f"lease page {entry.path!r} has invalid handles or deadlines")
    return PageRecord(
        number=number,
        handles=tuple(handles),
        until_ms=tuple(until),
        deadline_ms=f["deadline_ms"],
        revision=entry.revision,
        page_id=nonce,
        outage=entry.value.get("schema") == OUTAGE_SCHEMA,
    )
