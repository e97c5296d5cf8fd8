"""TLS of the server's listeners, and of a cluster proxy's connections to its brokers.

`ServerTLS` serves `[security] tls_cert_file` / `tls_key_file` (and, with
`tls_client_ca_file`, requires and verifies client certificates: mutual TLS) through grpc's
dynamic server credentials, so the certificate is replaced without a restart: on SIGHUP
(`reload_soon`) and when the files change (checked every `tls_reload_check_s`). A reload
reads and checks the files first (each one PEM, the key the certificate's, the key not
encrypted); one that fails keeps the certificate in use and logs why. Connections already
open keep the certificate they were made with; new ones get the new one.

At start the same checks raise `TLSFilesError` (an InvalidArgumentError: `popmq serve`,
`proxy` and `broker` print one line and exit 2).

`broker_channel_tls` builds the client side a cluster proxy uses towards `popmq broker`s
that serve TLS (`[security] broker_tls*`).

Threads: grpc calls the certificate fetcher (`_fetch`) on its own threads at every new
connection's handshake; it only takes a configuration waiting under a lock (microseconds).
Reading and checking the files (small local files, but file I/O) runs in a worker thread on
reload (`reload_async`); at start it runs once before the server serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import ssl
import threading
from dataclasses import dataclass

import grpc

from popmq.broker_core import InvalidArgumentError
from popmq.security.config import SecurityConfig

log = logging.getLogger(__name__)

_Stamp = tuple[tuple[int, int, int, int] | None, ...]
"""What the file-change check compares: (mtime_ns, size, inode, device) of each file, None
for a file that cannot be read. A file replaced by a rename (or a Kubernetes secret's
symlink swap) changes inode even when size and time do not."""


class TLSFilesError(InvalidArgumentError):
    """A certificate, key or CA file cannot be read or used; the message names the setting
    and the file."""


@dataclass(frozen=True, kw_only=True)
class CertificateFiles:
    """Which PEM files make a TLS identity (and the CA that verifies peers), by setting."""

    cert: tuple[str, str]
    """(setting, path) of the certificate chain."""
    key: tuple[str, str]
    """(setting, path) of its private key."""
    ca: tuple[str, str] | None = None
    """(setting, path) of the CA bundle that verifies the peer; None: none."""

    def paths(self) -> list[str]:
        return [self.cert[1], self.key[1], *([self.ca[1]] if self.ca else [])]


@dataclass(frozen=True, kw_only=True)
class LoadedFiles:
    """The bytes of checked files, ready for grpc."""

    chain: bytes
    key: bytes
    ca: bytes | None
    fingerprint: str
    """SHA-256 of the first (leaf) certificate, as `openssl x509 -fingerprint -sha256`
    prints it: what the log names, so an operator can see which certificate is served."""


def _read(setting: str, path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise TLSFilesError(
            f"security.{setting} {path}: cannot read it ({exc.strerror or exc})"
        ) from exc


def _pem_text(setting: str, path: str, data: bytes, what: str) -> str:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TLSFilesError(
            f"security.{setting} {path}: not a PEM file (binary data; give {what} in PEM "
            "form, as `openssl x509 -inform der -in FILE -out FILE.pem` converts it)"
        ) from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise TLSFilesError(f"security.{setting} {path}: holds no PEM certificate ({what})")
    return text


def _check_certificates(setting: str, path: str, data: bytes, what: str) -> str:
    """The PEM text of a file of certificates, each parsed; TLSFilesError otherwise."""
    text = _pem_text(setting, path, data, what)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise TLSFilesError(
            f"security.{setting} {path}: not a valid PEM certificate ({what}): {exc}"
        ) from exc
    return text


class _EncryptedKeyError(Exception):
    """The private key asks for a password (grpc takes none)."""


def _no_password() -> bytes:
    raise _EncryptedKeyError


def _fingerprint(chain: str) -> str:
    first = chain[chain.index("-----BEGIN CERTIFICATE-----") :]
    end = first.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(first[:end])).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def load_files(files: CertificateFiles) -> LoadedFiles:
    """Read and check an identity's files (blocking file I/O: start, or a worker thread).

    Raises:
        TLSFilesError: A file cannot be read, is not PEM, the key is encrypted or is not the
            certificate's, or the files changed while being read.
    """
    (cert_setting, cert_path), (key_setting, key_path) = files.cert, files.key
    chain = _read(cert_setting, cert_path)
    key = _read(key_setting, key_path)
    chain_text = _check_certificates(cert_setting, cert_path, chain, "the certificate chain")
    if b"PRIVATE KEY-----" not in key:
        raise TLSFilesError(f"security.{key_setting} {key_path}: holds no PEM private key")
    # ssl reads the pair from the paths (it takes no bytes): the same files, read again and
    # compared below, so what grpc gets is what was checked.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path, password=_no_password)
    except _EncryptedKeyError:
        raise TLSFilesError(
            f"security.{key_setting} {key_path}: the private key is encrypted; grpc takes no "
            "password: give it unencrypted (readable by the server's user only), e.g. "
            "`openssl pkey -in KEY -out KEY.plain`"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TLSFilesError(
                f"security.{key_setting} {key_path} is not the private key of the certificate "
                f"in security.{cert_setting} {cert_path}"
            ) from exc
        raise TLSFilesError(
            f"security.{key_setting} {key_path}: not a usable PEM private key for "
            f"security.{cert_setting} {cert_path}: {exc}"
        ) from exc
    ca: bytes | None = None
    if files.ca is not None:
        ca_setting, ca_path = files.ca
        ca = _read(ca_setting, ca_path)
        _check_certificates(ca_setting, ca_path, ca, "the CA certificates that verify peers")
    if _read(cert_setting, cert_path) != chain or _read(key_setting, key_path) != key:
        raise TLSFilesError(
            f"security.{cert_setting} {cert_path} or security.{key_setting} {key_path} "
            "changed while being read: read again at the next check"
        )
    return LoadedFiles(chain=chain, key=key, ca=ca, fingerprint=_fingerprint(chain_text))


def _stamp(paths: list[str]) -> _Stamp:
    stamps: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
    return tuple(stamps)


def server_files(config: SecurityConfig) -> CertificateFiles:
    """The files of `[security]`'s server identity (tls_cert_file, tls_key_file,
    tls_client_ca_file)."""
    return CertificateFiles(
        cert=("tls_cert_file", config.tls_cert_file),
        key=("tls_key_file", config.tls_key_file),
        ca=("tls_client_ca_file", config.tls_client_ca_file) if config.tls_client_ca_file else None,
    )


class ServerTLS:
    """The server's certificate, served through grpc's dynamic credentials and reloaded.

    Args:
        config: `[security]`; its TLS files must be set (`config.tls`).
        what: Names the server in log lines ("proxy", "broker").

    Raises:
        TLSFilesError: The files cannot be read or used (see `load_files`).
    """

    def __init__(self, config: SecurityConfig, *, what: str = "server") -> None:
        if not config.tls:
            raise ValueError("ServerTLS needs security.tls_cert_file and tls_key_file")
        self._files = server_files(config)
        self._what = what
        self._check_s = config.tls_reload_check_s
        self._seen = _stamp(self._files.paths())
        loaded = load_files(self._files)
        self.fingerprint = loaded.fingerprint
        """SHA-256 fingerprint of the certificate loaded last (served to new connections
        from their next handshake on)."""
        self.require_client_certificate = self._files.ca is not None
        self._initial = self._configuration(loaded)
        # The configuration a reload made, until grpc's fetcher takes it at the next
        # handshake; the lock guards it (the fetcher runs on grpc's threads).
        self._lock = threading.Lock()
        self._pending: grpc.ServerCertificateConfiguration | None = None
        # One reload at a time (SIGHUP and the file check may coincide); loop only.
        self._reloading = asyncio.Lock()
        self._watch: asyncio.Task[None] | None = None
        # Reloads started by reload_soon, held so they run to the end.
        self._soon: set[asyncio.Task[bool]] = set()
        log.info(
            "%s TLS: certificate %s (sha256 %s)%s",
            what,
            self._files.cert[1],
            self.fingerprint,
            f", client certificates verified by {self._files.ca[1]}" if self._files.ca else "",
        )

    @staticmethod
    def _configuration(loaded: LoadedFiles) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(loaded.key, loaded.chain)], root_certificates=loaded.ca
        )

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials for `add_secure_port`, following reloads."""
        return grpc.dynamic_ssl_server_credentials(
            self._initial,
            self._fetch,
            require_client_authentication=self.require_client_certificate,
        )

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """grpc's fetcher: a new configuration once after a reload, else None (keep)."""
        with self._lock:
            pending, self._pending = self._pending, None
        return pending

    def reload(self) -> bool:
        """Read and check the files now (blocking); True when the new certificate will be
        served to new connections. A failure keeps the certificate in use and logs why."""
        self._seen = _stamp(self._files.paths())
        try:
            loaded = load_files(self._files)
            configuration = self._configuration(loaded)
        except (TLSFilesError, ValueError) as exc:
            failure = str(exc)
        else:
            failure = ""
        if failure:
            log.error(
                "%s TLS: reload failed, still serving certificate sha256 %s: %s",
                self._what,
                self.fingerprint,
                failure,
            )
            return False
        with self._lock:
            self._pending = configuration
        previous, self.fingerprint = self.fingerprint, loaded.fingerprint
        log.info(
            "%s TLS: reloaded %s (sha256 %s, was %s); new connections use it",
            self._what,
            self._files.cert[1],
            loaded.fingerprint,
            previous,
        )
        return True

    async def reload_async(self) -> bool:
        """`reload` in a worker thread, one at a time."""
        async with self._reloading:
            return await asyncio.to_thread(self.reload)

    def reload_soon(self) -> None:
        """Reload in the background (a SIGHUP handler; on the loop thread)."""
        task = asyncio.get_running_loop().create_task(self.reload_async(), name="popmq-tls-reload")
        self._soon.add(task)
        task.add_done_callback(self._soon.discard)

    def changed(self) -> bool:
        """Whether a file changed (or appeared, or went) since it was last read."""
        return _stamp(self._files.paths()) != self._seen

    def start(self) -> None:
        """Check the files for a change every `tls_reload_check_s` (0: never; SIGHUP only)."""
        if self._check_s > 0 and self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(
                self._follow_files(), name="popmq-tls-watch"
            )

    async def _follow_files(self) -> None:
        while True:
            await asyncio.sleep(self._check_s)
            if await asyncio.to_thread(self.changed):
                await self.reload_async()

    async def close(self) -> None:
        """Stop checking the files; a reload under way finishes."""
        if self._watch is not None:
            watch, self._watch = self._watch, None
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if self._soon:
            await asyncio.gather(*self._soon, return_exceptions=True)


