"""Test certificates made at test time with the `openssl` command: a CA, servers, clients.

Nothing is checked in: each test gets fresh keys in its tmp dir. EC P-256 keys, so making
one takes milliseconds. Server certificates name `localhost` and 127.0.0.1 (what the tests
dial); client certificates carry the clientAuth usage (mutual TLS). Tests that need them
skip when `openssl` is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

OPENSSL = shutil.which("openssl")

_CA_EXTENSIONS = """\
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
"""
_SERVER_EXTENSIONS = """\
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {names}
"""
_CLIENT_EXTENSIONS = """\
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
"""


def require_openssl() -> str:
    """The openssl binary, or skip the test (certificates cannot be made)."""
    if OPENSSL is None:
        pytest.skip("the openssl command is not installed: no test certificates")
    return OPENSSL


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


class CertificateAuthority:
    """A self-signed CA in `folder` that issues server and client certificates there."""

    def __init__(self, folder: Path, name: str = "popmq-test-ca") -> None:
        self._openssl = require_openssl()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._serial = 1
        self.cert = folder / f"{name}.pem"
        self.key = folder / f"{name}.key"
        config = self._config(name, _CA_EXTENSIONS)
        self._run(
            "req", "-x509", "-new", "-config", str(config), "-extensions", "ext",
            *self._new_key(self.key), "-days", "2", "-out", str(self.cert),
        )  # fmt: skip

    def server(self, name: str = "server", *, hosts: tuple[str, ...] = ()) -> KeyPair:
        """A server certificate for localhost and 127.0.0.1 (and `hosts`)."""
        names = ["DNS:localhost", "IP:127.0.0.1", *(f"DNS:{h}" for h in hosts)]
        return self._issue(name, "localhost", _SERVER_EXTENSIONS.format(names=",".join(names)))

    def client(self, name: str = "client") -> KeyPair:
        """A client certificate (clientAuth) whose common name is `name`."""
        return self._issue(name, name, _CLIENT_EXTENSIONS)

    def _issue(self, name: str, common_name: str, extensions: str) -> KeyPair:
        pair = KeyPair(self.folder / f"{name}.pem", self.folder / f"{name}.key")
        config = self._config(common_name, extensions)
        request = self.folder / f"{name}.csr"
        self._run(
            "req", "-new", "-config", str(config), *self._new_key(pair.key), "-out", str(request)
        )
        self._serial += 1
        self._run(
            "x509", "-req", "-in", str(request), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-set_serial", str(self._serial), "-days", "2", "-extfile", str(config),
            "-extensions", "ext", "-out", str(pair.cert),
        )  # fmt: skip
        return pair

    def _config(self, common_name: str, extensions: str) -> Path:
        path = self.folder / f"{common_name}-{self._serial}.cnf"
        text = f"""\
        [req]
        distinguished_name = dn
        prompt = no
        [dn]
        CN = {common_name}
        [ext]
        """
        path.write_text(textwrap.dedent(text) + extensions)
        return path

    @staticmethod
    def _new_key(key: Path) -> list[str]:
        return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", str(key)]  # fmt: skip

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [self._openssl, *args], capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 0, f"openssl {' '.join(args)}: {result.stderr}"
