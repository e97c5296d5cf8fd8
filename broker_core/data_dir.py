"""The data dir: private to the server's user, and the receipt key kept outside RocksDB.

The receipt key signs every receipt handle: whoever reads it can mint handles the server
accepts. It used to live in RocksDB's meta family, so in the WAL and table files, which
RocksDB creates 0644 under the usual umask. Now it is a file of its own, `receipt.key`,
0600, in a data dir created 0700; an older store's key moves there (handles it issued stay
valid) and leaves RocksDB.

Every call here is blocking file I/O of a few bytes, made once at start.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import shutil
from pathlib import Path

from popmq.broker_core.errors import DataDirError

log = logging.getLogger(__name__)

KEY_FILE = "receipt.key"
"""The receipt key's file name in the data dir."""
KEY_BYTES = 32
"""Length of the receipt key (the keyed BLAKE2b of pop/receipt.py)."""
PRIVATE_UMASK = 0o077
"""Files the store creates are readable by the server's user only."""


def prepare(path: Path) -> None:
    """Create the data dir 0700, or check an existing one; warn when others can read it.

    Raises:
        DataDirError: the path is a file, or cannot be created or written.
    """
    try:
        _prepare(path)
    except OSError as exc:
        raise describe_error(path, exc) from exc


def _prepare(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise DataDirError(f"data dir {path} is a file, not a directory; give a directory path")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        log.warning(
            "data dir %s has mode %04o: other local users can read the store and its "
            "receipt key and forge receipt handles; run `chmod 700 %s`",
            path,
            mode,
            path,
        )
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        if hasattr(os, "statvfs") and os.statvfs(path).f_flag & os.ST_RDONLY:
            raise DataDirError(
                f"data dir {path} is on a read-only file system; the server needs to write to it"
            )
        raise DataDirError(
            f"data dir {path} is not permitted to this user (permission denied); the server "
            "needs read and write access to it"
        )


def load_receipt_key(path: Path, legacy: bytes | None) -> bytes:
    """The data dir's receipt key, created (or moved from `legacy`) when it has none.

    Args:
        path: The data dir.
        legacy: The key an older store kept in RocksDB, if any: it becomes the file's, so
            handles issued before the upgrade stay valid.

    Raises:
        DataDirError: the key file is unreadable, of the wrong size, or cannot be written.
    """
    key_path = path / KEY_FILE
    try:
        key = key_path.read_bytes()
    except FileNotFoundError:
        key = legacy if legacy is not None else secrets.token_bytes(KEY_BYTES)
        _write_private(key_path, key)
        return key
    except OSError as exc:
        raise describe_error(key_path, exc) from exc
    if len(key) != KEY_BYTES:
        raise DataDirError(
            f"receipt key {key_path} holds {len(key)} bytes, not {KEY_BYTES}; restore it from "
            "a backup, or delete it to make a new one (handles issued so far become invalid)"
        )
    if legacy is not None and legacy != key:
        raise DataDirError(
            f"receipt key {key_path} differs from the key stored in the database; "
            "keep the right one: handles issued so far were signed with the database's"
        )
    mode = key_path.stat().st_mode & 0o777
    if mode & 0o077:
        log.warning("receipt key %s had mode %04o; made it 0600", key_path, mode)
        key_path.chmod(0o600)
    return key


def _write_private(target: Path, data: bytes) -> None:
    """Write `data` to a new 0600 file atomically: a crash leaves the old state or the new."""
    temporary = target.with_name(target.name + ".tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        temporary.replace(target)
        if os.name == "posix":  # the rename itself is durable once its directory is synced
            directory = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise describe_error(target, exc) from exc


def describe_error(path: Path, exc: BaseException) -> DataDirError:
    """One line saying what is wrong with the data dir, from an OSError or RocksDB's text."""
    text = str(exc)
    number = exc.errno if isinstance(exc, OSError) else None
    if "LOCK" in text and ("temporarily unavailable" in text or "lock hold" in text):
        return DataDirError(
            f"data dir {path} is in use by another popmq process (RocksDB's LOCK file is "
            "held); stop it or give another --data-dir"
        )
    if number in (errno.EACCES, errno.EPERM) or "Permission denied" in text:
        return DataDirError(
            f"data dir {path} is not permitted to this user (permission denied); the server "
            "needs read and write access to it"
        )
    if number == errno.EROFS or "Read-only file system" in text:
        return DataDirError(
            f"data dir {path} is on a read-only file system; the server needs to write to it"
        )
    if number == errno.ENOTDIR or "Not a directory" in text:
        return DataDirError(f"data dir {path}: a part of the path is a file, not a directory")
    if number == errno.ENOSPC or "No space left" in text:
        return DataDirError(
            f"{path}: the disk is full, and starting needs to write here (a new store or "
            "receipt key cannot be made read-only); free some space"
        )
    if "Corruption" in text:
        return DataDirError(f"the store in {path} is corrupt: {text}")
    return DataDirError(f"cannot open the store in {path}: {text}")


def disk_usage(path: Path) -> int:
    """Bytes of the files under `path` (the store's size on disk, WAL included).

    Computed by the broker, on the host that holds the data dir, so a caller (the proxy's
    metrics, GetServerInfo) need not share that disk.
    """
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except FileNotFoundError:
            continue
        for entry in entries:
            # RocksDB deletes files during compaction: a vanished file counts as zero.
            with contextlib.suppress(FileNotFoundError):
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def disk_free(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on `path`'s filesystem (statvfs f_bavail,
    ~2 us), measured where the data dir is; None when it cannot be measured."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None
