"""TLS of a client's connections: ``tls=True`` or ``tls=TLSConfig(...)`` on every client.

``tls=True`` verifies the server's certificate with the system's roots (grpc's bundle, or
the file ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` names). ``TLSConfig(ca_file=...)`` trusts the
CA in that file instead (a private or self-signed CA); ``cert_file`` and ``key_file`` present
a client certificate to a server that requires one (mutual TLS); ``server_name`` is the name
the server's certificate must carry when it is not the host dialled (an IP address, or a
load balancer's name).

The files are read and checked when the client is made, so a wrong path or a key that is not
the certificate's fails at once, naming the file (``InvalidArgumentError``); a client made
before the files were replaced keeps the old ones.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

import grpc

from popmq.sdk.errors import InvalidArgumentError

__all__ = ["TLS", "ChannelSecurity", "TLSConfig", "channel_security"]


@dataclass(frozen=True, kw_only=True)
class TLSConfig:
    """How a client connects with TLS: the CA it trusts, its own certificate (mutual TLS).

    Args:
        ca_file: PEM file of the CA certificates that verify the server; None: the system's
            roots.
        cert_file: PEM certificate chain the client presents (mutual TLS), with
            ``key_file``.
        key_file: PEM private key of ``cert_file`` (not encrypted).
        server_name: The name the server's certificate must carry, when it is not the host
            of the endpoint; None: that host.
    """

    ca_file: str | os.PathLike[str] | None = None
    cert_file: str | os.PathLike[str] | None = None
    key_file: str | os.PathLike[str] | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidArgumentError(
                "TLSConfig cert_file and key_file go together: give both for a client "
                "certificate (mutual TLS), or neither"
            )
        if self.server_name is not None and not self.server_name.strip():
            raise InvalidArgumentError("TLSConfig server_name is empty: give a name or None")


TLS = bool | TLSConfig
"""What a client takes as ``tls``: False (plaintext, the default), True (TLS, the system's
roots) or a ``TLSConfig``."""


@dataclass(frozen=True)
class ChannelSecurity:
    """A client's channel credentials and the channel options that go with them."""

    credentials: grpc.ChannelCredentials
    options: tuple[tuple[str, str], ...] = ()


def _read(what: str, path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise InvalidArgumentError(
            f"TLSConfig {what} {os.fspath(path)!s}: cannot read it ({exc.strerror or exc})"
        ) from exc


def _check_certificates(what: str, path: str | os.PathLike[str], data: bytes) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=data.decode("ascii"))
    except (ssl.SSLError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidArgumentError(
            f"TLSConfig {what} {os.fspath(path)!s}: not a PEM certificate file ({exc})"
        ) from exc


class _EncryptedKeyError(Exception):
    """The key asks for a password (grpc takes none)."""


def _no_password() -> bytes:
    raise _EncryptedKeyError


def _check_pair(cert: str | os.PathLike[str], key: str | os.PathLike[str]) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKeyError:
        raise InvalidArgumentError(
            f"TLSConfig key_file {os.fspath(key)!s}: the private key is encrypted; give it "
            "unencrypted (grpc takes no password)"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise InvalidArgumentError(
                f"TLSConfig key_file {os.fspath(key)!s} is not the private key of cert_file "
                f"{os.fspath(cert)!s}"
            ) from exc
        raise InvalidArgumentError(
            f"TLSConfig cert_file {os.fspath(cert)!s} and key_file {os.fspath(key)!s}: not a "
            f"PEM certificate and its private key ({exc})"
        ) from exc


def channel_security(tls: TLS | None) -> ChannelSecurity | None:
    """The credentials of ``tls`` (files read and checked now); None for plaintext.

    Raises:
        InvalidArgumentError: A file cannot be read, is not PEM, or the key is encrypted or
            not the certificate's.
        TypeError: ``tls`` is neither a bool nor a ``TLSConfig``.
    """
    if tls is None or tls is False:
        return None
    if tls is True:
        return ChannelSecurity(grpc.ssl_channel_credentials())
    if not isinstance(tls, TLSConfig):
        raise TypeError(f"tls must be a bool or a TLSConfig, got {type(tls).__name__}")
    ca = None
    if tls.ca_file is not None:
        ca = _read("ca_file", tls.ca_file)
        _check_certificates("ca_file", tls.ca_file, ca)
    key = chain = None
    if tls.cert_file is not None and tls.key_file is not None:
        chain = _read("cert_file", tls.cert_file)
        key = _read("key_file", tls.key_file)
        _check_pair(tls.cert_file, tls.key_file)
    options = (("grpc.ssl_target_name_override", tls.server_name),) if tls.server_name else ()
    return ChannelSecurity(grpc.ssl_channel_credentials(ca, key, chain), options)