def bind(server: grpc.aio.Server, address: str, tls: ServerTLS | None, *, shown: str) -> int:
    """Add a listener: TLS only with `tls`, else plaintext; returns the bound port.

    Raises:
        InvalidArgumentError: The address cannot be bound (`shown` is the setting's value).
    """
    try:
        if tls is None:
            return int(server.add_insecure_port(address))
        return int(server.add_secure_port(address, tls.credentials()))
    except RuntimeError as exc:
        raise InvalidArgumentError(f"cannot listen on {shown}: {exc}") from exc


@dataclass(frozen=True, kw_only=True)
class ChannelTLS:
    """Client-side TLS of a channel: its credentials and the name its server must prove."""

    credentials: grpc.ChannelCredentials
    server_name: str = ""
    """Checked against the server's certificate instead of the dialled host; empty: the
    host dialled (grpc.ssl_target_name_override)."""

    def options(self) -> list[tuple[str, str]]:
        """Channel options that go with the credentials."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def broker_channel_tls(config: SecurityConfig) -> ChannelTLS | None:
    """How a cluster proxy connects to its brokers: TLS with `[security] broker_tls`
    (verifying them with `broker_tls_ca_file`, else the system's roots; presenting
    `broker_tls_cert_file` when brokers require client certificates), else None (plaintext).

    Raises:
        TLSFilesError: A file cannot be read or used.
    """
    if not config.broker_tls:
        return None
    ca: bytes | None = None
    if config.broker_tls_ca_file:
        ca = _read("broker_tls_ca_file", config.broker_tls_ca_file)
        _check_certificates(
            "broker_tls_ca_file", config.broker_tls_ca_file, ca, "the CA that signed the brokers"
        )
    key: bytes | None = None
    chain: bytes | None = None
    if config.broker_tls_cert_file:
        loaded = load_files(
            CertificateFiles(
                cert=("broker_tls_cert_file", config.broker_tls_cert_file),
                key=("broker_tls_key_file", config.broker_tls_key_file),
            )
        )
        key, chain = loaded.key, loaded.chain
    return ChannelTLS(
        credentials=grpc.ssl_channel_credentials(ca, key, chain),
        server_name=config.broker_tls_server_name,
    )
