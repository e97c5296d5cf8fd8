"""The process's limit on open files, raised to what the system allows at start.

RocksDB keeps every table file of the store open (its default, `max_open_files` -1: a read
never waits for an open), and a table file holds up to 64 MiB, so a store of 64 GB keeps
about a thousand open, beside the server's connections and WAL files. Many systems start a
process with a soft limit of 1,024; past it RocksDB's next open fails and the store turns
read-only. Servers that keep files open raise the soft limit to the hard one at start, as
this does; the hard limit is the operator's to set (docs/operations.md).
"""

from __future__ import annotations

import logging
import resource
from typing import Final

log = logging.getLogger(__name__)

UNLIMITED_TARGET: Final = 1 << 20
"""The soft limit asked for when the hard one is unlimited (Linux's default `nr_open`)."""


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit; (before, after) soft limits.

    A system that refuses (some cap the soft limit below an unlimited hard one) keeps the
    limit it had, with a warning: the server still runs, up to that limit.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning(
            "open files are limited to %d and could not be raised to %d (%s): the store's "
            "table files and the connections share that limit (docs/operations.md)",
            soft,
            target,
            exc,
        )
        return soft, soft
    log.info(
        "raised the open-file limit from %d to %d (the store keeps its files open)", soft, target
    )
    return soft, target
